"""Import torchvision on a CPU-only torch whose torchvision wheel links CUDA.

The torchvision wheels on PyPI are built against CUDA torch: their C extension (``_C.so``,
which holds ``nms``, ``roi_align`` ...) needs ``libtorch_cuda.so`` and does not load on the
CPU torch wheel. torchvision's Python code works without it, except that
``torchvision/_meta_registrations.py`` registers fake kernels for those C ops at import
and fails when they are missing. :func:`import_torchvision` therefore

- imports torchvision normally when its extension loads (a CPU build of torchvision);
- otherwise defines ``torchvision::nms`` in Python (:func:`_nms`, greedy IoU suppression,
  the exact algorithm of torchvision's CPU kernel) before importing torchvision, so the
  detection models run and export (the legacy exporter maps it to ``NonMaxSuppression``
  through torchvision's own symbolic, the dynamo exporter through onnxscript's
  ``torchvision::nms`` translation). Models needing ``roi_align`` (Faster R-CNN) stay out.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

__all__ = ["import_torchvision"]

_DONE: list[Any] = []


def _extension_loads() -> bool:
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("torchvision is not installed")
    lib = os.path.join(os.path.dirname(spec.origin), "_C.so")
    try:
        torch.ops.load_library(lib)
    except OSError:
        return False
    return True


def _nms(dets: Any, scores: Any, iou_threshold: float) -> Any:
    """Indices of the kept boxes, by decreasing score (torchvision's CPU ``nms``)."""
    import torch

    order = torch.argsort(scores, descending=True, stable=True)
    boxes = dets[order]
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        iou = inter / (areas[i] + areas - inter)
        suppressed |= iou > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]


def _define_nms() -> None:
    import torch

    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.impl("nms", _nms, "CPU")
    _DONE.append(lib)  # the library object must stay alive

    @torch.library.register_fake("torchvision::nms")
    def _nms_fake(dets: Any, scores: Any, iou_threshold: float) -> Any:
        n = torch.library.get_ctx().new_dynamic_size()
        return dets.new_empty(n, dtype=torch.long)


def _has_ops() -> bool:  # a plain function: torch.jit.script reads its source
    return True


def import_torchvision() -> Any:
    """The torchvision module, importable on CPU torch (see the module notes)."""
    if "torchvision" in sys.modules or _DONE:
        import torchvision

        return torchvision
    if not _extension_loads():
        import types

        _define_nms()
        # its fake kernels are for the ops of _C.so; ours carries nms's own
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision.extension

        torchvision.extension._has_ops = _has_ops
    _DONE.append(True)
    import torchvision

    return torchvision
