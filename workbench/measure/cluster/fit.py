"""Fit the per-link constants o, L, beta of the collectives cost model (`workbench.measure.cluster.collectives`) and hold
the model to the data: per-call fits (`fit_all`), per-sync fits inside a running program (`fit_chains`), the
predictions beside the measurements (`predict`, `predict_chains`), the model before (`legacy_predict`).

Calibration (`is_calibration`): the 2-process psum of each link class only. On loopback it fits o and
beta (there is no wire: the kernel's loopback path is software at the endpoints, part of o); on a shaped
class it fits L and beta with o from loopback (same runtime, same machine). Every other point is
validation. The statistic is the median over calls (`statistic`; any stored one can be asked for):
the mean is the expected time the scheduler term models, but on this shared machine one burst of another
user's load moves the mean of 25 calls by milliseconds (in a busy campaign the loopback 2-process psum's
mean was about 2 ms at every small size, its median 0.35-0.5 ms), while the median keeps the typical call. These constants describe this machine only.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from workbench.core.constants import Constant
from workbench.core.errors import WorkbenchError, require_int
from workbench.machine.network import (
    collective_cost,
    collective_latency,
    traversals,
)
from workbench.measure.cluster.collectives import (
    CORE_ALGORITHMS,
    LOOPBACK,
    MATCHED_ALGORITHM,
    STATISTICS,
    WITH_BUCKET,
    HostModel,
    LinkModel,
    link_models,
    model_time,
)
from workbench.measure.cluster.netns import LinkShape
from workbench.measure.cluster.programs import RUNTIME_ALGORITHM

# The model before the fixed-costs issue (kept to report before -> after): one alpha per traversal of
# the ideal ring / star / tree, the ring standing in for gloo's halving-doubling.
LEGACY_ALGORITHM = {"psum": "ring", "all_gather": "ring", "psum_scatter": "ring", "star": "star",
                    "ring_ppermute": "ring", "tree_ppermute": "tree"}
FIT_PROGRAM, FIT_PROCESSES = "psum", 2
DEFAULT_STATISTIC = "median_s"


def statistic(frame: pd.DataFrame) -> str:
    """The per-point statistic to model by default: the median over calls (robust to other users' bursts)."""
    if DEFAULT_STATISTIC not in frame:
        raise WorkbenchError(f"measurements need a {DEFAULT_STATISTIC} column, got {sorted(frame.columns)}")
    return DEFAULT_STATISTIC


def is_calibration(frame: pd.DataFrame, program: str = FIT_PROGRAM, processes: int = FIT_PROCESSES) -> pd.Series:
    """Rows used to fit: the 2-process (unless asked) `program` (the psum unless asked) of each link class."""
    return (frame["program"] == program) & (frame["processes"] == processes)


def _terms(points: pd.DataFrame, host: HostModel, stat: str = DEFAULT_STATISTIC, burst_bytes: float = 0.0,
           burst_byte_cost_s: float = 0.0) -> tuple[np.ndarray, ...]:
    """Per point: steps, message sides x CPU share, busiest bytes (x CPU share on loopback), fixed seconds;
    the same terms as `model_time`, as arrays for the fit."""
    def unit(link: LinkModel) -> list[dict]:
        return [model_time(p, n, m, link, host, stat) for p, n, m in
                zip(points["program"], points["processes"], points["message_bytes"])]

    link_class = str(points["link_class"].iloc[0]) if "link_class" in points and len(points) else LOOPBACK
    o_only = unit(LinkModel(link_class, 1.0, 0.0, 1e-300))
    l_only = unit(LinkModel(link_class, 0.0, 1.0, 1e-300))
    b_only = unit(LinkModel(link_class, 0.0, 0.0, 1.0, burst_bytes))  # bytes past the bucket
    fast = unit(LinkModel(link_class, 0.0, 0.0, 1e-300, burst_bytes, burst_byte_cost_s))
    steps = np.array([r["wire_s"] for r in l_only])
    messages = np.array([r["message_s"] for r in o_only])
    busiest = np.array([r["bytes_s"] for r in b_only])
    fixed = np.array([r["dispatch_s"] + r["alloc_s"] + r["wait_s"] + r["bytes_s"] for r in fast])
    return steps, messages, busiest, fixed


def fit_link(points: pd.DataFrame, host: HostModel, stat: str = DEFAULT_STATISTIC,
             message_overhead_s: float | None = None, burst_bytes: float = 0.0,
             burst_byte_cost_s: float = 0.0) -> tuple[float, float, float, float]:
    """(o, L, beta, median |relative residual|) from one link class's calibration points.

    Without `message_overhead_s` it fits o and beta (L = 0: loopback); with it, L and beta, the first
    `burst_bytes` of a call passing at `burst_byte_cost_s` (a tbf bucket; `LinkModel.bytes_time`). Least squares
    on log(predicted / measured), so 4 B and 64 MiB weigh alike, with a soft-L1 loss (about 10 % scale):
    on a shared machine single points can be milliseconds off. Parameters are fitted as logarithms.
    """
    if len(points) < 2:
        raise WorkbenchError(f"fitting a link class needs at least 2 points, got {len(points)}")
    if stat not in points:
        raise WorkbenchError(f"statistic must be a measured column ({', '.join(STATISTICS)}), got {stat!r}")
    t = points[stat].to_numpy(float)
    if np.any(~np.isfinite(t)) or np.any(t <= 0):
        raise WorkbenchError("measured latencies must be finite and > 0 to fit")
    steps, messages, busiest, fixed = _terms(points, host, stat, burst_bytes, burst_byte_cost_s)
    per_call = messages if message_overhead_s is None else steps

    def model(x):
        base = fixed + (0.0 if message_overhead_s is None else message_overhead_s * messages)
        return base + np.exp(x[0]) * per_call + np.exp(x[1]) * busiest

    start = np.log([max(t.min() / max(per_call.max(), 1.0), 1e-9), max(t.max() / max(busiest.max(), 1.0), 1e-15)])
    result = least_squares(lambda x: np.log(model(x)) - np.log(t), start, loss="soft_l1", f_scale=0.1)
    first, beta = np.exp(result.x)
    residual = np.median(np.abs(model(result.x) - t) / t)
    if message_overhead_s is None:
        return float(first), 0.0, float(beta), float(residual)
    return float(message_overhead_s), float(first), float(beta), float(residual)


def fit_all(measured: pd.DataFrame, host: HostModel, stat: str | None = None,
            program: str = FIT_PROGRAM, bucket_share: float | None = None,
            processes: int = FIT_PROCESSES) -> pd.DataFrame:
    """One fit per link class on its calibration rows: loopback first (o, beta), then the shaped classes
    (L, beta) with loopback's o; without loopback data every class fits its own o (L = 0). A shaped class's
    tbf bucket passes `bucket_share` of its bytes per call at loopback's rate (default: the whole bucket for a
    single call's statistic, `WITH_BUCKET`, none otherwise)."""
    stat = stat or statistic(measured)
    if bucket_share is None:
        bucket_share = 1.0 if stat in WITH_BUCKET else 0.0
    calib = measured[is_calibration(measured, program, processes)]
    if calib.empty:
        raise WorkbenchError(f"no calibration rows ({processes}-process {program}) in the measurements")
    links = sorted(set(calib["link_class"]), key=lambda k: (k != LOOPBACK, k))
    o_loop, beta_loop, rows = None, 0.0, []
    for link in links:
        group = calib[calib["link_class"] == link]
        shaped = link != LOOPBACK and o_loop is not None
        burst = tbf_burst_bytes(link) * bucket_share if shaped else 0.0
        o, lat, beta, residual = fit_link(group, host, stat, o_loop if shaped else None, burst, beta_loop)
        if link == LOOPBACK:
            o_loop, beta_loop = o, beta
        rows.append({"link_class": link, "message_overhead_s": o, "latency_s": lat, "beta_s_per_byte": beta,
                     "bandwidth_bytes_per_s": 1.0 / beta, "burst_bytes": burst,
                     "burst_byte_cost_s": beta_loop if burst else 0.0, "fit_points": len(group), "statistic": stat,
                     "fitted": "L, beta (o from loopback)" if shaped else "o, beta (L = 0)",
                     "fit_median_abs_residual": residual})
    return pd.DataFrame(rows)


def tbf_burst_bytes(link_class: str) -> float:
    """The bucket of a shaped class ('tbf_<rate>mbit') as the launcher configures it (`LinkShape.burst`)."""
    match = re.fullmatch(r"tbf_([0-9.]+)mbit", link_class)
    if not match:
        raise WorkbenchError(f"link class must be 'loopback' or 'tbf_<rate>mbit', got {link_class!r}")
    return float(LinkShape(float(match.group(1))).burst)
CHAIN_STATISTIC = "per_sync_s"


def chain_slopes(chains: pd.DataFrame, stat: str = "min_s") -> pd.DataFrame:
    """Per (link class, processes, program, size): seconds of one more sync inside a running program, the
    least-squares slope of a chain's `stat` over its length (`sync_chain`); dispatch and the first wait are
    its intercept. Slopes of fastest calls are scheduler-free, and a steady stream of syncs finds the tbf
    bucket empty, so they are modelled with CPU sharing, no wait and no bucket (`per_sync_s`)."""
    need = {"link_class", "processes", "program", "message_bytes", "length", stat}
    if not need <= set(chains.columns):
        raise WorkbenchError(f"chain rows need columns {sorted(need)}, got {sorted(chains.columns)}")
    rows = []
    for (link, n, program, m), group in chains.groupby(["link_class", "processes", "program", "message_bytes"],
                                                       sort=False):
        if group["length"].nunique() < 2:
            raise WorkbenchError(f"a chain slope needs two lengths or more: {link}, {n} processes, {program}, {m} B")
        slope, intercept = np.polyfit(group["length"].to_numpy(float), group[stat].to_numpy(float), 1)
        rows.append({"link_class": link, "processes": int(n), "program": program, "message_bytes": int(m),
                     CHAIN_STATISTIC: float(slope), "intercept_s": float(intercept)})
    return pd.DataFrame(rows)
AFTER_COMPUTE, COMPUTE_ONLY = "star_after_gemm", "gemm_only"
# A star sync that follows a compute step: the same messages as the star, but every process has just computed
# and must run to reach it, so with more processes than cores its CPU work stretches by processes / cores
# (`active_steps`; on 4 processes the 2-process fit under-predicts these syncs by 44-47 % on loopback without it)
AFTER_COMPUTE_SYNC = "star_after_compute"
# The same after a step that streams its weights from memory (a decode step), which costs more per sync here
AFTER_STREAM, STREAM_ONLY = "star_after_stream", "stream_only"
AFTER_STREAM_SYNC = "star_after_streaming"
# The same among a real decoder layer's kernels: TPI-LLM's TP layer on its own shape with its two star syncs, less
# the same layers without them (`workbench.measure.cluster.experiments.decoder_chain`); per sync: half the difference
IN_DECODER, DECODER_ONLY = "star_in_decoder", "decoder_only"
DECODER_SYNC = "star_in_decoder_layers"
# derived sync kind -> (chain with the syncs, the same chain without them)
SYNC_AFTER = {AFTER_COMPUTE_SYNC: (AFTER_COMPUTE, COMPUTE_ONLY), AFTER_STREAM_SYNC: (AFTER_STREAM, STREAM_ONLY),
              DECODER_SYNC: (IN_DECODER, DECODER_ONLY)}
SYNCS_PER_STEP = {DECODER_SYNC: 2}  # a decoder layer syncs after attention and after the MLP; other chains once


def sync_after_step(slopes: pd.DataFrame, kind: str = AFTER_COMPUTE_SYNC) -> pd.DataFrame:
    """Per (link class, processes, size): what one star sync adds to a step that works first (the slope of the
    chain with syncs minus that of the same steps without them, `SYNC_AFTER`), as `kind` rows: in a decoder each
    sync finds processes that were just computing or streaming, which the bare chain of syncs does not see."""
    if kind not in SYNC_AFTER:
        raise WorkbenchError(f"sync kind must be one of {sorted(SYNC_AFTER)}, got {kind!r}")
    with_syncs, without = SYNC_AFTER[kind]
    keys = ["link_class", "processes", "message_bytes"]
    after = slopes[slopes.program == with_syncs].set_index(keys)[CHAIN_STATISTIC]
    alone = slopes[slopes.program == without].set_index(keys)[CHAIN_STATISTIC]
    both = after.index.intersection(alone.index)
    if both.empty:
        raise WorkbenchError(f"{kind} needs {with_syncs} and {without} chains at the same points")
    out = ((after[both] - alone[both]) / SYNCS_PER_STEP.get(kind, 1)).rename(CHAIN_STATISTIC).reset_index()
    return out.assign(program=kind)[["link_class", "processes", "program", "message_bytes", CHAIN_STATISTIC]]


def sync_after_compute(slopes: pd.DataFrame) -> pd.DataFrame:
    """`sync_after_step` after a compute step (`star_after_gemm` minus `gemm_only`)."""
    return sync_after_step(slopes, AFTER_COMPUTE_SYNC)


def fit_chains(slopes: pd.DataFrame, cores: int, longest: int = 32, processes: int = FIT_PROCESSES) -> pd.DataFrame:
    """Per link class, o / L / beta fitted on the star's per-sync slopes (`chain_slopes`) at `processes`
    processes (2 unless asked): the constants a running program pays per message, beside `fit_all`'s per-call
    ones (no dispatch, no wait). The syncs of a chain share one tbf bucket: each passes 1/`longest` of it at
    loopback's rate. The slopes must be of one program (one kind of sync)."""
    require_int("longest", longest, low=1)
    programs = sorted(set(slopes["program"])) if len(slopes) else ["star"]
    if len(programs) != 1:
        raise WorkbenchError(f"fit_chains fits one kind of sync at a time, got programs {programs}")
    return fit_all(slopes, HostModel(cores, 0.0, 0.0), CHAIN_STATISTIC, program=programs[0],
                   bucket_share=1.0 / longest, processes=processes)


def predict_chains(slopes: pd.DataFrame, fits: pd.DataFrame, cores: int) -> pd.DataFrame:
    """Every per-sync slope beside the model's with `fits` (calibration: the 2-process star of each class)."""
    host = HostModel(cores, 0.0, 0.0)
    links = link_models(fits)
    out = slopes.copy()
    out["predicted_s"] = [model_time(r.program, r.processes, r.message_bytes, links[r.link_class], host,
                                     CHAIN_STATISTIC)["pred_s"] for r in slopes.itertuples()]
    out["error"] = out["predicted_s"] / out[CHAIN_STATISTIC] - 1
    out["role"] = np.where(is_calibration(slopes, str(slopes["program"].iloc[0])), "calibration", "validation")
    return out


def predict(measured: pd.DataFrame, fits: pd.DataFrame, host: HostModel, stat: str | None = None,
            program: str = FIT_PROGRAM) -> pd.DataFrame:
    """Measured points with the model's prediction and its parts, the core's ring / tree / star with the
    fitted link (per-message o, L, beta; no host terms) for comparison, the error and the role."""
    stat = stat or statistic(measured)
    links = link_models(fits)
    missing = sorted(set(measured["link_class"]) - set(links))
    if missing:
        raise WorkbenchError(f"no fit for link classes {missing}")
    out = measured.copy()
    parts = pd.DataFrame([model_time(p, n, m, links[k], host, stat) for p, n, m, k in
                          zip(out["program"], out["processes"], out["message_bytes"], out["link_class"])],
                         index=out.index)
    out = pd.concat([out, parts], axis=1)
    collective = out["program"].map(lambda p: RUNTIME_ALGORITHM[p][0])
    for algorithm in CORE_ALGORITHMS:
        out[f"pred_{algorithm}_s"] = [
            float(collective_latency(algorithm, c, n, m, links[k].bandwidth_bytes_per_s, links[k].latency_s,
                                     message_overhead=links[k].message_overhead_s))
            for c, n, m, k in zip(collective, out["processes"], out["message_bytes"], out["link_class"])]
    out["runtime_algorithm"] = out["program"].map(lambda p: RUNTIME_ALGORITHM[p][1])
    out["model_algorithm"] = out["program"].map(MATCHED_ALGORITHM)
    out["statistic"] = stat
    out["measured_s"] = out[stat]
    out["rel_error"] = (out["pred_s"] - out["measured_s"]).abs() / out["measured_s"]
    out["role"] = np.where(is_calibration(out, program), "calibration", "validation")
    return out


def legacy_predict(measured: pd.DataFrame, stat: str | None = None) -> pd.DataFrame:
    """The model before the fixed-costs issue, refitted on the same rows and statistic: alpha per traversal of
    the ideal algorithm (`LEGACY_ALGORITHM`) + beta x busiest bytes, no dispatch, no scheduler wait."""
    stat = stat or statistic(measured)
    out = measured.copy()
    collective = out["program"].map(lambda p: RUNTIME_ALGORITHM[p][0])
    algorithm = out["program"].map(LEGACY_ALGORITHM)
    a = np.array([float(traversals(al, c, n)) for al, c, n in zip(algorithm, collective, out["processes"])])
    b = np.array([float(collective_cost(al, c, n, m).busiest_bytes)
                  for al, c, n, m in zip(algorithm, collective, out["processes"], out["message_bytes"])])
    calib = is_calibration(out).to_numpy()
    out["pred_s"] = np.nan
    for link in sorted(set(out["link_class"])):
        sel = calib & (out["link_class"] == link).to_numpy()
        if sel.sum() < 2:
            raise WorkbenchError(f"no calibration rows for link class {link!r}")
        t = out.loc[sel, stat].to_numpy(float)

        def log_ratio(x, sel=sel, t=t):
            return np.log(np.exp(x[0]) * a[sel] + np.exp(x[1]) * b[sel]) - np.log(t)

        x = least_squares(log_ratio, np.log([1e-4, 1e-9]), loss="soft_l1", f_scale=0.1).x
        rows = (out["link_class"] == link).to_numpy()
        out.loc[rows, "pred_s"] = np.exp(x[0]) * a[rows] + np.exp(x[1]) * b[rows]
    out["measured_s"] = out[stat]
    out["rel_error"] = (out["pred_s"] - out["measured_s"]).abs() / out["measured_s"]
    out["role"] = np.where(calib, "calibration", "validation")
    return out


def validation_summary(predicted: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Median (and 90th percentile) relative error of the validation points, overall or per group."""
    val = predicted[predicted["role"] == "validation"]
    if val.empty:
        raise WorkbenchError("no validation points")
    if not by:
        return pd.DataFrame([{"points": len(val), "median_rel_error": val["rel_error"].median(),
                              "p90_rel_error": val["rel_error"].quantile(0.9),
                              "within_20pct": float((val["rel_error"] <= 0.2).mean())}])
    return val.groupby(list(by)).agg(points=("rel_error", "size"), median_rel_error=("rel_error", "median"),
                                      p90_rel_error=("rel_error", lambda s: s.quantile(0.9))).reset_index()


def star_vs_ring(measured: pd.DataFrame, max_bytes: int = 2048, min_processes: int = 4,
                 stat: str = "median_s") -> pd.DataFrame:
    """Measured star vs both rings (gloo's psum and the kernel's ppermute ring) at small messages, 4+ processes.

    The ppermute ring is the like-for-like comparison (both are chains of gloo send/recv pairs);
    psum is what `jax.lax.psum` gives you on this runtime.
    """
    small = measured[(measured["message_bytes"] <= max_bytes) & (measured["processes"] >= min_processes)]
    pivot = small.pivot_table(index=["link_class", "processes", "message_bytes"], columns="program",
                              values=stat).reset_index()
    needed = ["star", "psum", "ring_ppermute"]
    if any(p not in pivot for p in needed):
        raise WorkbenchError(f"star_vs_ring needs measurements of {needed}")
    pivot = pivot.dropna(subset=needed)
    out = pivot[["link_class", "processes", "message_bytes"]].copy()
    out["star_s"], out["psum_ring_s"], out["ppermute_ring_s"] = pivot["star"], pivot["psum"], pivot["ring_ppermute"]
    out["star_over_psum_ring"] = out["star_s"] / out["psum_ring_s"]
    out["star_over_ppermute_ring"] = out["star_s"] / out["ppermute_ring_s"]
    out["star_beats_psum_ring"] = out["star_s"] < out["psum_ring_s"]
    out["star_beats_ppermute_ring"] = out["star_s"] < out["ppermute_ring_s"]
    return out.reset_index(drop=True)


def fit_constants(fits: pd.DataFrame, measurement_file: str, machine: str, date: str) -> dict[str, Constant]:
    """The fitted constants as provenance-carrying constants: `message_overhead` (o, fitted on loopback),
    and per link class `<link>_latency` (L: fitted on a shaped class, 0 assumed on loopback) and
    `<link>_byte_cost` (beta)."""
    out = {}
    source = (f"calibration on this machine ({machine}; measured {date}) with jax.distributed + gloo; "
              f"not a property of any paper's hardware")
    for row in fits.itertuples():
        fitted_on = (f"{measurement_file}: program={FIT_PROGRAM}, processes={FIT_PROCESSES}, "
                     f"link_class={row.link_class} ({row.fit_points} message sizes, {row.statistic} over calls)")
        shaped = row.link_class != LOOPBACK and "o from loopback" in row.fitted
        if not shaped:
            name = "message_overhead" if row.link_class == LOOPBACK else f"{row.link_class}_message_overhead"
            out[name] = Constant(name, row.message_overhead_s, "s", "fitted",
                                 f"per-message endpoint software (send or receive handled in turn); {source}",
                                 fitted_on)
            out[f"{row.link_class}_latency"] = Constant(
                f"{row.link_class}_latency", 0.0, "s", "assumed",
                "no wire on loopback: the kernel's loopback path is software at the endpoints, part of "
                "message_overhead")
        else:
            out[f"{row.link_class}_latency"] = Constant(
                f"{row.link_class}_latency", row.latency_s, "s", "fitted",
                f"wire latency per traversal of the shaped path (veth, bridge, tbf), beside loopback's "
                f"message_overhead; {source}", fitted_on)
        out[f"{row.link_class}_byte_cost"] = Constant(f"{row.link_class}_byte_cost", row.beta_s_per_byte, "s/B",
                                                      "fitted", f"per-byte cost of the link class; {source}",
                                                      fitted_on)
    return out


def fits_from_constants(constants: dict[str, Constant]) -> pd.DataFrame:
    """Back from `message_overhead` / `<link>_latency` / `<link>_byte_cost` constants to a fits table."""
    links = sorted(k.removesuffix("_byte_cost") for k in constants if k.endswith("_byte_cost"))
    rows = []
    for link in links:
        own = f"{link}_message_overhead"
        o = constants[own] if own in constants else constants.get("message_overhead")
        if o is None:
            raise WorkbenchError(f"no message_overhead constant for link class {link!r}")
        beta = float(constants[f"{link}_byte_cost"].value)
        rows.append({"link_class": link, "message_overhead_s": float(o.value),
                     "latency_s": float(constants[f"{link}_latency"].value), "beta_s_per_byte": beta,
                     "bandwidth_bytes_per_s": 1.0 / beta})
    return pd.DataFrame(rows)
