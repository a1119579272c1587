"""Analyses and rewrites over graphs, as functions: static shape inference
(:func:`infer_shapes`), constant folding (:func:`fold_constants`), BatchNormalization
folding (:func:`fold_batchnorm`), dead convolution taps cut (:func:`trim_conv_taps`), seeded
random inputs (:func:`random_inputs`) and the networkx view (:func:`to_networkx`).
"""

from __future__ import annotations

from subgraph.analysis.constants import fold_constants
from subgraph.analysis.fold import fold_batchnorm
from subgraph.analysis.inputs import random_inputs
from subgraph.analysis.nx import to_networkx
from subgraph.analysis.shape_inference import infer_shapes
from subgraph.analysis.taps import trim_conv_taps

__all__ = ["infer_shapes", "fold_constants", "fold_batchnorm", "trim_conv_taps", "random_inputs", "to_networkx"]
