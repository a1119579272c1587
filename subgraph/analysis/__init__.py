"""Analyses: functions that answer a question about a graph (as TVM's ``relax.analysis``):
static shape inference (:func:`infer_shapes`), attribute checks, integer value ranges,
Loop trip counts, seeded random inputs (:func:`random_inputs`) and the networkx view
(:func:`to_networkx`).

Functions that return a rewritten graph are :mod:`subgraph.transform`'s.
"""

from __future__ import annotations

from subgraph.analysis.inputs import random_inputs
from subgraph.analysis.nx import to_networkx
from subgraph.analysis.shape_inference import infer_shapes

__all__ = ["infer_shapes", "random_inputs", "to_networkx"]
