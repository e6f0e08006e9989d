"""Bochem et al., distributed inference on up to 64 Siracusa MCUs: the paper's experiments as tidy frames.

Everything is costed by the arena's scheme (`workbench.schemes.mcu_siracusa`): this module only builds
the paper's clusters and workloads from the presets (data/devices/siracusa.toml,
data/constants/mcu_siracusa.toml), sweeps them and names the results the way the paper reports them:
runtime and energy of *one Transformer block* (Sec. V-A), speedup over one chip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from workbench.core.errors import (
    WorkbenchError,
    require_choice,
    require_int,
    require_non_negative,
    require_positive,
)
from workbench.core.simulate import Timeline
from workbench.machine.hardware import BITS, DeviceSpec, load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import TransformerConfig, get_model
from workbench.papers import base
from workbench.papers.base import result_row, result_rows, rows_frame
from workbench.schemes.base import Cluster, Workload
from workbench.schemes.mcu_siracusa import PAPER, BlockCost, Placement, block_cost, model_timeline, place

DEVICE_ID = "siracusa"
MODES = ("autoregressive", "prompt")
DTYPES = ("int8", "fp16", "fp32")
DEFAULT_MODEL = "TinyLlama-42M"
SCALED_MODEL = "TinyLlama-42M-64h"
ENCODER_MODEL = "MobileBERT"
FIG4_CHIPS = (1, 2, 4, 8)
MOBILEBERT_CHIPS = (1, 2, 4)
FIG6_CHIPS = (1, 2, 4, 8, 16, 32, 64)
BREAKDOWN = ("computation", "launch", "accumulation", "chip-to-chip", "L2", "L3")


# ---- constants, the paper's setting and presets ----------------------------------------------------------
def constants() -> Mapping[str, Any]:
    """The paper's constant values (data/constants/mcu_siracusa.toml), read once per process."""
    return base.paper_values(PAPER)


@dataclass(frozen=True)
class Setting(base.PaperSetting):
    """The paper's MIPI links and workload lengths (Sec. II-B, V-A); the chip itself is data/devices/siracusa.toml."""

    PAPER: ClassVar[str] = PAPER

    mipi_bandwidth: float  # B/s
    mipi_latency: float  # s per message
    mipi_energy: float  # pJ/B
    mipi_message_overhead: float  # s per message at each endpoint
    group_size: int  # chips per hierarchical reduction group
    autoregressive_kv_len: int  # KV cache of the autoregressive block
    prompt_seq_len: int
    mobilebert_seq_len: int

    def __post_init__(self) -> None:
        require_positive("mipi_bandwidth", self.mipi_bandwidth)
        for name in ("mipi_latency", "mipi_energy", "mipi_message_overhead"):
            require_non_negative(name, getattr(self, name))
        for name in ("group_size", "autoregressive_kv_len", "prompt_seq_len", "mobilebert_seq_len"):
            require_int(name, getattr(self, name), low=1)


@dataclass(frozen=True)
class Knobs:
    """What the notebook lets a reader change; None keeps the preset (the paper's setting)."""

    link_bandwidth: float | None = None  # B/s, MIPI
    l3_bandwidth: float | None = None  # B/s, off-chip memory
    l2_bandwidth: float | None = None  # B/s, L2<->L1 DMA
    dtype: str = "int8"
    efficiency_gemm: float | None = None
    efficiency_gemv: float | None = None
    kernel_launch: float | None = None  # s per kernel launched on a chip (preset: derived from Deeploy's cycles)
    message_overhead: float | None = None  # s per MIPI message at each endpoint (preset: assumed)

    def __post_init__(self) -> None:
        require_choice("dtype", self.dtype, DTYPES)
        for name in ("link_bandwidth", "l3_bandwidth", "l2_bandwidth"):
            if getattr(self, name) is not None:
                require_positive(name, getattr(self, name))
        for name in ("kernel_launch", "message_overhead"):
            if getattr(self, name) is not None:
                require_non_negative(name, getattr(self, name))

    @property
    def bits(self) -> int:
        """Weight and activation precision."""
        return BITS[self.dtype]


def siracusa_device(knobs: Knobs = Knobs()) -> DeviceSpec:
    """The Siracusa preset with any knob applied."""
    device = load_device(DEVICE_ID)
    if knobs.l3_bandwidth is not None:
        device = device.with_memory("L3", bandwidth_bytes_per_s=float(knobs.l3_bandwidth))
    if knobs.l2_bandwidth is not None:
        device = device.with_memory("L2", bandwidth_bytes_per_s=float(knobs.l2_bandwidth))
    changes = {k: getattr(knobs, k) for k in ("efficiency_gemm", "efficiency_gemv") if getattr(knobs, k) is not None}
    if knobs.kernel_launch is not None:
        changes["kernel_launch_s"] = float(knobs.kernel_launch)
    return device.with_changes(**changes) if changes else device


