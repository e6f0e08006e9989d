"""Regime map: which scheme wins, and by how much, over link bandwidth, per-hop latency, device count,
memory per device and sequence length; and where each paper's headline claim holds and where it stops.

A *slice* varies two axes around a base deployment (a `UserConfig`) and runs the arena at every grid
point; `winners` keeps, per point and phase, the fastest scheme that fits and its margin over the
runner-up; `regime_chart` draws the winners as tiles on log axes with the boundaries between regions
as black lines. A *claim* varies one axis and compares two schemes (or one scheme against its own
single-device run) to find where a paper's headline holds (ratio > threshold) and where it stops.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import pandas as pd

from workbench.core.errors import (
    WorkbenchError,
    require_choice,
    require_int,
    require_non_negative,
    require_positive,
)
from workbench.core.units import mbps_to_bytes_per_s
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import Topology
from workbench.model.models import TransformerConfig, get_model
from workbench.model.routing import UNIFORM, Routing
from workbench.scenarios.arena import GIB, Registry, run_arena
from workbench.scenarios.userconfig import UserConfig
from workbench.schemes.base import Cluster, load_all
from workbench.schemes.baselines import LAYERWISE_MP
from workbench.schemes.galaxy import HMP, HMP_OVERLAP, MEGATRON_TP, SP
from workbench.schemes.hepti import HEPTI_1D, HEPTI_2D
from workbench.schemes.mcu_siracusa import SCHEME as MCU_SCHEME
from workbench.schemes.sti import PIPELINE as STI_PIPELINE
from workbench.schemes.sti import STREAMED
from workbench.schemes.tpi_llm import STAR_TP

AXES = {"bandwidth_mbps": "link bandwidth (Mbps)", "latency_ms": "per-hop latency (ms)",
        "n_devices": "devices", "memory_gib": "memory per device (GiB)", "seq_len": "sequence length (tokens)"}
NOTHING = "nothing fits"


# ---- one point of a sweep ------------------------------------------------------------------------
def with_budget(device: DeviceSpec, budget_bytes: float) -> DeviceSpec:
    """The device with its outermost memory level set to `budget_bytes` (what one app may use); inner
    levels larger than the budget are capped at it too."""
    if not device.memory:
        raise WorkbenchError(f"device {device.name!r} has no memory levels to budget")
    levels = tuple(replace(m, capacity_bytes=min(m.capacity_bytes, budget_bytes)) for m in device.memory[:-1])
    return device.with_changes(memory=levels + (replace(device.memory[-1], capacity_bytes=budget_bytes),))


def vary_cluster(cluster: Cluster, n_devices: int | None = None, bandwidth_mbps: float | None = None,
                 latency_ms: float | None = None, memory_gib: float | None = None) -> Cluster:
    """`cluster` with its devices cycled to `n_devices`, its link changed and its memory capped (what no
    argument names, e.g. the per-message overhead and a shared machine, is kept)."""
    if n_devices is not None:
        cluster = with_device_count(cluster, int(n_devices))
    cluster = with_link(cluster, bandwidth_mbps, latency_ms)
    if memory_gib is not None:
        cluster = with_memory_budget(cluster, memory_gib)
    return cluster


def with_device_count(cluster: Cluster, n_devices: int, most: int | None = None) -> Cluster:
    """`cluster` with its devices cycled to `n_devices` (topology kind, link and shared machine kept)."""
    n = require_int("device count", n_devices, low=1, high=most)
    devices = tuple(cluster.devices[i % cluster.n] for i in range(n))
    return replace(cluster, devices=devices, topology=replace(cluster.topology, n_devices=n, max_devices=None))


def with_link(cluster: Cluster, bandwidth_mbps: float | None = None, latency_ms: float | None = None) -> Cluster:
    """`cluster` on a link of another bandwidth and/or per-hop latency (its per-message overhead kept)."""
    link = cluster.topology.link
    if bandwidth_mbps is not None:
        mbps = require_positive("link bandwidth (Mbps)", bandwidth_mbps)
        link = replace(link, bandwidth_bytes_per_s=mbps_to_bytes_per_s(mbps))
    if latency_ms is not None:
        link = replace(link, latency_s=require_non_negative("per-hop latency (ms)", latency_ms) * 1e-3)
    return replace(cluster, topology=replace(cluster.topology, link=link))


def with_memory_budget(cluster: Cluster, memory_gib: float) -> Cluster:
    """`cluster` with every device's memory set to a budget of `memory_gib` GiB (`with_budget`)."""
    budget = require_positive("memory budget per device (GiB)", memory_gib) * GIB
    return replace(cluster, devices=tuple(with_budget(d, budget) for d in cluster.devices))


