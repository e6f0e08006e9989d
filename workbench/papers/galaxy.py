"""Galaxy's experiments on the shared cost model: Table I, Table IV, Figs. 8-11 and the GPU environment.

Every experiment returns a tidy DataFrame; `*_rows` turn them into result rows whose keys match
data/reported/galaxy.csv. Environments (Table III) are Jetson Nano CPUs at the Nano-S/M/L frequencies
with the paper's memory budgets, on a switch at the given bandwidth; latencies come from the scheme
evaluators in `workbench.schemes.galaxy` (one cost model for the paper, the arena and the tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice, require_int, require_positive
from workbench.machine.hardware import DeviceSpec, load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import TransformerConfig, get_model
from workbench.papers import base
from workbench.papers.base import result_row, result_rows, rows_frame
from workbench.schemes.base import Cluster, SchemeResult, Workload
from workbench.schemes.galaxy import PARALLEL_SCHEMES, latency_or_nan, overlap_timeline
from workbench.schemes.planners.galaxy import evaluate, planned_partition

PAPER = "galaxy"
MODELS = ("DistilBERT", "BERT-L", "GPT2-L", "OPT-L", "OPT-XL")
ENVIRONMENTS = {"A": "MM", "B": "MMM", "C": "MMMM", "D": "LM", "E": "LS", "F": "LMS"}
HOMOGENEOUS = ("A", "B", "C")
PROCESSORS = ("cpu", "gpu")
PARALLEL = PARALLEL_SCHEMES
BASELINES = {"megatron_tp": "mlm", "sp": "sp"}
# Table IV's cells (model, environment), as the paper lists them.
TABLE4_CELLS = (("DistilBERT", "A"), ("BERT-L", "A"), ("BERT-L", "B"), ("GPT2-L", "A"), ("GPT2-L", "B"),
                ("OPT-L", "A"), ("OPT-L", "B"), ("OPT-L", "C"), ("OPT-XL", "A"), ("OPT-XL", "B"), ("OPT-XL", "C"))


# ---- constants, the paper's setting and devices -----------------------------------------------------
def constants() -> Mapping[str, Any]:
    """Galaxy's constant values (data/constants/galaxy.toml), read once per process."""
    return base.paper_values(PAPER)


@dataclass(frozen=True)
class Setting(base.PaperSetting):
    """The evaluation defaults of Sec. IV (data/constants/galaxy.toml); every experiment overrides any of them."""

    PAPER: ClassVar[str] = PAPER
    KEYS: ClassVar[Mapping[str, str]] = {
        "bandwidth_mbps": "bandwidth_table4", "seq_len": "seq_len_eval", "sweep_mbps": "bandwidth_sweep",
        "scaling_mbps": "bandwidth_scaling", "tokens_per_device": "weak_tokens_per_device", "gpu_mbps": "bandwidth_gpu",
        "gpu_budget_bytes": "budget_gpu", "table1_seq_len": "seq_len_table1"}

    bandwidth_mbps: float  # Table IV and Fig. 9
    seq_len: int  # QNLI's average sequence length (Tables IV, Figs. 8-9, the GPU environment)
    sweep_mbps: list  # Fig. 8's bandwidths (assumed: the paper does not list them)
    scaling_mbps: float  # Figs. 10 and 11
    tokens_per_device: int  # Fig. 10
    strong_seq_len: int  # Fig. 11
    gpu_mbps: float  # Sec. IV-E
    gpu_budget_bytes: float  # Sec. IV-E
    table1_seq_len: int  # Table I

    def __post_init__(self) -> None:
        bad = [f.name for f in fields(self) if not all(v > 0 for v in np.ravel(getattr(self, f.name)))]
        if bad:
            raise WorkbenchError(f"Galaxy settings {bad} must be > 0, got {[getattr(self, n) for n in bad]}")


def nano_cpu(mode: str, budget_bytes: float | None = None, clock_independent_share: float = 0.0,
             fixed_scale: float = 1.0) -> DeviceSpec:
    """A Jetson Nano CPU at the Nano-S/M/L frequency; `budget_bytes` replaces its memory capacity.

    `clock_independent_share` (what-if, default 0 = the model): the share x of Nano-M's GEMM time that does
    not scale with the CPU clock (e.g. DRAM stalls), so a GEMM at clock f takes x + (1 - x) * 825 MHz / f of
    its Nano-M time. The paper gives no measurement at a second clock, so the model keeps x = 0 (GEMM
    throughput proportional to the clock, the efficiency fitted at 825 MHz); `clock_share_sensitivity` shows
    what x would do to Fig. 9. `fixed_scale` (what-if, default 1 = the model) multiplies the preset's
    per-kernel launch and per-layer framework time (both assumed: `fixed_cost_sensitivity`).
    """
    require_choice("Nano mode", mode, ("S", "M", "L"))
    _require_scale(fixed_scale)
    if not isinstance(clock_independent_share, int | float) or not 0 <= clock_independent_share < 1:
        raise WorkbenchError(f"clock_independent_share must be in [0, 1), got {clock_independent_share!r}")
    device = load_device(f"jetson_nano_cpu_{mode.lower()}")
    if clock_independent_share:
        clock_ratio = load_device("jetson_nano_cpu_m").clock_hz / device.clock_hz  # 825 MHz / f
        time_ratio = clock_independent_share + (1 - clock_independent_share) * clock_ratio
        device = device.with_changes(efficiency_gemm=device.efficiency_gemm * clock_ratio / time_ratio)
    device = _scaled_fixed(device, fixed_scale)
    return device if budget_bytes is None else device.with_memory("DRAM", capacity_bytes=float(budget_bytes))


