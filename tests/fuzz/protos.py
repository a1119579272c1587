"""What the structural mutations share: hostile values, graph walking and tensor scrambling."""

from __future__ import annotations

import random
from typing import Any, Callable

__all__ = [
    "HUGE_INTS",
    "FLOATS",
    "DIMS",
    "OPS",
    "BAD_UTF8",
    "show",
    "graphs",
    "pick_graph",
    "value_infos",
    "all_value_names",
    "scramble_tensor",
    "size",
    "control_flow_nodes",
]

HUGE_INTS = [
    0,
    -1,
    1,
    2,
    3,
    -2,
    7,
    64,
    65,
    2**31 - 1,
    2**31,
    -(2**31),
    2**32 + 1,
    2**33,
    2**62,
    2**63 - 1,
    -(2**63),
]
FLOATS = [0.0, -1.0, 1.0, 1e-30, 1e30, -1e30, float("nan"), float("inf"), float("-inf"), 3.4e38, 0.5]
DIMS = [0, -1, -7, 1, 2, 3, 1000, 2**20, 2**31, 2**33, 2**40, 2**62, 2**63 - 1]
OPS = [
    "Relu",
    "Add",
    "Conv",
    "Gather",
    "Reshape",
    "Loop",
    "If",
    "Scan",
    "Concat",
    "Softmax",
    "MatMul",
    "Split",
    "Transpose",
    "Slice",
    "Expand",
    "Cast",
    "MaxPool",
    "NoSuchOp",
    "",
    "Identity",
    "Where",
    "TopK",
    "Resize",
]
#: marker strings replaced by invalid UTF-8 after serialization (the Python API refuses to set such bytes)
BAD_UTF8 = "\x01BADUTF8\x01"


def show(name: str) -> str:
    """``repr(name)``, long names shortened the way they were made (``'x' * 5000``)."""
    if len(name) > 40 and len(set(name)) == 1:
        return f"{name[0]!r} * {len(name)}"
    return repr(name)


def graphs(model: Any) -> list[tuple[str, Any]]:
    """Every graph of the model with its path: the main graph, then control-flow bodies."""
    found = [("graph", model.graph)]
    i = 0
    while i < len(found):
        path, g = found[i]
        for k, node in enumerate(g.node):
            for attr in node.attribute:
                if attr.HasField("g"):
                    found.append((f"{path}.node[{k}]({node.op_type}).{attr.name}", attr.g))
                for j, body in enumerate(attr.graphs):
                    found.append((f"{path}.node[{k}]({node.op_type}).{attr.name}[{j}]", body))
        i += 1
    return found


def pick_graph(model: Any, rnd: random.Random, want: Callable[[Any], bool] = lambda g: True):
    choices = [(p, g) for p, g in graphs(model) if want(g)]
    return rnd.choice(choices) if choices else (None, None)


def value_infos(g: Any) -> list[tuple[str, Any]]:
    return (
        [(f"input[{i}]", v) for i, v in enumerate(g.input)]
        + [(f"output[{i}]", v) for i, v in enumerate(g.output)]
        + [(f"value_info[{i}]", v) for i, v in enumerate(g.value_info)]
    )


def all_value_names(g: Any) -> list[str]:
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    for node in g.node:
        names += list(node.output)
    return [n for n in names if n]


def scramble_tensor(t, rnd):
    import numpy as np
    from onnx import numpy_helper

    try:
        array = numpy_helper.to_array(t)
    except Exception:
        t.raw_data = bytes(rnd.randrange(256) for _ in range(rnd.randrange(16)))
        return
    if array.dtype.kind in "iu":
        pool = [0, -1, 1, 2**31 - 1, -(2**31), 2**62, -(2**62), 1000, -1000]
        info = np.iinfo(array.dtype)
        pool = [v for v in pool if info.min <= v <= info.max]
        new = np.array([rnd.choice(pool) for _ in range(array.size)], dtype=array.dtype).reshape(array.shape)
    elif array.dtype.kind == "f":
        new = np.array([rnd.choice(FLOATS) for _ in range(array.size)], dtype=np.float64)
        with np.errstate(over="ignore"):
            new = new.astype(array.dtype).reshape(array.shape)
    elif array.dtype.kind == "b":
        new = ~array
    else:
        return
    t.CopyFrom(numpy_helper.from_array(new, t.name))


def size(t) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def control_flow_nodes(model):
    return [
        (p, g, k, n)
        for p, g in graphs(model)
        for k, n in enumerate(g.node)
        if any(a.type == 5 for a in n.attribute)
    ]
