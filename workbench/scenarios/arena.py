"""The arena: every registered scheme on one model, one cluster and one cost model.

`run_arena` evaluates each evaluator in `workbench.schemes.base.SCHEMES` (prefill = time to first
token, decode = time per token) and keeps the `SchemeResult`s; `Arena.table()` is the tidy frame
(one row per scheme and phase, OOM marked, paper of origin), `Arena.memory()` the peak memory per
device against its budget. A scheme that does not apply (e.g. more devices than heads) raises
`WorkbenchError`; its row says "n/a" with the message. Any other exception is a bug and propagates.
Charts: `workbench.scenarios.arena_charts`; the `whatif FILE.toml` command: `workbench.scenarios.whatif`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import pandas as pd

from workbench.core.errors import InfeasibleError, WorkbenchError, require_choice
from workbench.core.units import GIB, MIB, bytes_per_s_to_mbps
from workbench.model.models import TransformerConfig
from workbench.model.routing import UNIFORM, ExpertCache, Routing
from workbench.schemes.base import PHASES, Cluster, Evaluator, SchemeResult, Workload, load_all

METRIC = {"prefill": "TTFT", "decode": "time per token"}
COMPONENTS = {"memory_s": "memory streaming", "compute_s": "arithmetic", "fixed_s": "fixed (launches, per-layer)", "serial_s": "serial (one device)",
              "comm_link_latency_s": "communication: per-message (hops, endpoints)",
              "comm_bytes_s": "communication: bytes", "io_stall_s": "IO stall", "other_s": "other"}
STATUSES = ("ok", "OOM", "n/a")
Registry = Mapping[str, tuple[str, Evaluator]]


@dataclass(frozen=True)
class Entry:
    """One scheme on one phase: its result, or the WorkbenchError message when it does not apply."""

    scheme: str
    paper: str
    phase: str
    result: SchemeResult | None
    error: str = ""

    @property
    def status(self) -> str:
        """ok | OOM | n/a."""
        if self.result is None:
            return "n/a"
        return "OOM" if self.result.oom else "ok"


def cluster_label(cluster: Cluster) -> str:
    """'4x Raspberry Pi 5 + 1x TV': consecutive devices with one name grouped."""
    groups: list[list] = []
    for device in cluster.devices:
        if groups and groups[-1][0] == device.name:
            groups[-1][1] += 1
        else:
            groups.append([device.name, 1])
    return " + ".join(f"{count}x {name}" for name, count in groups)


def device_budgets(result: SchemeResult, cluster: Cluster) -> list[float]:
    """Memory budget per device: the scheme's own when it states one, else the outermost memory level."""
    if result.memory_budget_bytes:
        return [float(b) for b in result.memory_budget_bytes]
    return [float(d.memory_bytes) if d.memory else math.nan for d in cluster.devices]