def _require_scale(scale: float) -> None:
    if not isinstance(scale, int | float) or isinstance(scale, bool) or not 0 <= scale < math.inf:
        raise WorkbenchError(f"fixed_scale must be a finite number >= 0, got {scale!r}")


def _scaled_fixed(device: DeviceSpec, scale: float) -> DeviceSpec:
    if scale == 1.0:
        return device
    return device.with_changes(kernel_launch_s=device.kernel_launch_s * scale,
                               layer_overhead_s=device.layer_overhead_s * scale)


def nano_gpu(budget_bytes: float | None = None, fixed_scale: float = 1.0) -> DeviceSpec:
    """A Jetson Nano GPU at 460 MHz with the GPU environment's budget (`fixed_scale`: as `nano_cpu`)."""
    _require_scale(fixed_scale)
    budget = Setting.from_constants(gpu_budget_bytes=budget_bytes).gpu_budget_bytes
    device = _scaled_fixed(load_device("jetson_nano_gpu_460"), fixed_scale)
    return device.with_memory("DRAM", capacity_bytes=float(budget))


def budget(env: str, mode: str) -> float:
    """The paper's memory budget of a Nano-`mode` in environment `env` (Sec. IV-A)."""
    if env in HOMOGENEOUS:
        return float(constants()["budget_homogeneous"])
    return float(constants()[f"budget_nano_{mode.lower()}"])


def environment(env: str, bandwidth_mbps: float, processor: str = "cpu", devices: int | None = None,
                clock_independent_share: float = 0.0, fixed_scale: float = 1.0) -> Cluster:
    """Table III's environment `env` on a switch at `bandwidth_mbps`; `devices` resizes a homogeneous one
    (`clock_independent_share`: the what-if of `nano_cpu`). Each message pays `link_message_overhead` at
    both endpoints; `fixed_scale` (what-if) multiplies it and the devices' launch and layer times."""
    require_choice("environment", env, ENVIRONMENTS)
    require_choice("processor", processor, PROCESSORS)
    require_positive("bandwidth_mbps", bandwidth_mbps)
    modes = ENVIRONMENTS[env]
    if devices is not None:
        require_int("devices", devices, low=1, high=64)
        if env not in HOMOGENEOUS:
            raise WorkbenchError(f"devices can only resize a homogeneous environment (A, B, C), not {env!r}")
        modes = "M" * devices
    if processor == "gpu":
        if env not in HOMOGENEOUS:
            raise WorkbenchError(f"the GPU environment is homogeneous (A, B, C); got environment {env!r}")
        nodes = tuple(nano_gpu(fixed_scale=fixed_scale) for _ in modes)
    else:
        nodes = tuple(nano_cpu(m, budget(env, m), clock_independent_share, fixed_scale) for m in modes)
    c = constants()
    link = Link.from_mbps(bandwidth_mbps, c["link_hop_latency"] * 1e3, name="switched Ethernet",
                          message_overhead_s=float(c["link_message_overhead"]) * fixed_scale)
    return Cluster(nodes, Topology("switch", len(nodes), link))


def workload(seq_len: int, processor: str = "cpu") -> Workload:
    """Prefill of `seq_len` tokens with half-precision weights and the processor's activation precision;
    the backbone only (Galaxy times classifiers: no LM head, `Workload.output_head=False`)."""
    require_choice("processor", processor, PROCESSORS)
    c = constants()
    return Workload("prefill", seq_len, seq_len, weight_bits=c["weight_bits"],
                    activation_bits=c[f"activation_bits_{processor}"], output_head=False)


def stack_seconds_per_byte(cluster: Cluster, cycles_per_byte: float) -> tuple[float, ...] | None:
    """What-if: each device's network-stack CPU seconds per byte, `cycles_per_byte` at its `clock_hz` (the
    clock of the cores that compute and run the stack), for CPU-only devices (their GEMMs run on the cores the
    stack takes); None (no stack cost) for 0, and 0 for a GPU preset (it gives `gpu_frequency`, not a CPU
    clock: its GEMMs do not share the stack's cores)."""
    if not isinstance(cycles_per_byte, int | float) or isinstance(cycles_per_byte, bool) or not 0 <= cycles_per_byte < math.inf:
        raise WorkbenchError(f"stack cycles_per_byte must be a finite number >= 0, got {cycles_per_byte!r}")
    if cycles_per_byte == 0:
        return None
    out = []
    for d in cluster.devices:
        out.append(0.0 if d.clock_hz == 0 else cycles_per_byte / d.clock_hz)
    return tuple(out)


def run_schemes(model: str | TransformerConfig, cluster: Cluster, wl: Workload,
                schemes=("local",) + PARALLEL, stack_cycles_per_byte: float = 0.0) -> dict[str, SchemeResult]:
    """Every scheme on one (model, cluster, workload) (`stack_cycles_per_byte`: the what-if of
    `stack_seconds_per_byte`; 0 = the model)."""
    m, cluster = get_model(model), with_network_stack(cluster, stack_cycles_per_byte)
    return {s: evaluate(s, m, cluster, wl) for s in schemes}


