"""Structural mutations of an ONNX model through the protobuf API: attributes (values,
types, removal, duplication, unknown names), dims, names, dtypes, cycles, opset imports,
nodes, graph outputs, control-flow bodies (If/Loop/Scan), initializers and external data.

Each mutation takes ``(model, rnd)``, changes the model in place and returns what it did
(the reproducer's line), or None when it does not apply to this model.
"""

from __future__ import annotations

import random
from typing import Any, Callable

from tests.fuzz.corpus import WEIGHTS_FILE
from tests.fuzz.protos import (
    BAD_UTF8,
    DIMS,
    FLOATS,
    HUGE_INTS,
    OPS,
    all_value_names,
    control_flow_nodes,
    pick_graph,
    scramble_tensor,
    show,
    size,
    value_infos,
)

__all__ = ["STRUCTURAL", "WEIGHTED", "BAD_UTF8"]


# --------------------------------------------------------------------------- structural mutations
def attr_value(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: any(n.attribute for n in g.node))
    if g is None:
        return None
    k, node = rnd.choice([(k, n) for k, n in enumerate(g.node) if n.attribute])
    attr = rnd.choice(node.attribute)
    where = f"{path}.node[{k}]({node.op_type}).{attr.name}"
    if attr.type == 2:  # INT
        attr.i = rnd.choice(HUGE_INTS)
        return f"attr_value {where} = {attr.i}"
    if attr.type == 7:  # INTS
        values = list(attr.ints)
        choice = rnd.randrange(4)
        if choice == 0 and values:
            values[rnd.randrange(len(values))] = rnd.choice(HUGE_INTS)
        elif choice == 1:
            values = []
        elif choice == 2:
            values = values + [rnd.choice(HUGE_INTS)]
        else:
            values = values[:-1]
        del attr.ints[:]
        attr.ints.extend(values)
        return f"attr_value {where} = {values}"
    if attr.type == 1:  # FLOAT
        attr.f = rnd.choice(FLOATS)
        return f"attr_value {where} = {attr.f}"
    if attr.type == 6:  # FLOATS
        del attr.floats[:]
        attr.floats.extend(rnd.choice(FLOATS) for _ in range(rnd.randrange(4)))
        return f"attr_value {where} = {list(attr.floats)}"
    if attr.type == 3:  # STRING
        attr.s = rnd.choice([b"", b"NOTSET", b"SAME_UPPER", b"\xff\xfe", b"a\0b", b"linear", b"x" * 300])
        return f"attr_value {where} = {attr.s!r}"
    if attr.type == 4:  # TENSOR
        t = attr.t
        choice = rnd.randrange(3)
        if choice == 0:
            t.data_type = rnd.choice([0, 1, 6, 7, 9, 10, 11, 16, 17, 99])
            return f"attr_value {where}.data_type = {t.data_type}"
        if choice == 1:
            del t.dims[:]
            t.dims.extend(rnd.choice(DIMS) for _ in range(rnd.randrange(3)))
            return f"attr_value {where}.dims = {list(t.dims)}"
        scramble_tensor(t, rnd)
        return f"attr_value {where}.data scrambled"
    if attr.type == 5:  # GRAPH: replace the body by an empty graph
        attr.g.Clear()
        attr.g.name = "empty"
        return f"attr_value {where} = empty graph"
    return None


def attr_type(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: any(n.attribute for n in g.node))
    if g is None:
        return None
    k, node = rnd.choice([(k, n) for k, n in enumerate(g.node) if n.attribute])
    attr = rnd.choice(node.attribute)
    old = attr.type
    attr.type = rnd.choice([0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 13, 14])
    if rnd.random() < 0.5:  # also set the field of the new type, as an exporter bug would
        attr.i, attr.f, attr.s = 5, 2.5, b"5"
    return f"attr_type {path}.node[{k}]({node.op_type}).{attr.name} type {old} -> {attr.type}"


def attr_remove(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: any(n.attribute for n in g.node))
    if g is None:
        return None
    k, node = rnd.choice([(k, n) for k, n in enumerate(g.node) if n.attribute])
    i = rnd.randrange(len(node.attribute))
    name = node.attribute[i].name
    del node.attribute[i]
    return f"attr_remove {path}.node[{k}]({node.op_type}).{name}"


def attr_duplicate(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: any(n.attribute for n in g.node))
    if g is None:
        return None
    k, node = rnd.choice([(k, n) for k, n in enumerate(g.node) if n.attribute])
    attr = rnd.choice(node.attribute)
    copy = node.attribute.add()
    copy.CopyFrom(attr)
    if copy.type == 2:
        copy.i = rnd.choice(HUGE_INTS)
    return f"attr_duplicate {path}.node[{k}]({node.op_type}).{attr.name}"


