"""ONNX protos built by hand, shared by the reader and writer tests."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17, **kwargs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, kwargs.pop("name", "m"), inputs, outputs, list(initializers),
                              value_info=kwargs.pop("value_info", None))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)


def tensor(name, elem=F, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def load_in_child(path, show: str = "", memory: int | None = None) -> str:
    """``from_onnx(path)`` in a child Python, so a native crash fails the test, not the worker.

    Returns what the child printed: ``"<ErrorClass>: <message>"`` for a SubgraphError, else
    ``show`` evaluated on the loaded ``graph`` (``""``: "loaded"). ``memory``: the child's
    address-space limit in bytes. A child that dies fails the calling test."""
    import subprocess
    import sys
    import textwrap

    limit = ("import resource\n"
             f"resource.setrlimit(resource.RLIMIT_AS, ({memory}, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
             if memory else "")
    code = limit + textwrap.dedent(f"""
        from subgraph.errors import SubgraphError
        from subgraph.frontend import from_onnx
        try:
            graph = from_onnx({str(path)!r})
        except SubgraphError as exc:
            print(f"{{type(exc).__name__}}: {{exc}}")
        else:
            print({show or '"loaded"'})
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"child died with {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout.strip()
