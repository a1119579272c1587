"""TVM loaded without torch: an import hook that answers "not installed" to TVM's own imports of it.

``tvm_ffi`` imports ``torch`` first thing when it is installed (a workaround for a symbol
clash on Windows; no variable turns it off), and ``tvm.relax`` imports ``torch.utils.dlpack``.
Nothing of this project hands TVM a torch tensor, yet on this 2-core VM that import is most
of a start: ``import tvm_ffi`` takes 1.5 s and 233 MB with torch installed and 0.2 s and
44 MB without; ``import tvm`` 2.8 s and 398 MB against 0.9 s and 195 MB. Both packages
treat a failed torch import as "not installed" (their ``try: import torch`` blocks) and keep
working on numpy arrays and DLPack.

:func:`install` puts :class:`TorchForTVM` first on ``sys.meta_path``. It refuses only an
import of ``torch`` (or a submodule) that code of the ``tvm`` or ``tvm_ffi`` packages makes
while torch is not loaded yet, in whatever thread; the user's own ``import torch``, before or
after, loads it as usual, and once torch is loaded no finder is asked again. TVM's torch
support (converting torch tensors, torch streams) is then off in this process; a user who
wants it imports torch before the first TVM compile or load.

Examples
--------
>>> import sys
>>> install()
>>> sum(isinstance(f, TorchForTVM) for f in sys.meta_path)
1
>>> TorchForTVM().find_spec("numpy", None) is None
True
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["TorchForTVM", "install"]

#: the packages whose imports of torch are refused
_TVM_PACKAGES = ("tvm", "tvm_ffi")


def _from_tvm() -> bool:
    """Whether the import being resolved was started by code of a TVM package: the first
    frame above this finder and the import machinery (``importlib``) decides."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != __name__ and not name.startswith("importlib"):
            return name.split(".", 1)[0] in _TVM_PACKAGES
        frame = frame.f_back
    return False


class TorchForTVM:
    """A ``sys.meta_path`` finder: ``import torch`` from TVM's code raises
    :class:`ModuleNotFoundError`; every other import goes on to the next finder."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if (fullname == "torch" or fullname.startswith("torch.")) and _from_tvm():
            raise ModuleNotFoundError(f"No module named {fullname!r} (not loaded for TVM by subgraph: "
                                      "import torch before TVM loads to use TVM's torch support)", name=fullname)

    def __repr__(self) -> str:
        return "<subgraph: torch not loaded for TVM>"


def install() -> None:
    """Put :class:`TorchForTVM` first on ``sys.meta_path``, once per process."""
    if not any(isinstance(finder, TorchForTVM) for finder in sys.meta_path):
        sys.meta_path.insert(0, TorchForTVM())
