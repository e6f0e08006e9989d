"""Syncs inside a running program: the chain experiment, its slope, and the link fitted on it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.measure.cluster.collectives import HostModel, LinkModel, model_time
from workbench.measure.cluster.fit import CHAIN_STATISTIC, chain_slopes, fit_chains, predict_chains


def _chain_rows(per_sync: dict, intercept: float = 3e-4, lengths=(1, 8, 32)) -> pd.DataFrame:
    return pd.DataFrame([{"link_class": link, "processes": n, "program": "star", "message_bytes": m, "length": k,
                          "min_s": intercept + k * t} for (link, n, m), t in per_sync.items() for k in lengths])


def test_chain_slope_is_the_per_sync_time_and_drops_the_intercept():
    slopes = chain_slopes(_chain_rows({("loopback", 2, 2048): 1.1e-4, ("loopback", 4, 2048): 4.9e-4}))
    assert slopes[CHAIN_STATISTIC].tolist() == pytest.approx([1.1e-4, 4.9e-4])
    assert slopes["intercept_s"].tolist() == pytest.approx([3e-4, 3e-4])


def test_a_chain_measured_at_one_length_is_refused():
    with pytest.raises(WorkbenchError, match="two lengths or more"):
        chain_slopes(_chain_rows({("loopback", 2, 2048): 1e-4}, lengths=(8,)))


def test_fit_on_two_process_chains_recovers_the_link_and_predicts_four():
    truth = LinkModel("loopback", 5e-5, 0.0, 1 / 3e8)
    host = HostModel(2, 0.0, 0.0)
    per_sync = {("loopback", n, m): model_time("star", n, m, truth, host, CHAIN_STATISTIC)["pred_s"]
                for n in (2, 4) for m in (2048, 65536)}
    slopes = chain_slopes(_chain_rows(per_sync))
    fits = fit_chains(slopes, cores=2).set_index("link_class")
    assert fits.loc["loopback", "message_overhead_s"] == pytest.approx(5e-5, rel=1e-3)
    assert fits.loc["loopback", "bandwidth_bytes_per_s"] == pytest.approx(3e8, rel=1e-3)
    checked = predict_chains(slopes, fits.reset_index(), cores=2)
    assert set(checked.role) == {"calibration", "validation"}
    assert np.abs(checked.error).max() < 1e-3
    # a star at 4 processes handles 6 messages at its master, not 2: the slope is ~3x the 2-process one
    four, two = (checked[(checked.processes == n) & (checked.message_bytes == 2048)][CHAIN_STATISTIC].iloc[0]
                 for n in (4, 2))
    assert four / two == pytest.approx(3.0, rel=0.05)


def test_chains_of_one_shaped_class_share_one_bucket():
    # 32 syncs of 2 KiB fit a 64 KiB bucket: the shaped fit charges each sync 1/32 of the bucket at loopback's
    # rate, so its per-byte cost is what the 64 KiB chain pays past the bucket, not the small chain's
    host = HostModel(2, 0.0, 0.0)
    loop = LinkModel("loopback", 5e-5, 0.0, 1 / 3e8)
    shaped = LinkModel("tbf_100mbit", 5e-5, 1e-5, 8 / 100e6, 65536 / 32, 1 / 3e8)
    per_sync = {(link.link_class, 2, m): model_time("star", 2, m, link, host, CHAIN_STATISTIC)["pred_s"]
                for link in (loop, shaped) for m in (2048, 65536)}
    fits = fit_chains(chain_slopes(_chain_rows(per_sync)), cores=2).set_index("link_class")
    assert fits.loc["tbf_100mbit", "burst_bytes"] == pytest.approx(65536 / 32)
    assert fits.loc["tbf_100mbit", "bandwidth_bytes_per_s"] == pytest.approx(100e6 / 8, rel=1e-2)


@pytest.mark.slow
def test_sync_chain_runs_on_host_devices_and_checks_its_result():
    from types import SimpleNamespace

    import jax

    from workbench.measure.cluster import experiments

    ctx = SimpleNamespace(n_devices=len(jax.devices()))
    rows = experiments.sync_chain(ctx, programs=experiments.CHAIN_PROGRAMS, sizes=(64,), lengths=(1, 4), reps=2,
                                  rounds=1, decoder_tokens=(1,), decoder_lengths=(1, 4))
    assert {(r["program"], r["length"]) for r in rows} == {(p, k) for p in experiments.CHAIN_PROGRAMS for k in (1, 4)}
    assert all(len(r["times_s"]) == 2 and min(r["times_s"]) > 0 for r in rows)
    with pytest.raises(WorkbenchError, match="length"):
        experiments.make_chain("star", experiments._global_mesh(), 0)


def test_a_sync_after_compute_is_the_step_minus_its_compute():
    from workbench.measure.cluster.fit import sync_after_compute

    rows = []
    for program, per_step in (("star_after_gemm", 6e-4), ("gemm_only", 4e-4), ("star", 1e-4)):
        rows += _chain_rows({("loopback", 2, 2048): per_step}).assign(program=program).to_dict("records")
    after = sync_after_compute(chain_slopes(pd.DataFrame(rows)))
    assert after.program.tolist() == ["star_after_compute"] and after[CHAIN_STATISTIC].tolist() == pytest.approx([2e-4])
    with pytest.raises(WorkbenchError, match="gemm_only"):
        sync_after_compute(chain_slopes(pd.DataFrame([r for r in rows if r["program"] != "gemm_only"])))


def test_the_decoders_link_is_fitted_on_syncs_after_compute():
    from workbench.measure.cluster.collectives import link_models
    from workbench.studies import cluster as stored

    links, bare = stored.program_links(), stored.chain_table()
    after = bare[(bare.syncs == "after compute") & (bare.role == "calibration") & (bare.link_class == "loopback")]
    small = after[after.message_bytes == after.message_bytes.min()].iloc[0]
    # the 2-process star handles 2 messages at its master: o is half the per-sync time (less its bytes)
    assert links["loopback"].message_overhead_s == pytest.approx(small.per_sync_s / 2, rel=0.2)
    assert links["loopback"].message_overhead_s < link_models(stored.stored_fits())["loopback"].message_overhead_s


def test_a_sync_after_compute_needs_every_process_so_co_located_ones_stretch_its_cpu_work():
    from workbench.measure.cluster.collectives import active_steps, colocated_link, cpu_share
    from workbench.measure.cluster.fit import AFTER_COMPUTE_SYNC

    assert set(a for a, _ in active_steps(AFTER_COMPUTE_SYNC, 4)) == {4}
    assert set(a for a, _ in active_steps("star", 4)) == {2}  # a bare star step: the master and one worker
    assert cpu_share(AFTER_COMPUTE_SYNC, 4, 2) == pytest.approx(2.0) and cpu_share("star", 4, 2) == 1.0
    loop, shaped = LinkModel("loopback", 1e-4, 0.0, 1e-9), LinkModel("tbf_100mbit", 1e-4, 2e-4, 8e-8)
    assert colocated_link(loop, AFTER_COMPUTE_SYNC, 2, 2) == loop  # a core each: nothing stretches
    four = colocated_link(loop, AFTER_COMPUTE_SYNC, 4, 2)
    assert (four.message_overhead_s, four.byte_cost_s) == pytest.approx((2e-4, 2e-9))  # o and the CPU's copies
    wire = colocated_link(shaped, AFTER_COMPUTE_SYNC, 4, 2)
    assert (wire.message_overhead_s, wire.latency_s, wire.byte_cost_s) == pytest.approx((2e-4, 2e-4, 8e-8))


def test_the_stored_four_process_syncs_after_compute_are_predicted_better_with_the_stretch(monkeypatch):
    from workbench.measure.cluster import collectives
    from workbench.studies import cluster as stored

    def loopback_after_compute(table):
        rows = table[(table.syncs == "after compute") & (table.role == "validation") & (table.link_class == "loopback")]
        assert len(rows) == 2
        return float(rows.error.abs().median())

    stretched = loopback_after_compute(stored.chain_table())
    monkeypatch.setattr(collectives, "cpu_share", lambda program, processes, cores, message_bytes=4096.0: 1.0)
    # the chains measured 17:51-17:58 on 2026-11-24: +11 / +36 % with the stretch, -44 / -32 % without (the
    # campaign before: +12 / +7 % and -44 / -47 %)
    assert stretched < loopback_after_compute(stored.chain_table())


def test_a_sync_after_streaming_is_the_streaming_step_minus_its_stream():
    from workbench.measure.cluster.fit import AFTER_STREAM_SYNC, fit_chains, sync_after_step

    rows = []
    for program, per_step in (("star_after_stream", 7e-4), ("stream_only", 3e-4), ("star_after_gemm", 5e-4),
                              ("gemm_only", 4e-4)):
        rows += _chain_rows({("loopback", 2, 2048): per_step}).assign(program=program).to_dict("records")
    slopes = chain_slopes(pd.DataFrame(rows))
    after = sync_after_step(slopes, AFTER_STREAM_SYNC)
    assert after.program.tolist() == [AFTER_STREAM_SYNC] and after[CHAIN_STATISTIC].tolist() == pytest.approx([4e-4])
    assert sync_after_step(slopes)[CHAIN_STATISTIC].tolist() == pytest.approx([1e-4])  # after compute
    with pytest.raises(WorkbenchError, match="sync kind"):
        sync_after_step(slopes, "after lunch")
    with pytest.raises(WorkbenchError, match="one kind of sync"):
        fit_chains(slopes, cores=2)  # four programs at once


def test_each_phase_sees_the_syncs_its_layers_end_in_profiled_at_the_deployed_count():
    from workbench.measure.cluster.collectives import colocated_link, link_models
    from workbench.measure.cluster.fit import fit_chains
    from workbench.studies import cluster as stored

    assert stored.PHASE_SYNC == {"prefill": "after compute", "decode": "after streaming"}
    slopes = stored._program_slopes(stored.DATA_DIR)
    for processes in (2, 4):
        for phase, kind in stored.PHASE_SYNC.items():
            fitted = link_models(fit_chains(slopes[kind], cores=2, processes=processes))["loopback"]
            want = colocated_link(fitted, stored.SYNC_KINDS[kind], processes, 2)
            assert stored.deployed_link(processes, "loopback", phase) == want
    # on this machine a sync after a decode step's streaming costs more than one after a GEMM (2 processes)
    assert (stored.deployed_link(2, "loopback", "decode").message_overhead_s
            > stored.deployed_link(2, "loopback", "prefill").message_overhead_s)
    with pytest.raises(WorkbenchError, match="phase"):
        stored.deployed_link(2, "loopback", "training")


def test_a_sync_in_decoder_layers_is_half_of_what_the_syncs_add_to_a_layer():
    from workbench.measure.cluster.collectives import SYNCS_AFTER_WORK, active_steps
    from workbench.measure.cluster.fit import DECODER_SYNC, sync_after_step

    rows = []
    for program, per_layer in (("star_in_decoder", 1.6e-3), ("decoder_only", 1.0e-3)):
        rows += _chain_rows({("loopback", 2, 2560): per_layer}, lengths=(1, 4, 16)).assign(
            program=program).to_dict("records")
    after = sync_after_step(chain_slopes(pd.DataFrame(rows)), DECODER_SYNC)
    # a TP decoder layer syncs twice (after attention, after the MLP): each sync is half the difference
    assert after.program.tolist() == [DECODER_SYNC] and after[CHAIN_STATISTIC].tolist() == pytest.approx([3e-4])
    assert DECODER_SYNC in SYNCS_AFTER_WORK and set(a for a, _ in active_steps(DECODER_SYNC, 4)) == {4}


def test_the_decoder_chains_baseline_is_the_same_layers_without_a_single_collective(cpu_devices):
    import jax.numpy as jnp
    from jax.sharding import Mesh

    from workbench.kernels import reference as ref
    from workbench.kernels.tpi_llm import (
        ALLREDUCE_KINDS,
        NO_SYNC,
        make_backbone,
        master_input,
        shard_params,
        tp_backbone,
        tp_empty_cache,
    )
    from workbench.kernels.traffic import compiled_hlo, parse_collectives
    from workbench.model.models import tiny_config

    cfg, mesh = tiny_config("llama"), Mesh(np.array(cpu_devices[:2]), ("x",))
    tp = shard_params(cfg, ref.init_params(cfg, 0), mesh)
    cache = tp_empty_cache(tp, 8)
    args = (tp.blocks, cache.k, cache.v, master_input(tp, [1, 2]), jnp.int32(0))

    def kinds(kind: str) -> list[str]:
        return [c.kind for c in parse_collectives(compiled_hlo(make_backbone(cfg, mesh, kind, donate=False), *args))]

    assert kinds(NO_SYNC) == []
    assert kinds("star") and set(kinds("star")) == {"collective-permute"}
    assert NO_SYNC not in ALLREDUCE_KINDS
    with pytest.raises(WorkbenchError, match="allreduce"):
        tp_backbone(tp, NO_SYNC)  # a generation cannot be run without its syncs


def test_a_campaign_with_decoder_chains_deploys_the_syncs_measured_among_a_decoder_layers_kernels():
    from workbench.measure.cluster.collectives import colocated_link, link_models
    from workbench.measure.cluster.fit import DECODER_SYNC, fit_chains
    from workbench.studies import cluster as stored
    from workbench.studies.own_hardware import CAMPAIGNS

    with_decoder = CAMPAIGNS["2026-11-25a"]
    assert stored.phase_sync_for(stored.DATA_DIR) == stored.PHASE_SYNC  # measured before the decoder chains
    assert stored.phase_sync_for(with_decoder) == stored.DECODER_PHASE_SYNC
    slopes = stored._program_slopes(with_decoder)["in decoder layers"]
    for processes in (2, 4):
        fitted = link_models(fit_chains(slopes, cores=2, processes=processes))["loopback"]
        want = colocated_link(fitted, DECODER_SYNC, processes, 2)
        for phase in ("prefill", "decode"):
            assert stored.deployed_link(processes, "loopback", phase, with_decoder) == want
    with pytest.raises(WorkbenchError, match="not measured"):
        stored.program_links(stored.DATA_DIR, "in decoder layers")