@dataclass(frozen=True)
class Base:
    """The deployment a sweep varies: model, cluster, prompt length, weight and activation bits, and for a
    mixture of experts the routing its tokens follow."""

    model: TransformerConfig
    cluster: Cluster
    seq_len: int = 128
    weight_bits: float = 16.0
    activation_bits: float = 16.0
    routing: Routing = UNIFORM

    @classmethod
    def from_config(cls, config: UserConfig, model: str | None = None, weight_bits: float | None = None) -> Base:
        """A base from a TOML deployment (its [workload] routing kept), optionally with another model or weight
        precision."""
        return cls(get_model(model) if model else config.model, config.cluster, config.seq_len,
                   config.weight_bits if weight_bits is None else weight_bits, config.activation_bits,
                   config.routing)


def moe_capable(registry: Registry | None = None) -> list[str]:
    """The registered schemes that cost a mixture of experts (registered with moe=True; the others refuse a MoE
    model in one line, `schemes.base.dense_only`), in the registry's order: what a MoE regime map compares."""
    catalogue = load_all()
    registry = catalogue if registry is None else registry
    capable = set(catalogue.filter(moe=True))
    return [name for name in registry if name in capable]


def evaluate_point(base: Base, point: dict, phases: Sequence[str], schemes: list[str] | None,
                   registry: Registry) -> pd.DataFrame:
    """The arena table at one grid point (axis values as columns)."""
    cluster = vary_cluster(base.cluster, point.get("n_devices"), point.get("bandwidth_mbps"),
                           point.get("latency_ms"), point.get("memory_gib"))
    seq = int(point.get("seq_len", base.seq_len))
    arena = run_arena(base.model, cluster, seq, seq, base.weight_bits, base.activation_bits, tuple(phases),
                      schemes, registry, routing=base.routing)
    table = arena.table()
    for axis, value in point.items():
        table[f"axis_{axis}"] = value
    return table


def sweep(base: Base, grid: dict[str, Sequence[float]], phases: Sequence[str] = ("prefill", "decode"),
          schemes: list[str] | None = None, registry: Registry | None = None) -> pd.DataFrame:
    """The arena at every point of the Cartesian grid over `grid`'s axes (tidy, one row per scheme)."""
    for axis in grid:
        require_choice("axis", axis, AXES)
    registry = load_all() if registry is None else registry
    frames = [evaluate_point(base, dict(zip(grid, values)), phases, schemes, registry)
              for values in itertools.product(*grid.values())]
    return pd.concat(frames, ignore_index=True)


def winners(swept: pd.DataFrame) -> pd.DataFrame:
    """Per grid point and phase: the fastest scheme that fits, its paper, latency and margin over the runner-up."""
    axes = [c for c in swept.columns if c.startswith("axis_")]
    rows = []
    for key, group in swept.groupby(axes + ["phase"], sort=True):
        ok = group[group["status"] == "ok"].sort_values(["latency_s", "scheme"])
        row = dict(zip(axes + ["phase"], key))
        if ok.empty:
            row.update(winner=NOTHING, paper="", latency_s=math.nan, runner_up="", margin=math.nan, feasible=0)
        else:
            second = ok.iloc[1] if len(ok) > 1 else None
            row.update(winner=ok.iloc[0].scheme, paper=ok.iloc[0].paper, latency_s=ok.iloc[0].latency_s,
                       runner_up="" if second is None else second.scheme,
                       margin=math.nan if second is None else second.latency_s / ok.iloc[0].latency_s,
                       feasible=len(ok))
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.rename(columns={c: c.removeprefix("axis_") for c in axes})


