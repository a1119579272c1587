"""Seeded mutations of ONNX models: byte flips and truncation of the file, and structural
mutations through the protobuf API (attributes, dims, names, dtypes, cycles, opsets,
control-flow bodies, external data, initializers, nodes).

:func:`make_mutant` is a pure function of ``(seed, index)``: the same pair gives the same
bytes and the same mutation list on every machine, which is the fuzzer's reproducer.

Examples
--------
>>> a, b = make_mutant(13, 7), make_mutant(13, 7)
>>> a.data == b.data and a.mutations == b.mutations and a.seed_name == b.seed_name
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.fuzz.corpus import seeds
from tests.fuzz.structural import BAD_UTF8, STRUCTURAL, WEIGHTED

__all__ = ["Mutant", "make_mutant", "STRUCTURAL", "BYTE_LEVEL"]


@dataclass
class Mutant:
    """One mutant: its seed model, bytes, side files and the list of mutations applied."""

    index: int
    seed_name: str
    data: bytes
    files: dict[str, bytes] = field(default_factory=dict)
    mutations: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- byte-level mutations
def flip_bytes(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    buf = bytearray(data)
    spots = sorted(rnd.randrange(len(buf)) for _ in range(rnd.randint(1, 8)))
    for i in spots:
        buf[i] ^= 1 << rnd.randrange(8) if rnd.random() < 0.7 else rnd.randrange(1, 256)
    return bytes(buf), f"flip_bytes at {spots}"


def truncate(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    n = rnd.randrange(len(data))
    return data[:n], f"truncate to {n} of {len(data)} bytes"


def splice(data: bytes, rnd: random.Random) -> tuple[bytes, str]:
    i, j = sorted(rnd.randrange(len(data)) for _ in range(2))
    k = rnd.randrange(len(data))
    return data[:k] + data[i:j] + data[k:], f"splice [{i}:{j}] inserted at {k}"


BYTE_LEVEL = {f.__name__: f for f in (flip_bytes, truncate, splice)}


# --------------------------------------------------------------------------- the mutant
def make_mutant(seed: int, index: int) -> Mutant:
    """Mutant ``index`` of the run seeded ``seed``: one seed model, one to three mutations."""
    import onnx

    rnd = random.Random(f"subgraph-fuzz:{seed}:{index}")
    corpus = seeds()
    base = corpus[rnd.randrange(len(corpus))]
    mutant = Mutant(index, base.name, base.data, dict(base.files))
    if rnd.random() < 0.2:  # the file's bytes only
        name = rnd.choice(sorted(BYTE_LEVEL))
        mutant.data, what = BYTE_LEVEL[name](base.data, rnd)
        mutant.mutations.append(what)
        return mutant
    model = onnx.ModelProto()
    model.ParseFromString(base.data)
    wanted = rnd.choice([1, 1, 1, 2, 2, 3])
    tries = 0
    while len(mutant.mutations) < wanted and tries < 20:
        tries += 1
        name = rnd.choice(WEIGHTED)
        what = STRUCTURAL[name](model, rnd)
        if what is not None:
            mutant.mutations.append(what)
    data = model.SerializeToString()
    if BAD_UTF8.encode() in data:
        data = data.replace(BAD_UTF8.encode(), b"\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1"[: len(BAD_UTF8)])
    if rnd.random() < 0.1:
        data, what = flip_bytes(data, rnd)
        mutant.mutations.append(what)
    mutant.data = data
    return mutant
