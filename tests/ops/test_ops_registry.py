"""The kernel registry: op_path, node_path, register_kernel predicates, get_kernel errors, and
its structure: a leaf registry filled by exactly the modules op_list names."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

import subgraph
import subgraph.ops
from subgraph.errors import ExecutionError, UnsupportedOpError
from subgraph.executor import Executor
from subgraph.ir import Graph
from subgraph.ops import (
    KERNELS,
    SUPPORTS,
    any_dtype,
    get_kernel,
    native_dtypes,
    node_path,
    numpy_ops,
    op_path,
    register_kernel,
)
from subgraph.ops.reference import ReferenceKernel
from subgraph.ops.registry import PLANS

REQUIRED = [
    "Conv", "BatchNormalization", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm",
    "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Erf", "Tanh", "Sigmoid", "Softmax",
    "LogSoftmax", "Reshape", "Flatten", "Transpose", "Concat", "Split", "Slice", "Gather", "Unsqueeze",
    "Squeeze", "Shape", "Cast", "Constant", "ConstantOfShape", "Identity", "Dropout", "LRN",
    "LayerNormalization", "ReduceMean", "Sum", "Max", "Min", "Mean", "Where", "Equal", "Expand", "Pad", "Neg",
    "Exp", "Log", "Abs", "LeakyRelu", "Gelu", "Range", "Not", "And", "Or", "Less", "Greater", "ArgMax",
]


def _light_model_ops() -> set[str]:
    import glob
    import os

    import onnx

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    ops = set()
    for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
        ops.update(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)
    return ops


def test_required_ops_and_light_model_ops_have_numpy_kernels():
    light = _light_model_ops()
    assert len(light) >= 15
    missing = sorted(op for op in {*REQUIRED, *light} if op_path(op) != "numpy")
    assert missing == []


def test_op_path_answers_numpy_reference_and_unknown():
    assert op_path("Conv") == "numpy"
    assert op_path("Conv", "ai.onnx") == "numpy"
    assert op_path("Celu") == "reference"
    assert op_path("LabelEncoder", "ai.onnx.ml") == "reference"
    assert op_path("NotAnOnnxOp") is None
    assert op_path("Conv", "com.example") is None
    assert numpy_ops() == sorted(KERNELS)


def test_node_path_follows_the_predicate():
    g = Graph("g")
    f32 = g.add_input("f32", (3,), "float32")
    f64 = g.add_input("f64", (3,), "float64")
    text = g.add_input("text", (3,), object)
    assert node_path(g.add_node("Erf", [f32])) == "numpy"
    assert node_path(g.add_node("Erf", [f64])) == "reference"  # numpy erf is float32-accurate only
    assert node_path(g.add_node("Equal", [text, text])) == "reference"
    assert node_path(g.add_node("Identity", [text])) == "numpy"  # data movement takes any dtype
    assert node_path(g.add_node("Cast", [f32], attrs={"to": 8})) == "reference"  # to string
    assert node_path(g.add_node("Cast", [f32], attrs={"to": 7})) == "numpy"
    assert node_path(g.add_node("Celu", [f32])) == "reference"
    assert node_path(g.add_node("Frobnicate", [f32])) is None
    unknown = g.add_node("Relu", [g.add_node("Frobnicate", [f32]).outputs[0]])
    assert node_path(unknown) == "numpy"  # unknown dtypes do not decline


def test_get_kernel_returns_numpy_kernel_or_reference_runner():
    g = Graph("g")
    x = g.add_input("x", (3,), "float64")
    assert get_kernel(g.add_node("Relu", [x])) is KERNELS["Relu"]
    assert isinstance(get_kernel(g.add_node("Erf", [x])), ReferenceKernel)


def test_get_kernel_names_the_node_when_nothing_can_run_it():
    g = Graph("g")
    x = g.add_input("x", (3,), "float32")
    node = g.add_node("Frobnicate", [x], name="frob", domain="com.example")
    with pytest.raises(UnsupportedOpError, match=r"node 'frob' \(Frobnicate\): no numpy kernel and "
                                                  r"onnx.reference does not implement 'Frobnicate' in "
                                                  r"domain 'com.example'; numpy kernels exist for"):
        get_kernel(node)


def test_executor_reports_unrunnable_node():
    g = Graph("g")
    x = g.add_input("x", (3,), "float32")
    g.set_outputs([g.add_node("Frobnicate", [x], name="frob").outputs[0]])
    with pytest.raises(ExecutionError, match="node 'frob' \\(Frobnicate\\)"):
        Executor(g).run({"x": np.zeros(3, np.float32)})


def test_register_kernel_with_predicate_declines_to_reference():
    calls = []

    def only_float32(node):
        return node.inputs[0].dtype == np.float32

    original = KERNELS["Softsign"], SUPPORTS["Softsign"]  # the real kernel, restored below

    @register_kernel("Softsign", supports=only_float32)
    def softsign(node, x):
        calls.append(x.dtype)
        return x / (1 + np.abs(x))

    try:
        g = Graph("g")
        a = g.add_input("a", (2,), "float32")
        b = g.add_input("b", (2,), "float64")
        ya = g.add_node("Softsign", [a], name="sa").outputs[0]
        yb = g.add_node("Softsign", [b], name="sb").outputs[0]
        g.set_outputs([ya, yb])
        out = Executor(g).run({"a": np.array([1, -3], np.float32), "b": np.array([1, -3], np.float64)})
        np.testing.assert_allclose(out["sa"], [0.5, -0.75])
        np.testing.assert_allclose(out["sb"], [0.5, -0.75])
        assert out["sb"].dtype == np.float64
        assert calls == [np.float32]  # the float64 node ran on onnx.reference
    finally:
        KERNELS["Softsign"], SUPPORTS["Softsign"] = original


def test_default_predicate_is_native_dtypes():
    assert all(SUPPORTS[op] is not None for op in KERNELS)
    assert SUPPORTS["Relu"] is native_dtypes
    assert SUPPORTS["Reshape"] is any_dtype


# --------------------------------------------------------------------------- structure
OPS_DIR = Path(subgraph.ops.__file__).parent


def listed_modules(import_graph) -> list[str]:
    """The kernel modules subgraph/ops/op_list.py imports."""
    return sorted(import_graph.find_modules_directly_imported_by("subgraph.ops.op_list"))


def registers_kernels(path: Path, decorators: tuple[str, ...] = ("register_kernel", "register_plan")) -> bool:
    """Whether a module's source decorates anything with register_kernel(...) or register_plan(...)."""
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", None) in decorators
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.FunctionDef) for d in node.decorator_list)