def attr_unknown(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: len(g.node) > 0)
    if g is None:
        return None
    k = rnd.randrange(len(g.node))
    node = g.node[k]
    attr = node.attribute.add()
    attr.name, attr.type = rnd.choice(["axis", "zzz_unknown", "", "perm", "to"]), rnd.choice([1, 2, 7])
    attr.i, attr.f = rnd.choice(HUGE_INTS), 1.5
    attr.ints.extend([rnd.choice(HUGE_INTS)])
    return f"attr_unknown {path}.node[{k}]({node.op_type}) += {attr.name!r} type {attr.type}"


def dims(model, rnd):
    g = model.graph
    infos = [(p, v) for p, v in value_infos(g) if v.type.HasField("tensor_type")]
    if not infos:
        return None
    where, info = rnd.choice(infos)
    shape = info.type.tensor_type.shape
    choice = rnd.randrange(6)
    if choice == 0:
        info.type.tensor_type.ClearField("shape")
        return f"dims {where} %{info.name}: shape removed"
    if not shape.dim:
        shape.dim.add().dim_value = rnd.choice(DIMS)
        return f"dims {where} %{info.name}: dim added"
    d = rnd.randrange(len(shape.dim))
    if choice == 1:
        shape.dim[d].dim_param = rnd.choice(["N", "", "batch", BAD_UTF8, "a\0b"])
        return f"dims {where} %{info.name}.dim[{d}] = symbolic {shape.dim[d].dim_param!r}"
    if choice == 2:
        del shape.dim[d]
        return f"dims {where} %{info.name}.dim[{d}] removed"
    shape.dim[d].dim_value = rnd.choice(DIMS)
    return f"dims {where} %{info.name}.dim[{d}] = {shape.dim[d].dim_value}"


def initializer_dims(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: len(g.initializer) > 0)
    if g is None:
        return None
    t = rnd.choice(g.initializer)
    if rnd.random() < 0.5 and t.dims:
        d = rnd.randrange(len(t.dims))
        t.dims[d] = rnd.choice(DIMS)
    else:
        t.dims.append(rnd.choice([1, 2, 0, -1]))
    return f"initializer_dims {path} {t.name!r} dims = {list(t.dims)}"


def initializer_values(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: any(t.data_location != 1 for t in g.initializer))
    if g is None:
        return None
    t = rnd.choice([t for t in g.initializer if t.data_location != 1])
    if rnd.random() < 0.25 and t.raw_data:
        t.raw_data = t.raw_data[: rnd.randrange(len(t.raw_data))]
        return f"initializer_values {path} {t.name!r} raw_data truncated to {len(t.raw_data)} bytes"
    if size(t) > 4096:  # big weights: scrambling every value is slow and tests nothing more
        return None
    scramble_tensor(t, rnd)
    return f"initializer_values {path} {t.name!r} scrambled"


def names(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: len(g.node) > 0)
    if g is None:
        return None
    new = rnd.choice(["", "dup", BAD_UTF8, "a\0b", "x" * 5000, "%y", "/Softmax"])
    k = rnd.randrange(len(g.node))
    node = g.node[k]
    choice = rnd.randrange(5)
    if new == "dup":
        others = all_value_names(g) + [n.name for n in g.node]
        new = rnd.choice(others) if others else ""
    if choice == 0:
        node.name = new
        return f"names {path}.node[{k}]({node.op_type}).name = {show(new)}"
    if choice == 1 and node.input:
        i = rnd.randrange(len(node.input))
        node.input[i] = new
        return f"names {path}.node[{k}]({node.op_type}).input[{i}] = {show(new)}"
    if choice == 2 and node.output:
        i = rnd.randrange(len(node.output))
        node.output[i] = new
        return f"names {path}.node[{k}]({node.op_type}).output[{i}] = {show(new)}"
    if choice == 3 and g.output:
        i = rnd.randrange(len(g.output))
        g.output[i].name = new
        return f"names {path}.output[{i}] = {show(new)}"
    if g.input:
        i = rnd.randrange(len(g.input))
        g.input[i].name = new
        return f"names {path}.input[{i}] = {show(new)}"
    return None