@dataclass(frozen=True)
class Arena:
    """Every scheme's result on one model, cluster and workload pair (prefill, decode)."""

    model: TransformerConfig
    cluster: Cluster
    workloads: tuple[Workload, ...]
    entries: tuple[Entry, ...]

    def context(self) -> dict:
        """Columns that describe the setting (the same on every row)."""
        w = self.workloads[0]
        link = self.cluster.topology.link
        return {"model": self.model.name, "devices": cluster_label(self.cluster), "n_devices": self.cluster.n,
                "topology": self.cluster.topology.kind, "bandwidth_mbps": bytes_per_s_to_mbps(link.bandwidth_bytes_per_s),
                "latency_ms": link.latency_s * 1e3, "seq_len": w.seq_len, "kv_len": w.kv_len,
                "weight_bits": w.weight_bits}

    def table(self) -> pd.DataFrame:
        """Tidy: one row per (scheme, phase) with latency, its breakdown, peak memory, OOM, rank and paper."""
        rows = []
        for e in self.entries:
            row = {"scheme": e.scheme, "paper": e.paper, "phase": e.phase, "metric": METRIC[e.phase],
                   "status": e.status, "latency_s": math.nan, **dict.fromkeys(COMPONENTS, math.nan), "bound": "",
                   "peak_memory_bytes": math.nan, "memory_budget_bytes": math.nan, "memory_use": math.nan,
                   "oom": False, "notes": e.error}
            if e.result is not None:
                r = e.result
                budgets = device_budgets(r, self.cluster)
                use = [p / b for p, b in zip(r.peak_memory_bytes, budgets) if b > 0]
                worst = max(range(len(use)), key=use.__getitem__) if use else None
                flat = r.row()  # the one flattening of a result; the arena adds budgets and its NaN conventions
                row.update({"latency_s": flat["latency_s"], **{c: flat[c] for c in COMPONENTS}, "bound": flat["bound"],
                            "peak_memory_bytes": max(r.peak_memory_bytes, default=math.nan),
                            "memory_budget_bytes": budgets[worst] if worst is not None else math.nan,
                            "memory_use": use[worst] if worst is not None else math.nan,
                            "oom": bool(r.oom), "notes": r.notes})
            rows.append(row)
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        ok = frame["status"] == "ok"
        best = frame[ok].groupby("phase")["latency_s"].min()
        frame["vs_best"] = frame["latency_s"] / frame["phase"].map(best)
        frame["rank"] = frame[ok].groupby("phase")["latency_s"].rank(method="min").astype("Int64")
        for key, value in reversed(self.context().items()):
            frame.insert(0, key, value)
        return frame

    def memory(self) -> pd.DataFrame:
        """Tidy: peak memory of every device under every scheme and phase, against its budget."""
        rows = []
        for e in self.entries:
            if e.result is None:
                continue
            budgets = device_budgets(e.result, self.cluster)
            for i, peak in enumerate(e.result.peak_memory_bytes):
                budget = budgets[i] if i < len(budgets) else math.nan
                rows.append({"scheme": e.scheme, "paper": e.paper, "phase": e.phase, "device": i,
                             "device_name": self.cluster.devices[i].name if i < self.cluster.n else "?",
                             "peak_bytes": float(peak), "budget_bytes": budget,
                             "over_budget": bool(not math.isnan(budget) and peak > budget)})
        return pd.DataFrame(rows, columns=["scheme", "paper", "phase", "device", "device_name", "peak_bytes",
                                           "budget_bytes", "over_budget"])

    def wide(self) -> pd.DataFrame:
        """One row per scheme (fitting ones first, fastest first): TTFT, time per token, peak memory, OOM, paper."""
        t = self.table()
        if t.empty:
            return pd.DataFrame(columns=["scheme", "paper"])
        out = t.pivot(index="scheme", columns="phase", values="latency_s").reindex(columns=list(PHASES))
        out.columns = [f"{METRIC[p].replace(' ', '_')}_s".lower() for p in out.columns]
        status = t.pivot(index="scheme", columns="phase", values="status").reindex(columns=list(PHASES))
        for p in PHASES:
            out[f"{p}_status"] = status[p].fillna("n/a")
        mem = t.groupby("scheme")[["peak_memory_bytes", "memory_use"]].max()
        out["peak_memory_gib"] = mem["peak_memory_bytes"] / GIB
        out["memory_use"] = mem["memory_use"]
        out.insert(0, "paper", t.groupby("scheme")["paper"].first())
        out = out.reset_index()
        phase = "prefill" if (out["prefill_status"] == "ok").any() else "decode"
        out["_order"] = out[f"{phase}_status"].map({"ok": 0, "OOM": 1}).fillna(2)
        sort_col = "ttft_s" if phase == "prefill" else "time_per_token_s"
        out = out.sort_values(["_order", sort_col, "scheme"], na_position="last").drop(columns="_order")
        return out.reset_index(drop=True)

    def feasible(self) -> bool:
        """Whether at least one scheme runs within memory in some phase."""
        return any(e.status == "ok" for e in self.entries)

    def check_feasible(self) -> Arena:
        """Raise InfeasibleError naming sizes when every scheme is out of memory or does not apply."""
        if not self.entries:
            raise WorkbenchError("no partition schemes are registered (workbench/schemes/<paper>.py)")
        if not self.feasible():
            w = self.workloads[0]
            largest = format_bytes(max(d.memory_bytes for d in self.cluster.devices))
            reasons = sorted({e.error.split(";")[0] for e in self.entries if e.error})
            why = f"; not applicable: {reasons[0]}" if reasons else ""
            raise InfeasibleError(
                f"infeasible: nothing fits: {self.model.name} ({self.model.weight_bytes(w.weight_bits) / GIB:.2f} GiB "
                f"at {w.weight_bits:g} bit) is out of memory under every scheme on {self.cluster.n} device(s) "
                f"(largest memory {largest}){why}")
        return self