def siracusa_cluster(n_chips: int, knobs: Knobs = Knobs()) -> Cluster:
    """`n_chips` Siracusa MCUs on direct MIPI links, reduced hierarchically in groups of four."""
    require_int("chips", n_chips, low=1)
    s = Setting.from_constants(mipi_bandwidth=knobs.link_bandwidth, mipi_message_overhead=knobs.message_overhead)
    link = Link(float(s.mipi_bandwidth), float(s.mipi_latency), float(s.mipi_energy), name="MIPI",
                message_overhead_s=float(s.mipi_message_overhead))
    topology = Topology("direct", n_chips, link, group_size=int(s.group_size))
    device = siracusa_device(knobs)
    return Cluster(tuple(device for _ in range(n_chips)), topology)


def paper_workload(model: TransformerConfig, mode: str, bits: int = 8) -> Workload:
    """The paper's workloads: autoregressive (one token, KV cache of 128), prompt (16 tokens), MobileBERT (268);
    the blocks only, as the paper measures them (no LM head: `Workload.output_head=False`)."""
    require_choice("mode", mode, MODES)
    setting = Setting.from_constants()
    if not model.is_decoder:
        if mode != "prompt":
            raise WorkbenchError(f"model {model.name!r} is an encoder: mode must be 'prompt', got {mode!r}")
        s = int(setting.mobilebert_seq_len)
        return Workload("prefill", seq_len=s, kv_len=s, weight_bits=bits, activation_bits=bits, output_head=False)
    if mode == "prompt":
        s = int(setting.prompt_seq_len)
        return Workload("prefill", seq_len=s, kv_len=s, weight_bits=bits, activation_bits=bits, output_head=False)
    t = int(setting.autoregressive_kv_len)
    return Workload("decode", seq_len=t, kv_len=t, weight_bits=bits, activation_bits=bits, output_head=False)


def setting_label(model: TransformerConfig, mode: str, chips: int) -> str:
    """The `setting` key of a result row: 'autoregressive,S=128,chips=8', 'S=268,chips=4' for the encoder."""
    w = paper_workload(model, mode)
    if not model.is_decoder:
        return f"S={w.seq_len},chips={chips}"
    return f"{mode},S={w.kv_len if w.phase == 'decode' else w.seq_len},chips={chips}"


# ---- one configuration ----------------------------------------------------------------------------------
def block(model: str | TransformerConfig, mode: str, chips: int, knobs: Knobs = Knobs()) -> BlockCost:
    """Runtime and energy of one block; bad chip counts or models that fit nowhere raise WorkbenchError."""
    cfg = get_model(model)
    return block_cost(cfg, siracusa_cluster(chips, knobs), paper_workload(cfg, mode, knobs.bits), strict=True)


def placement(model: str | TransformerConfig, mode: str, chips: int, knobs: Knobs = Knobs()) -> Placement:
    """What one chip keeps in L2 and L3."""
    cfg = get_model(model)
    return place(cfg, siracusa_device(knobs), chips, paper_workload(cfg, mode, knobs.bits))


def timeline(model: str | TransformerConfig, mode: str, chips: int, knobs: Knobs = Knobs()) -> Timeline:
    """All blocks of one inference with the double-buffered L3 prefetch (workbench.core.simulate)."""
    cfg = get_model(model)
    return model_timeline(block(cfg, mode, chips, knobs), cfg.n_layers)


def _scaling_row(cfg: TransformerConfig, mode: str, chips: int, cost: BlockCost) -> dict:
    """One configuration as a flat row (ms, mJ, MiB)."""
    steady = model_timeline(cost, cfg.n_layers).makespan / cfg.n_layers
    row = {"model": cfg.name, "mode": mode, "chips": chips, "case": cost.placement.case,
           "runtime_ms": cost.runtime_s * 1e3, "energy_mJ": cost.energy_j * 1e3,
           "steady_state_ms": steady * 1e3, "prefetch_ms": cost.prefetch_s * 1e3,
           "l2_traffic_MiB": cost.l2_bytes_per_chip / 2**20, "l3_traffic_MiB": cost.l3_bytes_per_chip / 2**20,
           "c2c_bytes": cost.c2c_bytes, "weight_slice_MiB": cost.placement.weight_slice_bytes / 2**20}
    row.update({f"{k}_ms": v * 1e3 for k, v in cost.breakdown().items()})
    row.update({f"energy_{k}_mJ": v * 1e3 for k, v in cost.energy_breakdown().items()})
    return row


def scaling(model: str | TransformerConfig, mode: str, chips: tuple[int, ...], knobs: Knobs = Knobs()) -> pd.DataFrame:
    """One row per chip count: runtime, breakdown, energy, and speedup/energy ratio vs the first count."""
    cfg = get_model(model)
    rows = [_scaling_row(cfg, mode, n, block(cfg, mode, n, knobs)) for n in chips]
    frame = pd.DataFrame(rows)
    base = frame.iloc[0]
    frame["speedup"] = base["runtime_ms"] / frame["runtime_ms"]
    frame["energy_ratio"] = frame["energy_mJ"] / base["energy_mJ"]
    frame["setting"] = [setting_label(cfg, mode, n) for n in chips]
    return frame


