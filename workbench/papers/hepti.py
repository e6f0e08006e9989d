"""Hepti experiments: the three modes vs device count, the 2D/1D crossover, solver time, and dynamic
re-partitioning over a trace of changing secondary devices (dynamic vs static partition).

Every number comes from the one cost model of `workbench.schemes.hepti` and the MILP planner of
`workbench.schemes.planners.hepti`; the settings default to `data/constants/hepti.toml`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from workbench.core.errors import (
    InfeasibleError,
    WorkbenchError,
    require_choice,
    require_int,
    require_non_negative,
    require_positive,
)
from workbench.core.io import DATA_DIR
from workbench.core.simulate import Scheduler, Task
from workbench.core.units import MIB, mbps_to_bytes_per_s
from workbench.machine.hardware import load_device
from workbench.model.models import get_model
from workbench.papers import base
from workbench.papers.base import result_row, rows_frame
from workbench.schemes.base import Workload
from workbench.schemes.hepti import (
    COMM_MODELS,
    MODES,
    BlockShape,
    DeviceProfile,
    evaluate_partition,
    new_slice_bytes,
    profile_from_device,
    weight_slices,
)
from workbench.schemes.planners.hepti import Plan, linear_cost, plan, solve_p2

PAPER = "hepti"
TRACE_PATH = DATA_DIR / "traces" / "hepti_trace.csv"
TRACE_COLUMNS = ["time_s", "device", "free_memory_mib", "cycles_per_flop", "bandwidth_mbps"]


# ---- constants, the paper's setting and reported numbers ------------------------------------------
def constants() -> Mapping[str, Any]:
    """Hepti's constant values (data/constants/hepti.toml), read once per process."""
    return base.paper_values(PAPER)


@dataclass(frozen=True)
class Setting(base.PaperSetting):
    """One experiment's knobs; defaults are data/constants/hepti.toml (the paper states almost none)."""

    PAPER: ClassVar[str] = PAPER
    KEYS: ClassVar[Mapping[str, str]] = {
        "free_memory_mib": "free_memory", "bandwidth_mbps": "bandwidth", "hop_latency_ms": "hop_latency",
        "deadline_s": "deadline", "threshold": "mode_threshold_devices",
        "replan_overhead_s": "replan_overhead"}

    model: str
    n_devices: int
    free_memory_mib: float
    bandwidth_mbps: float
    hop_latency_ms: float
    seq_len: int
    deadline_s: float
    comm_model: str
    weight_bits: int
    activation_bits: int
    threshold: int  # devices from which the planner picks 2D- over 1D-tiled WS
    memory_headroom: float
    replan_threshold: float
    replan_overhead_s: float
    amortize_inferences: int
    device: str = "hepti_rpi4"  # device preset of every board (not a constant: data/devices/)
    path_hops: int = 2  # switch hops of a message (device - switch - device)

    def __post_init__(self) -> None:
        get_model(self.model)
        for name in ("n_devices", "seq_len", "weight_bits", "activation_bits", "threshold", "amortize_inferences"):
            require_int(name, getattr(self, name), low=1)
        require_int("path_hops", self.path_hops, low=0)
        require_choice("comm_model", self.comm_model, COMM_MODELS)
        if not isinstance(self.memory_headroom, int | float) or not 0 <= self.memory_headroom < 1:
            raise WorkbenchError(f"memory_headroom must be in [0, 1), got {self.memory_headroom}")
        # floats stay floats when the toml writes a whole number (2600 MiB), so rows and reprs never change type
        for name in ("free_memory_mib", "bandwidth_mbps", "deadline_s"):
            object.__setattr__(self, name, float(require_positive(name, getattr(self, name))))
        for name in ("hop_latency_ms", "replan_threshold", "replan_overhead_s", "memory_headroom"):
            object.__setattr__(self, name, float(require_non_negative(name, getattr(self, name))))

    @property
    def cfg(self):
        """The model's TransformerConfig."""
        return get_model(self.model)

    @property
    def workload(self) -> Workload:
        """Prefill of `seq_len` tokens at the setting's precision."""
        return Workload("prefill", self.seq_len, weight_bits=self.weight_bits, activation_bits=self.activation_bits)

    def base_profile(self, name: str = "primary") -> DeviceProfile:
        """The preset device with the setting's free memory, bandwidth and per-message latency."""
        dev = load_device(self.device)
        return replace(profile_from_device(dev, mbps_to_bytes_per_s(self.bandwidth_mbps), self.path_hops * self.hop_latency_ms * 1e-3,
                                           self.weight_bits, self.free_memory_mib * MIB), name=name)

    def profiles(self, n: int | None = None) -> list[DeviceProfile]:
        """n identical devices (the primary first)."""
        n = self.n_devices if n is None else n
        return [self.base_profile("primary" if i == 0 else f"sec{i}") for i in range(n)]

    @property
    def storage_bytes_per_s(self) -> float:
        """Local storage read rate (weights of a new partition are loaded from the device's own copy); a preset
        without one is an error, never an assumed rate."""
        rate = load_device(self.device).storage_read_bytes_per_s
        if rate is None:
            raise WorkbenchError(f"device {self.device!r} has no storage_read_bandwidth: re-partitions load weights from it")
        return float(rate)