def rename_everywhere(model, rnd):
    """A value renamed consistently (producer and every reader) to a hostile name."""
    path, g = pick_graph(model, rnd, lambda g: len(g.node) > 0)
    if g is None or not all_value_names(g):
        return None
    old = rnd.choice(all_value_names(g))
    new = rnd.choice([BAD_UTF8, "a\0b", "", " ", "x" * 3000, "ü"])
    for node in g.node:
        for field_ in (node.input, node.output):
            for i, n in enumerate(field_):
                if n == old:
                    field_[i] = new
    for v in [*g.input, *g.output, *g.value_info, *g.initializer]:
        if v.name == old:
            v.name = new
    return f"rename_everywhere {path} %{old} -> {show(new)}"


def dtypes(model, rnd):
    g = model.graph
    choice = rnd.randrange(3)
    if choice == 0:
        infos = [(p, v) for p, v in value_infos(g) if v.type.HasField("tensor_type")]
        if not infos:
            return None
        where, info = rnd.choice(infos)
        info.type.tensor_type.elem_type = rnd.choice([0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 12, 13, 16, 17, 8, 99])
        return f"dtypes {where} %{info.name} elem_type = {info.type.tensor_type.elem_type}"
    path, g = pick_graph(model, rnd, lambda g: len(g.initializer) > 0)
    if g is None:
        return None
    t = rnd.choice(g.initializer)
    t.data_type = rnd.choice([0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 16, 99])
    return f"dtypes {path} initializer {t.name!r} data_type = {t.data_type}"


def cycle(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: len(g.node) > 0)
    if g is None:
        return None
    j = rnd.randrange(len(g.node))
    i = rnd.randrange(j + 1)
    src, dst = g.node[j], g.node[i]
    if not src.output or not dst.input:
        return None
    k = rnd.randrange(len(dst.input))
    dst.input[k] = src.output[rnd.randrange(len(src.output))]
    return f"cycle {path}.node[{i}]({dst.op_type}).input[{k}] = %{dst.input[k]} (output of node[{j}])"


def opsets(model, rnd):
    choice = rnd.randrange(5)
    if choice == 0 and model.opset_import:
        o = rnd.choice(model.opset_import)
        o.version = rnd.choice([0, 1, 5, 6, 7, 11, 13, 17, 21, 22, 23, 99, -1, 2**62])
        return f"opsets {o.domain!r} version = {o.version}"
    if choice == 1:
        del model.opset_import[:]
        return "opsets removed"
    if choice == 2:
        o = model.opset_import.add()
        o.domain, o.version = rnd.choice([("", 13), ("", 99), ("com.unknown", 1), ("ai.onnx", 17)])
        return f"opsets += {o.domain!r} {o.version}"
    path, g = pick_graph(model, rnd, lambda g: len(g.node) > 0)
    if g is None:
        return None
    k = rnd.randrange(len(g.node))
    g.node[k].domain = rnd.choice(["com.unknown", "ai.onnx", "com.microsoft", "subgraph", BAD_UTF8])
    return f"opsets {path}.node[{k}]({g.node[k].op_type}).domain = {g.node[k].domain!r}"


def nodes(model, rnd):
    path, g = pick_graph(model, rnd, lambda g: len(g.node) > 0)
    if g is None:
        return None
    k = rnd.randrange(len(g.node))
    node = g.node[k]
    choice = rnd.randrange(6)
    if choice == 0:
        del g.node[k]
        return f"nodes {path}.node[{k}]({node.op_type}) removed"
    if choice == 1:
        g.node.add().CopyFrom(node)
        return f"nodes {path}.node[{k}]({node.op_type}) duplicated"
    if choice == 2:
        old = node.op_type
        node.op_type = rnd.choice(OPS)
        return f"nodes {path}.node[{k}]({old}).op_type = {node.op_type!r}"
    if choice == 3 and node.input:
        i = rnd.randrange(len(node.input))
        del node.input[i]
        return f"nodes {path}.node[{k}]({node.op_type}).input[{i}] removed"
    if choice == 4:
        node.input.append(rnd.choice(all_value_names(g) + [""]))
        return f"nodes {path}.node[{k}]({node.op_type}).input += %{node.input[-1]}"
    m = rnd.randrange(len(g.node))
    first = type(node)()
    first.CopyFrom(g.node[k])
    g.node[k].CopyFrom(g.node[m])
    g.node[m].CopyFrom(first)
    return f"nodes {path} node[{k}] <-> node[{m}]"