# ---- the paper's figures ----------------------------------------------------------------------------------
def fig4(knobs: Knobs = Knobs()) -> pd.DataFrame:
    """Fig. 4 (a) TinyLlama autoregressive, (b) prompt on 1-8 chips, (c) MobileBERT on 1-4 chips."""
    parts = [scaling(DEFAULT_MODEL, "autoregressive", FIG4_CHIPS, knobs).assign(panel="a"),
             scaling(DEFAULT_MODEL, "prompt", FIG4_CHIPS, knobs).assign(panel="b"),
             scaling(ENCODER_MODEL, "prompt", MOBILEBERT_CHIPS, knobs).assign(panel="c")]
    return pd.concat(parts, ignore_index=True)


def breakdown_long(frame: pd.DataFrame) -> pd.DataFrame:
    """Fig. 4's stacked bars: one row per (configuration, component) with milliseconds."""
    keep = [c for c in ("panel", "model", "mode", "chips", "setting") if c in frame]
    long = frame.melt(id_vars=keep, value_vars=[f"{c}_ms" for c in BREAKDOWN], var_name="component",
                      value_name="ms")
    long["component"] = long["component"].str.removesuffix("_ms")
    return long


def fig5(knobs: Knobs = Knobs(), scaled_chips: tuple[int, ...] = FIG6_CHIPS) -> pd.DataFrame:
    """Fig. 5: energy vs latency per block, default models (crosses) and the 64-head model (circles)."""
    parts = [scaling(DEFAULT_MODEL, "autoregressive", FIG4_CHIPS, knobs).assign(panel="a", variant="default"),
             scaling(SCALED_MODEL, "autoregressive", scaled_chips, knobs).assign(panel="a", variant="scaled-up"),
             scaling(DEFAULT_MODEL, "prompt", FIG4_CHIPS, knobs).assign(panel="b", variant="default"),
             scaling(SCALED_MODEL, "prompt", scaled_chips, knobs).assign(panel="b", variant="scaled-up"),
             scaling(ENCODER_MODEL, "prompt", MOBILEBERT_CHIPS, knobs).assign(panel="c", variant="default")]
    return pd.concat(parts, ignore_index=True)


def fig6(knobs: Knobs = Knobs(), chips: tuple[int, ...] = FIG6_CHIPS) -> pd.DataFrame:
    """Fig. 6: speedup of the 64-head TinyLlama on 2-64 chips over one chip, both modes."""
    return pd.concat([scaling(SCALED_MODEL, m, chips, knobs) for m in MODES], ignore_index=True)


def placement_frame(model: str, mode: str, chips: tuple[int, ...], knobs: Knobs = Knobs()) -> pd.DataFrame:
    """Per chip count: what sits in L2 and L3 of one chip, in MiB."""
    return pd.concat([placement(model, mode, n, knobs).table() for n in chips], ignore_index=True)


# ---- fitting and fidelity ---------------------------------------------------------------------------------
REPORTED_FIT = {  # constant -> (model, mode, chips) of the reported block_runtime it is fitted on
    "efficiency_gemv": (DEFAULT_MODEL, "autoregressive", 8),
    "efficiency_gemm": (ENCODER_MODEL, "prompt", 4),
}
ENERGY_FIT = ("mem_L2_bandwidth", DEFAULT_MODEL, "autoregressive", 8)  # constant, then its block_energy row
DMA_RANGE = (0.1e9, 64e9)  # B/s: the L2<->L1 DMA bandwidths fit_constants searches (0.2-128 B/cycle at 500 MHz)


def reported() -> pd.DataFrame:
    """The paper's numbers (data/reported/mcu_siracusa.csv); the fits read their targets from there."""
    return base.reported(PAPER)


def reported_value(artifact: str, model: str, setting: str, quantity: str) -> float:
    """One number as the paper reports it (data/reported/mcu_siracusa.csv)."""
    return base.reported_value(PAPER, artifact, model, setting, quantity)


def _fit_target(rows: pd.DataFrame, name: str, model: str, mode: str, chips: int, quantity: str) -> float:
    """The value of the one reported row `name` is fitted on, checked against the expected key."""
    row = rows[rows["fitted"] == name]
    if len(row) != 1:
        raise WorkbenchError(f"expected one reported row fitted on {name}, found {len(row)}")
    expected = (get_model(model).name, setting_label(get_model(model), mode, chips), quantity)
    found = (row["model"].iloc[0], row["setting"].iloc[0], row["quantity"].iloc[0])
    if found != expected:
        raise WorkbenchError(f"reported row for {name} is {found!r}, expected {expected!r}")
    return float(row["value"].iloc[0])


def _with(knobs: Knobs, **changes) -> Knobs:
    """`knobs` with some fields replaced (Knobs is frozen)."""
    return Knobs(**{**{f: getattr(knobs, f) for f in Knobs.__dataclass_fields__}, **changes})


def _runtime_targets(rows: pd.DataFrame) -> dict[str, float]:
    """Seconds: the reported block runtime each efficiency is fitted on."""
    return {name: _fit_target(rows, name, *key, "block_runtime") * 1e-3 for name, key in REPORTED_FIT.items()}


