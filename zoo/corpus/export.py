"""Export a corpus model with a torch exporter, cached on disk.

A model is exported once per (name, exporter, torch version) into the cache folder
(:func:`cache_dir`): ``<dir>/torch-<version>/<name>.<exporter>.onnx`` plus its feeds,
``<name>.<exporter>.npz`` (the example inputs, keyed by graph input name). Both files are
written to a temporary name in the same folder and renamed, so a crash or a concurrent
run never leaves half a file under the final name.

Exporters:

- ``legacy``: ``torch.onnx.export(..., dynamo=False, opset_version=17)`` (TorchScript);
- ``dynamo``: ``torch.onnx.export(..., dynamo=True, opset_version=18)`` (torch.export and
  onnxscript; 18 is its own opset: asking for 17 runs onnx's version converter, which
  fails on most models and leaves 18 anyway).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = ["EXPORTERS", "cache_dir", "cached_paths", "export"]

EXPORTERS = ("legacy", "dynamo")
OPSETS = {"legacy": 17, "dynamo": 18}


def cache_dir() -> Path:
    """``$SUBGRAPH_CORPUS_DIR``, else ``$XDG_CACHE_HOME/subgraph/corpus`` (``~/.cache/...``)."""
    if os.environ.get("SUBGRAPH_CORPUS_DIR"):
        return Path(os.environ["SUBGRAPH_CORPUS_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "subgraph" / "corpus"


#: bump when an entry's module, example input or export settings change: older files are not reused
RECIPE = 2


def cached_paths(name: str, exporter: str, torch_version: str) -> tuple[Path, Path]:
    """The model file and feeds file of one export."""
    folder = cache_dir() / f"torch-{torch_version}-recipe{RECIPE}"
    return folder / f"{name}.{exporter}.onnx", folder / f"{name}.{exporter}.npz"


def _atomic(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def export(module: Any, args: tuple, input_names: list[str], output_names: list[str] | None,
           exporter: str, path: Path, dynamic_axes: dict[str, dict[int, str]] | None = None) -> None:
    """Export ``module(*args)`` to ``path`` (atomically) with ``exporter``.

    ``dynamic_axes`` (input name -> {axis: dim name}) makes those dimensions symbolic;
    without it every input shape is static.
    """
    import onnx
    import torch

    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")

    def write(tmp: str) -> None:
        kwargs: dict[str, Any] = {"input_names": input_names, "opset_version": OPSETS[exporter]}
        if output_names:
            kwargs["output_names"] = output_names
        if exporter == "legacy":
            if dynamic_axes:
                kwargs["dynamic_axes"] = dynamic_axes
            torch.onnx.export(module, args, tmp, dynamo=False, **kwargs)
            return
        if dynamic_axes:
            shapes = tuple({axis: torch.export.Dim.AUTO for axis in dynamic_axes.get(n, {})} or None
                           for n in input_names)
            params = inspect.signature(module.forward).parameters.values()
            if [p.kind for p in params] == [inspect.Parameter.VAR_POSITIONAL]:
                shapes = (shapes,)  # forward(*args): one input holding them all
            kwargs["dynamic_shapes"] = shapes
        program = torch.onnx.export(module, args, dynamo=True, verbose=False, **kwargs)
        model = program.model_proto
        onnx.save(model, tmp)

    fastpath = torch.backends.mha.get_fastpath_enabled()
    # nn.TransformerEncoder's fused eval kernel (aten::_transformer_encoder_layer_fwd) has
    # no ONNX symbolic: export the layers' plain ops, as a trained model is usually exported
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            warnings.simplefilter("ignore")
            _atomic(path, write)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def save_feeds(path: Path, feeds: dict[str, Any]) -> None:
    """Write ``feeds`` (name -> numpy array) to ``path`` atomically."""
    import numpy as np

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **feeds)

    _atomic(path, write)
