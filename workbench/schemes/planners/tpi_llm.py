"""TPI-LLM's partition planner: attention heads and FFN columns split in proportion to device capability.

TPI-LLM Sec. 3.1, Step 1: "Workers with greater computing power and larger memory are allocated more
attention heads and FFN weights." The split is integral (whole heads, whole FFN columns), so it is
a largest-remainder apportionment of `n_heads` and `d_ff` over capability weights, with at least one
head and one FFN column per device. Uneven splits are fine: the kernel pads and masks.

No JAX here, so the cost model's users, the notebook and the JAX kernel share one split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.core.apportion import apportion as shared_apportion
from workbench.core.errors import WorkbenchError, require_int
from workbench.machine.hardware import DeviceSpec
from workbench.model.models import TransformerConfig
from workbench.schemes.tpi_llm import capability, check_devices


def apportion(total: int, weights: Sequence[float], minimum: int = 1) -> tuple[int, ...]:
    """Split `total` items over len(weights) devices in proportion to `weights` (> 0), at least `minimum` each.

    TPI-LLM's rounding, the "clamp" rule of `workbench.core.apportion.apportion`: floors raised to `minimum`,
    then trimmed / topped up by largest remainder; ties go to the earlier part, so the result is deterministic.
    """
    require_int("total", total, low=0)
    w = np.asarray(list(weights), dtype=float)
    if w.ndim != 1 or w.size == 0:
        raise WorkbenchError("weights must be a non-empty 1-D sequence")
    if np.any(~np.isfinite(w)) or np.any(w <= 0):
        raise WorkbenchError(f"weights must be finite and > 0, got {list(weights)}")
    if total < minimum * w.size:
        raise WorkbenchError(f"cannot give {w.size} devices at least {minimum} of {total} items each; "
                             f"use at most {total // max(minimum, 1)} devices")
    return tuple(int(p) for p in shared_apportion(total, w, minimum, rule="clamp"))


@dataclass(frozen=True)
class TPSplit:
    """Per-device query heads and FFN columns (contiguous ranges, device 0 = master first)."""

    heads: tuple[int, ...]
    ffn: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))
        object.__setattr__(self, "ffn", tuple(int(f) for f in self.ffn))
        if len(self.heads) != len(self.ffn) or not self.heads:
            raise WorkbenchError(f"split needs one head count and one FFN count per device, got "
                                 f"{len(self.heads)} and {len(self.ffn)}")
        if min(self.heads) < 1 or min(self.ffn) < 1:
            raise WorkbenchError(f"every device needs >= 1 head and >= 1 FFN column, got heads={self.heads}, "
                                 f"ffn={self.ffn}")

    @property
    def n_devices(self) -> int:
        """Devices in the split."""
        return len(self.heads)

    def head_ranges(self) -> list[tuple[int, int]]:
        """[start, stop) of each device's query heads."""
        edges = np.concatenate([[0], np.cumsum(self.heads)])
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    def ffn_ranges(self) -> list[tuple[int, int]]:
        """[start, stop) of each device's FFN columns."""
        edges = np.concatenate([[0], np.cumsum(self.ffn)])
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    def kv_ranges(self, cfg: TransformerConfig) -> list[tuple[int, int]]:
        """[start, stop) of the KV heads each device needs for its query heads (GQA groups may straddle)."""
        group = cfg.n_heads // cfg.n_kv_heads
        return [(a // group, (b - 1) // group + 1) for a, b in self.head_ranges()]

    def shares(self) -> tuple[float, ...]:
        """p_i: each device's fraction of the heads (TPI-LLM's proportion of parameters)."""
        total = sum(self.heads)
        return tuple(h / total for h in self.heads)

    def validate(self, cfg: TransformerConfig) -> TPSplit:
        """Check the split covers exactly the model's heads and FFN width; return self."""
        if sum(self.heads) != cfg.n_heads:
            raise WorkbenchError(f"split heads {self.heads} sum to {sum(self.heads)}, model {cfg.name!r} has "
                                 f"{cfg.n_heads}")
        if sum(self.ffn) != cfg.d_ff:
            raise WorkbenchError(f"split FFN columns sum to {sum(self.ffn)}, model {cfg.name!r} has d_ff={cfg.d_ff}")
        return self


def proportional_split(cfg: TransformerConfig, weights: Sequence[float] | int) -> TPSplit:
    """Heads and FFN columns in proportion to `weights` (or an int n: n equal devices)."""
    if isinstance(weights, int) and not isinstance(weights, bool):
        weights = [1.0] * check_devices(cfg, weights)
    weights = list(weights)
    check_devices(cfg, len(weights))
    return TPSplit(apportion(cfg.n_heads, weights), apportion(cfg.d_ff, weights)).validate(cfg)


def plan_split(cfg: TransformerConfig, devices: Sequence[DeviceSpec]) -> TPSplit:
    """TPI-LLM Step 1 for a concrete set of devices: split by their computing power (the cost model's
    `capability`, the decode-bound weight-streaming rate), master first."""
    if not devices:
        raise WorkbenchError("plan_split needs at least one device")
    return proportional_split(cfg, [capability(d) for d in devices])