def fit_efficiencies(knobs: Knobs = Knobs()) -> dict[str, float]:
    """Solve each efficiency so the modelled block runtime equals the one reported row it is fitted on.

    The L2<->L1 DMA bandwidth is the one in `knobs` (None: the preset); `fit_constants` fits it too.
    """
    return _fit_efficiencies(knobs, _runtime_targets(reported()))


def _fit_efficiencies(knobs: Knobs, targets_s: dict[str, float]) -> dict[str, float]:
    """`fit_efficiencies` with the reported runtimes already read (the joint fit calls it many times)."""
    fitted = {}
    for name, (model, mode, chips) in REPORTED_FIT.items():
        target_s = targets_s[name]

        def gap(eff, name=name, model=model, mode=mode, chips=chips, target_s=target_s):
            return block(model, mode, chips, _with(knobs, **{name: eff})).runtime_s - target_s

        low, high = 1e-4, 1.0
        if gap(high) > 0 or gap(low) < 0:
            raise WorkbenchError(
                f"cannot fit {name}: no efficiency in ({low}, {high}] gives the reported "
                f"{target_s * 1e3:g} ms for {model} on {chips} chips under these knobs (the non-compute time "
                f"alone is {(gap(high) + target_s) * 1e3:.3g} ms at efficiency 1)")
        fitted[name] = float(brentq(gap, low, high, xtol=1e-9))
    return fitted


def _runtime_excess_at_full_efficiency(l2_bandwidth: float, knobs: Knobs, targets_s: dict[str, float]) -> float:
    """Largest (runtime at efficiency 1 - reported runtime) over the efficiency rows: > 0 means no fit."""
    k = _with(knobs, l2_bandwidth=float(l2_bandwidth), efficiency_gemm=1.0, efficiency_gemv=1.0)
    return max(block(model, mode, chips, k).runtime_s - targets_s[name]
               for name, (model, mode, chips) in REPORTED_FIT.items())


def fit_constants(knobs: Knobs = Knobs(), dma_range: tuple[float, float] = DMA_RANGE) -> dict[str, float]:
    """Fit the L2<->L1 DMA bandwidth and both efficiencies jointly on 0.54 ms, 38.8 ms and 0.64 mJ.

    Nested solve: for a DMA bandwidth the efficiencies are fitted on the two runtimes; the bandwidth is
    then solved (brentq) so that the 8-chip autoregressive block's E_total equals the reported energy. A
    faster DMA leaves more of the fitted runtime to computation, so the energy rises with the bandwidth.
    `knobs.l2_bandwidth` and the knobs' efficiencies are ignored (they are what is fitted).
    """
    name, model, mode, chips = ENERGY_FIT
    low, high = (float(b) for b in dma_range)
    if not 0 < low < high:
        raise WorkbenchError(f"dma_range must be (low, high) with 0 < low < high B/s, got {dma_range!r}")
    rows = reported()
    target_j, targets_s = _fit_target(rows, name, model, mode, chips, "block_energy") * 1e-3, _runtime_targets(rows)
    span = f"[{low / 1e9:g}, {high / 1e9:g}] GB/s"
    if _runtime_excess_at_full_efficiency(high, knobs, targets_s) > 0:
        raise WorkbenchError(f"cannot fit {name}: even at {high / 1e9:g} GB/s the non-compute time exceeds a "
                             f"reported block runtime at efficiency 1, so no DMA bandwidth in {span} works")
    if _runtime_excess_at_full_efficiency(low, knobs, targets_s) > 0:  # the slowest DMA leaving time to compute
        low = float(brentq(_runtime_excess_at_full_efficiency, low, high, args=(knobs, targets_s), xtol=1.0,
                           rtol=1e-12))
        low *= 1 + 1e-6  # just inside: brentq stops within ~1 B/s of the boundary

    def fitted_at(bandwidth: float) -> Knobs:
        k = _with(knobs, l2_bandwidth=float(bandwidth))
        return _with(k, **_fit_efficiencies(k, targets_s))

    def gap(bandwidth: float) -> float:
        return block(model, mode, chips, fitted_at(bandwidth)).energy_j - target_j

    gap_low, gap_high = gap(low), gap(high)
    if gap_low > 0 or gap_high < 0:
        raise WorkbenchError(
            f"cannot fit {name}: no L2<->L1 DMA bandwidth in {span} gives the reported {target_j * 1e3:g} mJ for "
            f"{model} {mode} on {chips} chips with both efficiencies refitted (the modelled energy spans "
            f"{(gap_low + target_j) * 1e3:.3g}-{(gap_high + target_j) * 1e3:.3g} mJ from {low / 1e9:.3g} to "
            f"{high / 1e9:g} GB/s, where both runtimes can be fitted)")
    bandwidth = float(brentq(gap, low, high, xtol=1.0, rtol=1e-12))
    k = fitted_at(bandwidth)
    return {name: bandwidth, "efficiency_gemv": float(k.efficiency_gemv), "efficiency_gemm": float(k.efficiency_gemm)}