def reported() -> pd.DataFrame:
    """The paper's numbers (data/reported/hepti.csv: one design rule, no measurements), read now."""
    return base.reported(PAPER)


def reported_value(artifact: str, model: str, setting: str, quantity: str) -> float:
    """One Hepti number as the paper states it (data/reported/hepti.csv)."""
    return base.reported_value(PAPER, artifact, model, setting, quantity)


# ---- modes vs device count and the crossover ----------------------------------------------------
def mode_sweep(s: Setting, counts, comm_model: str | None = None) -> pd.DataFrame:
    """Latency and per-device memory of each mode (forced, memory unconstrained) and of Hepti's own choice."""
    comm = comm_model or s.comm_model
    rows = []
    for n in counts:
        roomy = [p.with_changes(free_memory_bytes=1e15) for p in s.profiles(n)]
        for mode in MODES:
            pl = plan(s.cfg, s.workload, roomy, mode=mode, comm_model=comm, threshold=s.threshold)
            mem = np.array(pl.breakdown.memory_bytes)
            rows.append({"devices": n, "mode": pl.mode if n == 1 else mode, "forced": mode, "comm_model": comm,
                         "latency_s": pl.latency_s, "compute_s": pl.breakdown.compute_s,
                         "comm_s": pl.breakdown.comm_bytes_s + pl.breakdown.comm_link_s,
                         "participants": len(pl.devices), "max_memory_mib": mem.max() / MIB,
                         "secondary_memory_mib": (mem[1:].max() if len(mem) > 1 else mem[0]) / MIB,
                         "fits": bool(mem.max() <= s.free_memory_mib * MIB)})
        try:
            auto = plan(s.cfg, s.workload, s.profiles(n), comm_model=comm, threshold=s.threshold)
            rows.append({"devices": n, "mode": auto.mode, "forced": "auto", "comm_model": comm,
                         "latency_s": auto.latency_s, "compute_s": auto.breakdown.compute_s,
                         "comm_s": auto.breakdown.comm_bytes_s + auto.breakdown.comm_link_s,
                         "participants": len(auto.devices),
                         "max_memory_mib": max(auto.breakdown.memory_bytes) / MIB,
                         "secondary_memory_mib": max(auto.breakdown.memory_bytes[1:] or auto.breakdown.memory_bytes) / MIB,
                         "fits": True})
        except InfeasibleError:
            pass
    return pd.DataFrame(rows)


def crossover(sweep: pd.DataFrame) -> float:
    """Smallest device count from which 2D-tiled WS stays faster than 1D-tiled WS (NaN if never)."""
    wide = sweep[sweep.forced.isin(["1d", "2d"])].pivot_table(index="devices", columns="forced", values="latency_s")
    better = (wide["2d"] < wide["1d"]).to_numpy()
    for k in range(len(better)):
        if better[k:].all():
            return float(wide.index[k])
    return float("nan")


def sweep_rows(s: Setting, sweep: pd.DataFrame) -> pd.DataFrame:
    """The sweep as tidy result rows."""
    rows = []
    for r in sweep.itertuples():
        setting = f"{r.forced},n={r.devices},{r.comm_model}"
        for quantity, value, unit in (("latency", r.latency_s, "s"), ("max_device_memory", r.max_memory_mib, "MiB"),
                                      ("participants", r.participants, "devices")):
            rows.append(result_row(PAPER, "modes vs devices", s.model, setting, quantity, value, unit))
    return rows_frame(rows)


