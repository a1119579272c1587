"""The package's layers: no import cycles between its parts, no private names across modules,
``import subgraph`` stays light and resolves its public names lazily, the wheel holds no zoo,
and the import-linter contracts of setup.cfg are kept."""

from __future__ import annotations

import ast
import configparser
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
import setuptools

#: what ``import subgraph`` and running a graph must not load
HEAVY = ("onnx", "onnxruntime", "tvm", "torch", "zoo", "networkx")


def part(module: str) -> str | None:
    """The top-level part of ``subgraph`` a module belongs to (``subgraph.ops.conv`` -> ``ops``)."""
    names = module.split(".")
    return names[1] if len(names) > 1 else None


def test_no_import_cycles_between_the_parts(import_graph):
    parts = nx.DiGraph()
    for module in import_graph.modules:
        if part(module) is None:
            continue  # subgraph/__init__, the facade on top, maps names to every part
        parts.add_node(part(module))
        for imported in import_graph.find_modules_directly_imported_by(module):
            if part(imported) not in (None, part(module)):
                parts.add_edge(part(module), part(imported))
    assert {"ir", "ops", "executor", "properties", "partition", "hetero", "api", "cli"} <= set(parts)
    assert list(nx.simple_cycles(parts)) == []
    assert nx.is_directed_acyclic_graph(parts)
    # the bottom imports nothing of the package; the top is imported by nothing but __main__
    assert list(parts.successors("errors")) == []
    assert sorted(parts.predecessors("cli")) == ["__main__"]


def test_no_import_cycles_between_modules(import_graph):
    """No module reaches itself through imports, those inside functions counted (grimp sees
    them): a package's ``__init__`` counts as the module that re-exports its children."""
    modules = nx.DiGraph()
    for module in import_graph.modules:
        modules.add_node(module)
        for imported in import_graph.find_modules_directly_imported_by(module):
            if imported.startswith("subgraph"):
                modules.add_edge(module, imported)
    modules.remove_node("subgraph")  # the facade's lazy names resolve through importlib, not imports
    assert "subgraph.properties.tvm.build.compiler" in modules
    assert [cycle for cycle in nx.simple_cycles(modules) if len(cycle) > 1] == []


