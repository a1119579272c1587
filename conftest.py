"""For the whole suite, doctests included: the suite leaves nothing behind.

- The session has a temporary folder of its own (``TMPDIR``, made by the controller, inherited
  by xdist's workers and every subprocess: the CLI, the examples, TVM's RPC servers and
  compile workers). At the end whatever is still in it was left there by a test or a process
  it started: the session fails naming it, and the folder is removed. pytest's ``tmp_path``
  folders stay where pytest keeps them (``PYTEST_DEBUG_TEMPROOT``: the system's temporary
  folder), and so do corpus exports (``SUBGRAPH_CORPUS_DIR``, default ``subgraph-corpus-<uid>``
  there, kept between runs).
- Compiled TVM libraries and tuning records go to a cache folder of the process (xdist
  workers too) inside it, removed at the end (``SUBGRAPH_CACHE_DIR``), never the user's cache.
- A new entry of the home folder or of ``~/.cache`` named like this project's (``subgraph``,
  ``tvm``) fails the session too.

Without apache-tvm, doctest collection skips the TVM backend's modules (its support table and
rewrites need no tvm).
"""

import fnmatch
import getpass
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

#: the environment variables the suite sets, with their values before (restored at the end)
_CACHE_ENV = "SUBGRAPH_CACHE_DIR"
_SESSION_ENV = ("TMPDIR", "PYTEST_DEBUG_TEMPROOT", "SUBGRAPH_CORPUS_DIR")
_saved: dict[str, "str | None"] = {}
#: the home folder's entries (and ~/.cache's) when the session started
_home_before: set[str] = set()
#: what libraries keep in the temporary folder for their next run, by design (removed with the
#: session's folder, not reported): onnxruntime (1.32) writes its session id to ``.ses`` when
#: imported and reads it back the next time; importing torch's inductor (the exporters do) makes
#: its cache folder ``torchinductor_<user>``
_KEPT_BY_LIBRARIES = (".ses", "torchinductor_*")
#: what in the home folder would be this suite's
_OURS = re.compile(r"subgraph|tvm", re.IGNORECASE)


def _is_controller(config) -> bool:
    """The process that runs the session: xdist's controller, or the only one."""
    return not hasattr(config, "workerinput")


def _home_entries() -> set[str]:
    home = Path.home()
    return {str(p) for folder in (home, home / ".cache") if folder.is_dir() for p in folder.iterdir()}


def pytest_configure(config) -> None:
    """Give the session its temporary folder (controller), then each process its TVM cache."""
    if _is_controller(config):
        system = tempfile.gettempdir()
        for name in _SESSION_ENV:
            _saved[name] = os.environ.get(name)
        uid = os.getuid() if hasattr(os, "getuid") else getpass.getuser()
        os.environ.setdefault("SUBGRAPH_CORPUS_DIR", os.path.join(system, f"subgraph-corpus-{uid}"))
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", system)
        _saved["session"] = tempfile.mkdtemp(prefix="subgraph-test-tmp-", dir=system)
        _home_before.update(_home_entries())
        os.environ["TMPDIR"] = _saved["session"]
        tempfile.tempdir = None  # read TMPDIR again
    _saved[_CACHE_ENV] = os.environ.get(_CACHE_ENV)
    _saved["folder"] = tempfile.mkdtemp(prefix="subgraph-test-cache-")
    os.environ[_CACHE_ENV] = _saved["folder"]


def leftovers() -> list[str]:
    """What the session left in its temporary folder (its caches aside) and in the home folder."""
    session = _saved.get("session")
    if session is None:
        return []
    mine = {_saved.get("folder"), *_removed_at_exit()}
    found = sorted(str(p) for p in Path(session).iterdir()
                   if str(p) not in mine and not any(fnmatch.fnmatch(p.name, k) for k in _KEPT_BY_LIBRARIES))
    return found + sorted(p for p in _home_entries() - _home_before if _OURS.search(os.path.basename(p)))


def _removed_at_exit() -> set[str]:
    """The temporary folders TVM removes when this process exits (objects still alive)."""
    utils = sys.modules.get("tvm.support.utils")
    return set(getattr(getattr(utils, "TempDirectory", None), "TEMPDIRS", ()))


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers (their caches are gone then)
def pytest_sessionfinish(session) -> None:
    """Fail the session when it left anything behind, naming each entry."""
    if not _is_controller(session.config):
        return
    found = leftovers()
    if not found:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["the suite left these behind (a test, or a process it started, did not remove them):",
             *(f"  {path}" for path in found)]
    if reporter is not None:
        reporter.write("\n")  # after the progress line
        reporter.write_sep("=", "leftovers", red=True)
        reporter.write_line("\n".join(lines))
    else:
        print("\n".join(lines))
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config) -> None:
    """Remove the cache folder and (controller) the session's temporary folder; give the
    variables back their old values."""
    folder = _saved.pop("folder", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    names = [_CACHE_ENV, *(_SESSION_ENV if _is_controller(config) else ())]
    session = _saved.pop("session", None)
    if session is not None:
        shutil.rmtree(session, ignore_errors=True)
    for name in names:
        value = _saved.pop(name, None)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    tempfile.tempdir = None


def _has_tvm() -> bool:
    try:
        return importlib.util.find_spec("tvm") is not None
    except (ImportError, ValueError):
        return False


_TVM = Path(__file__).parent / "subgraph" / "properties" / "tvm"
collect_ignore = [] if _has_tvm() else [
    str(p) for p in sorted(_TVM.glob("*.py")) if p.name not in ("support.py", "rewrites.py")]