# ---- solver time ---------------------------------------------------------------------------------
def random_profiles(s: Setting, n: int, seed: int = 0) -> list[DeviceProfile]:
    """A heterogeneous cluster: secondaries 1-3x slower, 40-100 % bandwidth, 50-100 % free memory (seeded)."""
    rng = np.random.default_rng(seed)
    base = s.base_profile()
    return [base] + [base.with_changes(name=f"sec{i}", cycles_per_flop=base.cycles_per_flop * rng.uniform(1, 3),
                                       bandwidth_bytes_per_s=base.bandwidth_bytes_per_s * rng.uniform(0.4, 1.0),
                                       free_memory_bytes=base.free_memory_bytes * rng.uniform(0.5, 1.0))
                     for i in range(1, n)]


def solver_timing(s: Setting, counts, repeats: int = 3, seed: int = 0) -> pd.DataFrame:
    """Wall-clock seconds of one P2 solve (WS and 1D) and of a whole plan() call, median of `repeats` (measured)."""
    rows = []
    for n in counts:
        profiles = random_profiles(s, n, seed)
        for what in ("ws", "1d", "plan"):
            walls, cpus, info = [], [], None
            for _ in range(repeats):
                w0, c0 = time.perf_counter(), time.process_time()
                if what == "plan":
                    info = plan(s.cfg, s.workload, profiles, comm_model=s.comm_model, threshold=s.threshold)
                else:
                    info = solve_p2(linear_cost(s.cfg, s.workload, what), profiles, comm_model=s.comm_model)
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
            rows.append({"devices": n, "problem": what if what != "plan" else f"plan ({info.mode})",
                         "wall_s": float(np.median(walls)), "cpu_s": float(np.median(cpus)),
                         "variables": getattr(info, "n_variables", np.nan),
                         "constraints": getattr(info, "n_constraints", np.nan)})
    return pd.DataFrame(rows)


# ---- the trace ------------------------------------------------------------------------------------
def _episodes(rng, duration: float, mean_gap: float):
    """Start times of episodes: a Poisson process of rate 1 / mean_gap over [0, duration)."""
    t, out = 0.0, []
    while True:
        t += rng.exponential(mean_gap)
        if t >= duration:
            return out
        out.append(t)


def generate_trace(seed: int = 7, n_secondaries: int = 4, duration_s: float = 120.0, step_s: float = 1.0,
                   free_memory_mib: float = 2600.0, cycles_per_flop: float = 0.125,
                   bandwidth_mbps: float = 1000.0) -> pd.DataFrame:
    """A deterministic trace of the secondaries' free memory, compute intensity and bandwidth.

    Per secondary (its own generator, seeded by (seed, index)), sampled every `step_s`:
      * free memory: other apps start as a Poisson process (mean gap 35 s) and take 45-80 % of the
        base free memory, ramping up over 3-8 s, holding 10-25 s and releasing over 2-5 s (an app
        allocates progressively; abrupt grabs would outrun any monitor); +-1 % noise;
      * compute intensity rho_i: background load episodes (mean gap 30 s, 5-20 s long) multiply the
        cycles per FLOP by 1.5-3, switching on and off abruptly;
      * bandwidth: base x exp(AR(1) log-fluctuation, 0.8 memory, 0.12 innovation), clipped to 30-120 %.
    """
    require_int("n_secondaries", n_secondaries, low=1)
    require_positive("duration_s", duration_s)
    require_positive("step_s", step_s)
    times = np.arange(0.0, duration_s + 1e-9, step_s)
    frames = []
    for k in range(1, n_secondaries + 1):
        rng = np.random.default_rng([seed, k])
        used = np.zeros_like(times)
        for start in _episodes(rng, duration_s, 35.0):
            peak = rng.uniform(0.45, 0.80)
            up, hold, down = rng.uniform(3, 8), rng.uniform(10, 25), rng.uniform(2, 5)
            shape = np.interp(times, [start, start + up, start + up + hold, start + up + hold + down],
                              [0.0, peak, peak, 0.0], left=0.0, right=0.0)
            used = np.maximum(used, shape)
        memory = free_memory_mib * (1 - used) * (1 + rng.uniform(-0.01, 0.01, len(times)))
        load = np.ones_like(times)
        for start in _episodes(rng, duration_s, 30.0):
            factor, length = rng.uniform(1.5, 3.0), rng.uniform(5, 20)
            load[(times >= start) & (times < start + length)] = factor
        log_bw = np.zeros_like(times)
        for j in range(1, len(times)):
            log_bw[j] = 0.8 * log_bw[j - 1] + rng.normal(0, 0.12)
        bandwidth = bandwidth_mbps * np.clip(np.exp(log_bw), 0.3, 1.2)
        frames.append(pd.DataFrame({"time_s": np.round(times, 6), "device": f"sec{k}",
                                    "free_memory_mib": np.round(memory), "cycles_per_flop": np.round(cycles_per_flop * load, 6),
                                    "bandwidth_mbps": np.round(bandwidth, 1)}))
    return pd.concat(frames, ignore_index=True)[TRACE_COLUMNS]