def test_the_tvm_backend_stages_are_folders_in_the_contract():
    """The TVM backend's stages are its sub-folders, each named in the layer contract."""
    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parents[1] / "setup.cfg")
    layers = config["importlinter:contract:tvm-backend"]["layers"].split()
    stages = {name for layer in layers for name in layer.split("|") if name}
    backend = Path(__file__).resolve().parents[1] / "subgraph" / "properties" / "tvm"
    folders = {p.name for p in backend.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert stages == folders and 1 < len(folders) <= 5
    assert sorted(p.name for p in backend.glob("*.py")) == ["__init__.py"]


def private_imports(source: str) -> list[str]:
    """``from subgraph.x import _name`` (and relative forms) in ``source``: dunders are public."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("subgraph")):
            found += [f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}"
                      for a in node.names
                      if a.name.startswith("_") and not (a.name.startswith("__") and a.name.endswith("__"))]
    return found


def test_private_import_scan_finds_what_it_should():
    assert private_imports("from subgraph.ir.graph import _canonical, __all__\n"
                           "from .x import _y\nfrom numpy import _z\nimport subgraph._q\n") == [
        "line 1: from subgraph.ir.graph import _canonical", "line 2: from .x import _y"]


def package_modules() -> list:
    """Every module of the package, a test parameter each."""
    package = Path(__file__).resolve().parents[1] / "subgraph"
    return [pytest.param(path, id=path.relative_to(package).as_posix()) for path in sorted(package.rglob("*.py"))]


@pytest.mark.parametrize("path", package_modules())
def test_no_module_imports_another_ones_private_names(path):
    assert private_imports(path.read_text(encoding="utf-8")) == []


def top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (inside top-level ``if``/``try`` blocks too)."""
    names: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            pending += [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                        *(s for h in getattr(node, "handlers", []) for s in h.body)]
    return names


def declared_all(tree: ast.Module) -> list[str] | None:
    """The literal strings of the module's ``__all__`` (``*spread`` parts, as in
    ``subgraph/__init__``'s lazy names, are checked by the lazy-name tests), or None."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return None


def test_the_all_scan_sees_every_kind_of_binding():
    tree = ast.parse("import a.b\nfrom c import d as e\nX: int = 1\nif 1:\n    def f(): pass\n"
                     "try:\n    class G: pass\nexcept ImportError:\n    H = None\n"
                     "__all__ = ['X', 'f', *Y]\n")
    assert top_level_names(tree) == {"a", "e", "X", "f", "G", "H", "__all__"}
    assert declared_all(tree) == ["X", "f"]


@pytest.mark.parametrize("path", package_modules())
def test_every_name_in_all_is_defined_once_in_its_module(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = declared_all(tree) or []
    assert sorted(set(names) - top_level_names(tree)) == []
    assert len(names) == len(set(names))


def test_every_folder_of_the_package_is_a_regular_package():
    """A folder of modules without ``__init__.py`` is a namespace package, which
    ``packages = find:`` leaves out of the wheel."""
    package = Path(__file__).resolve().parents[1] / "subgraph"
    folders = {p.parent for p in package.rglob("*.py")}
    assert sorted(str(f.relative_to(package)) for f in folders if not (f / "__init__.py").exists()) == []


def fresh_python(code: str, cwd) -> dict:
    """Run ``code`` in a new interpreter; it prints one JSON document, returned here."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


LOADED = "sorted({m.split('.')[0] for m in sys.modules} & set(%r))" % (HEAVY,)


def test_import_subgraph_and_running_a_graph_stay_light(repo_root):
    code = f"""
import json, sys
import numpy as np
import subgraph
after_import = {LOADED}
from subgraph.testing import seed_example
from subgraph.partition import partition_graph
graph = partition_graph(seed_example(), "numpy", ops=["Relu"])
subgraph.run(graph, {{"x": np.ones(4, np.float32)}})
print(json.dumps({{"import": after_import, "run": {LOADED},
                   "parts": sorted({{m for m in sys.modules if m.startswith("subgraph.")}})}}))
"""
    loaded = fresh_python(code, repo_root)
    assert loaded["import"] == [] and loaded["run"] == []
    # the TVM property is registered (its folder imported) while tvm itself waits for a compile
    assert "subgraph.properties.tvm" in loaded["parts"]


def test_public_names_resolve_lazily(repo_root):
    code = """
import json, sys
import subgraph
light = sorted(m for m in sys.modules if m.startswith("subgraph."))
cached = "run" in vars(subgraph)
import subgraph.api, subgraph.executor, subgraph.frontend, subgraph.hetero, subgraph.onnx.writer
import subgraph.partition
import subgraph.properties.runtime
same = [subgraph.run is subgraph.properties.runtime.run, subgraph.Executor is subgraph.executor.Executor,
        subgraph.from_onnx is subgraph.frontend.from_onnx, subgraph.to_onnx is subgraph.onnx.writer.to_onnx,
        subgraph.partition_graph is subgraph.partition.partition_graph,
        subgraph.compile_model is subgraph.api.compile_model,
        subgraph.partition_model is subgraph.api.partition_model,
        subgraph.query_model is subgraph.hetero.query_model, subgraph.CompiledModel is subgraph.hetero.CompiledModel]
missing = [name for name in subgraph.__all__ if getattr(subgraph, name, None) is None]
print(json.dumps({"light": light, "cached": [cached, "run" in vars(subgraph)], "same": same,
                  "missing": missing, "dir": dir(subgraph) == sorted(subgraph.__all__)}))
"""
    loaded = fresh_python(code, repo_root)
    # the facade itself needs the errors and the IR only
    assert "subgraph.ir.graph" in loaded["light"]
    assert [m for m in loaded["light"] if m != "subgraph.errors" and not m.startswith("subgraph.ir")] == []
    assert loaded["cached"] == [False, True]  # resolved on first access, then a plain attribute
    assert loaded["same"] == [True] * 9
    assert loaded["missing"] == [] and loaded["dir"]


def test_unknown_public_name_is_an_attribute_error():
    import subgraph

    with pytest.raises(AttributeError, match=r"^module 'subgraph' has no attribute 'nope'$"):
        subgraph.nope  # noqa: B018


def test_the_wheel_holds_subgraph_only(repo_root):
    config = configparser.ConfigParser()
    config.read(repo_root / "setup.cfg")
    assert config["options"]["packages"].strip() == "find:"
    include = [p.strip() for p in config["options.packages.find"]["include"].split(",")]
    assert include == ["subgraph", "subgraph.*"]
    packages = setuptools.find_packages(where=str(repo_root), include=include)
    expected = sorted(".".join(p.relative_to(repo_root).parent.parts)
                      for p in (repo_root / "subgraph").rglob("__init__.py"))
    assert sorted(packages) == expected
    assert (repo_root / "zoo" / "__init__.py").is_file()  # zoo is a package at the root, left out
    assert not [p for p in packages if p.split(".")[0] != "subgraph"]


def test_import_linter_contracts_are_kept(repo_root):
    lint_imports = shutil.which("lint-imports")
    if lint_imports is None:
        pytest.skip("import-linter is not installed")
    result = subprocess.run([lint_imports, "--no-cache"], cwd=repo_root, capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = re.search(r"^Contracts: (\d+) kept, 0 broken\.$", result.stdout, re.M)
    assert summary and int(summary.group(1)) >= 2, result.stdout  # the layers and the light import


def test_every_module_of_a_layered_container_is_in_its_layers(repo_root):
    # import-linter checks only the modules a layers contract names: a new module left out
    # of its container's layers would go unchecked
    config = configparser.ConfigParser()
    config.read(repo_root / "setup.cfg")
    checked = 0
    for section in config.sections():
        if not section.startswith("importlinter:contract:") or config[section].get("type") != "layers":
            continue
        named = set(re.split(r"[\s|:]+", config[section]["layers"])) - {"", "(", ")"}
        named = {n.strip("()") for n in named}
        for container in config[section]["containers"].split():
            folder = repo_root.joinpath(*container.split("."))
            modules = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
            modules |= {p.parent.name for p in folder.glob("*/__init__.py")}
            assert modules <= named, f"{container}: {sorted(modules - named)} in no layer of [{section}]"
            checked += 1
    assert checked >= 2
