"""From a subgraph to a Relax module: BN folded, rewrites applied, ONNX written and imported.

TVM's ONNX frontend imports the model with the graph's static input shapes and dtypes
(constants stay constants, bound into the module); a refusal becomes a
:class:`~subgraph.errors.PropertyError` naming the op when the importer says which.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from typing import Any

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

from subgraph.errors import PropertyError, SubgraphError
from subgraph.ir import Graph
from subgraph.onnx.writer import to_onnx
from subgraph.properties.tvm.intake.cells import unroll_recurrent
from subgraph.properties.tvm.intake.numpy_fold import fold_with_numpy
from subgraph.properties.tvm.intake.qoperator import qdq_equivalents
from subgraph.properties.tvm.intake.quantized import integer_convolutions
from subgraph.properties.tvm.intake.rewrites import (
    explicit_pads,
    group_norms,
    scaled_projections,
    squeezed_gathers,
    sum_as_adds,
)
from subgraph.properties.tvm.runtime.messages import error_summary
from subgraph.properties.tvm.runtime.tensors import static_shape
from subgraph.transform.batchnorm import fold_batchnorm
from subgraph.transform.select import select_ifs
from subgraph.transform.subnormals import flush_subnormal_weights
from subgraph.transform.taps import trim_conv_taps
from subgraph.transform.unroll import unroll_loops

__all__ = ["check_outputs", "checked_prepared", "onnx_for_tvm", "prepared_graph", "prepared_onnx", "relax_module"]


def _import_relax(graph: Graph, model: Any, shapes: dict[str, list[int]], dtypes: dict[str, str],
                  integer: bool) -> Any:
    """The Relax module of ``model``; a :class:`PropertyError` naming the op if TVM refuses."""
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore")
            mod = from_onnx(model, shape_dict=shapes, dtype_dict=dtypes)
            if integer:
                mod = integer_convolutions(mod)
            return relax.transform.FoldConstant()(fold_with_numpy(mod))
    except Exception as exc:
        failed = re.search(r"Error converting operator (\w+)", printed.getvalue())
        missing = re.search(r"not supported for frontend ONNX: ([\w, ]+)", str(exc))
        ops = [failed.group(1)] if failed else missing.group(1).split(", ") if missing else []
        nodes = [n.name for n in graph.nodes if n.op in ops]
        where = f" at {'/'.join(sorted(ops))} node(s) {nodes[:3]}" if nodes else ""
        raise PropertyError(f"TVM could not import graph {graph.name!r}{where}: {error_summary(exc)}") from None


def check_outputs(graph: Graph, func: Any) -> list[int]:
    """Positions of outputs TVM returns as constants; raises if types disagree with the graph."""
    ret = func.ret_ty
    types = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    if len(types) != len(graph.outputs):
        raise PropertyError(f"TVM built graph {graph.name!r} with {len(types)} output(s), the graph "
                            f"has {len(graph.outputs)}")
    for value, ty in zip(graph.outputs, types):
        if isinstance(ty, relax.ShapeType):
            dtype, shape = "int64", (ty.ndim,)
        else:
            dtype = str(ty.dtype)
            dims = static_shape(ty)  # None: unknown rank or symbolic dimensions
            shape = None if dims is None else tuple(dims)
        if dtype != value.dtype.name or shape != value.shape:
            found = "?" if shape is None else ",".join(map(str, shape))
            raise PropertyError(f"TVM built graph {graph.name!r} with output %{value.name} of type "
                                f"{dtype}[{found}]; the graph says {value.type_str()}")
    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings}

    def resolve(expr: Any) -> Any:
        while isinstance(expr, relax.Var) and expr in bound:
            expr = bound[expr]
        return expr

    result = resolve(func.body.body)
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    return [i for i, expr in enumerate(fields) if isinstance(resolve(expr), tvm.ir.expr.Constant)]


def prepared_graph(graph: Graph) -> Graph:
    """The graph TVM compiles: Loops with a constant trip count and LSTM/GRU/RNN unrolled, Ifs
    with small pure branches as both branches and a Where, QOperator int8 ops in QDQ form,
    BatchNormalization folded into convolutions, kernel taps that read only padding cut,
    subnormal weights of products and sums zero, GroupNorm exports on the map's own axes,
    Sum as Adds, Gathers of an axis's one element as Squeeze, a Conv's SAME auto_pad as
    explicit pads. Never the caller's graph:
    :func:`~subgraph.transform.unroll.unroll_loops` copies it, and the later rewrites return their input when they have nothing to rewrite.

    :func:`~subgraph.transform.unroll.unroll_loops` and
    :func:`~subgraph.properties.tvm.intake.cells.unroll_recurrent` write what the importer
    lacks as primitive ops. TVM's fuser does not fuse ``conv2d`` with ``batch_norm``, so
    each BN would be one more pass over memory; :func:`~subgraph.transform.batchnorm.fold_batchnorm`
    removes it beforehand. A multiply reading a subnormal weight takes a microcode assist
    (:func:`~subgraph.transform.subnormals.flush_subnormal_weights`, after the folding, which
    can make them). :func:`~subgraph.properties.tvm.intake.rewrites.sum_as_adds` avoids the
    importer's stack, :func:`~subgraph.properties.tvm.intake.rewrites.squeezed_gathers` its
    unfusable ``take``, :func:`~subgraph.properties.tvm.intake.rewrites.explicit_pads` its
    separate ``pad`` (which stays NCHW), :func:`~subgraph.properties.tvm.intake.rewrites.scaled_projections`
    the separate multiply of a squeeze-and-excitation scale. The importer has no converter for
    onnxruntime's QOperator ops; :func:`~subgraph.properties.tvm.intake.qoperator.qdq_equivalents`
    writes them as the QDQ pattern whose convolutions and products import as int8 kernels.
    The device each node was given (``rt_info["affinity"]``, which HETERO records) is not
    part of what is compiled: it is dropped, so that two instances of one target (a MULTI
    model's ``REMOTE.0`` and ``REMOTE.1``) share one build and its cache entry.
    """
    graph = flush_subnormal_weights(trim_conv_taps(fold_batchnorm(qdq_equivalents(select_ifs(unroll_loops(graph))))))
    graph = unroll_recurrent(scaled_projections(explicit_pads(squeezed_gathers(sum_as_adds(group_norms(graph))))))
    for node in graph.nodes:
        node.rt_info.pop("affinity", None)
    return graph


def onnx_for_tvm(graph: Graph) -> tuple[Graph, Any]:
    """:func:`prepared_graph` and its ONNX model."""
    graph = checked_prepared(graph)
    return graph, prepared_onnx(graph)


def checked_prepared(graph: Graph) -> Graph:
    """:func:`prepared_graph`, for a graph whose inputs have static shapes and dtypes."""
    for value in graph.inputs:
        if value.shape is None or value.dtype is None:
            raise PropertyError(f"graph {graph.name!r}: input %{value.name} needs a static shape and "
                                f"dtype to compile with TVM, got {value.type_str()}")
    return prepared_graph(graph)


def prepared_onnx(prepared: Graph, weights: bool = True) -> Any:
    """The ONNX model of a :func:`checked_prepared` graph (``weights=False``: its structure
    only, see :func:`~subgraph.onnx.writer.to_onnx`)."""
    try:
        return to_onnx(prepared, weights=weights)
    except SubgraphError as exc:
        raise PropertyError(f"graph {prepared.name!r} cannot be written as ONNX for TVM: {exc}") from exc


def relax_module(graph: Graph, model: Any, integer: bool = False) -> Any:
    """The Relax module of ``model`` (from :func:`onnx_for_tvm`), with the graph's static input
    types; with ``integer``, QDQ convolutions in integer form
    (:func:`~subgraph.properties.tvm.intake.quantized.integer_convolutions`: for a target whose
    int8 kernels are faster than its float ones)."""
    shapes = {v.name: list(v.shape) for v in graph.inputs}
    dtypes = {v.name: v.dtype.name for v in graph.inputs}
    return _import_relax(graph, model, shapes, dtypes, integer)