def shipped_trace_parameters(s: Setting | None = None) -> dict:
    """The generator arguments of data/traces/hepti_trace.csv (seed from the constants, base = the setting)."""
    s = s or Setting.from_constants()
    return dict(seed=int(constants()["trace_seed"]), n_secondaries=s.n_devices - 1, duration_s=120.0, step_s=1.0,
                free_memory_mib=s.free_memory_mib, cycles_per_flop=round(s.base_profile().cycles_per_flop, 6),
                bandwidth_mbps=s.bandwidth_mbps)


def load_trace(path: str | Path = TRACE_PATH) -> pd.DataFrame:
    """Read a trace CSV (columns TRACE_COLUMNS), checking its columns and values."""
    path = Path(path)
    if not path.exists():
        raise WorkbenchError(f"trace file {path} does not exist")
    df = pd.read_csv(path)
    missing = [c for c in TRACE_COLUMNS if c not in df.columns]
    if missing:
        raise WorkbenchError(f"trace {path.name} lacks columns {missing}; needs {TRACE_COLUMNS}")
    if (df[["free_memory_mib", "cycles_per_flop", "bandwidth_mbps"]] < 0).any().any():
        raise WorkbenchError(f"trace {path.name} has negative values")
    return df[TRACE_COLUMNS]


@dataclass(frozen=True)
class TraceState:
    """The true state of every secondary over time (piecewise constant between samples)."""

    frame: pd.DataFrame
    devices: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(sorted(self.frame.device.unique(), key=lambda d: (len(d), d))))
        tables = {}
        for d, g in self.frame.groupby("device"):
            g = g.sort_values("time_s")
            tables[d] = tuple(g[c].to_numpy(dtype=float) for c in TRACE_COLUMNS if c != "device")
        object.__setattr__(self, "_tables", tables)

    @property
    def duration_s(self) -> float:
        """Last sample time."""
        return float(self.frame.time_s.max())

    def _index(self, device: str, t: float) -> int:
        return max(int(np.searchsorted(self._tables[device][0], t, side="right")) - 1, 0)

    def at(self, device: str, t: float) -> tuple[float, float, float]:
        """(free memory MiB, cycles per FLOP, bandwidth Mbit/s) of `device` at time t."""
        _, mem, cpf, bw = self._tables[device]
        i = self._index(device, t)
        return float(mem[i]), float(cpf[i]), float(bw[i])

    def min_memory(self, device: str, t0: float, t1: float) -> float:
        """Smallest free memory (MiB) of `device` during [t0, t1]."""
        mem = self._tables[device][1]
        return float(mem[self._index(device, t0):self._index(device, t1) + 1].min())


# ---- the dynamic run ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunResult:
    """One policy over a trace: one row per request, one row per (layer, device), and the timeline."""

    policy: str
    requests: pd.DataFrame
    layers: pd.DataFrame
    timeline: object

    def summary(self) -> dict:
        """Latency, deadline misses, OOM events and re-partitioning counts."""
        r = self.requests
        done = r[~r.oom]
        return {"policy": self.policy, "requests": len(r), "completed": int(len(done)),
                "mean_latency_s": float(done.latency_s.mean()) if len(done) else float("nan"),
                "p95_latency_s": float(done.latency_s.quantile(0.95)) if len(done) else float("nan"),
                "deadline_misses": int(r.missed.sum()), "oom_events": int(r.oom.sum()),
                "mode_switches": int(r.switches.sum()), "solves": int(r.solves.sum()),
                "memory_violations": int(self.layers.over.sum())}