FIDELITY = (  # (artifact, model, mode, chips, quantity, unit)
    ("Fig. 4a", DEFAULT_MODEL, "autoregressive", 8, "speedup", "x"),
    ("Fig. 4b", DEFAULT_MODEL, "prompt", 8, "speedup", "x"),
    ("Fig. 4c", ENCODER_MODEL, "prompt", 4, "speedup", "x"),
    ("Abstract", DEFAULT_MODEL, "autoregressive", 8, "block_energy", "mJ"),
    ("Abstract", DEFAULT_MODEL, "autoregressive", 8, "block_runtime", "ms"),
    ("Abstract", ENCODER_MODEL, "prompt", 4, "block_runtime", "ms"),
)


def fidelity_rows(knobs: Knobs = Knobs()) -> pd.DataFrame:
    """The modelled value of every reported number, keyed exactly like data/reported/mcu_siracusa.csv."""
    rows = []
    for artifact, model, mode, chips, quantity, unit in FIDELITY:
        cfg = get_model(model)
        cost, single = block(cfg, mode, chips, knobs), block(cfg, mode, 1, knobs)
        value = {"speedup": single.runtime_s / cost.runtime_s, "block_energy": cost.energy_j * 1e3,
                 "block_runtime": cost.runtime_s * 1e3}[quantity]
        rows.append(result_row(PAPER, artifact, cfg.name, setting_label(cfg, mode, chips), quantity, value, unit))
    return rows_frame(rows)


def fidelity_table(knobs: Knobs = Knobs()) -> pd.DataFrame:
    """Reported vs modelled with relative error, tolerance and role (calibration / validation)."""
    keys = ["artifact", "model", "setting", "quantity"]
    merged = reported().merge(fidelity_rows(knobs)[keys + ["value"]].rename(columns={"value": "modelled"}), on=keys)
    merged = merged.rename(columns={"value": "reported"})
    merged["relative_error"] = (merged["modelled"] - merged["reported"]) / merged["reported"]
    merged["role"] = np.where(merged["fitted"].str.len() > 0, "calibration (" + merged["fitted"] + ")", "validation")
    merged["within_tolerance"] = merged["relative_error"].abs() <= merged["tolerance"]
    merged["gain_error"] = np.where(merged["quantity"] == "speedup", gain_error(merged["modelled"], merged["reported"]),
                                    np.nan)
    return merged[keys + ["unit", "reported", "modelled", "relative_error", "gain_error", "tolerance",
                          "within_tolerance", "role"]]


def gain_error(modelled, reported):
    """Error of a speedup's gain: (modelled - 1) / (reported - 1) - 1 (vectorised)."""
    return (np.asarray(modelled, dtype=float) - 1) / (np.asarray(reported, dtype=float) - 1) - 1


def refitted(knobs: Knobs = Knobs()) -> Knobs:
    """`knobs` with the three fitted constants refitted under them (same calibration rows)."""
    fit = fit_constants(knobs)
    return _with(knobs, l2_bandwidth=fit["mem_L2_bandwidth"], efficiency_gemv=fit["efficiency_gemv"],
                 efficiency_gemm=fit["efficiency_gemm"])


def launch_sensitivity(launches_s: tuple[float, ...], knobs: Knobs = Knobs(),
                       chips: tuple[int, ...] = FIG6_CHIPS) -> pd.DataFrame:
    """Fig. 6 (both modes) vs the per-kernel launch cost, the three fitted constants refitted at each value
    on the same calibration rows (so every point still meets 0.54 ms, 38.8 ms and 0.64 mJ): one row per
    (launch, mode, chips) with the speedup, speedup/N and the three validation rows' errors."""
    parts = []
    for launch in launches_s:
        k = refitted(_with(knobs, kernel_launch=float(launch), l2_bandwidth=None, efficiency_gemv=None,
                           efficiency_gemm=None))
        frame = fig6(k, chips)
        table = fidelity_table(k)
        val = table[table.role == "validation"]
        frame = frame[["mode", "chips", "case", "runtime_ms", "speedup", "energy_mJ"]].assign(
            launch_us=float(launch) * 1e6, efficiency=lambda f: f.speedup / f.chips,
            efficiency_gemv=k.efficiency_gemv, efficiency_gemm=k.efficiency_gemm, l2_bandwidth=k.l2_bandwidth)
        for row in val.itertuples():
            frame[f"error {row.artifact}"] = row.relative_error
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)


LINEAR_BAND = (0.8, 1.25)  # speedup / chips read as "linear" / "quasi-linear": within 25 % of N (our reading)
PATTERN_COLUMNS = ["artifact", "claim", "criterion", "modelled", "holds"]


def gemm_time(cost: BlockCost, device: DeviceSpec, dtype: str = "int8") -> float:
    """Seconds one chip spends in its block's matrix products, each with its launch (the 'GEMM kernel
    runtime' of Sec. V-B/V-C)."""
    from workbench.schemes.mcu_siracusa import matmul_time

    work = [mm for mm in cost.kernels if mm.flops > 0]
    return float(sum(matmul_time(device, mm, dtype) for mm in work) + device.launch_time(len(work)))