def with_network_stack(cluster: Cluster, cycles_per_byte: float) -> Cluster:
    """The cluster whose devices' `stack_s_per_byte` is `stack_seconds_per_byte` (the what-if; unchanged for 0)."""
    stack = stack_seconds_per_byte(cluster, cycles_per_byte)
    if stack is None:
        return cluster
    return replace(cluster, devices=tuple(d.with_changes(stack_s_per_byte=s) for d, s in zip(cluster.devices, stack)))


# ---- the headline comparison and its breakdown -------------------------------------------------------
def compare(model: str, env: str, bandwidth_mbps: float, seq_len: int, processor: str = "cpu",
            devices: int | None = None) -> pd.DataFrame:
    """One row per scheme: latency, its breakdown, peak memory per device, OOM, speedup of Galaxy over it."""
    cluster = environment(env, bandwidth_mbps, processor, devices)
    results = run_schemes(model, cluster, workload(seq_len, processor))
    galaxy = latency_or_nan(results["galaxy_hmp_overlap"])
    rows = []
    for name, r in results.items():
        row = r.row()
        row.update(model=model, environment=env, bandwidth_mbps=bandwidth_mbps, seq_len=seq_len,
                   devices=cluster.n if name != "local" else 1, galaxy_speedup=latency_or_nan(r) / galaxy)
        rows.append(row)
    return pd.DataFrame(rows)


def timeline(model: str, env: str, bandwidth_mbps: float, seq_len: int, processor: str = "cpu",
             devices: int | None = None):
    """The overlap timeline of one Galaxy layer (for a Gantt chart) with Algorithm 1's partition."""
    cluster = environment(env, bandwidth_mbps, processor, devices)
    m, wl = get_model(model), workload(seq_len, processor)
    return overlap_timeline(m, cluster, wl, planned_partition(m, cluster, wl)[0], 1)


# ---- Table I --------------------------------------------------------------------------------------
def _single(device: DeviceSpec) -> Cluster:
    return Cluster((device,), Topology("switch", 1, Link.from_mbps(1000)))


def table1(nano_efficiency: float | None = None, a100_overhead: float | None = None) -> pd.DataFrame:
    """Table I: local latency of the five models at 30 tokens on a Nano-M CPU (1.5 GB) and an A100 (fp16
    weights; fp32 arithmetic on both, `activation_bits_cpu` / the fitted `activation_bits_a100`)."""
    s = Setting.from_constants().table1_seq_len
    nano = nano_cpu("M", constants()["budget_homogeneous"])
    if nano_efficiency is not None:
        nano = nano.with_changes(efficiency_gemm=nano_efficiency)
    a100 = load_device("a100")
    if a100_overhead is not None:
        a100 = a100.with_changes(layer_overhead_s=a100_overhead)
    a100_workload = replace(workload(s, "gpu"), activation_bits=constants()["activation_bits_a100"])  # fp32 GEMMs
    rows = []
    for name in MODELS:
        for label, device, wl in (("Nano-M", nano, workload(s, "cpu")), ("A100", a100, a100_workload)):
            r = evaluate("local", get_model(name), _single(device), wl)
            rows.append({"model": name, "device": label, "latency_s": r.latency_s, "oom": r.oom,
                         "memory_bytes": r.peak_memory_bytes[0], "budget_bytes": r.memory_budget_bytes[0]})
    return pd.DataFrame(rows)



def reported() -> pd.DataFrame:
    """The paper's numbers (data/reported/galaxy.csv), read now."""
    return base.reported(PAPER)


def reported_value(artifact: str, model: str, setting: str, quantity: str) -> float:
    """One Galaxy number as reported (data/reported/galaxy.csv); the fits read their targets from there."""
    return base.reported_value(PAPER, artifact, model, setting, quantity)


def _bert_nano_latency(efficiency: float) -> float:
    return float(table1(nano_efficiency=efficiency).query("model == 'BERT-L' and device == 'Nano-M'")["latency_s"].iloc[0])


def fit_nano_cpu_efficiency(reported_s: float | None = None) -> float:
    """The Nano CPU's GEMM efficiency that reproduces Table I's BERT-L Nano-M latency; `reported_s` defaults
    to that row of data/reported/galaxy.csv. The latency is GEMM time / efficiency + what does not depend on
    it (launches, layer overhead, memory-bound connective blocks), so it is solved, not scaled."""
    from scipy.optimize import brentq

    reported_s = reported_value("Table I", "BERT-L", "Nano-M S=30", "latency") if reported_s is None else reported_s
    if _bert_nano_latency(1.0) >= reported_s:
        raise WorkbenchError(f"BERT-L on a Nano-M takes at least {_bert_nano_latency(1.0):.3g} s at 100 % GEMM "
                             f"efficiency, more than the reported {reported_s:g} s: nothing to fit")
    return float(brentq(lambda e: _bert_nano_latency(e) - reported_s, 1e-4, 1.0, xtol=1e-10))


