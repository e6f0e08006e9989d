"""Toy paper: one model split evenly over n devices, each synchronisation a fixed latency (the template).

Copy to `workbench/papers/<paper>.py` (README, "Adding a paper"): the public names below are the ones every
paper module exposes (`workbench.papers.base`); a real paper costs its experiments with its scheme
(`workbench.schemes.<paper>`) instead of the one-line model in `scaling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.model.models import get_model
from workbench.papers import base
from workbench.papers.base import result_row, result_rows, rows_frame

PAPER = "toy"


# ---- constants and the paper's setting --------------------------------------------------------------
def constants() -> Mapping[str, Any]:
    """The paper's constant values (data/constants/<PAPER>.toml), read once per process."""
    return base.paper_values(PAPER)


@dataclass(frozen=True)
class Setting(base.PaperSetting):
    """The paper's experiment defaults (data/constants/<PAPER>.toml); every experiment overrides any of them."""

    PAPER: ClassVar[str] = PAPER
    KEYS: ClassVar[Mapping[str, str]] = {"link_latency_s": "link_latency"}

    model: str
    seq_len: int
    device_flops: float  # FLOP/s of one device
    link_latency_s: float  # s per synchronisation
    devices: list  # Fig. 1's device counts

    def __post_init__(self) -> None:
        get_model(self.model)
        bad = [n for n in ("seq_len", "device_flops", "devices") if not all(v > 0 for v in np.ravel(getattr(self, n)))]
        if bad or self.link_latency_s < 0:
            raise WorkbenchError(f"{PAPER} settings {bad or ['link_latency_s']} are out of range: {self}")


def reported() -> pd.DataFrame:
    """The paper's numbers (data/reported/<PAPER>.csv), read now."""
    return base.reported(PAPER)


def reported_value(artifact: str, model: str, setting: str, quantity: str) -> float:
    """One number as the paper reports it (data/reported/<PAPER>.csv)."""
    return base.reported_value(PAPER, artifact, model, setting, quantity)


# ---- experiments: each returns a tidy DataFrame ------------------------------------------------------
def scaling(devices=None, seq_len: int | None = None) -> pd.DataFrame:
    """Fig. 1: latency of one inference on 1..n devices and the speedup over one device."""
    s = Setting.from_constants(devices=devices, seq_len=seq_len)
    model = get_model(s.model)
    flops = model.block_flops(s.seq_len) * model.n_layers
    frame = pd.DataFrame({"devices": list(s.devices)})
    frame["latency_s"] = flops / (frame.devices * s.device_flops) + (frame.devices - 1) * s.link_latency_s
    frame["speedup"] = flops / s.device_flops / frame.latency_s
    return frame.assign(model=s.model, seq_len=s.seq_len)


def pattern_checks() -> pd.DataFrame:
    """The text's claims: the speedup grows with every device added, but less than linearly."""
    f = scaling()
    rows = [("Fig. 1", "speedup grows with every device (smallest step)", float(np.diff(f.speedup).min()),
             bool((np.diff(f.speedup) > 0).all())),
            ("Fig. 1", "sub-linear speedup (largest speedup / devices)", float((f.speedup / f.devices).max()),
             bool((f.speedup <= f.devices).all()))]
    return pd.DataFrame(rows, columns=["artifact", "claim", "modelled", "holds"])


# ---- result rows (keys match data/reported/<PAPER>.csv) -------------------------------------------------
def scaling_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 1 rows: latency and speedup per device count."""
    setting = "S=" + frame.seq_len.astype(str) + ",devices=" + frame.devices.astype(str)
    return result_rows(PAPER, "Fig. 1", frame, {"latency_s": "s", "speedup": "x"}, model=frame.model, setting=setting)


def pattern_rows(checks: pd.DataFrame) -> pd.DataFrame:
    """`pattern_checks` as rows: every claim's modelled number, then whether each holds (1) or not (0)."""
    return rows_frame([result_row(PAPER, r.artifact, "", r.claim, q, float(getattr(r, q)), u)
                       for q, u in (("modelled", ""), ("holds", "1")) for r in checks.itertuples()])