def fig6_checks(knobs: Knobs = Knobs(), chips: tuple[int, ...] = FIG6_CHIPS) -> list[tuple]:
    """The Sec. V-C / Fig. 6 text claims on the 64-head TinyLlama, each as (artifact, claim, criterion,
    modelled, holds). Read from the text only (the Fig. 6 values at 64 chips are held out)."""
    low, high = LINEAR_BAND
    chips = tuple(sorted(set(chips) | {1, 2, 4, 8, 16, 32}))  # every count a claim names
    ar, pr = (scaling(SCALED_MODEL, m, chips, knobs).set_index("chips") for m in MODES)
    eff_ar, eff_pr = ar.speedup / ar.index, pr.speedup / pr.index
    sup = [n for n in (8, 16, 32) if n in ar.index]
    lin = [n for n in (2, 4, 8, 16) if n in pr.index]
    worst_lin = max(lin, key=lambda n: abs(np.log(eff_pr[n])))
    device = siracusa_device(knobs)
    g1 = gemm_time(block(SCALED_MODEL, "prompt", 1, knobs), device, knobs.dtype)
    gn = gemm_time(block(SCALED_MODEL, "prompt", max(chips), knobs), device, knobs.dtype)
    overhead = (pr["chip-to-chip_ms"] + pr["accumulation_ms"]) / pr["runtime_ms"]
    top, mid = max(chips), 16
    return [
        ("Fig. 6", "autoregressive: super-linear for 8-32 chips (smallest speedup/N)", "speedup/N > 1 at 8, 16, 32",
         float(eff_ar[sup].min()), bool((eff_ar[sup] > 1).all())),
        ("Fig. 6", f"autoregressive: quasi-linear at {top} chips (speedup/N)",
         f"{low} <= speedup/N <= {high}", float(eff_ar[top]), bool(low <= eff_ar[top] <= high)),
        ("Fig. 6", f"autoregressive: parallel efficiency falls from 32 to {top} chips (ratio)",
         "(speedup/N at 64) / (at 32) < 1", float(eff_ar[top] / eff_ar[32]), bool(eff_ar[top] < eff_ar[32])),
        ("Fig. 6", f"prompt: linear up to 16 chips (speedup/N at {worst_lin} chips, the farthest from 1)",
         f"{low} <= speedup/N <= {high} at 2, 4, 8, 16", float(eff_pr[worst_lin]),
         bool(all(low <= eff_pr[n] <= high for n in lin))),
        ("Fig. 6", f"prompt: diminishing returns beyond 16 chips (speedup {top} / speedup 16)",
         "speedup/N falls at every doubling after 16",
         float(pr.speedup[top] / pr.speedup[mid]),
         bool(all(eff_pr[b] < eff_pr[a] for a, b in zip([n for n in chips if n >= mid], [n for n in chips if n > mid])))),
        ("Sec. V-B/V-C", f"GEMM kernels' runtime scales sub-linearly as they shrink (prompt, 1 -> {top} chips: "
                         f"GEMM-time speedup / N)", "GEMM-time speedup < N", float(g1 / gn / top),
         bool(g1 / gn < top * (1 - 1e-9))),
        ("Sec. V-C", f"prompt: chip-to-chip transfers and partial-sum accumulation add a larger overhead "
                     f"(share of the block at {top} chips)", "share grows from 16 to 64 chips",
         float(overhead[top]), bool(overhead[top] > overhead[mid])),
    ]


def fig5_checks(knobs: Knobs = Knobs(), chips: tuple[int, ...] = FIG6_CHIPS) -> list[tuple]:
    """Fig. 5's energy directions as the text states them (Sec. V-B, V-C, Abstract)."""
    ar = scaling(DEFAULT_MODEL, "autoregressive", FIG4_CHIPS, knobs)
    pr = scaling(DEFAULT_MODEL, "prompt", FIG4_CHIPS, knobs)
    mb = scaling(ENCODER_MODEL, "prompt", MOBILEBERT_CHIPS, knobs)
    chips = tuple(sorted(set(chips) | {1, 16, 32}))  # every count a claim names
    sa, sp = (scaling(SCALED_MODEL, m, chips, knobs).set_index("chips") for m in MODES)
    top = max(chips)
    return [
        ("Fig. 5a", "autoregressive energy falls at 8 chips (ratio to 1 chip)", "E8 / E1 < 1",
         float(ar.energy_ratio.iloc[3]), bool(ar.energy_ratio.iloc[3] < 1)),
        ("Fig. 5b", "prompt energy falls at 8 chips (ratio to 1 chip)", "E8 / E1 < 1",
         float(pr.energy_ratio.iloc[3]), bool(pr.energy_ratio.iloc[3] < 1)),
        ("Fig. 5c", "MobileBERT energy rises slightly at 4 chips (ratio to 1 chip)", "E4 / E1 > 1",
         float(mb.energy_ratio.iloc[-1]), bool(mb.energy_ratio.iloc[-1] > 1)),
        ("Fig. 5a", "64-head autoregressive: a further energy reduction at 32 chips, no double buffering (E32/E16)",
         "E32 / E16 < 1", float(sa.energy_mJ[32] / sa.energy_mJ[16]), bool(sa.energy_mJ[32] < sa.energy_mJ[16])),
        ("Fig. 5b", "64-head prompt: reduced energy at 32 chips, no double buffering (E32/E16)", "E32 / E16 < 1",
         float(sp.energy_mJ[32] / sp.energy_mJ[16]), bool(sp.energy_mJ[32] < sp.energy_mJ[16])),
        ("Abstract", f"64-head autoregressive: energy reduced at {top} chips vs 1 chip (E{top}/E1)",
         f"E{top} / E1 < 1", float(sa.energy_mJ[top] / sa.energy_mJ[1]), bool(sa.energy_mJ[top] < sa.energy_mJ[1])),
        ("Fig. 5a", "64-head autoregressive: the L3 (off-chip) energy term vanishes from 32 chips, the MIPI term "
                    "stays (MIPI mJ at 64 chips)", "E_L3 = 0 and E_C2C > 0 at 32 and 64 chips",
         float(sa["energy_chip-to-chip_mJ"][top]),
         bool((sa.energy_L3_mJ[[32, top]] == 0).all() and (sa["energy_chip-to-chip_mJ"][[32, top]] > 0).all())),
    ]