def fit_a100_layer_overhead(reported_s: float | None = None) -> float:
    """The A100's per-layer overhead that reproduces Table I's BERT-L A100 latency (latency is affine in it);
    `reported_s` defaults to that row of data/reported/galaxy.csv."""
    reported_s = reported_value("Table I", "BERT-L", "A100 S=30", "latency") if reported_s is None else reported_s
    t0 = table1(a100_overhead=0.0).query("model == 'BERT-L' and device == 'A100'")["latency_s"].iloc[0]
    return float((reported_s - t0) / get_model("BERT-L").n_layers)


# ---- Table IV, Fig. 8, Fig. 9 -------------------------------------------------------------------------
def speedups(model: str, env: str, bandwidth_mbps: float, seq_len: int, processor: str = "cpu",
             devices: int | None = None, clock_independent_share: float = 0.0, fixed_scale: float = 1.0,
             stack_cycles_per_byte: float = 0.0) -> dict:
    """Galaxy's speedup over M-LM and SP (NaN where either side runs out of memory) and the OOM flags
    (the what-if knobs of `environment` and `run_schemes` default to the model)."""
    cluster = environment(env, bandwidth_mbps, processor, devices, clock_independent_share, fixed_scale)
    res = run_schemes(model, cluster, workload(seq_len, processor), PARALLEL, stack_cycles_per_byte)
    g = res["galaxy_hmp_overlap"]
    out = {"model": model, "environment": env, "bandwidth_mbps": bandwidth_mbps, "seq_len": seq_len,
           "devices": cluster.n, "galaxy_latency_s": g.latency_s, "galaxy_oom": g.oom,
           "hmp_no_overlap_latency_s": res["galaxy_hmp"].latency_s}
    for scheme, short in BASELINES.items():
        r = res[scheme]
        out[f"{short}_latency_s"] = r.latency_s
        out[f"{short}_oom"] = r.oom
        out[f"oom_vs_{short}"] = bool(r.oom or g.oom)
        out[f"speedup_over_{short}"] = math.nan if (r.oom or g.oom) else r.latency_s / g.latency_s
    return out


def table4(bandwidth_mbps: float | None = None, seq_len: int | None = None,
           cells=TABLE4_CELLS, **what_if) -> pd.DataFrame:
    """Table IV: Galaxy's speedup over M-LM and SP on the homogeneous environments, with OOM cells
    (`what_if`: `fixed_scale`, `stack_cycles_per_byte` of `speedups`)."""
    s = Setting.from_constants(bandwidth_mbps=bandwidth_mbps, seq_len=seq_len)
    return pd.DataFrame([speedups(m, e, s.bandwidth_mbps, s.seq_len, **what_if) for m, e in cells])


def bandwidth_sweep(bandwidths=None, cells=TABLE4_CELLS, seq_len: int | None = None, **what_if) -> pd.DataFrame:
    """Fig. 8: Table IV's cells at several bandwidths (`what_if`: as `table4`)."""
    s = Setting.from_constants(sweep_mbps=bandwidths, seq_len=seq_len)
    return pd.DataFrame([speedups(m, e, bw, s.seq_len, **what_if) for bw in s.sweep_mbps for m, e in cells])


def heterogeneous(envs=("D", "E", "F"), models=MODELS, bandwidth_mbps: float | None = None,
                  seq_len: int | None = None, clock_independent_share: float = 0.0, **what_if) -> pd.DataFrame:
    """Fig. 9: every model on the heterogeneous environments D, E, F. M-LM and SP split evenly (Sec. IV-C:
    they overlook heterogeneity), so the slowest device is their straggler at every synchronisation."""
    s = Setting.from_constants(bandwidth_mbps=bandwidth_mbps, seq_len=seq_len)
    return pd.DataFrame([speedups(m, e, s.bandwidth_mbps, s.seq_len, clock_independent_share=clock_independent_share,
                                  **what_if) for e in envs for m in models])


def clock_share_sensitivity(shares=(0.0, 0.1, 0.2, 0.3), models=MODELS) -> pd.DataFrame:
    """What-if behind Fig. 9's miss: the heterogeneous speedup range when a share of Nano-M's GEMM time does
    not scale with the clock. Fig. 9 is the only result that depends on the Nano-L : M : S capacity ratios,
    and the paper reports no latency at a second clock, so no share can be fitted without using Fig. 9."""
    rows = []
    for x in shares:
        caps = {m: nano_cpu(m, clock_independent_share=x) for m in ("S", "M", "L")}
        speed = {m: d.peak("fp32") * d.efficiency_gemm for m, d in caps.items()}
        low, high = speedup_range(heterogeneous(models=models, clock_independent_share=x))
        rows.append({"clock_independent_share": x, "capacity_L_over_M": speed["L"] / speed["M"],
                     "capacity_L_over_S": speed["L"] / speed["S"], "speedup_min": low, "speedup_max": high})
    return pd.DataFrame(rows)


def speedup_range(frame: pd.DataFrame) -> tuple[float, float]:
    """Smallest and largest speedup of Galaxy over any baseline that runs."""
    values = pd.concat([frame["speedup_over_mlm"], frame["speedup_over_sp"]]).dropna()
    if values.empty:
        return math.nan, math.nan
    return float(values.min()), float(values.max())


# ---- Figs. 10 and 11: scaling on one layer --------------------------------------------------------------
def _one_layer(model: str) -> TransformerConfig:
    return get_model(model).with_changes(n_layers=1)


