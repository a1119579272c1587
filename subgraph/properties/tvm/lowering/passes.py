"""The Relax pipeline of CPU builds: without it ``tvm.compile`` emits scalar, single-thread loops.

TVM 0.27's default ``llvm`` pipeline lowers every operator to naive loop nests.
:func:`relax_pipeline` is what the build passes to ``tvm.compile``: the CPU backend's
legalize-and-fuse passes (:func:`prepare_passes`), then one schedule per fused function
(:mod:`~subgraph.properties.tvm.schedule.cpu`), then the usual lowering. Scheduling is
deterministic (no search, no measuring: :mod:`~subgraph.properties.tvm.build.tuner` measures
tiles ahead of time and stores the winners), so a build stays a matter of seconds:

- ``"cpu"`` (default): convolutions are first rewritten to NHWC activations and HWIO
  weights (``relax.transform.ConvertLayout``; the weight transposes fold into constants), so
  that the output channel is contiguous in both the output and the weights (where TVM's
  ConvertLayout fails, the graph stays NCHW), and the transposes it leaves move past
  elementwise arithmetic to cancel (:mod:`~subgraph.properties.tvm.lowering.permutes`); constant weights of convolutions and matrix
  products are packed in panels of the vector width (:mod:`~subgraph.properties.tvm.lowering.packing`);
  2-D resizes run as two 1-D passes (:mod:`~subgraph.properties.tvm.lowering.resize2d`); then every fused function gets the rules of
  :func:`~subgraph.properties.tvm.schedule.cpu.schedule_rules`, each function on its own
  (:class:`~subgraph.properties.tvm.schedule.isolation.ApplyScheduleRules`: a rule that fails on one
  function costs that function alone); ``erf`` goes through TVM's fast (vectorisable)
  approximation, softmax and layer norm through :mod:`~subgraph.properties.tvm.lowering.rowwise`.
- ``"dlight"``: only TVM's ``dlight.cpu`` rules (GEMV, row reductions).
- ``"none"``: TVM's default pipeline, unscheduled.

Examples
--------
>>> SCHEDULES
('cpu', 'dlight', 'none')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import tvm
from tvm import relax, tirx, topi
from tvm.relax.backend.cpu_generic import pipeline as cpu

from subgraph.properties.tvm.intake.numpy_fold import fold_with_numpy
from subgraph.properties.tvm.lowering.concat import concat_legalize
from subgraph.properties.tvm.lowering.convtranspose import conv2d_transpose_legalize
from subgraph.properties.tvm.lowering.fastmath import FAST_MATH_LEGALIZE
from subgraph.properties.tvm.lowering.lift import LiftWeights
from subgraph.properties.tvm.lowering.nan import NAN_LEGALIZE
from subgraph.properties.tvm.lowering.packing import packed_conv2d_legalize, packed_matmul_legalize
from subgraph.properties.tvm.lowering.permutes import SinkPermutes
from subgraph.properties.tvm.lowering.qconv import FusedQuantizedConvolutions, has_vnni
from subgraph.properties.tvm.lowering.reductions import SplitFullReductions
from subgraph.properties.tvm.lowering.resize2d import resize2d_legalize
from subgraph.properties.tvm.lowering.rounding import ROUNDING_LEGALIZE
from subgraph.properties.tvm.lowering.rowwise import layer_norm_legalize, softmax_legalize
from subgraph.properties.tvm.schedule.cpu import schedule_rules
from subgraph.properties.tvm.schedule.isolation import ApplyScheduleRules, FunctionStatus
from subgraph.properties.tvm.schedule.loops import vector_lanes
from subgraph.properties.tvm.schedule.tiles import Tile

__all__ = ["SCHEDULES", "prepare_passes", "relax_pipeline"]


#: The schedule names :func:`relax_pipeline` accepts; the first is the default.
SCHEDULES: tuple[str, ...] = ("cpu", "dlight", "none")


def prepare_passes(target: Any, schedule: str = "cpu", rewrite: bool = True) -> list[Any]:
    """The passes before scheduling: layout (``"cpu"``), library dispatch, legalize and fuse.

    Their output's TIR functions are what the schedule rules see and what tuning measures.
    ``rewrite=False`` leaves out the NHWC rewrite, the fast erf and the row-wise softmax and layer norm.
    """
    if schedule != "cpu" or not rewrite:  # clamps as Relax ops too: their legalization propagates NaN
        return [_ClampsAsRelaxOps(), *cpu.library_dispatch_passes(target), *_legalize_passes(target)]

    # TVM's legalize-and-fuse passes, with our softmax and layer norm, vectorisable math (fastmath) and layouts in its LegalizeOps
    lanes = vector_lanes(target)
    rules = {"relax.nn.softmax": softmax_legalize(lanes), "relax.nn.layer_norm": layer_norm_legalize(lanes),
             **NAN_LEGALIZE, **FAST_MATH_LEGALIZE, **ROUNDING_LEGALIZE,
             "relax.nn.conv2d": packed_conv2d_legalize(lanes), "relax.matmul": packed_matmul_legalize(lanes),
             "relax.nn.conv2d_transpose": conv2d_transpose_legalize(lanes), "relax.concat": concat_legalize(lanes),
             "relax.image.resize2d": resize2d_legalize(lanes)}
    legalize = [relax.transform.LegalizeOps(customize_legalize_map=rules)
                if p.info.name == "LegalizeOps" else p for p in cpu.legalize_passes(target)]
    quantized = [FusedQuantizedConvolutions()] if has_vnni(target) else []
    return [*quantized, SplitFullReductions(), _ClampsAsRelaxOps(), _ConvertLayoutIfPossible(), SinkPermutes(),
            *cpu.library_dispatch_passes(target), *legalize]


def _legalize_passes(target: Any) -> list[Any]:
    """TVM's legalize-and-fuse passes, max/min lowered NaN-propagating (:mod:`~subgraph.properties.tvm.lowering.nan`)
    and products rounded (:mod:`~subgraph.properties.tvm.lowering.rounding`)."""
    rules = {**NAN_LEGALIZE, **ROUNDING_LEGALIZE}
    return [relax.transform.LegalizeOps(customize_legalize_map=rules) if p.info.name == "LegalizeOps" else p
            for p in cpu.legalize_passes(target)]


def _ClampsAsRelaxOps() -> Any:  # noqa: N802 - a pass, named like TVM's
    """``call_tir(maximum|minimum, (x, scalar))`` and ``R.clip(x, low, high)`` (a float
    ``x``) as ``R.maximum`` / ``R.minimum``; Dropout's output as its input.

    TVM's ONNX importer emits ``Clip`` as calls of ready-made TIR functions, and
    HardSwish / HardSigmoid through ``R.clip``, none of which ConvertLayout sees through:
    in an NHWC build every ReLU6 of MobileNetV2 was wrapped in two transposes, and every
    HardSwish of MobileNetV3 in three (13% of SSDlite's backbone). The Relax ops compute
    the same (a scalar broadcasts) and
    follow their input's layout. ``R.nn.dropout`` returns a tuple, on which TVM 0.27's
    layout inference aborts ("Expected nested to match tuple", SqueezeNet); at inference
    its first output is its input.
    """
    call_tir, dropout = tvm.ir.Op.get("relax.call_tir"), tvm.ir.Op.get("relax.nn.dropout")
    clip = tvm.ir.Op.get("relax.clip")
    ops = {"maximum": relax.op.maximum, "minimum": relax.op.minimum}

    @relax.expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        def visit_tuple_getitem_(self, op: Any) -> Any:
            op = super().visit_tuple_getitem_(op)
            source = self.lookup_binding(op.tuple_value) if isinstance(op.tuple_value, relax.Var) else None
            if op.index == 0 and isinstance(source, relax.Call) and source.op == dropout:
                return source.args[0]  # inference: Dropout is the identity
            return op

        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            if call.op == clip:
                return self._clip(call)
            if call.op != call_tir or not isinstance(call.args[0], relax.GlobalVar):
                return call
            match = re.fullmatch(r"(maximum|minimum)\d*", call.args[0].name_hint)
            args = call.args[1]
            if match is None or not isinstance(args, relax.Tuple) or len(args.fields) != 2:
                return call
            x, bound = args.fields
            if isinstance(bound, relax.Var):  # a constant bound to a variable first
                bound = self.lookup_binding(bound)
            if not isinstance(bound, tvm.ir.GenericConst) or len(bound.value.shape) != 0:
                return call
            return ops[match.group(1)](x, bound)

        @staticmethod
        def _clip(call: Any) -> Any:
            x, low, high = call.args
            dtype = getattr(x.ty, "dtype", None)
            bounds = (low, high)
            if dtype not in ("float32", "float16", "float64") or not all(
                    isinstance(b, (tirx.IntImm, tirx.FloatImm)) for b in bounds):
                return call
            low, high = (relax.const(float(b.value), dtype) for b in bounds)
            return relax.op.minimum(relax.op.maximum(x, low), high)

    @tvm.transform.module_pass(opt_level=0, name="SubgraphClampsAsRelaxOps")
    def _rewrite(mod: Any, _ctx: Any) -> Any:
        for gvar, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mod[gvar] = _Rewrite().visit_expr(func)
        return relax.transform.DeadCodeElimination()(mod)

    return _rewrite


def _calls_conv2d(mod: Any) -> bool:
    """Whether any Relax function of ``mod`` calls ``relax.nn.conv2d`` or ``relax.nn.conv1d``."""
    convs, found = [tvm.ir.Op.get("relax.nn.conv2d"), tvm.ir.Op.get("relax.nn.conv1d")], []

    def visit(expr: Any) -> None:
        if isinstance(expr, relax.Call) and any(expr.op.same_as(conv) for conv in convs):
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not found:
            relax.analysis.post_order_visit(func.body, visit)
    return bool(found)


def _ConvertLayoutIfPossible() -> Any:  # noqa: N802 - a pass, named like TVM's
    """NHWC activations and HWIO weights for ``conv2d`` and ``conv2d_transpose`` (NWC and WIO for
    ``conv1d``); the module unchanged where TVM's ConvertLayout fails (it does on some Concat and channel-shuffle graphs), and where there
    is no conv2d to convert (on rank-0 broadcasts TVM 0.27's ConvertLayout dies of SIGFPE)."""
    # conv2d_transpose too: TVM 0.27 has no legalization of an NHWC one ("CodeGenVM cannot
    # emit", UNet), convtranspose.py has (in NCHW its vector lanes gathered along the width)
    convert = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"], "relax.nn.conv1d": ["NWC", "WIO"],
                                             "relax.nn.conv2d_transpose": ["NHWC", "HWIO"]})

    @tvm.transform.module_pass(opt_level=0, name="SubgraphConvertLayout")
    def _convert(mod: Any, _ctx: Any) -> Any:
        if not _calls_conv2d(mod):
            return mod
        for attempt in (lambda m: m, _opaque_concat_reshape):
            try:
                return relax.transform.FoldConstant()(fold_with_numpy(convert(attempt(mod))))
            except Exception:  # noqa: BLE001 - TVM's layout rules trip over concat and 5-D reshapes
                continue
        return mod  # keep NCHW; the rules still schedule it

    return _convert


