"""Read the collectives a compiled JAX program really performs, from its optimized HLO text.

Used to assert that each scheme's analytical communication volume equals what the compiled
`shard_map` program moves: `compiled_collectives(jax.jit(f), *args)` returns one row per collective
(kind, bytes of its result per device, participant groups, shape).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1,
               "s64": 8, "u64": 8, "s16": 2, "u16": 2}
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all", "collective-broadcast")

_OP = re.compile(
    r"=\s*(?P<shape>\([^=]*?\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+"
    r"(?P<kind>all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all|collective-broadcast)"
    r"(?P<suffix>-start)?\("
)
_ARRAY = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]")
_COMMENT = re.compile(r"/\*[^*]*\*/")


@dataclass(frozen=True)
class Collective:
    """One collective in the compiled program."""

    kind: str
    result_bytes: int  # bytes of the result buffer on each device
    shapes: str
    groups: str  # replica_groups or source_target_pairs as written in the HLO

    @property
    def group_size(self) -> int:
        """Participants per group (0 if the HLO does not say)."""
        m = re.match(r"\{\{([0-9,]+)\}", self.groups)
        if m:
            return len(m.group(1).split(","))
        m = re.match(r"\[(\d+),(\d+)\]<=", self.groups)  # iota form [groups, size]<=[n]
        if m:
            return int(m.group(2))
        return 0


def _shape_bytes(shape: str) -> int:
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * DTYPE_BYTES.get(dtype, 4)
    return total


def parse_collectives(hlo_text: str) -> list[Collective]:
    """Every collective op in HLO text (async `-start` halves counted once, `-done` ignored)."""
    out = []
    for line in hlo_text.splitlines():
        line = _COMMENT.sub("", line)  # a tuple of over five arrays carries /*index=5*/ inside its shape
        m = _OP.search(line)
        if not m:
            continue
        shape = m.group("shape")
        if m.group("suffix") and shape.startswith("("):
            # async start returns (operand, result, ...): count the result, the second element
            arrays = _ARRAY.findall(shape)
            if len(arrays) >= 2 and m.group("kind") != "all-reduce":
                shape = "{}[{}]".format(*arrays[1])
        groups = ""
        g = re.search(r"(replica_groups=(\{\{[^}]*\}(?:,\{[^}]*\})*\}|\[[^\]]*\]<=\[[^\]]*\][^,\s]*)|"
                      r"source_target_pairs=\{[^}]*\}(?:,\{[^}]*\})*\}?)", line)
        if g:
            groups = g.group(0).split("=", 1)[1]
        out.append(Collective(m.group("kind"), _shape_bytes(shape), shape, groups))
    return out


def compiled_hlo(jitted, *args, **kwargs) -> str:
    """Optimized HLO text of `jitted(*args)` (jit it first if it is a plain function)."""
    import jax

    if not hasattr(jitted, "lower"):
        jitted = jax.jit(jitted)
    return jitted.lower(*args, **kwargs).compile().as_text()


def compiled_collectives(jitted, *args, **kwargs) -> pd.DataFrame:
    """One row per collective the compiled program performs: kind, result_bytes, group_size, groups."""
    rows = [(c.kind, c.result_bytes, c.group_size, c.groups, c.shapes)
            for c in parse_collectives(compiled_hlo(jitted, *args, **kwargs))]
    return pd.DataFrame(rows, columns=["kind", "result_bytes", "group_size", "groups", "shapes"])


def traffic_summary(collectives: pd.DataFrame) -> dict[str, int]:
    """Bytes of collective results per kind (e.g. {'all-reduce': 4096})."""
    if collectives.empty:
        return {}
    return {k: int(v) for k, v in collectives.groupby("kind")["result_bytes"].sum().items()}
