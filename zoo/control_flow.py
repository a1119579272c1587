"""Small control-flow models (If, Loop, Scan) whose bodies read outer-scope values.

Bodies read values of the graphs around them by name, as ``torch.jit.script`` exports and
onnxscript write them: these are the models that need implicit inputs. Every builder
returns a model that passes ``onnx.checker`` (full check) and runs in onnxruntime;
:func:`torch_script_model` needs torch.

Examples
--------
>>> m = if_model()
>>> [n.op_type for n in m.graph.node]
['Relu', 'If', 'Neg']
>>> sorted(a.name for a in m.graph.node[1].attribute)
['else_branch', 'then_branch']
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "feeds_for",
    "if_model",
    "loop_model",
    "nested_loop_if_model",
    "rnn_loop_model",
    "scan_model",
    "torch_script_model",
]

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _t(name: str, elem: int = F, shape: Any = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes: list, name: str, inputs: list, outputs: list, initializers: list = (),
           opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def if_model(gather: bool = False) -> onnx.ModelProto:
    """``y = -(c ? relu(a) + b : relu(a) * b)``; both branches read ``%a2`` and ``%b`` from outside,
    and the second output is ``c ? b : -b``. With ``gather`` the then branch copies ``%b``
    by a Gather of its rows 0 and 1 (an index op: the If is not written out as a Where)."""
    copy = (helper.make_node("Gather", ["b", "rows"], ["tb"], name="copyb") if gather
            else helper.make_node("Identity", ["b"], ["tb"], name="copyb"))
    rows = [helper.make_tensor("rows", onnx.TensorProto.INT64, [2], [0, 1])] if gather else []
    then = helper.make_graph([helper.make_node("Add", ["a2", "b"], ["t"], name="add"), copy], "then", [],
                             [_t("t", F, [2, 3]), _t("tb", F, [2, 3])], initializer=rows)
    other = helper.make_graph([helper.make_node("Mul", ["a2", "b"], ["e"], name="mul"),
                               helper.make_node("Neg", ["b"], ["nb"], name="negb")], "else", [],
                              [_t("e", F, [2, 3]), _t("nb", F, [2, 3])])
    nodes = [helper.make_node("Relu", ["a"], ["a2"], name="relu"),
             helper.make_node("If", ["c"], ["r", "pass"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    return _model(nodes, "if_outer", [_t("c", B, []), _t("a", F, [2, 3]), _t("b", F, [2, 3])],
                  [_t("y", F, [2, 3]), _t("pass", F, [2, 3])])


def loop_model(scan_output: bool = True, trips: int | None = 4, cond: bool = True) -> onnx.ModelProto:
    """A Loop with trip count ``trips`` (an initializer; ``None``: omitted) and/or a condition
    (``cond``: the graph input ``%go``), carrying ``%acc`` of fixed shape [2, 3]: each
    iteration ``acc = acc * 0.5 + w * i`` and goes on while ``i < limit``; ``w`` and
    ``limit`` are read from outside. With ``scan_output`` it also stacks ``relu(acc)``."""
    body_nodes = [
        helper.make_node("Cast", ["i"], ["fi"], to=F, name="cast"),
        helper.make_node("Mul", ["w", "fi"], ["wi"], name="wi"),
        helper.make_node("Mul", ["acc_in", "half"], ["acc_h"], name="half_acc"),
        helper.make_node("Add", ["acc_h", "wi"], ["acc_out"], name="next"),
        helper.make_node("Less", ["fi", "limit"], ["cond_out"], name="less"),
    ]
    outs = [_t("cond_out", B, []), _t("acc_out", F, [2, 3])]
    if scan_output:
        body_nodes.append(helper.make_node("Relu", ["acc_out"], ["scan"], name="scan_relu"))
        outs.append(_t("scan", F, [2, 3]))
    body = helper.make_graph(body_nodes, "loop_body", [_t("i", I64, []), _t("cond_in", B, []), _t("acc_in", F, [2, 3])],
                             outs, [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    inputs = [_t("x", F, [2, 3]), _t("w", F, [2, 3]), _t("limit", F, [])]
    initializers = []
    if trips is not None:
        initializers.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    if cond:
        inputs.append(_t("go", B, []))
    loop_outs = ["acc_final"] + (["stacked"] if scan_output else [])
    nodes = [helper.make_node("Loop", ["M" if trips is not None else "", "go" if cond else "", "x"], loop_outs,
                              body=body, name="loop"),
             helper.make_node("Sigmoid", ["acc_final"], ["y"], name="sig")]
    outputs = [_t("y", F, [2, 3])] + ([_t("stacked", F, ["trips", 2, 3])] if scan_output else [])
    return _model(nodes, "loop_outer", inputs, outputs, initializers)


def rnn_loop_model(trips: int = 5, exit_early: bool = False, body_op: str = "Tanh",
                   trips_input: bool = False) -> onnx.ModelProto:
    """TorchScript's ``for t in range(x.size(1)): h = tanh(x[:, t] @ w + h)``: a Loop with a
    constant trip count and a constant true condition the body passes on, carrying ``h``,
    stacking every ``h`` as a scan output, reading ``x``, ``w`` and the condition from outside."""
    body = helper.make_graph([
        helper.make_node("Gather", ["x", "t"], ["x_t"], axis=1, name="step"),
        helper.make_node("MatMul", ["x_t", "w"], ["xw"], name="project"),
        helper.make_node("Add", ["xw", "h_in"], ["pre"], name="add"),
        helper.make_node(body_op, ["pre"], ["h_out"], name="act"),
        (helper.make_node("Less", ["t", "three"], ["cond_out"], name="stop") if exit_early else
         helper.make_node("Identity", ["go"], ["cond_out"], name="keep_going")),
        helper.make_node("Relu", ["h_out"], ["seen"], name="seen"),
    ], "body", [helper.make_tensor_value_info("t", I64, []), helper.make_tensor_value_info("cond_in", B, []),
                helper.make_tensor_value_info("h_in", F, [2, 8])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("h_out", F, [2, 8]),
         helper.make_tensor_value_info("seen", F, [2, 8])],
        [numpy_helper.from_array(np.array(3, np.int64), "three")])
    rng = np.random.default_rng(9)
    initializers = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.4, "w"),
                    numpy_helper.from_array(np.array(True), "go"),
                    numpy_helper.from_array(np.zeros((2, 8), np.float32), "h0")]
    inputs = [helper.make_tensor_value_info("x", F, [2, trips, 8])]
    if trips_input:
        inputs.append(helper.make_tensor_value_info("M", I64, []))
    else:
        initializers.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    graph = helper.make_graph([
        helper.make_node("Loop", ["M", "go", "h0"], ["h", "hs"], body=body, name="loop"),
        helper.make_node("Sigmoid", ["h"], ["y"], name="head"),
    ], "rnn", inputs, [helper.make_tensor_value_info("y", F, [2, 8]),
                       helper.make_tensor_value_info("hs", F, [None, 2, 8])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def nested_loop_if_model() -> onnx.ModelProto:
    """A Loop (3 trips) whose body holds an If reading ``%x`` and ``%y``, values two scopes
    out, and ``%acc``, a value of the loop body (one scope out)."""
    then = helper.make_graph([helper.make_node("Add", ["acc", "x"], ["t"], name="then_add")], "then", [],
                             [_t("t", F, [3])])
    other = helper.make_graph([helper.make_node("Sub", ["acc", "y"], ["e"], name="else_sub")], "else", [],
                              [_t("e", F, [3])])
    body = helper.make_graph([
        helper.make_node("ReduceSum", ["acc"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Greater", ["s", "zero"], ["pos"], name="pos"),
        helper.make_node("If", ["pos"], ["acc_out"], then_branch=then, else_branch=other, name="inner_if"),
        helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
    ], "body", [_t("i", I64, []), _t("cond_in", B, []), _t("acc", F, [3])],
        [_t("cond_out", B, []), _t("acc_out", F, [3])])
    nodes = [helper.make_node("Loop", ["M", "", "start"], ["acc_final"], body=body, name="loop"),
             helper.make_node("Mul", ["acc_final", "x"], ["out"], name="mul")]
    initializers = [numpy_helper.from_array(np.array(3, np.int64), "M"),
                    numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    return _model(nodes, "nested", [_t("start", F, [3]), _t("x", F, [3]), _t("y", F, [3])],
                  [_t("out", F, [3])], initializers)


def scan_model(input_direction: int = 0, output_axis: int = 0, output_direction: int = 0) -> onnx.ModelProto:
    """A Scan over ``%xs`` [4, 3] (axis 0) with state ``%s`` [3]: ``s = s + xs[t] * w`` with
    ``w`` read from outside; the scan output ``relu(s)`` is stacked along ``output_axis``."""
    body = helper.make_graph([
        helper.make_node("Mul", ["x_t", "w"], ["xw"], name="xw"),
        helper.make_node("Add", ["s_in", "xw"], ["s_out"], name="acc"),
        helper.make_node("Relu", ["s_out"], ["y_t"], name="relu"),
    ], "scan_body", [_t("s_in", F, [3]), _t("x_t", F, [3])], [_t("s_out", F, [3]), _t("y_t", F, [3])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s_final", "ys"], body=body, num_scan_inputs=1,
                            scan_input_directions=[input_direction], scan_output_axes=[output_axis],
                            scan_output_directions=[output_direction], name="scan")
    out_shape = [4, 3] if output_axis in (0, -2) else [3, 4]
    return _model([node], "scan_outer", [_t("s0", F, [3]), _t("xs", F, [4, 3]), _t("w", F, [3])],
                  [_t("s_final", F, [3]), _t("ys", F, out_shape)])


def torch_script_model() -> onnx.ModelProto:
    """A ``torch.jit.script`` module with an ``if`` on data and a ``for`` loop, exported with
    ``torch.onnx.export(..., dynamo=False)``: its bodies read the module's inputs by name."""
    import torch

    class Branchy(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            if bool(x.sum() > 0):
                y = x * w
            else:
                y = x - w
            for i in range(x.size(0)):  # a size: TorchScript keeps the loop
                y = y + w * float(i)
            return torch.relu(y)

    buffer = io.BytesIO()
    args = (torch.ones(2, 3), torch.ones(2, 3))
    with warnings.catch_warnings():  # TorchScript and its exporter are deprecated: that is the point
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(Branchy()), args, buffer, input_names=["x", "w"], output_names=["y"],
                          opset_version=17, dynamo=False)
    model = onnx.load_from_string(buffer.getvalue())
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded feeds for every graph input of ``model``: normal floats, bools true."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in model.graph.input:
        elem = info.type.tensor_type.elem_type
        shape = [d.dim_value for d in info.type.tensor_type.shape.dim]
        if elem == B:
            feeds[info.name] = np.ones(shape, bool)
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(elem))
    return feeds