def _opaque_concat_reshape(mod: Any) -> Any:
    """``R.concat``, ``R.reshape``, ``R.permute_dims``, ``R.split`` and ``R.stack`` as calls
    of TIR functions, which ConvertLayout leaves alone.

    TVM 0.27's layout inference aborts on 5-D reshapes and transposes (ShuffleNet's channel
    shuffle: "Invalid SLayout"), on split's tuple and on the stack the importer writes for a
    two-input Max ("Invalid Call": SSDlite's box clipping left all 98 convolutions NCHW,
    3.5x slower); as opaque calls they get NCHW inputs (a transpose each)
    and every convolution still becomes NHWC. Only used when ConvertLayout fails as is.
    """
    concat, reshape = tvm.ir.Op.get("relax.concat"), tvm.ir.Op.get("relax.reshape")
    permute = tvm.ir.Op.get("relax.permute_dims")
    split, stack = tvm.ir.Op.get("relax.split"), tvm.ir.Op.get("relax.stack")

    @relax.expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            shape = getattr(call.ty, "shape", None)
            if call.op == concat and isinstance(call.args[0], relax.Tuple):
                return self.builder_.call_te(topi.concatenate, list(call.args[0].fields), int(call.attrs.axis),
                                             primfunc_name_hint="concat")
            if call.op == reshape and shape is not None:
                return self.builder_.call_te(topi.reshape, call.args[0], [int(d) for d in shape.values],
                                             primfunc_name_hint="reshape")
            if call.op == stack and isinstance(call.args[0], relax.Tuple):
                return self.builder_.call_te(topi.stack, list(call.args[0].fields), int(call.attrs.axis),
                                             primfunc_name_hint="stack")
            if call.op == split:
                parts = call.attrs.indices_or_sections
                parts = int(parts) if isinstance(parts, (int, tirx.IntImm)) else [int(i) for i in parts]
                return self.builder_.call_te(topi.split, call.args[0], parts, int(call.attrs.axis),
                                             primfunc_name_hint="split")
            if call.op == permute and call.attrs.axes is not None:
                return self.builder_.call_te(topi.transpose, call.args[0], [int(a) for a in call.attrs.axes],
                                             primfunc_name_hint="transpose")
            return call

    for gvar, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            rewriter = _Rewrite(mod)
            new_func = rewriter.visit_expr(func)
            mod = rewriter.builder_.finalize()
            mod[gvar] = new_func
    return mod