def graph_outputs(model, rnd):
    path, g = pick_graph(model, rnd)
    choice = rnd.randrange(3)
    if choice == 0:
        del g.output[:]
        return f"graph_outputs {path} all removed"
    if choice == 1 and g.output:
        g.output.add().CopyFrom(rnd.choice(g.output))
        return f"graph_outputs {path} duplicated %{g.output[-1].name}"
    if g.input:
        g.output.add().CopyFrom(rnd.choice(g.input))
        return f"graph_outputs {path} += input %{g.output[-1].name}"
    return None


def bodies(model, rnd):
    found = control_flow_nodes(model)
    if not found:
        return None
    path, _, k, node = rnd.choice(found)
    attrs = [a for a in node.attribute if a.type == 5]
    attr = rnd.choice(attrs)
    body = attr.g
    where = f"{path}.node[{k}]({node.op_type}).{attr.name}"
    choice = rnd.randrange(6)
    if choice == 0 and body.output:
        del body.output[rnd.randrange(len(body.output))]
        return f"bodies {where} output removed"
    if choice == 1 and body.input:
        del body.input[rnd.randrange(len(body.input))]
        return f"bodies {where} input removed"
    if choice == 2 and body.output:
        body.input.add().CopyFrom(body.output[0])
        return f"bodies {where} input added"
    if choice == 3 and len(attrs) == 2:
        a, b = attrs
        tmp = type(a.g)()
        tmp.CopyFrom(a.g)
        a.g.CopyFrom(b.g)
        b.g.CopyFrom(tmp)
        return f"bodies {path}.node[{k}]({node.op_type}) branches swapped"
    if choice == 4 and node.output:
        node.output.append(node.output[-1] + "_extra")
        return f"bodies {path}.node[{k}]({node.op_type}) output added"
    if body.node:
        del body.node[rnd.randrange(len(body.node))]
        return f"bodies {where} a node removed"
    return None


def external_data(model, rnd):
    g = model.graph
    ext = [t for t in g.initializer if t.data_location == 1]
    if not ext:
        inline = [t for t in g.initializer if t.raw_data]
        if not inline:
            return None
        t = rnd.choice(inline)  # move it out without writing the file: the file is missing or wrong
        t.ClearField("raw_data")
        t.data_location = 1
        for key, value in [("location", WEIGHTS_FILE), ("offset", "0"), ("length", str(4 * size(t)))]:
            t.external_data.add(key=key, value=value)
        return f"external_data {t.name!r} moved to {WEIGHTS_FILE!r} (not written with it)"
    t = rnd.choice(ext)
    entries = {e.key: e for e in t.external_data}
    choice = rnd.randrange(5)
    if choice == 0 and "location" in entries:
        entries["location"].value = rnd.choice(
            [
                "w\0.bin",
                "../" + WEIGHTS_FILE,
                "/etc/passwd",
                "/dev/zero",
                "missing.bin",
                "",
                ".",
                "sub/../../x",
                BAD_UTF8,
                "/proc/self/mem",
            ]
        )
        return f"external_data {t.name!r} location = {entries['location'].value!r}"
    if choice == 1 and "length" in entries:
        entries["length"].value = rnd.choice(["0", "-4", "1", "1000000", str(2**62), "x", "", "95"])
        return f"external_data {t.name!r} length = {entries['length'].value!r}"
    if choice == 2 and "offset" in entries:
        entries["offset"].value = rnd.choice(["-1", "1", "4", "120", str(2**63), "1e3", "", "4096"])
        return f"external_data {t.name!r} offset = {entries['offset'].value!r}"
    if choice == 3 and t.external_data:
        i = rnd.randrange(len(t.external_data))
        key = t.external_data[i].key
        del t.external_data[i]
        return f"external_data {t.name!r} entry {key!r} removed"
    e = t.external_data.add()
    e.key, e.value = rnd.choice([("location", "other.bin"), ("checksum", "0"), ("zzz", "1"), ("offset", "8")])
    return f"external_data {t.name!r} entry {e.key!r}={e.value!r} added"


STRUCTURAL: dict[str, Callable[[Any, random.Random], str | None]] = {
    f.__name__: f
    for f in (
        attr_value,
        attr_type,
        attr_remove,
        attr_duplicate,
        attr_unknown,
        dims,
        initializer_dims,
        initializer_values,
        names,
        rename_everywhere,
        dtypes,
        cycle,
        opsets,
        nodes,
        graph_outputs,
        bodies,
        external_data,
    )
}

#: mutation kinds to draw from: those that apply to few seeds (bodies, external data) weigh more
WEIGHTED = sorted(STRUCTURAL) + ["bodies", "external_data", "initializer_values"] * 3
