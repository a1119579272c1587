"""Transforms: functions that take a graph and return a new one, never the caller's changed
(as TVM's ``relax.transform``): constant folding (:func:`fold_constants`), BatchNormalization
folded into the Conv before it (:func:`fold_batchnorm`), dead convolution taps cut
(:func:`trim_conv_taps`), subnormal weights set to zero (:func:`flush_subnormal_weights`),
element-wise chains fused back into their op, Loops unrolled, Ifs of small pure branches as
a Where (:mod:`.select`), and symbolic inputs specialized to static shapes.

The questions these ask of a graph (shapes, integer ranges, loop trip counts) are
:mod:`subgraph.analysis`'s.
"""

from __future__ import annotations

from subgraph.transform.batchnorm import fold_batchnorm
from subgraph.transform.constants import fold_constants
from subgraph.transform.subnormals import flush_subnormal_weights
from subgraph.transform.taps import trim_conv_taps

__all__ = ["flush_subnormal_weights", "fold_batchnorm", "fold_constants", "trim_conv_taps"]
