"""Relax to TIR: the CPU pass list (:mod:`.passes`) and the legalizations it installs
(packed convolution and matrix weights, Winograd, concatenation, ConvTranspose, 2-D resize,
softmax and layer norm by rows, vectorisable transcendentals, NaN-propagating max and min) and
the pass that moves layout transposes past elementwise arithmetic. Imports
:mod:`..schedule`, :mod:`..intake` and :mod:`..runtime`, never :mod:`..build`."""

from __future__ import annotations

__all__: list[str] = []