def pattern_checks(knobs: Knobs = Knobs(), chips: tuple[int, ...] = FIG6_CHIPS) -> pd.DataFrame:
    """The paper's qualitative claims, each with the modelled numbers behind it: Fig. 4's scaling and
    breakdown, Fig. 5's energy directions and the Fig. 6 scaling claims of Sec. V-C."""
    ar = scaling(DEFAULT_MODEL, "autoregressive", FIG4_CHIPS, knobs)
    pr = scaling(DEFAULT_MODEL, "prompt", FIG4_CHIPS, knobs)
    sc = scaling(SCALED_MODEL, "autoregressive", (1, 16, 32), knobs)
    rows = [("Fig. 4a", "autoregressive speedup above N at 8 chips", "speedup > 8", float(ar.speedup.iloc[3]),
             bool(ar.speedup.iloc[3] > 8))]
    for i, n in enumerate(FIG4_CHIPS[:3]):
        s = float(ar.speedup.iloc[i])
        rows.append(("Fig. 4a", f"autoregressive speedup at most N at {n} chip(s)", f"speedup <= {n}", s,
                     bool(s <= n * (1 + 1e-9))))
    memory = ("computation", "launch", "accumulation", "chip-to-chip", "L2", "L3")
    rows += [("Fig. 4b", "prompt mode: computation is the largest 1-chip component (share)", "largest component",
              float(pr.computation_ms.iloc[0] / pr.runtime_ms.iloc[0]),
              bool(pr[[f"{c}_ms" for c in memory]].iloc[0].idxmax() == "computation_ms")),
             ("Fig. 4a", "autoregressive: memory (L2+L3) is the largest 1-chip component (share)",
              "L2 + L3 > computation", float((ar.L2_ms.iloc[0] + ar.L3_ms.iloc[0]) / ar.runtime_ms.iloc[0]),
              bool(ar.L2_ms.iloc[0] + ar.L3_ms.iloc[0] > ar.computation_ms.iloc[0])),
             ("Sec. V-C", "64-head model: all blocks on chip from 32 chips, not at 16 (32-chip case)", "case at 32",
              float(sc.chips.iloc[2]), bool(sc.case.iloc[2] == "all_on_chip" and sc.case.iloc[1] != "all_on_chip"))]
    rows += fig5_checks(knobs, chips) + fig6_checks(knobs, chips)
    return pd.DataFrame(rows, columns=PATTERN_COLUMNS)


SCALING_QUANTITIES = {  # column of a `scaling` frame -> (quantity, unit) of its result rows
    "runtime_ms": ("block_runtime", "ms"), "energy_mJ": ("block_energy", "mJ"), "speedup": ("speedup", "x"),
    "steady_state_ms": ("steady_state_block_runtime", "ms"), "prefetch_ms": ("prefetch_time", "ms"),
    **{f"{c}_ms": (f"runtime_{c.replace('-', '_').lower()}", "ms") for c in BREAKDOWN}}


def scaling_rows(frame: pd.DataFrame, artifact: str) -> pd.DataFrame:
    """Every modelled number of a `scaling`-style frame as tidy result rows."""
    named = frame.rename(columns={c: q for c, (q, _) in SCALING_QUANTITIES.items()})
    return result_rows(PAPER, artifact, named, dict(SCALING_QUANTITIES.values()), model=frame["model"],
                       setting=frame["setting"])


def pattern_rows(checks: pd.DataFrame) -> pd.DataFrame:
    """`pattern_checks` as rows: every claim's modelled number, then whether each holds (1) or not (0)."""
    return rows_frame([result_row(PAPER, r.artifact, "", r.claim, q, float(getattr(r, q)), "")
                       for q in ("modelled", "holds") for r in checks.itertuples()])