def weak_scaling(models=("GPT2-L", "OPT-XL"), max_devices: int = 4, tokens_per_device: int | None = None,
                 bandwidth_mbps: float | None = None, scheme: str = "galaxy_hmp_overlap", fixed_scale: float = 1.0,
                 stack_cycles_per_byte: float = 0.0) -> pd.DataFrame:
    """Fig. 10: one layer, 96 tokens per device on 1..4 Nano-M; system FLOPS and the scaling efficiency
    (system FLOPS over n x one device's). `time_efficiency` = T(1) / T(n), the efficiency if FLOPs were
    counted as 2 x params x tokens (attention's growing S^2 work then counts as a loss, not as work)."""
    require_choice("scheme", scheme, PARALLEL)
    setting = Setting.from_constants(tokens_per_device=tokens_per_device, scaling_mbps=bandwidth_mbps)
    per, bw = setting.tokens_per_device, setting.scaling_mbps
    rows = []
    for name in models:
        m = _one_layer(name)
        base = base_s = None
        for n in range(1, max_devices + 1):
            cluster = environment("C", bw, devices=n, fixed_scale=fixed_scale)
            r = run_schemes(m, cluster, workload(per * n), (scheme,), stack_cycles_per_byte)[scheme]
            flops = m.block_flops(per * n) / r.latency_s
            base, base_s = (flops, r.latency_s) if n == 1 else (base, base_s)
            rows.append({"model": name, "devices": n, "seq_len": per * n, "latency_s": r.latency_s,
                         "system_flops": flops, "scaling_efficiency": flops / (n * base),
                         "time_efficiency": base_s / r.latency_s})
    return pd.DataFrame(rows)


def weak_scaling_bounds(models=("GPT2-L", "OPT-XL"), devices: int = 4) -> pd.DataFrame:
    """Why Fig. 10 misses: the weak-scaling efficiency at `devices` with the tile overlap (the model), with
    every ring step exposed (plain HMP: an upper bound on what wire time can cost at 1000 Mbps), and with
    FLOPs counted without attention. Per device the GEMM work is constant (weights / n x 96 n tokens);
    only attention (heads / n x (96 n)^2) and the ring volume (96 (n - 1) tokens) grow with n."""
    rows = []
    for scheme in ("galaxy_hmp_overlap", "galaxy_hmp"):
        df = weak_scaling(models, max_devices=devices, scheme=scheme)
        for r in df[df.devices == devices].itertuples():
            rows.append({"model": r.model, "devices": devices, "seq_len": r.seq_len, "scheme": scheme,
                         "scaling_efficiency": r.scaling_efficiency, "time_efficiency": r.time_efficiency})
    return pd.DataFrame(rows)


def strong_scaling(models=("GPT2-L", "OPT-XL"), max_devices: int = 4, seq_len: int | None = None,
                   bandwidth_mbps: float | None = None, fixed_scale: float = 1.0,
                   stack_cycles_per_byte: float = 0.0) -> pd.DataFrame:
    """Fig. 11: one layer of `seq_len` tokens (the paper's 384) on 1..4 Nano-M; per-layer latency of every scheme."""
    setting = Setting.from_constants(strong_seq_len=seq_len, scaling_mbps=bandwidth_mbps)
    s, bw = setting.strong_seq_len, setting.scaling_mbps
    rows = []
    for name in models:
        m = _one_layer(name)
        local = evaluate("local", m, environment("C", bw, devices=1, fixed_scale=fixed_scale), workload(s)).latency_s
        for n in range(1, max_devices + 1):
            res = run_schemes(m, environment("C", bw, devices=n, fixed_scale=fixed_scale), workload(s), PARALLEL,
                              stack_cycles_per_byte)
            for scheme, r in res.items():
                rows.append({"model": name, "devices": n, "seq_len": s, "scheme": scheme, "latency_s": r.latency_s,
                             "reduction_vs_local": local / r.latency_s})
    return pd.DataFrame(rows)


# ---- issue 17: fixed costs, their sensitivity, the network-stack what-if, the text's scaling claims ---------
def fixed_cost_sensitivity(scales=(0.0, 1.0, 3.0, 10.0), models=("GPT2-L", "OPT-XL")) -> pd.DataFrame:
    """The assumed fixed costs (per-op dispatch, per-layer framework time, per-message endpoint time) scaled
    by each factor (1 = the model, 0 = none; efficiency_gemm kept at its stored fit): Fig. 10's 4-device
    weak-scaling efficiency, Fig. 11's 4-device reduction of Galaxy over Local, Table IV's speedup range,
    Table I's BERT-L Nano-M latency and the GPU environment's speedup range (its Table V is held out). No
    paper row pins these constants, so this is how much they could move."""
    rows = []
    for k in scales:
        weak = weak_scaling(models, fixed_scale=k)
        strong = strong_scaling(models, fixed_scale=k)
        low, high = speedup_range(table4(fixed_scale=k))
        s = Setting.from_constants().table1_seq_len
        bert = evaluate("local", get_model("BERT-L"), _single(nano_cpu("M", constants()["budget_homogeneous"],
                                                                       fixed_scale=k)), workload(s)).latency_s
        gpu_low, gpu_high = speedup_range(gpu_environment(fixed_scale=k))  # Table V is held out: model only
        row = {"fixed_scale": k, "table4_speedup_min": low, "table4_speedup_max": high, "table1_bert_nano_s": bert,
               "gpu_speedup_min": gpu_low, "gpu_speedup_max": gpu_high}
        for m in models:
            row[f"fig10_{m}_efficiency"] = float(weak[(weak.model == m) & (weak.devices == weak.devices.max())]
                                                 .scaling_efficiency.iloc[0])
            row[f"fig11_{m}_reduction"] = float(strong[(strong.model == m) & (strong.devices == strong.devices.max())
                                                       & (strong.scheme == "galaxy_hmp_overlap")].reduction_vs_local.iloc[0])
        rows.append(row)
    return pd.DataFrame(rows)


