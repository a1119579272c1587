"""Replace each committed subgraph with the fused call node its property creates.

Boundary order (documented and deterministic): a fused node's inputs are the values
entering the subgraph in the order its nodes (in topological order) first read them,
slot by slot; constants are not inputs, they move into the subgraph. Its outputs are
the values produced inside that outside nodes read or that are graph outputs, in the
order of their producers, output by output. With ``dedup=False`` every entering edge
is its own input and every leaving edge its own output (MXNet without
``dedup_subgraph``); duplicates are named ``<value>__<k>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from subgraph.errors import PropertyError, call_hook
from subgraph.ir import Graph, Node, Value, ValueMap, fresh_name
from subgraph.partition.views import PartitionIndex

__all__ = ["Boundary", "build_subgraph", "fuse"]


@dataclass
class Boundary:
    """How one subgraph connects to the rest of the graph."""

    inputs: list[Value] = field(default_factory=list)          # outer values read, one per fused input
    input_names: list[str] = field(default_factory=list)       # the subgraph's placeholder names
    slot_names: dict[tuple[str, int], str] = field(default_factory=dict)  # (member, slot) -> placeholder
    outputs: list[Value] = field(default_factory=list)         # distinct subgraph outputs
    outer_outputs: list[tuple[str, int]] = field(default_factory=list)  # (outer name, subgraph output)
    rewire: dict[tuple[str, int], str] = field(default_factory=dict)    # (consumer, slot) -> outer name


def _boundary(graph: Graph, members: list[Node], inside: set[int], dedup: bool,
              graph_outputs: set[str]) -> Boundary:
    bd = Boundary()
    seen: dict[str, str] = {}
    taken: set[str] = set()

    def fresh(name: str) -> str:
        name = fresh_name(name, lambda n: n in taken or graph.has_value(n))
        taken.add(name)
        return name

    for node in members:
        for slot, value in enumerate(node.inputs):
            if value is None or value.data is not None:  # absent, or a constant (it moves in)
                continue
            if value.producer is not None and id(value.producer) in inside:
                continue
            if dedup and value.name in seen:
                bd.slot_names[(node.name, slot)] = seen[value.name]
                continue
            name = value.name
            if name in seen:
                name = fresh(f"{value.name}__{len(bd.inputs)}")
            seen.setdefault(value.name, name)
            bd.inputs.append(value)
            bd.input_names.append(name)
            bd.slot_names[(node.name, slot)] = name
    for node in members:
        for value in node.outputs:
            outside = [user for user in value.users if id(user) not in inside]
            edges = [(user.name, slot) for user in (dict.fromkeys(outside) if len(outside) > 1 else outside)
                     for slot, v in enumerate(user.inputs) if v is value] if outside else outside
            is_output = value.name in graph_outputs
            if not edges and not is_output:
                continue
            k = len(bd.outputs)
            bd.outputs.append(value)
            bd.outer_outputs.append((value.name, k))
            if dedup:
                continue
            for n, edge in enumerate(edges[0 if is_output else 1:], start=1):
                name = fresh(f"{value.name}__{n}")
                bd.outer_outputs.append((name, k))
                bd.rewire[edge] = name
    return bd


def build_subgraph(graph: Graph, members: list[Node], bd: Boundary, name: str, move: bool = False) -> Graph:
    """A graph of ``members`` under their own names, fed by the boundary's inputs.

    ``move=True`` moves the members themselves into it (:meth:`~subgraph.ir.Graph.adopt_node`)
    instead of copying them, which leaves ``graph`` inconsistent: for a working copy only.
    """
    sub = Graph(name, graph.opset)
    by_name = {n: sub.add_input(n, v.shape, v.dtype) for v, n in zip(bd.inputs, bd.input_names)}
    val_map: ValueMap = {}
    for node in members:
        for value in node.inputs:
            if value is not None and value.data is not None and value not in val_map:  # a constant
                val_map[value] = sub.add_constant(value.name, value.data)
    slot_names = bd.slot_names
    for node in members:
        name = node.name
        inputs = [None if v is None else val_map[v] if (slot := slot_names.get((name, s))) is None else by_name[slot]
                  for s, v in enumerate(node.inputs)]
        copy = sub.adopt_node(node, inputs) if move else sub.copy_node(node, inputs)
        val_map.update(zip(node.outputs, copy.outputs))
    sub.set_outputs([val_map[v] for v in bd.outputs])
    return sub


def fuse(graph: Graph, index: PartitionIndex, prop, dedup: bool, reasons: dict[int, str],
         move: bool = False) -> tuple[Graph, dict[int, tuple[int, str]]]:
    """The partitioned graph, and for each fused node index its (subgraph id, fused node name).

    ``graph`` is not modified, unless ``move=True``: then each subgraph takes the nodes
    themselves rather than copies, and ``graph`` (a working copy) must not be used again.
    """
    nodes = graph.nodes
    live = sorted((b for b in range(len(index.members)) if index.block_live[b]),
                  key=lambda b: index.block_lo[b])
    graph_outputs = {v.name for v in graph.outputs}
    blocks = []  # every boundary is read off the graph before any node moves
    for b in live:
        member_ids = sorted(index.members[b], key=index.pos.__getitem__)
        members = [nodes[i] for i in member_ids]
        blocks.append((b, member_ids, members,
                       _boundary(graph, members, {id(m) for m in members}, dedup, graph_outputs)))
    fused: dict[int, tuple[Node, Boundary]] = {}
    joined: dict[int, tuple[int, str]] = {}
    originals = {id(n) for n in nodes}
    returned: dict[int, int] = {}  # id of a node create_subgraph_node returned -> its subgraph id
    moved_inputs: dict[int, tuple] = {}  # a rejected subgraph's moved node -> its inputs in graph
    for sid, (b, member_ids, members, bd) in enumerate(blocks):
        inputs = [m.inputs for m in members] if move else None
        sub = build_subgraph(graph, members, bd, f"{graph.name}_{prop.name}_{sid}", move)
        node = _create(prop, sub, sid, members, originals, returned)
        if node is None:
            index.uncommit(b)
            for i in member_ids:
                reasons[i] = f"subgraph {sid} rejected by {type(prop).__name__}.create_subgraph_node"
            if inputs is not None:
                moved_inputs.update(zip(member_ids, inputs))
            continue
        output_map = [k for _, k in bd.outer_outputs]
        if output_map != list(range(len(bd.outputs))):
            node.attrs["output_map"] = output_map
        node.meta.setdefault("property", prop)
        fused[b] = (node, bd)
        for i in member_ids:
            joined[i] = (sid, node.name)
    return _assemble(graph, index, fused, joined, moved_inputs, move), joined


def _create(prop, sub: Graph, sid: int, members: list[Node], originals: set[int],
            returned: dict[int, int]) -> Node | None:
    """The property's fused node for subgraph ``sid``: a new Node (or None), never one it
    returned before (the second would run the first subgraph) nor a node of the graph
    (``originals``: their ids, made once for every subgraph) or of ``sub``."""
    def describe() -> str:  # formatted only for a message
        more = "..." if len(members) > 5 else ""
        return f"subgraph {sid} (nodes {[m.name for m in members[:5]]}{more})"

    call = f"{type(prop).__name__}.create_subgraph_node"
    node = call_hook(PropertyError, prop, "create_subgraph_node", sub, sid, where=describe)
    if node is None:
        return None
    if not isinstance(node, Node):
        raise PropertyError(f"{call} must return a Node or None for {describe()}, got {type(node).__name__}")
    if id(node) in originals or (node.graph is not None and any(node is n for n in sub.nodes)):
        raise PropertyError(f"{call} returned node {node.name!r} ({node.op}) of the graph itself for "
                            f"{describe()}; it must return a new fused node")
    if id(node) in returned:
        raise PropertyError(f"{call} returned the same node object {node.name!r} ({node.op}) for "
                            f"{describe()} as for subgraph {returned[id(node)]}; it must return a new node "
                            "each call")
    inner = node.subgraph
    if inner is None or not isinstance(inner, Graph):
        raise PropertyError(f"{call} returned node {node.name!r} ({node.op}) without a subgraph for "
                            f"{describe()} (its subgraph is {type(inner).__name__}); a fused node runs the "
                            "graph it was given")
    signature = [] if inner is sub else [  # the subgraph it was given needs no check of its types
        [v.type_str() for v in g.inputs] + ["->"] + [v.type_str() for v in g.outputs] for g in (inner, sub)]
    if signature and signature[0] != signature[1]:  # a rewritten subgraph of the same types is fine
        raise PropertyError(f"{call} returned node {node.name!r} ({node.op}) for {describe()} whose subgraph "
                            f"{inner.name!r} has types ({' '.join(signature[0])}); the subgraph it was given "
                            f"has ({' '.join(signature[1])})")
    returned[id(node)] = sid
    return node


def _assemble(graph: Graph, index: PartitionIndex, fused: dict[int, tuple[Node, Boundary]],
              joined: dict[int, tuple[int, str]], moved_inputs: dict[int, tuple], move: bool) -> Graph:
    """The result graph: fused nodes and the nodes left out, in the index's order. With
    ``move`` the nodes left out move in too (:meth:`~subgraph.ir.Graph.adopt_node`): a
    working copy's nodes are not copied a second time. Those of a rejected subgraph
    (``moved_inputs``) are copied: the subgraph the property was offered keeps its own."""
    nodes = graph.nodes
    result, val_map = graph.skeleton()
    rewired: dict[tuple[str, int], Value] = {}  # (consumer, slot) -> the extra fused output it reads
    taken = {nodes[i].name for i in range(index.n) if i not in joined}
    emitted: set[int] = set()
    for p in range(index.n):
        i = index.order[p]
        b = index.block[i]
        if b >= 0 and b in fused:
            if b in emitted:
                continue
            emitted.add(b)
            spec, bd = fused[b]
            name = fresh_name(spec.name, taken)
            taken.add(name)
            node = result.add_node(spec.op, [val_map[v] for v in bd.inputs],
                                   outputs=[n for n, _ in bd.outer_outputs], attrs=spec.attrs, name=name,
                                   domain=spec.domain, rt_info=spec.rt_info)
            node.subgraph, node.meta = spec.subgraph, dict(spec.meta)
            outs = {}
            for out, (outer, k) in zip(node.outputs, bd.outer_outputs):
                out.shape, out.dtype = bd.outputs[k].shape, bd.outputs[k].dtype
                outs[outer] = out
                val_map.setdefault(bd.outputs[k], out)  # the first output standing for the value
            rewired.update({edge: outs[outer] for edge, outer in bd.rewire.items()})
        else:
            node = nodes[i]
            offered = moved_inputs.get(i)
            inputs = [None if v is None else rewired.get((node.name, s)) or val_map[v]
                      for s, v in enumerate(node.inputs if offered is None else offered)]
            take = result.adopt_node if move and offered is None else result.copy_node
            val_map.update(zip(node.outputs, take(node, inputs).outputs))
    result.set_outputs([val_map[v] for v in graph.outputs])
    result.remove_unused_constants()
    return result