def _finalize_passes(target: Any, lifted: list[Any] | None) -> list[Any]:
    """TVM's finalizing passes; with ``lifted``, :func:`~subgraph.properties.tvm.lowering.lift.LiftWeights`
    just before ``VMShapeLower``, which then checks the weights' shapes like the inputs'."""
    passes = cpu.finalize_passes(target)
    if lifted is None:
        return passes
    at = next(i for i, p in enumerate(passes) if p.info.name == "VMShapeLower")
    return [*passes[:at], LiftWeights(lifted), *passes[at:]]


def relax_pipeline(target: Any, schedule: str = "cpu", tiles: Mapping[str, Tile] | None = None,
                   applied: list[str] | None = None, status: dict[str, FunctionStatus] | None = None,
                   verify: bool = False, rewrite: bool = True, lifted: list[Any] | None = None) -> Any:
    """The Relax pipeline for ``tvm.compile(mod, target, relax_pipeline=...)`` on a CPU target.

    Parameters
    ----------
    target : tvm.target.Target
        An ``llvm`` target; its vector width decides the vector lanes.
    schedule : str
        One of :data:`SCHEDULES`; ``"none"`` is TVM's default CPU pipeline (with
        NaN-propagating max/min, :mod:`~subgraph.properties.tvm.lowering.nan`).
    tiles : mapping, optional
        Tuned tiles by :func:`~subgraph.properties.tvm.schedule.cpu.function_key` (from
        :mod:`~subgraph.properties.tvm.build.tuner`); functions not in it get the default
        :class:`~subgraph.properties.tvm.schedule.tiles.Tile`.
    applied : list, optional
        Receives the :func:`~subgraph.properties.tvm.schedule.cpu.function_key` of every
        function that got a tile from ``tiles``.
    status : dict, optional
        Receives how each TIR function was scheduled
        (:class:`~subgraph.properties.tvm.schedule.isolation.FunctionStatus`, by function name).
        Each function is scheduled on its own: a rule that fails costs only its function.
    verify : bool
        Build each scheduled function alone and give a function whose scheduled code does
        not build a simpler schedule (slower compiles: for a retry after a failed build).
    rewrite : bool
        ``False`` keeps the layouts and the default erf, softmax and layer norm (a retry after the
        rewrites failed).
    lifted : list, optional
        Given, the large constants of ``main`` become its last parameters and the list
        receives them (:func:`~subgraph.properties.tvm.lowering.lift.LiftWeights`); ``None``
        (default) keeps them in the library.

    Returns
    -------
    tvm.transform.Pass or str

    Examples
    --------
    >>> import tvm
    >>> relax_pipeline(tvm.target.Target("llvm"), "none").info.name
    'SubgraphDefaultPipeline'
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown TVM schedule {schedule!r}; expected one of {list(SCHEDULES)}")
    if schedule == "none":  # TVM's default CPU pipeline, with the NaN-propagating max/min
        @tvm.transform.module_pass(opt_level=0, name="SubgraphDefaultPipeline")
        def _default(mod: Any, _ctx: Any) -> Any:
            with target:
                return tvm.transform.Sequential(
                    [_ClampsAsRelaxOps(), *cpu.library_dispatch_passes(target), *_legalize_passes(target)]
                    + cpu.dataflow_lower_passes(target) + _finalize_passes(target, lifted))(mod)
        return _default

    rules = schedule_rules(schedule, vector_lanes(target), tiles, applied)
    status = {} if status is None else status

    @tvm.transform.module_pass(opt_level=0, name="SubgraphCPUPipeline")
    def _pipeline(mod: Any, _ctx: Any) -> Any:
        with target:
            mod = tvm.transform.Sequential(
                prepare_passes(target, schedule, rewrite) + [ApplyScheduleRules(rules, status, verify)]
                + cpu.dataflow_lower_passes(target) + _finalize_passes(target, lifted))(mod)
        return mod

    return _pipeline