def _validation_errors(what_if: dict) -> pd.DataFrame:
    """Relative error and tolerance of every Galaxy validation speedup/efficiency row the network-stack
    what-if moves (Table IV, Figs. 8-10) under `what_if` (diagnostic: nothing is fitted on these)."""
    s = Setting.from_constants()
    rows = pd.concat([speedup_rows("Table IV", table4(**what_if)),
                      range_rows("Fig. 8", sweep_setting(s.sweep_mbps), bandwidth_sweep(s.sweep_mbps, **what_if)),
                      range_rows("Fig. 9", hetero_setting(s.bandwidth_mbps), heterogeneous(**what_if)),
                      weak_rows(weak_scaling(**what_if), s.scaling_mbps)])
    rep = reported()
    rep = rep[rep.fitted.fillna("") == ""]  # validation rows only
    joined = rep.merge(rows, on=["artifact", "model", "setting", "quantity"], suffixes=("_r", "_m"))
    joined = joined[joined.quantity.str.startswith(("speedup", "weak_scaling"))]
    joined["relative_error"] = (joined.value_m - joined.value_r) / joined.value_r
    joined["within"] = joined.relative_error.abs() <= joined.tolerance + 1e-12
    return joined[["artifact", "model", "setting", "quantity", "value_r", "value_m", "relative_error", "tolerance",
                   "within"]]


def stack_sensitivity(cycles=(0, 4, 8, 12, 16, 20, 24, 32)) -> pd.DataFrame:
    """What-if: network-stack CPU time on the GEMM cores, `cycles` per byte sent or received at the Nano's
    clock (the quoted rule of thumb is `stack_cycles_per_byte` = 8). Per value: every validation row it
    moves (Table IV's speedups, Figs. 8-9's ranges, Fig. 10's efficiencies) with its relative error and
    whether it is within tolerance. The model keeps 0: see `stack_windows`."""
    return pd.concat([_validation_errors({"stack_cycles_per_byte": float(c)}).assign(cycles_per_byte=float(c))
                      for c in cycles], ignore_index=True)