def combine_rows(*frames: pd.DataFrame) -> pd.DataFrame:
    """Concatenate result rows; a key recorded twice keeps its last value (e.g. Fig. 4 and fidelity)."""
    out = pd.concat(frames, ignore_index=True)
    return out.drop_duplicates(["paper", "artifact", "model", "setting", "quantity"], keep="last")


def placement_rows(frame: pd.DataFrame, model: str, mode: str) -> pd.DataFrame:
    """`placement_frame` as result rows: MiB per (level, content) for each chip count."""
    cfg = get_model(model)
    settings = [setting_label(cfg, mode, int(n)) for n in frame["chips"]]
    quantity = ("bytes_" + frame["level"] + "_" + frame["content"].str.replace(r"[^A-Za-z0-9]+", "_", regex=True)
                .str.strip("_").str.lower())
    return rows_frame([result_row(PAPER, "Sec. IV placement", cfg.name, setting, q, mib, "MiB")
                       for setting, q, mib in zip(settings, quantity, frame["MiB"], strict=True)])


def dma_sensitivity(bandwidths: tuple[float, ...], knobs: Knobs = Knobs()) -> pd.DataFrame:
    """The 8-chip autoregressive block vs the L2<->L1 DMA bandwidth, both efficiencies refitted.

    Shows what pins the fitted DMA bandwidth: the fitted runtime is fixed at 0.54 ms, so a slower DMA
    leaves less of it to computation and lowers P x T_comp (the energy the bandwidth is fitted on).
    """
    rows = []
    for bw in bandwidths:
        k = _with(knobs, l2_bandwidth=float(bw), efficiency_gemm=None, efficiency_gemv=None)
        k = _with(k, **fit_efficiencies(k))
        ar8, ar1 = block(DEFAULT_MODEL, "autoregressive", 8, k), block(DEFAULT_MODEL, "autoregressive", 1, k)
        rows.append({"l2_bandwidth_GBps": bw / 1e9, "efficiency_gemv": k.efficiency_gemv,
                     "efficiency_gemm": k.efficiency_gemm, "runtime_ms": ar8.runtime_s * 1e3,
                     "computation_ms": ar8.compute_s * 1e3, "energy_mJ": ar8.energy_j * 1e3,
                     "speedup": ar1.runtime_s / ar8.runtime_s,
                     "setting": f"autoregressive,S=128,chips=8,l2_bw={bw / 1e9:g}GB/s"})
    return pd.DataFrame(rows)


# ---- charts ----------------------------------------------------------------------------------------------
def speedup_chart(frame: pd.DataFrame, title: str):
    """Speedup vs chips (log-log) with the linear-speedup line."""
    import altair as alt

    ideal = pd.DataFrame({"chips": sorted(frame["chips"].unique())})
    ideal["linear"] = ideal["chips"].astype(float)
    ticks = [int(n) for n in ideal["chips"]]
    base = alt.Chart(frame).encode(x=alt.X("chips:Q", scale=alt.Scale(type="log", base=2), title="chips",
                                           axis=alt.Axis(values=ticks)))
    lines = base.mark_line(point=True).encode(
        y=alt.Y("speedup:Q", scale=alt.Scale(type="log", base=2), title="speedup over 1 chip"),
        color=alt.Color("label:N", title=None), tooltip=["model", "mode", "chips", "case", "speedup", "runtime_ms"])
    linear = alt.Chart(ideal).mark_line(strokeDash=[4, 4], color="gray").encode(x="chips:Q", y="linear:Q")
    return (lines + linear).properties(title=title, width=260, height=200)


def breakdown_chart(frame: pd.DataFrame, title: str):
    """Fig. 4's stacked bars: computation / chip-to-chip / L2 / L3 per chip count."""
    import altair as alt

    long = breakdown_long(frame)
    return alt.Chart(long).mark_bar().encode(
        x=alt.X("chips:O"), y=alt.Y("ms:Q", title="block runtime (ms)"),
        color=alt.Color("component:N", sort=list(BREAKDOWN)), order=alt.Order("component:N"),
        tooltip=["chips", "component", alt.Tooltip("ms:Q", format=".4g")],
    ).properties(title=title, width=200, height=200)


def energy_latency_chart(frame: pd.DataFrame, title: str):
    """Fig. 5: energy vs latency per block; crosses for default models, circles for the 64-head model."""
    import altair as alt

    return alt.Chart(frame).mark_point(size=80, filled=False).encode(
        x=alt.X("runtime_ms:Q", scale=alt.Scale(type="log"), title="block latency (ms)"),
        y=alt.Y("energy_mJ:Q", title="block energy (mJ)", scale=alt.Scale(zero=False)),
        shape=alt.Shape("variant:N", scale=alt.Scale(domain=["default", "scaled-up"], range=["cross", "circle"])),
        color=alt.Color("chips:O"), tooltip=["model", "mode", "chips", "case", "runtime_ms", "energy_mJ"],
    ).properties(title=title, width=220, height=200)
