"""The own-hardware path: a deployment that names a per-process device file costs exactly that share."""

from __future__ import annotations

import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import load_device
from workbench.measure.cluster.predict import shared_device
from workbench.scenarios.userconfig import parse_config
from workbench.studies import own_hardware as O


@pytest.mark.parametrize("processes", [2, 4])
def test_the_deployment_names_a_device_file_equal_to_the_process_share(processes, tmp_path):
    doc = O.deployment(processes, "loopback", tmp_path)
    config = parse_config(doc, "deploy.toml", tmp_path)
    from workbench.studies import cluster as stored

    measured = stored.colocated_share(processes)
    assert measured is not None and 1.0 / processes < measured < 1.0  # measured, and more than an even split
    share = shared_device(load_device("this_machine_cpu"), processes, measured)
    device = config.cluster.devices[0]
    assert config.cluster.n == processes
    assert device.peak_flops == pytest.approx(share.peak_flops)
    assert device.memory[-1].bandwidth_bytes_per_s == pytest.approx(share.memory[-1].bandwidth_bytes_per_s)
    assert (device.kernel_launch_s, device.layer_overhead_s) == pytest.approx((share.kernel_launch_s,
                                                                               share.layer_overhead_s))
    assert config.cluster.topology.link.message_overhead_s > 0
    assert (device.small_kernel_bytes, device.core_stream_bytes_per_s) == pytest.approx(
        (share.small_kernel_bytes, share.core_stream_bytes_per_s)) and device.small_kernel_bytes > 0
    assert device.gemm_half_rows == pytest.approx(share.gemm_half_rows) and device.gemm_half_rows > 0


def test_every_stored_run_has_a_prediction_and_an_error(tmp_path):
    checked = O.verify(tmp_path)
    assert set(checked.devices) == {2, 4} and checked["predicted_s"].gt(0).all()
    assert (checked["error"] == checked["predicted_s"] / checked["latency_s"] - 1).all()
    summary = O.error_summary(checked).set_index("points")
    assert summary.loc["all", "n"] == len(checked)


def test_calibration_fits_on_the_ttft_row_only(tmp_path):
    rows = O.calibration(tmp_path)
    cal = rows[rows.role == "calibration"]
    assert len(cal) == 1 and abs(float(cal.error_after.iloc[0])) < 1e-3
    assert (rows.role == "validation").sum() == 1


def test_unknown_link_class_is_one_line(tmp_path):
    with pytest.raises(WorkbenchError, match="unknown link class 'wifi'"):
        O.deployment(2, "wifi", tmp_path)


def test_the_link_is_what_a_running_program_pays_per_sync(tmp_path):
    # the deployment's per-message time is the chain fit's (slope of syncs in one program), far below the
    # single-call fit that absorbs each call's dispatch and scheduler waits
    doc = O.deployment(2, "loopback", tmp_path)
    from workbench.measure.cluster.collectives import link_models
    from workbench.studies import cluster as stored

    chain_o = stored.program_links()["loopback"].message_overhead_s
    assert doc["network"]["message_overhead_us"] == pytest.approx(chain_o * 1e6)
    assert chain_o < 0.5 * link_models(stored.stored_fits())["loopback"].message_overhead_s
    chains = stored.chain_table()
    assert set(chains.role) == {"calibration", "validation"}
    assert chains[chains.role == "calibration"].processes.eq(2).all()


def test_fastest_rows_are_never_slower_than_typical_ones():
    rows = O.measured_rows()
    assert (rows.latency_s <= rows.typical_s).all() and (rows.latency_s > 0).all()


def test_serial_work_of_co_located_processes_runs_on_the_whole_machine(tmp_path):
    # the master's embedding, head and host work run while the other processes wait at their next sync:
    # measured 3.5-4.0 ms at 1, 2 and 4 processes (2026-11-24), where the process's share would charge 4.8 / 9.8 ms
    from workbench.scenarios.calibrate import predict_parts

    rows = O.measured_rows()
    rows = rows[(rows.devices == 4) & (rows.link_class == "loopback")].drop(columns=["devices"])
    on_machine = predict_parts(O.deployment(4, "loopback", tmp_path, phase="decode"), rows, "m", tmp_path)
    on_share = predict_parts(O.deployment(4, "loopback", tmp_path, phase="decode", shared_machine=False), rows, "s",
                             tmp_path)
    assert (on_machine.serial_s < 0.5 * on_share.serial_s).all()
    assert on_machine.compute_s.tolist() == pytest.approx(on_share.compute_s.tolist())  # the rest is unchanged
    config = parse_config(O.deployment(2, "loopback", tmp_path), "deploy.toml", tmp_path)
    assert config.cluster.shared_machine == load_device("this_machine_cpu")


def test_a_missing_shared_machine_file_is_one_line(tmp_path):
    doc = O.deployment(2, "loopback", tmp_path)
    doc["cluster"] = {"shared_machine": "no_such_box.toml"}
    with pytest.raises(WorkbenchError, match=r"cluster.shared_machine file .*no_such_box.toml.* does not exist"):
        parse_config(doc, "deploy.toml", tmp_path)
    doc["cluster"] = {"shared_machin": "this_machine_cpu"}
    with pytest.raises(WorkbenchError, match="shared_machin"):
        parse_config(doc, "deploy.toml", tmp_path)


