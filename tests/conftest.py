"""Fixtures shared by the whole suite: the repository root, the package's import graph, and
the environment the README's first command gives (for subprocesses). Tests marked
``slow_corpus`` (the whole zoo/corpus, deployment-size sweeps) run only when selected:
``-m slow_corpus``."""

from __future__ import annotations

import configparser
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "slow_corpus" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="the whole corpus: select with -m slow_corpus")
    for item in items:
        if "slow_corpus" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root folder (setup.cfg, zoo/, subgraph/)."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def import_graph():
    """grimp's graph of every import inside ``subgraph``, those inside functions included
    (built without grimp's on-disk cache, so the suite writes nothing into the repository)."""
    grimp = pytest.importorskip("grimp")
    return grimp.build_graph("subgraph", cache_dir=None)


def _first_command_distributions(root: Path) -> set[str]:
    """The distributions the README's first command (``pip install -e ".[tvm]"``) installs:
    setup.cfg's requirements and the ``tvm`` extra's, with theirs, and a fresh virtual
    environment's pip, setuptools and wheel (canonical names)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    config = configparser.ConfigParser(interpolation=None)
    config.read(root / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    lines += config["options.extras_require"]["tvm"].splitlines()
    todo = [Requirement(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    found = {"pip", "setuptools", "wheel", "subgraph"}
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        extras = sorted(requirement.extras) or [""]
        if name in found or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        found.add(name)
        try:
            requires = importlib.metadata.requires(requirement.name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            child = Requirement(line)
            if child.marker is None or any(child.marker.evaluate({"extra": e}) for e in extras):
                todo.append(Requirement(str(child).split(";")[0]))
    return found


@pytest.fixture(scope="session")
def first_command_env(tmp_path_factory, repo_root) -> Callable[[dict[str, str]], dict[str, str]]:
    """Adds to a subprocess's environment what makes it see only the packages the README's
    first command installs: a ``sitecustomize`` (first on ``PYTHONPATH``) that makes every
    other installed package's modules unimportable (``sys.modules[name] = None``), as absent
    packages are."""
    from packaging.utils import canonicalize_name

    allowed = _first_command_distributions(repo_root)
    blocked = sorted(module for module, dists in importlib.metadata.packages_distributions().items()
                     if not any(canonicalize_name(d) in allowed for d in dists))
    folder = tmp_path_factory.mktemp("first-command")
    (folder / "sitecustomize.py").write_text(
        f'"""Modules of packages the README\'s first command does not install."""\n'
        f"import sys\n\nfor name in {blocked!r}:\n    sys.modules.setdefault(name, None)\n")

    def env(base: dict[str, str]) -> dict[str, str]:
        path = base.get("PYTHONPATH")
        return {**base, "PYTHONPATH": os.pathsep.join([str(folder), *([path] if path else [])])}

    return env
