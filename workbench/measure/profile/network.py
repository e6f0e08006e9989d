"""`python -m workbench profile network`: a link class's `[network]` table, measured with the cluster launcher.

The per-message endpoint time, the wire latency and the bandwidth of a link class as `processes` co-located
processes see it (star syncs inside one running program, or single calls of a 2-process psum; over loopback,
or through tbf-shaped namespaces as root), fitted by `workbench.measure.cluster.fit`, written as a deployment's
`[network]` table with each number's kind and source.
"""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pandas as pd

from workbench.core.errors import require_choice, require_int
from workbench.core.units import bytes_per_s_to_mbps

# --phase -> the derived sync kind of `workbench.measure.cluster.fit.SYNC_AFTER` (its chain with syncs, and without)
PHASE_KIND = {"decoder": "star_in_decoder_layers", "decode": "star_after_streaming", "prefill": "star_after_compute"}
PHASE_WORK = {"decoder": "among a TP decoder layer's kernels (1 and 32 tokens)", "decode": "after a decode step",
              "prefill": "after a prefill step"}


def network_table(rate_mbit: float | None, quick: bool, processes: int = 2, phase: str | None = "decoder") \
        -> tuple[str, pd.DataFrame]:
    """The `[network]` table of one link class, as `processes` co-located processes see it: star syncs inside
    one running program (`sync_chain`), by default among TPI-LLM's TP decoder layers (`decoder`: the layers with
    their two syncs less the same layers without them; what the own_hardware notebook verifies), or after one
    decode step's streaming GEMV (`decode`) or a prefill's GEMM (`prefill`), less the same steps alone, fitted
    at that process count; or, with `phase=None`, single calls of a 2-process psum. Returns the TOML text and
    the measured rows."""
    from workbench.measure.cluster.collectives import HostModel, colocated_link
    from workbench.measure.cluster.fit import SYNC_AFTER, chain_slopes, fit_all, fit_chains, sync_after_step
    from workbench.measure.cluster.host import kernel_hz
    from workbench.measure.cluster.measure import machine_label

    require_int("processes", processes, low=2, high=16)
    where = f"python -m workbench profile network on {machine_label()}, {dt.date.today().isoformat()}"
    cores = int(os.cpu_count() or 1)
    if phase is None:
        from workbench.measure.cluster.measure import CampaignPoint, run_point

        sizes = (4, 4096, 1 << 18) if quick else (4, 64, 4096, 1 << 16, 1 << 20, 1 << 22)
        rows, _ = run_point(CampaignPoint(2, sizes, rate_mbit, programs=("psum",)),
                            target_seconds=0.3 if quick else 1.0, min_reps=3 if quick else 5,
                            max_reps=8 if quick else 25)
        hz, _ = kernel_hz()
        fit = fit_all(rows, HostModel(cores, 1.0 / hz)).iloc[0]
        what = "single calls of a 2-process psum"
        bandwidth, latency, overhead = (float(fit["bandwidth_bytes_per_s"]), float(fit["latency_s"]),
                                        float(fit["message_overhead_s"]))
    else:
        from workbench.measure.cluster.launcher import ClusterSpec, launch
        from workbench.measure.cluster.measure import chain_summary
        from workbench.measure.cluster.netns import LinkShape

        require_choice("phase", phase, tuple(PHASE_KIND))
        kind = PHASE_KIND[phase]
        with_syncs, alone = SYNC_AFTER[kind]
        params = {"programs": [with_syncs, alone], "sizes": [2048, 65536],
                  "lengths": [1, 8] if quick else [1, 8, 32], "reps": 3 if quick else 15}
        if phase == "decoder":
            params = {"programs": [with_syncs, alone], "decoder_tokens": [1, 8] if quick else [1, 32],
                      "decoder_lengths": [1, 4] if quick else [1, 4, 16], "reps": 3 if quick else 15}
        shape = LinkShape(rate_mbit) if rate_mbit else None
        run = launch(ClusterSpec(processes, "sync_chain", params, shape=shape, timeout_s=1800),
                     announce=lambda message: None)
        rows = chain_summary(run, processes, dt.date.today().isoformat(), machine_label())
        slopes = sync_after_step(chain_slopes(rows), kind)
        longest = max(params.get("lengths", params.get("decoder_lengths")))
        fit = fit_chains(slopes, cores, longest, processes)
        link = colocated_link(_link(fit.iloc[0]), kind, processes, cores)
        what = (f"star syncs {PHASE_WORK[phase]} inside one program on {processes} co-located processes "
                f"(sync_chain: {with_syncs} less {alone}, fitted at that count)")
        bandwidth, latency, overhead = link.bandwidth_bytes_per_s, link.latency_s, link.message_overhead_s
    mbps, what_bandwidth = resolved_bandwidth_mbps(bandwidth, what)
    text = "\n".join([
        "[network]", 'topology = "switch"',
        f"bandwidth_mbps = {mbps!r}",
        f"latency_ms = {latency * 1e3 / 2!r}  # per hop: a switch has two",
        f"message_overhead_us = {overhead * 1e6!r}",
        "[network.sources]",
        f"bandwidth_mbps = {_q(f'kind = measured: {what_bandwidth} ({where})')}",
        f"latency_ms = {_q(f'kind = measured: wire latency of {what}, half per hop ({where})')}",
        f"message_overhead_us = {_q(f'kind = measured: per-message endpoint time of {what} ({where})')}",
    ]) + "\n"
    return text, rows


def resolved_bandwidth_mbps(bandwidth_bytes_per_s: float, what: str) -> tuple[float, str]:
    """The fitted bandwidth in Mbit/s and its provenance text; a per-byte cost the measured sizes could not
    resolve (the larger syncs cost no more than the small ones, so the fit drives it to ~0) is written as the
    largest bandwidth a deployment accepts, and says so, so the file `profile` writes is one `whatif` reads."""
    from workbench.scenarios.userconfig import NETWORK_FIELDS

    mbps = bytes_per_s_to_mbps(bandwidth_bytes_per_s)
    ceiling = float(NETWORK_FIELDS["bandwidth_mbps"].high)
    if np.isfinite(mbps) and mbps <= ceiling:
        return float(mbps), f"1 / per-byte cost of {what}"
    return ceiling, (f"per-byte cost of {what} not resolved (the larger syncs cost no more than the small "
                     f"ones within the noise; fitted {mbps:.3g} Mbit/s): the largest bandwidth a deployment "
                     f"accepts; re-run without --quick")


def _link(row):
    """A fit row as a LinkModel."""
    from workbench.measure.cluster.collectives import link_models

    return link_models(pd.DataFrame([row]))[row["link_class"]]


def _q(text: str) -> str:
    """A TOML basic string."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