def _profiles_at(s: Setting, state: TraceState, t: float) -> list[DeviceProfile]:
    base = s.base_profile()
    out = [base]
    for name in state.devices:
        mem, cpf, bw = state.at(name, t)
        out.append(base.with_changes(name=name, free_memory_bytes=mem * MIB, cycles_per_flop=cpf,
                                     bandwidth_bytes_per_s=mbps_to_bytes_per_s(bw)))
    return out


def _budget(s: Setting, profiles: list[DeviceProfile]) -> list[DeviceProfile]:
    return [p.with_changes(free_memory_bytes=p.free_memory_bytes * (1 - s.memory_headroom)) for p in profiles]


def _plan(s: Setting, profiles: list[DeviceProfile]) -> Plan:
    """P2 with the deadline; when no partition meets it, the fastest one (the request will miss D)."""
    try:
        return plan(s.cfg, s.workload, _budget(s, profiles), s.deadline_s, comm_model=s.comm_model, threshold=s.threshold)
    except InfeasibleError as err:
        if "deadline" not in str(err):
            raise
        return plan(s.cfg, s.workload, _budget(s, profiles), None, comm_model=s.comm_model, threshold=s.threshold)


def _layer_time(s: Setting, pl: Plan, profiles: list[DeviceProfile]) -> float:
    """Seconds of one block under `pl` with the devices as they really are."""
    bd = evaluate_partition(s.cfg, s.workload, pl.partition, [profiles[i] for i in pl.devices], s.comm_model)
    head = BlockShape.of(s.cfg, s.workload).primary_flops() * profiles[0].seconds_per_flop
    return (bd.latency_s - head) / s.cfg.n_layers


def _changed(a: list[DeviceProfile], b: list[DeviceProfile], threshold: float) -> bool:
    for p, q in zip(a, b):
        for x, y in ((p.free_memory_bytes, q.free_memory_bytes), (p.cycles_per_flop, q.cycles_per_flop),
                     (p.bandwidth_bytes_per_s, q.bandwidth_bytes_per_s)):
            if abs(x - y) > threshold * max(abs(y), 1e-12):
                return True
    return False


def _holdings(s: Setting, pl: Plan, n: int) -> list[dict | None]:
    slices = weight_slices(s.cfg, pl.partition)
    out: list[dict | None] = [None] * n
    for k, i in enumerate(pl.devices):
        out[i] = slices[k]
    return out