def test_the_registry_is_a_leaf(import_graph):
    # it holds the dicts; the IR is all it needs (Node, for its signatures)
    assert import_graph.find_modules_directly_imported_by("subgraph.ops.registry") == {"subgraph.ir"}
    assert not {m for m in import_graph.find_upstream_modules("subgraph.ops.registry")
                if m.startswith("subgraph.ops")}


def test_every_listed_module_is_imported_and_registers_kernels(import_graph):
    listed = listed_modules(import_graph)
    assert listed == [f"subgraph.ops.{name}" for name in (
        "activation", "constant", "contrib_quant", "conv", "conv_plans", "convert", "detection", "elementwise",
        "index", "linalg", "norm", "pool", "qlinear", "qlinear_plans", "quant", "recurrent", "reduce", "resize", "tensor")]
    registered = {kernel.__module__ for kernel in [*KERNELS.values(), *PLANS.values()]}
    for module in listed:
        assert module in sys.modules
        assert module in registered, f"{module} registers no kernel and no plan"
    assert registered <= set(listed), f"registered outside op_list: {sorted(registered - set(listed))}"


def test_plans_are_registered_beside_their_kernels():
    """Each plan lives in its kernel's module, or in that module's ``_plans`` sibling, and
    planned.py holds no list of ops: the registry is the list."""
    assert PLANS and set(PLANS) <= set(KERNELS)
    for op, planner in PLANS.items():
        home = KERNELS[op].__module__
        assert planner.__module__ in (home, home + "_plans"), f"{op}: plan in {planner.__module__}, kernel in {home}"
    source = (OPS_DIR / "planned.py").read_text()
    quoted = {node.value for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not quoted & set(KERNELS), sorted(quoted & set(KERNELS))


def test_no_kernel_module_is_missing_from_op_list(import_graph):
    kernel_modules = sorted(f"subgraph.ops.{p.stem}" for p in OPS_DIR.glob("*.py") if registers_kernels(p))
    assert kernel_modules == listed_modules(import_graph)
    helpers = sorted(p.stem for p in OPS_DIR.glob("*.py") if not registers_kernels(p))
    assert helpers == ["__init__", "blas", "common", "control", "kn2row", "op_list", "planned", "reference", "registry",
                       "window"]


def test_topk_ties_keep_the_lower_index_first_like_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    x = np.array([[3, 1, 3, 2, 3, 1]], np.float32)
    for largest in (1, 0):
        model = helper.make_model(helper.make_graph(
            [helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest)], "topk",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
            [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 4]),
             helper.make_tensor_value_info("i", TensorProto.INT64, [1, 4])],
            [helper.make_tensor("k", TensorProto.INT64, [1], [4])]), opset_imports=[helper.make_opsetid("", 17)])
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        graph = subgraph.from_onnx(model)
        assert node_path(graph.node("TopK_0")) == "numpy"
        got = subgraph.run(graph, {"x": x})
        np.testing.assert_array_equal(got["v"], want[0])
        np.testing.assert_array_equal(got["i"], want[1])