def stack_windows(cycles=tuple(range(0, 41, 2)), sensitivity: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per validation row, the stack costs (cycles/B, on the evenly spaced grid `cycles`, or those of a
    `stack_sensitivity` frame) at which it is within tolerance: the smallest and largest grid value that
    pass (NaN if none). Whether one value could serve every row is then read off the windows; nothing is
    fitted (these are validation rows)."""
    sens = stack_sensitivity(cycles) if sensitivity is None else sensitivity
    cycles = tuple(sorted(sens.cycles_per_byte.unique()))
    keys = ["artifact", "model", "setting", "quantity"]
    rows = []
    for key, g in sens.groupby(keys, sort=False):
        ok = g[g.within].cycles_per_byte
        rows.append(dict(zip(keys, key)) | {"lowest_ok": float(ok.min()) if len(ok) else math.nan,
                                            "highest_ok": float(ok.max()) if len(ok) else math.nan,
                                            "contiguous": bool(len(ok) == 0 or len(ok) == 1 + cycles.index(ok.max())
                                                               - cycles.index(ok.min()))})
    return pd.DataFrame(rows)


def pattern_checks() -> pd.DataFrame:
    """The text's scaling claims (Sec. IV-B, IV-D), each with the modelled number behind it. Fig. 11's
    reductions are held out and not used: only its qualitative claims are checked."""
    weak = weak_scaling()
    strong = strong_scaling()
    t4 = table4().set_index(["model", "environment"]).speedup_over_mlm
    rows = []
    for m in ("GPT2-L", "OPT-XL"):
        w = weak[weak.model == m].sort_values("devices")
        rows.append((f"Fig. 10: {m} system FLOPS grows with every device added (1-4; smallest step ratio)",
                     float((w.system_flops.values[1:] / w.system_flops.values[:-1]).min()),
                     bool((np.diff(w.system_flops.values) > 0).all())))
        g = strong[(strong.model == m) & (strong.scheme == "galaxy_hmp_overlap")].sort_values("devices")
        rows.append((f"Fig. 11: {m} Galaxy's per-layer latency falls with every device added (1-4; largest "
                     "step ratio)", float((g.latency_s.values[1:] / g.latency_s.values[:-1]).max()),
                     bool((np.diff(g.latency_s.values) < 0).all())))
        four = strong[(strong.model == m) & (strong.devices == strong.devices.max())].set_index("scheme").latency_s
        rows.append((f"Fig. 11: {m} Galaxy is the fastest scheme on 4 devices (Galaxy / fastest baseline)",
                     float(four["galaxy_hmp_overlap"] / four.drop("galaxy_hmp_overlap").min()),
                     bool(four["galaxy_hmp_overlap"] <= four.drop("galaxy_hmp_overlap").min())))
    eff = weak[weak.devices == weak.devices.max()].set_index("model").scaling_efficiency
    rows.append(("Fig. 10: GPT2-L scales less well than OPT-XL on 4 devices (81 % vs 86 %; modelled difference)",
                 float(eff["OPT-XL"] - eff["GPT2-L"]), bool(eff["GPT2-L"] < eff["OPT-XL"])))
    for m, envs in (("BERT-L", "AB"), ("GPT2-L", "AB"), ("OPT-L", "ABC")):
        v = [float(t4[(m, e)]) for e in envs]
        rows.append((f"Sec. IV-B: more devices raise {m}'s speedup over M-LM ({'<'.join(envs)}; smallest step)",
                     float(np.diff(v).min()), bool((np.diff(v) > 0).all())))
    gpu = gpu_environment()
    gpu_speedups = pd.concat([gpu.speedup_over_mlm, gpu.speedup_over_sp]).dropna()
    rows.append(("Sec. IV-E: Galaxy outperforms M-LM and SP on two Nano GPUs (every model that fits; smallest "
                 "speedup)", float(gpu_speedups.min()), bool((gpu_speedups > 1).all())))
    a = [float(t4[(m, "A")]) for m in ("DistilBERT", "BERT-L", "GPT2-L", "OPT-L")]
    rows.append(("Sec. IV-B: larger models gain less over M-LM (env A, DistilBERT > BERT-L > GPT2-L > OPT-L; "
                 "largest step)", float(np.diff(a).max()), bool((np.diff(a) < 0).all())))
    return pd.DataFrame(rows, columns=["claim", "modelled", "holds"])


def gpu_environment(models=MODELS, bandwidth_mbps: float | None = None, seq_len: int | None = None,
                    fixed_scale: float = 1.0) -> pd.DataFrame:
    """Sec. IV-E: two Nano GPUs at 460 MHz on 500 Mbps (environment A)."""
    s = Setting.from_constants(gpu_mbps=bandwidth_mbps, seq_len=seq_len)
    return pd.DataFrame([speedups(m, "A", s.gpu_mbps, s.seq_len, processor="gpu", fixed_scale=fixed_scale)
                         for m in models])


# ---- result rows (keys match data/reported/galaxy.csv) ---------------------------------------------------
def table1_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Table I latencies (s) and OOM flags (1 = out of memory) per model and device."""
    s = Setting.from_constants().table1_seq_len
    rows = []
    for r in df.itertuples():
        setting = f"{r.device} S={s}"
        rows.append(result_row(PAPER, "Table I", r.model, setting, "oom", float(r.oom), "1"))
        if not r.oom:
            rows.append(result_row(PAPER, "Table I", r.model, setting, "latency", r.latency_s, "s"))
    return rows_frame(rows)


def _setting(env: str, bw: float, s: int, processor: str = "cpu") -> str:
    gpu = ",gpu" if processor == "gpu" else ""
    return f"env={env},{bw:g}Mbps,S={s}{gpu}"


def speedup_rows(artifact: str, df: pd.DataFrame, processor: str = "cpu") -> pd.DataFrame:
    """Per cell: speedups over M-LM and SP where both run, and OOM flags (1 = a side runs out of memory)."""
    rows = []
    for r in df.itertuples():
        setting = _setting(r.environment, r.bandwidth_mbps, r.seq_len, processor)
        for short in BASELINES.values():
            oom = float(getattr(r, f"oom_vs_{short}"))
            rows.append(result_row(PAPER, artifact, r.model, setting, f"oom_vs_{short}", oom, "1"))
            value = getattr(r, f"speedup_over_{short}")
            if not math.isnan(value):
                rows.append(result_row(PAPER, artifact, r.model, setting, f"speedup_over_{short}", value, "x"))
        rows.append(result_row(PAPER, artifact, r.model, setting, "galaxy_latency", r.galaxy_latency_s, "s"))
    return rows_frame(rows)


def range_rows(artifact: str, setting: str, df: pd.DataFrame) -> pd.DataFrame:
    """The smallest and largest speedup over the baselines that run (the paper's quoted range)."""
    low, high = speedup_range(df)
    return rows_frame([result_row(PAPER, artifact, "", setting, "speedup_min", low, "x"),
                   result_row(PAPER, artifact, "", setting, "speedup_max", high, "x")])


def sweep_setting(bandwidths) -> str:
    """Fig. 8's setting key: the bandwidths swept."""
    return "envs A-C," + "/".join(f"{b:g}" for b in bandwidths) + "Mbps"


def hetero_setting(bw: float) -> str:
    """Fig. 9's setting key."""
    return f"envs D-F,{bw:g}Mbps"


def weak_rows(df: pd.DataFrame, bw: float) -> pd.DataFrame:
    """Fig. 10: system FLOPS per device count and the scaling efficiency."""
    rows = []
    for r in df.itertuples():
        setting = _weak_setting(bw, r.seq_len, r.devices)
        rows.append(result_row(PAPER, "Fig. 10", r.model, setting, "system_flops", r.system_flops, "FLOP/s"))
        rows.append(result_row(PAPER, "Fig. 10", r.model, setting, "weak_scaling_efficiency", r.scaling_efficiency, "1"))
    return rows_frame(rows)


def _weak_setting(bw: float, seq_len: int, devices: int) -> str:
    """Fig. 10's setting key: bandwidth, tokens per device and device count."""
    return f"env=C,{bw:g}Mbps,{seq_len // devices} tokens/device,{devices} devices"


def bounds_rows(df: pd.DataFrame, bw: float) -> pd.DataFrame:
    """`weak_scaling_bounds` as Fig. 10 rows: both efficiencies per model, device count and scheme."""
    rows = []
    for r in df.itertuples():
        setting = f"{_weak_setting(bw, r.seq_len, r.devices)},{r.scheme}"
        rows += [result_row(PAPER, "Fig. 10", r.model, setting, q, getattr(r, q), "1")
                 for q in ("scaling_efficiency", "time_efficiency")]
    return rows_frame(rows)


def clock_share_rows(df: pd.DataFrame, bw: float) -> pd.DataFrame:
    """`clock_share_sensitivity` as Fig. 9 rows: the speedup range per clock-independent share."""
    return rows_frame([result_row(PAPER, "Fig. 9", "", f"{hetero_setting(bw)},clock-independent share "
                                  f"{r.clock_independent_share:g}", q, getattr(r, q), "x")
                       for r in df.itertuples() for q in ("speedup_min", "speedup_max")])


def pattern_rows(checks: pd.DataFrame) -> pd.DataFrame:
    """`pattern_checks` as rows: every claim's modelled number, then whether each holds (1) or not (0)."""
    return result_rows(PAPER, "Sec. IV claims", checks.assign(holds=checks.holds.astype(float)),
                       {"modelled": "", "holds": "1"}, setting=checks["claim"])


def fixed_cost_rows(df: pd.DataFrame) -> pd.DataFrame:
    """`fixed_cost_sensitivity` as rows: every column per scale of the assumed fixed costs."""
    return df.melt(id_vars=["fixed_scale"], var_name="quantity", value_name="value").assign(
        paper=PAPER, artifact="Sec. IV fixed costs", model="",
        setting=lambda d: "assumed fixed costs x" + d.fixed_scale.map("{:g}".format),
        unit=lambda d: np.where(d.quantity.str.contains("efficiency"), "1",
                                np.where(d.quantity.str.endswith("_s"), "s", "x")))[base.RESULT_COLUMNS]


def stack_rows(sensitivity: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """`stack_sensitivity`'s relative errors per stack cost, then `stack_windows`' ends (a row with no window
    in the grid records none)."""
    errors = sensitivity.assign(paper=PAPER, quantity=sensitivity.quantity + "_relative_error",
                                setting=sensitivity.setting + ",stack " + sensitivity.cycles_per_byte.map("{:g}".format)
                                + " cycles/B", value=sensitivity.relative_error, unit="1")
    ends = windows.melt(id_vars=["artifact", "model", "setting", "quantity"], value_vars=["lowest_ok", "highest_ok"],
                        var_name="end", value_name="value").dropna(subset=["value"]).assign(
        paper=PAPER, setting=lambda d: d.setting + ",stack window", quantity=lambda d: d.quantity + "_" + d.end,
        unit="cycle/B")
    return pd.concat([errors[base.RESULT_COLUMNS], ends[base.RESULT_COLUMNS]], ignore_index=True)


def strong_rows(df: pd.DataFrame, bw: float) -> pd.DataFrame:
    """Fig. 11: per-layer latency per scheme and device count, and Galaxy's reduction over Local."""
    rows = []
    for r in df.itertuples():
        setting = f"env=C,{bw:g}Mbps,S={r.seq_len},{r.devices} devices,{r.scheme}"
        rows.append(result_row(PAPER, "Fig. 11", r.model, setting, "layer_latency", r.latency_s, "s"))
        if r.scheme == "galaxy_hmp_overlap":
            rows.append(result_row(PAPER, "Fig. 11", r.model, setting, "reduction_vs_local", r.reduction_vs_local, "x"))
    return rows_frame(rows)


# ---- the planner: optimality gap on small instances ------------------------------------------------------
def random_cluster(n: int, rng: np.random.Generator, bandwidth_mbps: float = 125.0,
                   budget_range=(0.5e9, 1.6e9)) -> tuple[Cluster, str]:
    """`n` Nanos with random Nano-S/M/L frequencies and memory budgets (planner studies), and their modes."""
    modes = "".join(rng.choice(["S", "M", "L"], size=n))
    nodes = tuple(nano_cpu(m, float(rng.uniform(*budget_range))) for m in modes)
    return Cluster(nodes, Topology("switch", n, Link.from_mbps(bandwidth_mbps))), modes


def planner_gap_study(n_instances: int = 40, seed: int = 0, device_counts=(2, 3, 4),
                      models=MODELS) -> pd.DataFrame:
    """Algorithm 1 vs the exact optimum of Eq. 5 on random heterogeneous instances (deterministic seed)."""
    from workbench.schemes.planners.galaxy import optimality_gap

    require_int("n_instances", n_instances, low=1)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_instances):
        n = int(rng.choice(device_counts))
        name = str(rng.choice(models))
        cluster, modes = random_cluster(n, rng)
        gap = optimality_gap(get_model(name), cluster, workload(Setting.from_constants().seq_len))
        rows.append({"instance": i, "model": name, "devices": n, "modes": modes, **gap})
    return pd.DataFrame(rows)