class _Runtime:
    """One policy's run in progress: the plan, the primary's estimates, who holds which weights, and the
    tasks placed so far (`workbench.core.simulate.Scheduler`, one at a time: every decision depends on when
    the block it is taken at starts)."""

    def __init__(self, s: Setting, state: TraceState, policy: str) -> None:
        self.s, self.state, self.dynamic = s, state, policy == "dynamic"
        self.policy, self.n_dev, self.n_layers = policy, s.n_devices, s.cfg.n_layers
        self.head_s = BlockShape.of(s.cfg, s.workload).primary_flops() * s.base_profile().seconds_per_flop
        self.storage = s.storage_bytes_per_s
        self.sched = Scheduler()
        self.estimates = self.basis = _profiles_at(s, state, 0.0)
        self.current = _plan(s, self.estimates)
        self.held = _holdings(s, self.current, self.n_dev)
        self.pending: dict[int, list[str]] = {}  # block -> load tasks it must wait for
        self.last: str | None = None  # the primary's latest task: the next one runs after it

    def _after(self, *names: str) -> tuple[str, ...]:
        return tuple(x for x in ((self.last,) + names) if x)

    def _chain(self, name: str, duration: float, kind: str, device: str, *deps: str) -> float:
        """Add a task on the primary after its latest one (and `deps`); return its start."""
        start = self.sched.add(Task(name, "primary", float(duration), self._after(*deps), kind, device))
        self.last = name
        return start

    def serve(self, k: int, t: float) -> tuple[dict, list[dict]]:
        """Request k arriving at t: its row and its (block, device) rows."""
        switches, solves, oom, modes, layer_rows = 0, 0, False, [], []
        if self.dynamic:
            self.estimates = _profiles_at(self.s, self.state, t)  # profiling when the request arrives (Sec. 4.1)
        for layer in range(self.n_layers):
            if self.dynamic:  # the primary holds the whole tensor: re-plan here (Sec. 4.3)
                solved, switched = self.replan(k, layer)
                solves, switches = solves + solved, switches + switched
            rows = self.run_block(k, layer)
            modes.append(self.current.mode)
            layer_rows += rows
            crashed = [i for i, r in enumerate(rows) if r["over"]]
            if crashed:  # out of memory: the request dies, the device reloads its weights
                oom = True
                self.restart(k, crashed)
                break
            if self.dynamic:
                self.observe(rows[0]["end_s"])
        if not oom and self.head_s > 0:
            self._chain(f"r{k}.head", self.head_s, "compute", "primary")
        end = self.sched.free_at("primary")
        return _request_row(self.policy, k, t, end, modes, switches, solves, oom, self.s.deadline_s), layer_rows

    def replan(self, k: int, layer: int) -> tuple[int, int]:
        """(solves, switches) at block `layer`: re-solve P2 when the plan no longer fits the budgets or an
        estimate moved; switch when it must (memory) or when the saving pays for loading the new slices."""
        s, n = self.s, self.n_dev
        budget = np.array([p.free_memory_bytes for p in _budget(s, self.estimates)])
        pressure = bool(np.any(self.current.memory_by_device(n) > budget))
        if not (pressure or _changed(self.estimates, self.basis, s.replan_threshold)):
            return 0, 0
        self._chain(f"r{k}.b{layer}.plan", s.replan_overhead_s, "other", "primary")
        self.basis = self.estimates
        try:
            candidate = _plan(s, self.estimates)
        except InfeasibleError:
            candidate = self.current
        if (candidate.devices, candidate.partition) == (self.current.devices, self.current.partition):
            return 1, 0
        new_held = _holdings(s, candidate, n)
        load_s = np.array([new_slice_bytes(s.cfg, s.workload, self.held[i], new_held[i]) / self.storage
                           if new_held[i] else 0.0 for i in range(n)])
        gain = _layer_time(s, self.current, self.estimates) - _layer_time(s, candidate, self.estimates)
        L = self.n_layers
        if not (pressure or gain * L * s.amortize_inferences > load_s.max() * L):
            return 1, 0
        self.load(k, layer, load_s)
        self.current, self.held = candidate, new_held
        return 1, 1

    def load(self, k: int, layer: int, load_s: np.ndarray) -> None:
        """Each device reads its new slices from its own storage, block by block in the order they run."""
        L = self.n_layers
        for i in np.nonzero(load_s)[0]:
            for j in [*range(layer, L), *range(layer)]:
                name = f"r{k}.b{layer}.load.d{i}.b{j}"
                self.sched.add(Task(name, f"storage{i}", float(load_s[i]), self._after(), "io", f"d{i}"))
                self.pending.setdefault(j, []).append(name)

    def run_block(self, k: int, layer: int) -> list[dict]:
        """Block `layer` of request k under the current plan with the devices as they really are."""
        s = self.s
        truth = _profiles_at(s, self.state, self.sched.free_at("primary"))
        name = f"r{k}.b{layer}"
        begin = self._chain(name, _layer_time(s, self.current, truth), "compute", self.current.mode,
                            *self.pending.pop(layer, []))
        return _block_rows(s, self.state, self.policy, k, layer, begin, self.sched.end_of(name), self.current)

    def restart(self, k: int, crashed: list[int]) -> None:
        """After an OOM the crashed devices reload their slices before the next request."""
        s = self.s
        reload = max(self.n_layers * new_slice_bytes(s.cfg, s.workload, None, self.held[i]) for i in crashed)
        self._chain(f"r{k}.restart", reload / self.storage, "io", "restart")
        self.pending.clear()

    def observe(self, end: float) -> None:
        """What a block's results tell the primary: the participants' state when the block ended."""
        seen = _profiles_at(self.s, self.state, end)
        self.estimates = [seen[i] if (i == 0 or i in self.current.devices) else self.estimates[i]
                          for i in range(self.n_dev)]


