"""Fit a per-message latency and a per-byte cost per link class, and hold the core's models to the data.

The model is `workbench.network.collective_latency`: time = traversals x alpha + bottleneck bytes x beta
(path_hops = 1, so alpha is the whole per-message cost: socket, kernel, bridge and JAX dispatch).
Calibration: for each link class, alpha and beta are fitted (robust least squares on log ratios, see
`fit_link`) to the 2-process psum only. Every other measured point (4 and 8 processes, all_gather,
psum_scatter, the star) is validation. These constants describe this machine, nothing else.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from workbench.cluster.programs import RUNTIME_ALGORITHM
from workbench.constants import Constant
from workbench.errors import WorkbenchError
from workbench.network import bottleneck_bytes, collective_latency, traversals

CORE_ALGORITHMS = ("ring", "tree", "star")
# The core algorithm that models what the runtime runs (halving-doubling has no core model: its bytes
# equal the ring's, its latency steps are log2 n instead of n - 1).
MATCHED_ALGORITHM = {"psum": "ring", "all_gather": "ring", "psum_scatter": "ring", "star": "star",
                     "ring_ppermute": "ring", "tree_ppermute": "tree"}
FIT_PROGRAM, FIT_PROCESSES = "psum", 2


def is_calibration(frame: pd.DataFrame) -> pd.Series:
    """Rows used to fit alpha and beta: the 2-process psum of each link class."""
    return (frame["program"] == FIT_PROGRAM) & (frame["processes"] == FIT_PROCESSES)


def fit_link(points: pd.DataFrame) -> tuple[float, float, float]:
    """(alpha_s, beta_s_per_byte, median |relative residual|) from measured points of one link class.

    Least squares on log(predicted / measured), so 4 B and 64 MiB weigh alike, with a soft-L1 loss
    (about 10 % scale), because on a shared machine single points can be milliseconds off (another
    user's process held the core); alpha and beta are kept positive by fitting their logarithms.
    """
    if len(points) < 2:
        raise WorkbenchError(f"fitting alpha and beta needs at least 2 points, got {len(points)}")
    collective = points["program"].map(lambda p: RUNTIME_ALGORITHM[p][0])
    algorithm = points["program"].map(MATCHED_ALGORITHM)
    a = np.array([float(traversals(al, c, n)) for al, c, n in zip(algorithm, collective, points["processes"])])
    b = np.array([float(bottleneck_bytes(al, c, n, m)) for al, c, n, m in
                  zip(algorithm, collective, points["processes"], points["message_bytes"])])
    t = points["median_s"].to_numpy(float)
    if np.any(t <= 0):
        raise WorkbenchError("measured latencies must be > 0 to fit")

    def log_ratio(x):
        return np.log(np.exp(x[0]) * a + np.exp(x[1]) * b) - np.log(t)

    start = np.log([max(t.min() / max(a.max(), 1.0), 1e-9), max(t.max() / max(b.max(), 1.0), 1e-15)])
    result = least_squares(log_ratio, start, loss="soft_l1", f_scale=0.1)
    alpha, beta = np.exp(result.x)
    residual = (alpha * a + beta * b - t) / t
    return float(alpha), float(beta), float(np.median(np.abs(residual)))


def fit_all(measured: pd.DataFrame) -> pd.DataFrame:
    """One fit per link class on its calibration rows."""
    rows = []
    for link, group in measured[is_calibration(measured)].groupby("link_class", sort=True):
        alpha, beta, residual = fit_link(group)
        rows.append({"link_class": link, "alpha_s": alpha, "beta_s_per_byte": beta,
                     "bandwidth_bytes_per_s": 1.0 / max(beta, 1e-30),
                     "fit_points": len(group), "fit_median_abs_residual": residual})
    if not rows:
        raise WorkbenchError("no calibration rows (2-process psum) in the measurements")
    return pd.DataFrame(rows)


def predict(measured: pd.DataFrame, fits: pd.DataFrame) -> pd.DataFrame:
    """Measured points with the ring / tree / star predictions, the matched one, its error and role."""
    fit = fits.set_index("link_class")
    missing = sorted(set(measured["link_class"]) - set(fit.index))
    if missing:
        raise WorkbenchError(f"no fit for link classes {missing}")
    out = measured.copy()
    alpha = out["link_class"].map(fit["alpha_s"]).to_numpy(float)
    bandwidth = out["link_class"].map(fit["bandwidth_bytes_per_s"]).to_numpy(float)
    collective = out["program"].map(lambda p: RUNTIME_ALGORITHM[p][0])
    n, m = out["processes"].to_numpy(float), out["message_bytes"].to_numpy(float)
    for algorithm in CORE_ALGORITHMS:
        out[f"pred_{algorithm}_s"] = [
            float(collective_latency(algorithm, c, ni, mi, bi, ai))
            for c, ni, mi, bi, ai in zip(collective, n, m, bandwidth, alpha)]
    out["runtime_algorithm"] = out["program"].map(lambda p: RUNTIME_ALGORITHM[p][1])
    out["model_algorithm"] = out["program"].map(MATCHED_ALGORITHM)
    out["pred_s"] = [getattr(row, f"pred_{row.model_algorithm}_s") for row in out.itertuples()]
    out["rel_error"] = (out["pred_s"] - out["median_s"]).abs() / out["median_s"]
    out["role"] = np.where(is_calibration(out), "calibration", "validation")
    return out


def validation_summary(predicted: pd.DataFrame, by: tuple[str, ...] = ()) -> pd.DataFrame:
    """Median (and 90th percentile) relative error of the validation points, overall or per group."""
    val = predicted[predicted["role"] == "validation"]
    if val.empty:
        raise WorkbenchError("no validation points")
    if not by:
        return pd.DataFrame([{"points": len(val), "median_rel_error": val["rel_error"].median(),
                              "p90_rel_error": val["rel_error"].quantile(0.9)}])
    return val.groupby(list(by)).agg(points=("rel_error", "size"), median_rel_error=("rel_error", "median"),
                                      p90_rel_error=("rel_error", lambda s: s.quantile(0.9))).reset_index()


def star_vs_ring(measured: pd.DataFrame, max_bytes: int = 2048, min_processes: int = 4) -> pd.DataFrame:
    """Measured star vs both rings (gloo's psum and the kernel's ppermute ring) at small messages, 4+ processes.

    The ppermute ring is the like-for-like comparison (both are chains of gloo send/recv pairs);
    psum is what `jax.lax.psum` gives you on this runtime.
    """
    small = measured[(measured["message_bytes"] <= max_bytes) & (measured["processes"] >= min_processes)]
    pivot = small.pivot_table(index=["link_class", "processes", "message_bytes"], columns="program",
                              values="median_s").reset_index()
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
    """The fitted alpha and beta of each link class as provenance-carrying constants."""
    out = {}
    for row in fits.itertuples():
        fitted_on = (f"{measurement_file}: program={FIT_PROGRAM}, processes={FIT_PROCESSES}, "
                     f"link_class={row.link_class} ({row.fit_points} message sizes)")
        source = (f"calibration on this machine ({machine}; measured {date}) with jax.distributed + gloo; "
                  f"not a property of any paper's hardware")
        out[f"{row.link_class}_message_latency"] = Constant(
            f"{row.link_class}_message_latency", row.alpha_s, "s", "fitted", source, fitted_on)
        out[f"{row.link_class}_byte_cost"] = Constant(
            f"{row.link_class}_byte_cost", row.beta_s_per_byte, "s/B", "fitted", source, fitted_on)
    return out


def constants_toml(constants: dict[str, Constant], header: str = "") -> str:
    """Render constants in the data/constants TOML format (deterministic)."""
    def q(text: str) -> str:
        return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"# {line}" for line in header.splitlines()] + ([""] if header else [])
    for name in sorted(constants):
        c = constants[name]
        value = float(f"{c.value:.6g}") if isinstance(c.value, float) else c.value
        lines += [f"[{name}]", f"value = {value!r}", f"unit = {q(c.unit)}", f"kind = {q(c.kind)}",
                  f"source = {q(c.source)}"]
        if c.fitted_on:
            lines.append(f"fitted_on = {q(c.fitted_on)}")
        lines.append("")
    return "\n".join(lines)


def fits_from_constants(constants: dict[str, Constant]) -> pd.DataFrame:
    """Back from `<link>_message_latency` / `<link>_byte_cost` constants to a fits table."""
    links = sorted(k.removesuffix("_message_latency") for k in constants if k.endswith("_message_latency"))
    rows = []
    for link in links:
        beta = float(constants[f"{link}_byte_cost"].value)
        rows.append({"link_class": link, "alpha_s": float(constants[f"{link}_message_latency"].value),
                     "beta_s_per_byte": beta, "bandwidth_bytes_per_s": 1.0 / max(beta, 1e-30)})
    return pd.DataFrame(rows)