def test_a_campaign_is_profiled_and_verified_from_its_own_folder(tmp_path):
    """Each stored campaign's deployments read its own profile, chains and shares, and its own runs: the same
    deployment priced with the second campaign's slower profile predicts more, and the campaign table holds
    every profile against every campaign's runs."""
    first, second = (O.CAMPAIGNS[k] for k in ("2026-11-24a", "2026-11-24b"))
    assert O.LATEST in O.CAMPAIGNS and first != second
    a = O.verify(tmp_path / "a", data_dir=first)
    b_profile = O.verify(tmp_path / "b", data_dir=second, runs_dir=first)
    assert list(a["latency_s"]) == list(b_profile["latency_s"])  # the same runs
    assert (b_profile["predicted_s"] != a["predicted_s"]).all()  # another profile, chains and shares
    assert O.measured_rows(data_dir=second)["repeats"].min() == 8
    table = O.campaign_table(tmp_path / "t")
    n = len(O.CAMPAIGNS)
    assert n >= 3 and {"2026-11-24a", "2026-11-24b", "2026-11-25a"} <= set(O.CAMPAIGNS)
    assert len(table) == n * n and table["same_campaign"].sum() == n
    assert set(zip(table.profile, table.runs)) == {(p, r) for p in O.CAMPAIGNS for r in O.CAMPAIGNS}
    with pytest.raises(WorkbenchError, match="tpi_llm_e2e.csv is missing"):
        O.measured_rows(data_dir=tmp_path / "nowhere")


def test_the_first_campaign_with_decoder_chains_verifies_with_the_syncs_measured_among_a_layers_kernels(tmp_path):
    """The campaign with decoder chains deploys them (chosen before its runs were compared): its own runs at
    2 and 4 processes are predicted within the issue's 15 % (median |error|, fastest runs), and a deployment on
    the older after-compute / after-streaming chains of the same campaign does worse."""
    from workbench.studies import cluster as stored

    campaign = O.CAMPAIGNS["2026-11-25a"]
    assert stored.phase_sync_for(campaign) == stored.DECODER_PHASE_SYNC
    used = O.verify(tmp_path / "used", data_dir=campaign)
    older = O.verify(tmp_path / "older", phase_sync=stored.PHASE_SYNC, data_dir=campaign)
    assert float(used["error"].abs().median()) <= 0.15
    assert float(used["error"].abs().median()) < float(older["error"].abs().median())


def test_a_chain_fit_with_no_resolved_per_byte_cost_still_deploys(tmp_path, monkeypatch):
    # a campaign whose larger syncs cost no more than the small ones fits beta ~ 0 (2026-11-25-drift1 and -drift3 on
    # 2 processes: 1.7e11 Mbit/s), which the deployment parser refuses; the deployment writes the largest bandwidth
    # it accepts, as `profile network` does (one rule: `profile.resolved_bandwidth_mbps`)
    from workbench.measure.cluster.collectives import LinkModel
    from workbench.scenarios.userconfig import NETWORK_FIELDS

    monkeypatch.setattr(O.stored, "deployed_link", lambda *a, **k: LinkModel("loopback", 3e-4, 0.0, 4.8e-17))
    doc = O.deployment(2, "loopback", tmp_path, phase="decode")
    assert doc["network"]["bandwidth_mbps"] == float(NETWORK_FIELDS["bandwidth_mbps"].high)
    parse_config(doc, "drift", tmp_path)  # readable


def test_the_drift_summary_counts_each_repeat_once():
    import pandas as pd

    table = pd.DataFrame({"campaign": list("abcd"), "devices": 4, "phase": "decode", "latency_s": [1.0, 2, 3, 4],
                          "typical_s": 1.0, "predicted_s": 1.0, "error": [-0.3, 0.25, 0.1, -0.05],
                          "error_typical": 0.0})
    row = O.drift_summary(table).iloc[0]
    assert (row.repeats, row.within_25pct, row.error_min, row.error_max) == (4, 3, -0.3, 0.25)
    assert (row.measured_min_s, row.measured_max_s) == (1.0, 4.0)


def test_the_drift_repeats_verify_every_loopback_point_on_their_own_profiles(tmp_path):
    table = O.drift_table(tmp_path)
    assert set(table.campaign) == {O.LATEST, *O.DRIFT_CAMPAIGNS}
    assert (table.groupby("campaign").size() == 4).all() and table.error.notna().all()
    summary = O.drift_summary(table).set_index(["devices", "phase"])
    assert (summary.repeats == 4).all()
    # the 4-process steps: within 25 % of the fastest run in 3 (decode) and 4 (prefill) of the 4 repeats (2026-11-25)
    assert summary.loc[(4, "decode"), "within_25pct"] >= 3 and summary.loc[(4, "prefill"), "within_25pct"] == 4
