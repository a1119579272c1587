"""What a compiled function needs at run time: the function over a Relax VM per thread
(:mod:`.function`), zero-copy tensors (:mod:`.tensors`), the target and thread pool
(:mod:`.target`), the weights file (:mod:`.weights`), TVM's messages and Ctrl-C around
native work. The bottom stage: it imports no other."""

from __future__ import annotations

__all__: list[str] = []
