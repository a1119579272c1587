"""Relax to TIR: the CPU pass list (:mod:`.passes`) and the legalizations it installs
(packed convolution and matrix weights, Winograd, concatenation, ConvTranspose, 2-D resize,
vectorisable transcendentals, NaN-propagating max and min). Imports
:mod:`..schedule`, :mod:`..intake` and :mod:`..runtime`, never :mod:`..build`."""

from __future__ import annotations

__all__: list[str] = []
