"""BatchNormalization statistics measured on data, so random networks stay O(1).

With He-initialised weights a plain ReLU network keeps its activations' scale roughly
constant, but a residual sum doubles their variance at every block (2**16 through
ResNet-50) unless each BatchNormalization really divides by its input's variance, as in
a trained network. :func:`calibrate_batchnorm` makes that true for one calibration
batch, exactly and in a single run (of onnxruntime; of this package's numpy executor where
onnxruntime is not installed, as after the README's first command: the statistics then
differ by float32 rounding, up to 1e-3 relative on ResNet-18's, so the model's bytes differ):

1. every ``BatchNormalization(x, scale, bias, mean, var)`` of a copy of the model is fed
   the statistics of its actual input instead of its initializers -- per channel
   ``var = Var(x) * j`` with a jitter ``j`` in U(0.5, 1.5), and
   ``mean = Mean(x) + 0.1 * o * sqrt(Var(x))`` with ``o`` from N(0, 1) (so channels
   differ as in a real network); those tensors are also made graph outputs;
2. one run of the copy on ``feeds`` yields every statistic, computed on the
   activations that the calibrated network itself produces upstream;
3. the statistics are written into the model's mean and variance initializers, so the
   calibrated model computes, on ``feeds``, exactly what the copy computed.

Examples
--------
>>> import numpy as np
>>> from zoo.builder import GraphBuilder
>>> b = GraphBuilder("bn", seed=0)
>>> x = b.input("x", [1, 3, 8, 8], "float32")
>>> w = b.initializer("w", np.full((4, 3, 3, 3), 10.0, np.float32))   # outputs up to ~500
>>> y = b.node("Conv", [x, w], "conv", pads=[1, 1, 1, 1])
>>> stats = [b.initializer(n, np.ones(4, np.float32)) for n in ("s", "b", "m", "v")]
>>> b.output(b.node("BatchNormalization", [y, *stats], "bn"), [1, 4, 8, 8], "float32")
>>> feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8), dtype=np.float32)}
>>> model = calibrate_batchnorm(b.model(), feeds, seed=0)
>>> import onnxruntime
>>> out = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
>>> bool(0.5 < out.std() < 2.0)
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from zoo.builder import rng_for, shapes_without_weights

__all__ = ["calibrate_batchnorm"]


def _measuring_copy(model: Any, seed: int) -> tuple[Any, list[tuple[str, str, str, str]]]:
    """The copy whose BatchNormalizations use their input's statistics (step 1)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    ranks = {name: len(shape) for name, shape in shapes_without_weights(model).items()}
    dims = {t.name: tuple(t.dims) for t in model.graph.initializer}
    nodes, consts, measured = [], [], []
    for node in model.graph.node:
        if node.op_type != "BatchNormalization" or not {node.input[3], node.input[4]} <= dims.keys():
            nodes.append(node)
            continue
        x, mean_name, var_name = node.input[0], node.input[3], node.input[4]
        channels = dims[var_name]
        axes = [0, *range(2, ranks[x])]
        jitter = rng_for(seed, var_name).uniform(0.5, 1.5, channels).astype(np.float32)
        offset = (rng_for(seed, mean_name).standard_normal(channels) * 0.1).astype(np.float32)
        p = f"calibrate/{node.name or node.output[0]}/"
        consts += [numpy_helper.from_array(jitter, p + "jitter"), numpy_helper.from_array(offset, p + "offset")]
        nodes += [
            helper.make_node("ReduceMean", [x], [p + "mean_k"], axes=axes, keepdims=1),
            helper.make_node("ReduceMean", [x], [p + "mean"], axes=axes, keepdims=0),
            helper.make_node("Sub", [x, p + "mean_k"], [p + "centered"]),
            helper.make_node("Mul", [p + "centered", p + "centered"], [p + "squared"]),
            helper.make_node("ReduceMean", [p + "squared"], [p + "var"], axes=axes, keepdims=0),
            helper.make_node("Mul", [p + "var", p + "jitter"], [p + "var_used"]),
            helper.make_node("Sqrt", [p + "var"], [p + "std"]),
            helper.make_node("Mul", [p + "std", p + "offset"], [p + "shift"]),
            helper.make_node("Add", [p + "mean", p + "shift"], [p + "mean_used"]),
        ]
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.input[3], copy.input[4] = p + "mean_used", p + "var_used"
        nodes.append(copy)
        measured.append((mean_name, var_name, p + "mean_used", p + "var_used"))
    outputs = list(model.graph.output)
    for _, _, mean_out, var_out in measured:
        outputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in (mean_out, var_out)]
    replaced = {name for entry in measured for name in entry[:2]}
    kept = [t for t in model.graph.initializer if t.name not in replaced]
    graph = helper.make_graph(nodes, model.graph.name, list(model.graph.input), outputs,
                              initializer=[*kept, *consts])
    copy_model = helper.make_model(graph, opset_imports=model.opset_import)
    copy_model.ir_version = model.ir_version
    return copy_model, measured


def calibrate_batchnorm(model: Any, feeds: Mapping[str, np.ndarray], seed: int = 0) -> Any:
    """A copy of ``model`` whose BatchNormalization statistics fit ``feeds`` (see above).

    Parameters
    ----------
    model : onnx.ModelProto
        Its BatchNormalization means and variances must be initializers (others are left).
    feeds : Mapping[str, numpy.ndarray]
        The calibration batch, one array per graph input.
    seed : int
        Seed of the per-channel jitter.

    Returns
    -------
    onnx.ModelProto
        The same graph with new mean and variance initializers; ``model`` is unchanged
        (and returned as is when it has no BatchNormalization).
    """
    import onnx
    from onnx import numpy_helper

    if not any(node.op_type == "BatchNormalization" for node in model.graph.node):
        return model
    measuring, measured = _measuring_copy(model, seed)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    wanted = [name for entry in measured for name in entry[2:]]
    values = dict(zip(wanted, _run(measuring, wanted, feeds)))
    index = {t.name: t for t in result.graph.initializer}
    for mean_name, var_name, mean_out, var_out in measured:
        index[mean_name].CopyFrom(numpy_helper.from_array(values[mean_out].astype(np.float32), mean_name))
        index[var_name].CopyFrom(numpy_helper.from_array(values[var_out].astype(np.float32), var_name))
    return result


def _run(model: Any, names: list[str], feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs ``names`` of ``model`` on ``feeds``: onnxruntime's, else ``subgraph.run``'s."""
    try:
        import onnxruntime
    except ImportError:
        import subgraph

        outputs = subgraph.run(subgraph.from_onnx(model), dict(feeds))
        return [outputs[name] for name in names]
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(names, dict(feeds))