def _block_rows(s: Setting, state: TraceState, policy: str, k: int, layer: int, begin: float, end: float,
                current: Plan) -> list[dict]:
    """One row per device: the block's planned memory against the least free memory during it."""
    need = current.memory_by_device(s.n_devices)
    rows = []
    for i in range(s.n_devices):
        free = s.free_memory_mib if i == 0 else state.min_memory(state.devices[i - 1], begin, end)
        rows.append({"policy": policy, "request": k, "layer": layer, "start_s": begin, "end_s": end,
                     "mode": current.mode, "device": "primary" if i == 0 else state.devices[i - 1],
                     "planned_mib": need[i] / MIB, "free_mib": free, "over": bool(need[i] > free * MIB)})
    return rows


def _request_row(policy: str, k: int, start: float, end: float, modes: list[str], switches: int, solves: int,
                 oom: bool, deadline_s: float) -> dict:
    """One request's latency, its blocks' modes, and whether it missed the deadline."""
    return {"policy": policy, "request": k, "start_s": start, "end_s": end, "latency_s": end - start,
            "mode": max(set(modes), key=modes.count), "modes": "/".join(dict.fromkeys(modes)),
            "switches": switches, "solves": solves, "oom": oom, "missed": bool(oom or end - start > deadline_s)}


def run_trace(s: Setting, trace: pd.DataFrame, policy: str = "dynamic") -> RunResult:
    """Serve requests back to back over `trace` with a static partition or Hepti's dynamic re-partitioning.

    Both start from the plan for the profiled state at t = 0 (with the memory headroom). Static keeps
    it. Dynamic profiles every device when a request starts (Sec. 4.1) and, at the start of every
    block's self-attention, updates its estimates from the previous block (each participant's free
    memory as reported with its results, rho_i and bandwidth from how long its work and transfers
    took), re-solves P2 when the current plan no longer fits the budgets or an estimate moved by more
    than `replan_threshold`, and switches when the plan must (memory) or when the predicted saving
    over `amortize_inferences` requests exceeds the time to load the new weight slices from local
    storage. Loads run on each device's storage while blocks compute (workbench.core.simulate timing): a
    block waits until every device holds its slices. A block whose plan needs more memory on a device
    than the device has at any time during the block is an OOM event: the request is aborted and the
    device reloads its slices before the next request.
    """
    require_choice("policy", policy, ("dynamic", "static"))
    state = TraceState(trace)
    if len(state.devices) + 1 != s.n_devices:
        s = replace(s, n_devices=len(state.devices) + 1)
    runtime = _Runtime(s, state, policy)
    request_rows, layer_rows = [], []
    t, k = 0.0, 0
    while t < state.duration_s:
        row, rows = runtime.serve(k, t)
        request_rows.append(row)
        layer_rows += rows
        t, k = row["end_s"], k + 1
    return RunResult(policy, pd.DataFrame(request_rows), pd.DataFrame(layer_rows), runtime.sched.timeline())


# ---- tidy results for the notebook ----------------------------------------------------------------
def dynamic_vs_static(s: Setting, trace: pd.DataFrame) -> dict[str, RunResult]:
    """Both policies over the same trace."""
    return {policy: run_trace(s, trace, policy) for policy in ("static", "dynamic")}


def run_summary(s: Setting, runs: dict[str, RunResult]) -> pd.DataFrame:
    """One row per policy: requests, latency, deadline misses, OOM events, switches, solves."""
    return pd.DataFrame([r.summary() for r in runs.values()])


def run_rows(s: Setting, runs: dict[str, RunResult], trace_name: str) -> pd.DataFrame:
    """Every modelled number of the trace runs as result rows (per policy and per request)."""
    units = {"requests": "count", "completed": "count", "mean_latency_s": "s", "p95_latency_s": "s",
             "deadline_misses": "count", "oom_events": "count", "mode_switches": "count", "solves": "count",
             "memory_violations": "count"}
    rows = []
    for summ in run_summary(s, runs).to_dict("records"):
        setting = f"{summ['policy']},{trace_name},D={s.deadline_s:g}s"
        for q, unit in units.items():
            rows.append(result_row(PAPER, "dynamic vs static", s.model, setting, q, summ[q], unit))
    for policy, run in runs.items():
        for r in run.requests.itertuples():
            rows.append(result_row(PAPER, "dynamic vs static", s.model, f"{policy},{trace_name},request={r.request}",
                                   "latency", r.latency_s, "s"))
    return rows_frame(rows)