def format_bytes(n_bytes: float) -> str:
    """'1.50 GiB', '12.0 MiB' or '512 KiB'."""
    for unit, size in (("GiB", GIB), ("MiB", MIB)):
        if n_bytes >= size:
            return f"{n_bytes / size:.3g} {unit}"
    return f"{n_bytes / 2**10:.3g} KiB"


def evaluate(name: str, paper: str, fn: Evaluator, model: TransformerConfig, cluster: Cluster,
             workload: Workload) -> Entry:
    """Run one evaluator; a WorkbenchError (the scheme does not apply) becomes an n/a entry."""
    try:
        return Entry(name, paper, workload.phase, fn(model, cluster, workload))
    except WorkbenchError as exc:
        return Entry(name, paper, workload.phase, None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def run_arena(model: TransformerConfig, cluster: Cluster, seq_len: int = 128, kv_len: int | None = None,
              weight_bits: float = 16, activation_bits: float = 16, phases: tuple[str, ...] = PHASES,
              schemes: list[str] | None = None, registry: Registry | None = None,
              output_head: bool = True, kv_bits: float | None = None, routing: Routing = UNIFORM,
              expert_cache: ExpertCache | None = None, weight_format: str = "", engine: str = "") -> Arena:
    """Evaluate every registered scheme (or `schemes`) on `model` and `cluster` for each phase: generation
    steps that end in the next token's logits (`output_head=False`: the backbone only, as Galaxy times it);
    `routing` is which experts a mixture of experts' tokens touch, `expert_cache` a device's cache of them;
    `weight_format` names the format the bits are (an engine's kernels cost by it), `engine` whose kernels the
    generic schemes run ("" = their own)."""
    workload = Workload(phase="decode", seq_len=seq_len, kv_len=seq_len if kv_len is None else kv_len,
                        weight_bits=weight_bits, activation_bits=activation_bits, output_head=output_head,
                        kv_bits=kv_bits, routing=routing, expert_cache=expert_cache, weight_format=weight_format,
                        engine=engine)
    return run_workload(model, cluster, workload, phases, schemes, registry)


def run_workload(model: TransformerConfig, cluster: Cluster, workload: Workload, phases: tuple[str, ...] = PHASES,
                 schemes: list[str] | None = None, registry: Registry | None = None) -> Arena:
    """Evaluate every registered scheme (or `schemes`) on `model` and `cluster` for `workload` in each phase."""
    registry = load_all() if registry is None else registry
    names = sorted(registry) if schemes is None else list(schemes)
    for name in names:
        require_choice("scheme", name, sorted(registry))
    workloads = tuple(replace(workload, phase=require_choice("phase", p, PHASES)) for p in phases)
    entries = tuple(evaluate(n, registry[n][0], registry[n][1], model, cluster, w) for w in workloads for n in names)
    return Arena(model, cluster, workloads, entries)


def arena_for_config(config, phases: tuple[str, ...] = PHASES, schemes: list[str] | None = None,
                     registry: Registry | None = None) -> Arena:
    """The arena for a `workbench.scenarios.userconfig.UserConfig` (a TOML deployment), its [workload] routing and expert
    cache included and its [schemes.*] options applied."""
    if config.scheme_options:
        from workbench.schemes.options import apply_options

        registry = apply_options(load_all() if registry is None else registry, config.scheme_options)
    return run_workload(config.model, config.cluster, config.base_workload, phases, schemes, registry)


# ---- chart frames (the charts themselves are Vega-Lite specs in workbench.scenarios.arena_charts) -----------
def _labelled(table: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran (OOM included), with 'scheme (OOM)' labels and 'x1.23 of best' texts."""
    t = table[table["status"] != "n/a"].copy() if len(table) else table.copy()
    t["label"] = t["scheme"] + t["status"].map({"OOM": " (OOM)"}).fillna("")
    t["text"] = [f"{v:.2f}x" if s == "ok" else "OOM" for v, s in zip(t["vs_best"], t["status"])]
    return t


def breakdown_frame(arena: Arena) -> pd.DataFrame:
    """Long: seconds per latency component per scheme and phase (n/a schemes left out)."""
    columns = ["scheme", "label", "paper", "phase", "metric", "component", "seconds", "latency_s"]
    t = arena.table()
    if t.empty:
        return pd.DataFrame(columns=columns)
    long = _labelled(t).melt(id_vars=["scheme", "label", "paper", "phase", "metric", "latency_s"],
                             value_vars=list(COMPONENTS), var_name="component", value_name="seconds")
    long["component"] = long["component"].map(COMPONENTS)
    return long[columns]


def ranking_frame(arena: Arena) -> pd.DataFrame:
    """Rows for the ranking chart: scheme, paper, phase, latency, status, label, 'x of best' text."""
    t = arena.table()
    if t.empty:
        return pd.DataFrame(columns=["scheme", "label", "paper", "phase", "status", "latency_s", "text", "notes"])
    return _labelled(t)[["scheme", "label", "paper", "phase", "status", "latency_s", "vs_best", "text", "notes"]]


def memory_frame(arena: Arena, phase: str = "decode") -> pd.DataFrame:
    """Rows for the memory chart: peak and budget (GiB) of each device under each scheme in `phase`."""
    m = arena.memory()
    m = m[m["phase"] == phase].copy()
    m["peak_gib"], m["budget_gib"] = m["peak_bytes"] / GIB, m["budget_bytes"] / GIB
    m["device_label"] = m["device"].astype(str) + ": " + m["device_name"]
    return m


def table_result_rows(table: pd.DataFrame, artifact: str, model: str, setting: str,
                      phase_in_name: bool = True) -> pd.DataFrame:
    """Tidy result rows (workbench.report.results columns) of an arena table: each scheme's latency and peak memory
    (n/a rows left out); quantities are <scheme>[_<phase>]_latency / _peak_memory."""
    from workbench.report.results import RESULT_COLUMNS

    rows = []
    for r in table.itertuples():
        if r.status == "n/a":
            continue
        name = f"{r.scheme}_{r.phase}" if phase_in_name else r.scheme
        rows.append(("workbench", artifact, model, setting, f"{name}_latency", float(r.latency_s), "s"))
        rows.append(("workbench", artifact, model, setting, f"{name}_peak_memory", float(r.peak_memory_bytes / GIB),
                     "GiB"))
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def arena_result_rows(arena: Arena, artifact: str = "arena") -> pd.DataFrame:
    """Tidy result rows of an arena: each scheme's latency per phase and peak memory."""
    c = arena.context()
    setting = (f"{c['devices']},{c['topology']},{c['bandwidth_mbps']:g}Mbps,{c['latency_ms']:g}ms,"
               f"S={c['seq_len']},{c['weight_bits']:g}bit")
    return table_result_rows(arena.table(), artifact, c["model"], setting)
