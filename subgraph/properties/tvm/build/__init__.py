"""Build, cache and tuning: the entry point of a TVM compile (:mod:`.compiler`), one build
with its fallbacks (:mod:`.attempts`), its code generation on every CPU (:mod:`.parallel`),
the compiled libraries cached in memory and on disk (:mod:`.cache`), and the tile tuner with
its database (:mod:`.tuner`, :mod:`.tuning_db`). The top stage: it imports every other one."""

from __future__ import annotations

__all__: list[str] = []
