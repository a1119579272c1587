"""What TVM takes and how it gets there: the per-op support table (:mod:`.support`, no tvm
import), and the graph rewrites before TVM's ONNX importer (recurrent cells and Loops
unrolled, Sum as adds, squeezed gathers), the import itself (:mod:`.importer`) and the
constant calls evaluated with numpy after it (:mod:`.numpy_fold`). Imports only
:mod:`..runtime`."""

from __future__ import annotations

__all__: list[str] = []