def memory_frame(runs: dict[str, RunResult], trace: pd.DataFrame) -> pd.DataFrame:
    """Per secondary over time: the true free memory and each policy's planned footprint (MiB)."""
    truth = trace.rename(columns={"free_memory_mib": "MiB"}).assign(series="free memory (trace)")
    parts = [truth[["time_s", "device", "MiB", "series"]]]
    for policy, run in runs.items():
        lay = run.layers[run.layers.device != "primary"]
        parts.append(pd.DataFrame({"time_s": lay.start_s, "device": lay.device, "MiB": lay.planned_mib,
                                   "series": f"{policy} plan"}))
    return pd.concat(parts, ignore_index=True)


def optimality_check(seed: int = 0, n: int = 3) -> pd.DataFrame:
    """A small heterogeneous instance: brute force vs the MILP (integer, heads-integer, relaxed) per mode."""
    from workbench.model.models import tiny_config
    from workbench.schemes.planners.hepti import brute_force_p2

    cfg = tiny_config("gpt", n_heads=4, d_model=32, d_ff=12)
    wl = Workload("prefill", 6, weight_bits=32, activation_bits=32)
    rng = np.random.default_rng(seed)
    profiles = [DeviceProfile(f"d{i}", 1e9, float(rng.uniform(1, 4)), 1e9, float(rng.uniform(5e6, 5e7)), 1e-4)
                for i in range(n)]
    rows = []
    for mode in ("ws", "1d"):
        cost = linear_cost(cfg, wl, mode)
        for comm in COMM_MODELS:
            _, best = brute_force_p2(cost, profiles, comm_model=comm)
            row = {"mode": mode, "comm_model": comm, "brute_force_s": best}
            for integrality in ("all", "heads", "none"):
                row[f"milp_{integrality}_s"] = solve_p2(cost, profiles, comm_model=comm, integrality=integrality).latency_s
            rows.append(row)
    return pd.DataFrame(rows)


def tiny_profiles(n: int) -> list[DeviceProfile]:
    """Heterogeneous devices with effectively free links, so the planner's splits on a tiny model are uneven."""
    return [DeviceProfile(f"d{i}", 1e9, 1.0 + 0.7 * i, 1e12, 1e15, 0.0) for i in range(n)]


def kernel_check(n_devices: int = 4, families=("llama", "gpt", "bert"), seq_len: int = 8, seed: int = 0) -> pd.DataFrame:
    """Each mode's shard_map kernel on a planner-chosen uneven split: error vs the reference and traffic.

    Needs `n_devices` JAX devices (notebooks: jax.config.update("jax_num_cpu_devices", 8) first).
    """
    import jax
    import jax.numpy as jnp

    from workbench.kernels import hepti as hk
    from workbench.kernels import reference as ref
    from workbench.kernels.traffic import parse_collectives
    from workbench.model.models import tiny_config

    rows = []
    for family in families:
        cfg = tiny_config(family)
        wl = Workload("prefill", seq_len, weight_bits=32, activation_bits=32)
        p = ref.init_block_params(cfg, jax.random.PRNGKey(seed))
        x = jax.random.normal(jax.random.PRNGKey(seed + 1), (seq_len, cfg.d_model))
        pos = jnp.arange(seq_len)
        want = jax.jit(lambda p, x, pos, cfg=cfg: ref.block_forward(cfg, p, x, pos)[0])(p, x, pos)
        for mode in MODES:
            part = plan(cfg, wl, tiny_profiles(n_devices), mode=mode).partition
            args = hk.block_args(cfg, p, part, x, pos)
            compiled = hk.block_program(cfg, part, seq_len).lower(*args).compile()
            got = compiled(*args)
            moved = {}
            for c in parse_collectives(compiled.as_text()):
                if c.group_size > 1:
                    moved[c.kind] = moved.get(c.kind, 0) + c.result_bytes
            rows.append({"family": family, "mode": mode, "devices": part.n, "grid": part.grid,
                         "heads": part.heads, "rows": part.rows, "ffn": part.ffn, "cols": part.cols,
                         "max_abs_error": float(jnp.max(jnp.abs(got - want))),
                         "compiled_bytes": sum(moved.values()), "modelled_bytes": sum(hk.kernel_traffic(cfg, seq_len, part).values()),
                         "compiled": moved})
    return pd.DataFrame(rows)
