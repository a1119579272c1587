"""What a compiled function needs at run time: TVM's runtime library without its compiler
(:mod:`.library`), the function over a Relax VM per thread (:mod:`.function`), zero-copy
tensors (:mod:`.tensors`), the thread pool (:mod:`.threads`), the weights file
(:mod:`.weights`), reading the disk cache (:mod:`.entries`) and a cached build found without
``tvm`` (:mod:`.warm`), TVM's messages and Ctrl-C around native work; and the target
(:mod:`.target`, the one module here that imports ``tvm``: the compiler asks it). The bottom
stage: it imports no other."""

from __future__ import annotations

__all__: list[str] = []
