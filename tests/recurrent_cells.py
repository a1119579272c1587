"""LSTM, GRU and RNN test cells built with onnx.helper, and onnxruntime's outputs for them.

Used by the numpy kernel tests (tests/ops) and the TVM unrolling tests (tests/properties/tvm).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

SEQ, BATCH, INPUT, HIDDEN = 6, 3, 4, 5
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def cell(op: str, attrs: dict, lens: bool = True, states: bool = True, peepholes: bool = False,
         seed: int = 5) -> tuple:
    """``(model, feeds, want, outputs)``: a one-node model of ``op`` with constant weights
    (and ``sequence_lens`` [SEQ, 2, 4], initial states, peepholes as asked), its feeds, and
    onnxruntime's outputs (onnxruntime has no layout 1: it runs the same cell sequence-first
    and its results are transposed)."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)

    def f32(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    gates = GATES[op]
    inits = {"W": f32(dirs, gates * HIDDEN, INPUT), "R": f32(dirs, gates * HIDDEN, HIDDEN),
             "B": f32(dirs, 2 * gates * HIDDEN)}
    names = ["x", "W", "R", "B", "lens" if lens else ""]
    state_shape = (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN)
    if states:
        inits["h0"] = f32(*state_shape)
        names.append("h0")
        if op == "LSTM":
            inits["c0"] = f32(*state_shape)
            names.append("c0")
    if peepholes:
        inits["P"] = f32(dirs, 3 * HIDDEN)
        names += [""] * (7 - len(names)) + ["P"]
    if lens:
        inits["lens"] = np.array([SEQ, 2, 4], np.int32)
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    x = f32(*([BATCH, SEQ, INPUT] if layout else [SEQ, BATCH, INPUT]))

    def model(layout: int, inits: dict):
        node = helper.make_node(op, names, outputs, name="cell", hidden_size=HIDDEN, **dict(attrs, layout=layout))
        shape = [BATCH, SEQ, INPUT] if layout else [SEQ, BATCH, INPUT]
        return helper.make_model(helper.make_graph(
            [node], "cell", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in inits.items()]), opset_imports=[helper.make_opsetid("", 14)])

    seq_first = {k: np.swapaxes(v, 0, 1) if layout and k in ("h0", "c0") else v for k, v in inits.items()}
    session = ort.InferenceSession(model(0, seq_first).SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": np.swapaxes(x, 0, 1) if layout else x})
    if layout:
        want = [np.transpose(want[0], (2, 0, 1, 3))] + [np.swapaxes(w, 0, 1) for w in want[1:]]
    return model(layout, inits), {"x": x}, want, outputs


def stack(op: str, steps: int = 64, width: int = 256, lens: int | None = None, seed: int = 7) -> tuple:
    """``(model, feeds)``: two bidirectional ``op`` layers of ``width`` over ``steps`` steps
    of batch 1 (the deployment CRNN's shapes), the first with constant initial states (and
    ``sequence_lens`` ``[lens]`` when given), the second with neither; each layer's ``Y``
    made ``[steps, 1, 2 * width]`` for the next, as PyTorch exports it. Outputs: the second
    layer's ``Y`` and both layers' ``Y_h``. Weights are drawn as PyTorch initialises them,
    uniform in +-1/sqrt(width): larger ones make a Tanh RNN chaotic, and 64 steps then
    amplify any rounding difference past a tolerance."""
    rng = np.random.default_rng(seed)

    def f32(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(np.float32) / np.float32(np.sqrt(width))

    gates, inits, nodes, x = GATES[op], [], [], "x"
    for layer in range(2):
        depth = width if layer == 0 else 2 * width
        arrays = {f"W{layer}": f32(2, gates * width, depth), f"R{layer}": f32(2, gates * width, width),
                  f"B{layer}": f32(2, 2 * gates * width)}
        names = [x, *arrays, "lens" if layer == 0 and lens is not None else ""]
        if layer == 0:
            for state in ("h0", "c0") if op == "LSTM" else ("h0",):
                arrays[state] = f32(2, 1, width)
                names.append(state)
        inits += [numpy_helper.from_array(v, k) for k, v in arrays.items()]
        outputs = [f"Y{layer}", f"Y_h{layer}"]
        nodes += [helper.make_node(op, names, outputs, name=f"{op.lower()}{layer}", hidden_size=width,
                                   direction="bidirectional"),
                  helper.make_node("Transpose", [f"Y{layer}"], [f"T{layer}"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"T{layer}", "shape"], [f"X{layer}"])]
        x = f"X{layer}"
    inits.append(numpy_helper.from_array(np.array([steps, 1, 2 * width], np.int64), "shape"))
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array([lens], np.int32), "lens"))
    model = helper.make_model(helper.make_graph(
        nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, width])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("X1", "Y_h0", "Y_h1")], inits),
        opset_imports=[helper.make_opsetid("", 14)])
    return model, {"x": rng.standard_normal((steps, 1, width)).astype(np.float32)}