# ---- the chart -----------------------------------------------------------------------------------
def _edges(values: Sequence[float]) -> dict[float, tuple[float, float]]:
    """Cell edges around each grid value: geometric midpoints (the axes are logarithmic)."""
    v = sorted(set(float(x) for x in values))
    if len(v) == 1:
        return {v[0]: (v[0] / 2, v[0] * 2)}
    mids = [math.sqrt(a * b) for a, b in zip(v, v[1:])]
    lo = [v[0] ** 2 / mids[0]] + mids
    hi = mids + [v[-1] ** 2 / mids[-1]]
    return {x: (a, b) for x, a, b in zip(v, lo, hi)}


def regime_cells(win: pd.DataFrame, x: str, y: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tiles (x0, x1, y0, y1, winner, margin) and the boundary segments between tiles of different winners."""
    ex, ey = _edges(win[x]), _edges(win[y])
    cells = win.copy()
    cells["x0"], cells["x1"] = zip(*cells[x].map(ex))
    cells["y0"], cells["y1"] = zip(*cells[y].map(ey))
    cells["label"] = [("-" if w == NOTHING else f"{m:.2f}x" if m == m else "only") for w, m in
                      zip(cells["winner"], cells["margin"])]
    lookup = {(r[x], r[y]): r["winner"] for _, r in cells.iterrows()}
    xs, ys = sorted(ex), sorted(ey)
    segments = []
    for i, xv in enumerate(xs):
        for j, yv in enumerate(ys):
            here = lookup.get((xv, yv))
            if i + 1 < len(xs) and lookup.get((xs[i + 1], yv)) not in (None, here):
                segments.append({"x0": ex[xv][1], "x1": ex[xv][1], "y0": ey[yv][0], "y1": ey[yv][1]})
            if j + 1 < len(ys) and lookup.get((xv, ys[j + 1])) not in (None, here):
                segments.append({"x0": ex[xv][0], "x1": ex[xv][1], "y0": ey[yv][1], "y1": ey[yv][1]})
    return cells, pd.DataFrame(segments, columns=["x0", "x1", "y0", "y1"])


def regime_chart(win: pd.DataFrame, x: str, y: str, phase: str, title: str = "", width: int = 320):
    """Tiles coloured by the winning scheme, labelled with its margin over the runner-up; black lines
    are the boundaries between regions. Each axis ticks the grid's own values, one per row and column of tiles
    (a log axis left to itself ticks 3, 5, 7 between grid values of 2, 4, 8)."""
    import altair as alt

    cells, segments = regime_cells(win[win["phase"] == phase], x, y)
    xs = alt.Scale(type="log", domain=[float(cells.x0.min()), float(cells.x1.max())], nice=False)
    ys = alt.Scale(type="log", domain=[float(cells.y0.min()), float(cells.y1.max())], nice=False)
    x_axis = alt.Axis(values=sorted(float(v) for v in set(cells[x])), format="~g", grid=False, title=AXES[x])
    y_axis = alt.Axis(values=sorted(float(v) for v in set(cells[y])), format="~g", grid=False, title=AXES[y])
    tiles = alt.Chart(cells).mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("x0:Q", scale=xs, axis=x_axis), x2="x1", y=alt.Y("y0:Q", scale=ys, axis=y_axis), y2="y1",
        color=alt.Color("winner:N", title="fastest scheme that fits"),
        tooltip=[x, y, "winner", "paper", "runner_up", alt.Tooltip("margin:Q", format=".2f"),
                 alt.Tooltip("latency_s:Q", format=".4g")])
    text = alt.Chart(cells).mark_text(fontSize=9).encode(  # at the grid value, level with its tick labels
        x=alt.X(f"{x}:Q", scale=xs), y=alt.Y(f"{y}:Q", scale=ys), text="label:N")
    layers = [tiles, text]
    if len(segments):
        layers.append(alt.Chart(segments).mark_rule(color="black", strokeWidth=2).encode(
            x=alt.X("x0:Q", scale=xs), x2="x1", y=alt.Y("y0:Q", scale=ys), y2="y1"))
    return alt.layer(*layers).properties(title=title or f"Winner ({phase}) and margin over the runner-up",
                                         width=width, height=width * 0.75)


# ---- headline claims ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """A paper's headline as a ratio over one axis: `baseline` latency / `scheme` latency > `threshold`.

    With `baseline` = "" the ratio is the scheme's speedup over its own run on one device divided by
    the device count (super-linear scaling holds where it exceeds 1).
    """

    paper: str
    claim: str
    scheme: str
    baseline: str
    axis: str
    values: tuple[float, ...]
    phase: str
    base: str = "regime"  # which base deployment (see `claim_bases`)
    threshold: float = 1.0
    kind: str = "ratio"  # ratio: faster by > threshold; fits: scheme fits where baseline does not

    def __post_init__(self) -> None:
        require_choice("axis", self.axis, AXES)
        require_choice("claim kind", self.kind, ("ratio", "fits"))


def claim_rows(claim: Claim, base: Base, registry: Registry) -> pd.DataFrame:
    """One row per axis value: latencies, the claim's ratio, whether it holds, and why not when n/a."""
    names = [claim.scheme] + ([claim.baseline] if claim.baseline else [])
    missing = [n for n in names if n not in registry]
    if missing:
        return pd.DataFrame([{"paper": claim.paper, "claim": claim.claim, "axis": claim.axis, "value": math.nan,
                              "ratio": math.nan, "holds": False, "detail": f"not registered: {missing}"}])
    rows = []
    single, outcome = None, ""
    if not claim.baseline:
        single = evaluate_point(base, {claim.axis: claim.values[0], "n_devices": 1} if claim.axis != "n_devices"
                                else {"n_devices": 1}, [claim.phase], [claim.scheme], registry).iloc[0]
    for value in claim.values:
        t = evaluate_point(base, {claim.axis: value}, [claim.phase], names, registry).set_index("scheme")
        a = t.loc[claim.scheme]
        if claim.baseline:
            b = t.loc[claim.baseline]
            ok = a.status == "ok" and b.status == "ok"
            ratio = b.latency_s / a.latency_s if ok else math.nan
            detail = "" if ok else f"{claim.scheme}: {a.status} {a.notes}; {claim.baseline}: {b.status} {b.notes}"
            other = b.latency_s
            if claim.kind == "fits":
                ok = a.status == "ok" and b.status != "ok"
                detail = f"{claim.scheme}: {a.status}; {claim.baseline}: {b.status}"
                outcome = {(True, True): "both fit", (True, False): f"only {claim.scheme} fits",
                           (False, True): f"only {claim.baseline} fits"}.get(
                    (a.status == "ok", b.status == "ok"), "neither fits")
        else:
            ok = a.status == "ok" and single is not None and single.status == "ok"
            ratio = single.latency_s / a.latency_s / value if ok else math.nan
            detail = "" if ok else f"{a.status} {a.notes}"
            other = single.latency_s
        if claim.kind == "ratio":
            outcome = "holds" if ok and ratio > claim.threshold else ("fails" if ok else "n/a or OOM")
        rows.append({"paper": claim.paper, "claim": claim.claim, "kind": claim.kind, "outcome": outcome,
                     "axis": claim.axis, "value": value,
                     "scheme_latency_s": a.latency_s, "baseline_latency_s": other, "ratio": ratio,
                     "holds": bool(ok and (claim.kind == "fits" or ratio > claim.threshold)),
                     "threshold": claim.threshold,
                     "detail": detail.strip()})
    return pd.DataFrame(rows)


def claim_variants() -> dict:
    """Configurations of a paper's own evaluator that isolate one claim (not registered as schemes):
    TPI-LLM's TP with all weights resident (no sliding window) and a star or a ring all-reduce."""
    try:
        from workbench.schemes import tpi_llm
    except ImportError:
        return {}
    variants = {}
    for algorithm in ("star", "ring"):
        name = f"tpi_{algorithm}_resident"
        options = tpi_llm.default_options(scheduler=False, allreduce=algorithm)
        variants[name] = ("tpi_llm", partial(tpi_llm.evaluate_tpi, options=options, scheme=name, paper="tpi_llm"))
    return variants


def claims_frame(claims: Sequence[Claim], bases: dict[str, Base], registry: Registry | None = None) -> pd.DataFrame:
    """Every claim's rows (see `claim_rows`); claims may also name `claim_variants`."""
    registry = {**claim_variants(), **(load_all() if registry is None else registry)}
    return pd.concat([claim_rows(c, bases[c.base], registry) for c in claims], ignore_index=True)


def _span(part: pd.DataFrame) -> str:
    """'latency_ms = 1, 10 (ratio 1.20-2.70)' or 'nowhere'."""
    if part.empty:
        return "nowhere"
    ratio = part["ratio"].dropna()
    values = ", ".join(f"{v:g}" for v in part["value"])
    rng = f" (ratio {ratio.min():.2f}-{ratio.max():.2f})" if len(ratio) else " (OOM or n/a)"
    return f"{part['axis'].iloc[0]} = {values}{rng}"


def claims_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per claim: the axis values where it holds and where it fails, with the ratio range in each."""
    out = []
    for (paper, claim), g in rows.groupby(["paper", "claim"], sort=False):
        holds, fails = g[g["holds"]], g[~g["holds"]]

        out.append({"paper": paper, "claim": claim, "holds_at": _span(holds), "fails_at": _span(fails),
                    "crossover": crossover(g)})
    return pd.DataFrame(out)


def crossover(rows: pd.DataFrame) -> float:
    """The axis value where the ratio crosses its threshold (log-interpolated), NaN when it does not."""
    g = rows.dropna(subset=["ratio"]).sort_values("value")
    if "threshold" not in g or len(g) < 2:
        return math.nan
    r, v, thr = np.log(g["ratio"].to_numpy()), np.log(g["value"].to_numpy()), math.log(g["threshold"].iloc[0])
    for i in range(len(g) - 1):
        if (r[i] - thr) * (r[i + 1] - thr) < 0:
            return float(math.exp(v[i] + (thr - r[i]) * (v[i + 1] - v[i]) / (r[i + 1] - r[i])))
    return math.nan


def ratio_scale(ratios: pd.Series, threshold: float):
    """A log axis when the ratios and the threshold span a decade or more, else a linear one that fits them
    (a log axis over 1.0-1.5 would be labelled 1-9)."""
    import altair as alt

    values = pd.concat([ratios.dropna(), pd.Series([threshold])]).astype(float)
    low, high = float(values.min()), float(values.max())
    if low > 0 and high / low >= 10:
        return alt.Scale(type="log")
    pad = 0.05 * max(high - low, 1e-9)
    return alt.Scale(domain=[low - pad, high + pad], zero=False, nice=False)


def claim_chart(rows: pd.DataFrame, width: int = 220):
    """Each claim's ratio over its axis (log-log), the threshold dashed; filled where the claim holds."""
    import altair as alt

    charts = []
    for claim, g in rows.dropna(subset=["value"]).groupby("claim", sort=False):
        base = alt.Chart(g).encode(x=alt.X("value:Q", scale=alt.Scale(type="log"), title=AXES[g["axis"].iloc[0]]))
        if g["kind"].iloc[0] == "fits":  # which of the two fits, per axis value
            dots = base.mark_point(size=80, filled=True).encode(
                y=alt.Y("outcome:N", title=None), color=alt.Color("holds:N"), tooltip=["value", "outcome", "detail"])
            charts.append(dots.properties(title=alt.Title(f"{g['paper'].iloc[0]}: {claim}", fontSize=10),
                                          width=width, height=150))
            continue
        line = base.mark_line(point=alt.OverlayMarkDef(filled=True, size=50)).encode(
            y=alt.Y("ratio:Q", scale=ratio_scale(g["ratio"], g["threshold"].iloc[0]), title="ratio"),
            tooltip=["value", alt.Tooltip("ratio:Q", format=".3f"), "holds", "detail"])
        dots = base.mark_point(size=80, filled=True).encode(
            y="ratio:Q", color=alt.Color("holds:N", scale=alt.Scale(domain=[True, False], range=["#54a24b", "#e45756"])))
        rule = alt.Chart(pd.DataFrame({"threshold": [g["threshold"].iloc[0]]})).mark_rule(
            strokeDash=[4, 3], color="grey").encode(y="threshold:Q")
        title = f"{g['paper'].iloc[0]}: {claim}"
        charts.append(alt.layer(line, dots, rule).properties(title=alt.Title(title, fontSize=10), width=width,
                                                               height=150))
    rows_of = [alt.hconcat(*charts[i:i + 3]) for i in range(0, len(charts), 3)]
    return alt.vconcat(*rows_of)


# ---- the default study ----------------------------------------------------------------------------
SLICES = {  # name: (x axis, y axis, phases)
    "network": ("bandwidth_mbps", "latency_ms", ("prefill", "decode")),
    "scale": ("n_devices", "memory_gib", ("prefill", "decode")),
    "prompt": ("bandwidth_mbps", "seq_len", ("prefill",)),
}


def default_grid(quick: bool = False) -> dict[str, dict[str, tuple]]:
    """Axis values per slice: modest so `reproduce` stays fast (quick: 2 x 2)."""
    if quick:
        return {"network": {"bandwidth_mbps": (10, 1000), "latency_ms": (0.001, 10)},
                "scale": {"n_devices": (1, 8), "memory_gib": (1, 16)},
                "prompt": {"bandwidth_mbps": (10, 1000), "seq_len": (16, 1024)}}
    return {"network": {"bandwidth_mbps": (10, 30, 100, 300, 1000, 3000, 10000),
                        "latency_ms": (0.001, 0.01, 0.1, 1, 10)},
            "scale": {"n_devices": (1, 2, 4, 8), "memory_gib": (0.5, 1, 2, 4, 8, 16)},
            "prompt": {"bandwidth_mbps": (10, 100, 1000, 10000), "seq_len": (16, 64, 256, 1024)}}


def default_claims(quick: bool = False) -> list[Claim]:
    """Each paper's headline as a ratio over the axis the issue names."""
    taus = (0.001, 0.1, 10) if quick else (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10)
    bws = (10, 300, 10000) if quick else (10, 30, 100, 300, 1000, 3000, 10000)
    mems = (0.5, 2, 8) if quick else (0.25, 0.5, 1, 2, 4, 8, 16)
    return [
        Claim("tpi_llm", "star all-reduce beats ring (same TP, weights resident)", "tpi_star_resident",
              "tpi_ring_resident", "latency_ms", taus, "decode", base="laptops"),
        Claim("tpi_llm", "tensor parallelism (star) beats layer-wise model parallelism", "tpi_star_resident",
              LAYERWISE_MP, "latency_ms", taus, "decode", base="laptops"),
        Claim("tpi_llm", "sliding window fits where all-resident TP is out of memory", STAR_TP,
              "tpi_star_resident", "memory_gib", mems, "decode", base="laptops", kind="fits"),
        Claim("galaxy", "tile overlap speeds HMP up by > 5%", HMP_OVERLAP, HMP, "bandwidth_mbps",
              bws, "prefill", threshold=1.05),
        Claim("galaxy", "HMP (with overlap) beats Megatron TP", HMP_OVERLAP, MEGATRON_TP,
              "bandwidth_mbps", bws, "prefill"),
        Claim("galaxy", "HMP (with overlap) beats SP", HMP_OVERLAP, SP, "bandwidth_mbps", bws, "prefill"),
        Claim("mcu_siracusa", "super-linear speedup (speedup / chips > 1)", MCU_SCHEME, "", "n_devices",
              (2, 4, 8), "decode", base="mcu"),
        Claim("hepti", "2D-tiled WS beats 1D-tiled WS", HEPTI_2D, HEPTI_1D, "n_devices",
              (4, 16, 32) if quick else (2, 4, 8, 16, 32), "prefill"),
        Claim("sti", "elastic-shard pipeline beats the plain streamed pipeline by > 5%", STI_PIPELINE,
              STREAMED, "seq_len", (16, 128, 512) if quick else (8, 16, 32, 64, 128, 256, 512),
              "prefill", base="tv", threshold=1.05),
    ]


def claim_bases(regime: Base) -> dict[str, Base]:
    """Base deployments for the claims: the regime base, TPI-LLM's laptops, Siracusa MCUs, the smart TV."""
    from workbench.core.io import REPO_ROOT
    from workbench.scenarios.userconfig import load_config

    bases = {"regime": regime}
    laptops = load_config(REPO_ROOT / "examples" / "laptops_wifi.toml")
    bases["laptops"] = Base.from_config(laptops, model="Llama 2-7B", weight_bits=16)
    home = load_config(REPO_ROOT / "examples" / "smart_home.toml")
    tv = Cluster(home.cluster.devices[-1:], Topology("switch", 1, home.cluster.topology.link))
    bases["tv"] = Base(get_model("BERT-base"), tv, 128, 8.0, 16.0)
    try:
        from workbench.papers import mcu_siracusa as mcu

        tiny = get_model("TinyLlama-42M")
        workload = mcu.paper_workload(tiny, "autoregressive")
        bases["mcu"] = Base(tiny, mcu.siracusa_cluster(1), workload.kv_len, workload.weight_bits,
                            workload.activation_bits)
    except (ImportError, WorkbenchError):
        bases["mcu"] = regime
    return bases


def study(base: Base, quick: bool = False, registry: Registry | None = None,
          progress: Callable[[str], None] | None = None) -> dict[str, pd.DataFrame]:
    """Sweep every default slice and claim: {slice name: winners, ..., 'claims': claim rows}."""
    registry = load_all() if registry is None else registry
    out = {}
    for name, grid in default_grid(quick).items():
        if progress:
            progress(name)
        out[name] = winners(sweep(base, grid, SLICES[name][2], registry=registry))
    out["claims"] = claims_frame(default_claims(quick), claim_bases(base), registry)
    return out


def regime_result_rows(results: dict[str, pd.DataFrame], model: str) -> pd.DataFrame:
    """Tidy result rows: each grid point's winning latency and margin, and each claim's ratio."""
    from workbench.report.results import RESULT_COLUMNS

    rows = []
    for name, win in results.items():
        if name == "claims":
            continue
        x, y, _ = SLICES[name]
        for r in win.itertuples():
            setting = f"{x}={getattr(r, x):g},{y}={getattr(r, y):g},{r.phase},winner={r.winner}"
            rows.append(("workbench", f"regime_{name}", model, setting, "best_latency", r.latency_s, "s"))
            rows.append(("workbench", f"regime_{name}", model, setting, "margin_over_runner_up", r.margin, "x"))
    claims = results.get("claims", pd.DataFrame())
    for r in claims.dropna(subset=["value"]).itertuples():
        rows.append((r.paper, "headline_claims", "", f"{r.claim} | {r.axis}={r.value:g}", "ratio", r.ratio, "x"))
    out = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    return out[out["value"].notna()].reset_index(drop=True)
