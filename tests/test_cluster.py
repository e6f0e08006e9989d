"""The multi-process cluster: launcher and teardown, shaped links, collectives, the alpha-beta fit,
TPI-LLM across 4 processes, and the accelerator roofline.

Multi-process tests start real processes (a few seconds each on 2 cores); shaped-link tests need root.
"""

import ast
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.accelerator import (
    block_operators,
    compare,
    layer_latency,
    measure_layer_latency,
    ridge_point,
    roofline,
)
from workbench.cluster import ClusterSpec, LinkShape, ProcessDied, parse_rate, run_cluster
from workbench.cluster import launcher as launcher_mod
from workbench.cluster.fit import (
    constants_toml,
    fit_all,
    fit_constants,
    fit_link,
    fits_from_constants,
    predict,
    star_vs_ring,
    validation_summary,
)
from workbench.cluster.measure import SUMMARY_COLUMNS, CampaignPoint, summarize
from workbench.cluster.microbench import device_constants, device_toml, shared_device
from workbench.cluster.netns import ShapedNetwork, list_namespaces, shaping_unavailable
from workbench.cluster.predict import LinkFit, device_slice, predict_generation, tp_step_latency
from workbench.cluster.programs import (
    PROGRAMS,
    check_output,
    global_input,
    make_program,
    program_input,
)
from workbench.constants import load_constants
from workbench.errors import WorkbenchError
from workbench.hardware import device_from_table, load_device
from workbench.io import DATA_DIR, REPO_ROOT
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_collectives
from workbench.models import get_model, tiny_config
from workbench.network import collective_latency

ROOT_REASON = shaping_unavailable()
needs_root = pytest.mark.skipif(ROOT_REASON is not None, reason=str(ROOT_REASON))


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line for line in f)
    except OSError:
        return False


def _wait_gone(pids, timeout=10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


# ---- programs on local devices ------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("program", PROGRAMS)
def test_programs_compute_their_collective(cpu_devices, program, n):
    mesh = make_mesh(n)
    for size in (4, 100, 4096):
        pi = program_input(program, size, n)
        check_output(pi, make_program(program, mesh)(global_input(pi, mesh)))


def test_check_output_detects_a_wrong_result(cpu_devices):
    mesh = make_mesh(4)
    pi = program_input("psum", 64, 4)
    with pytest.raises(AssertionError, match="psum"):
        check_output(pi, make_program("psum", mesh)(global_input(pi, mesh)) * 2)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("program,steps,chunk", [("star", lambda n: 2 * (n - 1), lambda n: 1),
                                                 ("ring_ppermute", lambda n: 2 * (n - 1), lambda n: n),
                                                 ("tree_ppermute", lambda n: 2 * int(np.log2(n)), lambda n: 1)])
def test_ppermute_programs_compile_to_their_point_to_point_steps(cpu_devices, n, program, steps, chunk):
    mesh = make_mesh(n)
    pi = program_input(program, 4096, n)
    ops = compiled_collectives(make_program(program, mesh), global_input(pi, mesh))
    assert list(ops.kind.unique()) == ["collective-permute"]
    assert len(ops) == steps(n)
    assert (ops.result_bytes == pi.message_bytes / chunk(n)).all()


def test_psum_compiles_to_one_all_reduce(cpu_devices):
    mesh = make_mesh(4)
    pi = program_input("psum", 4096, 4)
    ops = compiled_collectives(make_program("psum", mesh), global_input(pi, mesh))
    assert list(ops.kind) == ["all-reduce"] and ops.result_bytes[0] == 4096


def test_program_input_rounds_to_whole_elements_per_device():
    assert program_input("psum", 4, 8).message_bytes == 4
    assert program_input("all_gather", 4, 8).message_bytes == 32  # one float per device at least
    assert program_input("psum_scatter", 100, 8).elements_per_device % 8 == 0
    with pytest.raises(WorkbenchError, match="program"):
        program_input("allreduce", 4, 2)
    with pytest.raises(WorkbenchError, match="message_bytes"):
        program_input("psum", -1, 2)


# ---- configuration and errors -------------------------------------------------------------------
def test_cluster_spec_rejects_bad_input():
    with pytest.raises(WorkbenchError, match="processes"):
        ClusterSpec(0, "hello")
    with pytest.raises(WorkbenchError, match="processes"):
        ClusterSpec(17, "hello")
    with pytest.raises(WorkbenchError, match="unknown experiment"):
        ClusterSpec(2, "nope")
    with pytest.raises(WorkbenchError, match="port"):
        ClusterSpec(2, "hello", port=80)
    with pytest.raises(WorkbenchError, match="devices_per_process"):
        ClusterSpec(2, "hello", devices_per_process=0)
    with pytest.raises(WorkbenchError, match="JSON"):
        ClusterSpec(2, "sleep", params={"seconds": object()})
    with pytest.raises(WorkbenchError, match=r"no parameter\(s\) \['foo'\]"):
        ClusterSpec(2, "hello", params={"foo": 1})


def test_parse_rate_and_link_shape():
    assert parse_rate("125mbit") == 125.0
    assert parse_rate("1gbit") == 1000.0
    assert parse_rate("300") == 300.0
    with pytest.raises(WorkbenchError, match="--shape"):
        parse_rate("fast")
    with pytest.raises(WorkbenchError, match="rate_mbit"):
        LinkShape(0)
    shape = LinkShape(125)
    assert shape.link_class == "tbf_125mbit"
    assert shape.tbf_args()[:3] == ["tbf", "rate", "125mbit"]
    assert shape.burst >= 125e6 / 8 / 1000  # at least one 1 ms tick of traffic


def test_port_is_free_sees_a_listening_socket():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert not launcher_mod.port_is_free(s.getsockname()[1])
    assert launcher_mod.port_is_free(launcher_mod.free_port())


def test_shaped_network_names_and_addresses():
    net = ShapedNetwork(3, LinkShape(100), tag="123")
    assert [net.namespace(i) for i in range(3)] == ["wb123-0", "wb123-1", "wb123-2"]
    assert net.address(2) == "10.213.0.3"
    assert net.command_prefix(1) == ["ip", "netns", "exec", "wb123-1"]
    with pytest.raises(WorkbenchError, match="tag"):
        ShapedNetwork(2, LinkShape(100), tag="x;y")


def test_campaign_point_validates():
    with pytest.raises(WorkbenchError, match="processes"):
        CampaignPoint(1)
    with pytest.raises(WorkbenchError, match="sizes"):
        CampaignPoint(2, ())


# ---- real processes -----------------------------------------------------------------------------
@pytest.mark.slow
def test_hello_runs_across_4_processes():
    run = run_cluster("hello", 4, timeout_s=240)
    assert sorted(run.rows.process) == [0, 1, 2, 3]
    assert (run.rows.n_devices == 4).all() and (run.rows.local_devices == 1).all()
    assert (run.rows.psum == 10).all()  # 1 + 2 + 3 + 4, through gloo between processes
    assert len(set(run.rows.pid)) == 4 and os.getpid() not in set(run.rows.pid)
    assert run.link_class == "loopback" and run.note == ""
    assert _wait_gone(list(run.rows.pid)) == []


@pytest.mark.slow
def test_2_processes_with_2_devices_each_and_no_root_fall_back_to_loopback(monkeypatch):
    monkeypatch.setattr(launcher_mod, "shaping_unavailable", lambda: "shaped links need root; not running as root")
    run = run_cluster("hello", 2, devices_per_process=2, shape=LinkShape(125), timeout_s=240)
    assert run.link_class == "loopback" and "loopback" in run.note and "root" in run.note
    assert sorted(run.rows.process) == [0, 1] and (run.rows.local_devices == 2).all()
    assert (run.rows.psum == 10).all()  # 4 devices over 2 processes
    assert _wait_gone(list(run.rows.pid)) == []


@pytest.mark.slow
def test_a_dying_process_is_named_and_the_rest_are_stopped():
    announced = []
    start = time.monotonic()
    with pytest.raises(ProcessDied, match=r"process 2 .*exited with code 7"):
        launcher_mod.launch(ClusterSpec(3, "crash", {"process": 2, "exit_code": 7}, timeout_s=180),
                            announce=announced.append)
    assert time.monotonic() - start < 120
    pids = ast.literal_eval(re.search(r"pids (\[.*\])", announced[0]).group(1))
    assert _wait_gone(pids) == []


@pytest.mark.slow
def test_ctrl_c_tears_the_cluster_down():
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "cluster", "--processes", "2", "sleep",
                             "-p", "seconds=120"], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        pids = ast.literal_eval(re.search(r"pids (\[.*\])", line).group(1))
        time.sleep(1.0)
        assert all(_alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert _wait_gone(pids) == []


@pytest.mark.slow
def test_a_taken_port_is_a_clear_error(monkeypatch):
    with socket.socket(socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET) as s:
        s.bind(("::" if socket.has_ipv6 else "0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(WorkbenchError, match=f"port {port} is already in use"):
            run_cluster("hello", 2, port=port)
        # the race: the port is taken after the launcher's check -> process 0 fails to bind
        monkeypatch.setattr(launcher_mod, "port_is_free", lambda p: True)
        with pytest.raises(WorkbenchError, match=f"port {port} is already in use"):
            run_cluster("hello", 2, port=port, timeout_s=120)


@pytest.mark.slow
def test_collectives_experiment_times_every_program():
    sizes = [4, 64]
    run = run_cluster("collectives", 2, {"sizes": sizes, "min_reps": 2, "max_reps": 2, "target_seconds": 0.01},
                      timeout_s=240)
    summary = summarize(run.rows, run.link_class, 2)
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert set(summary.program) == set(PROGRAMS) and len(summary) == len(PROGRAMS) * len(sizes)
    assert (summary.reps == 2).all() and (summary.median_s > 0).all()
    assert (summary.min_s <= summary.median_s).all() and (summary.median_s <= summary.max_s).all()


@pytest.mark.slow
@needs_root
def test_shaped_links_run_and_are_removed():
    before = set(list_namespaces())
    run = run_cluster("hello", 2, shape=LinkShape(200), timeout_s=180)
    assert run.link_class == "tbf_200mbit" and (run.rows.psum == 3).all()
    assert set(list_namespaces()) == before
    etc = Path("/etc/netns")
    assert not etc.exists() or not any(p.name.startswith(f"wb{os.getpid()}-") for p in etc.iterdir())


@pytest.mark.slow
@needs_root
def test_shaped_links_are_removed_after_a_failure():
    before = set(list_namespaces())
    with pytest.raises(ProcessDied):
        run_cluster("crash", 2, {"process": 1}, shape=LinkShape(100), timeout_s=180)
    assert set(list_namespaces()) == before


@needs_root
def test_shaped_network_setup_and_teardown():
    net = ShapedNetwork(2, LinkShape(300))
    with net:
        names = set(list_namespaces())
        assert {net.namespace(0), net.namespace(1), net.bridge_namespace} <= names
        qdisc = subprocess.run(["tc", "-n", net.namespace(0), "qdisc", "show"], capture_output=True, text=True)
        assert "tbf" in qdisc.stdout and "300Mbit" in qdisc.stdout
        hosts = (Path("/etc/netns") / net.namespace(1) / "hosts").read_text()
        assert net.address(1) in hosts
    assert not {net.namespace(0), net.namespace(1), net.bridge_namespace} & set(list_namespaces())


# ---- TPI-LLM end to end -------------------------------------------------------------------------
@pytest.mark.slow
def test_tpi_llm_on_4_processes_generates_the_reference_tokens():
    from workbench.cluster.e2e import e2e_params, e2e_prompt
    from workbench.kernels.reference import generate_greedy

    n_new, prompt_len, seed = 4, 6, 3
    run = run_cluster("tpi_llm", 4, {"model": "tiny", "prompt_len": prompt_len, "n_new": n_new, "seed": seed,
                                     "reference": False}, timeout_s=300)
    cfg = tiny_config("llama")
    expected = generate_greedy(cfg, e2e_params(cfg, seed), e2e_prompt(cfg, prompt_len, seed), n_new)
    assert len(set(expected)) > 1  # a varied sequence, so equality is a real check
    master = run.rows[run.rows.process == 0].iloc[0]
    assert master.tokens == expected
    assert master.ttft_s > 0 and master.per_token_s > 0
    workers = run.rows[run.rows.process != 0]
    assert len(workers) == 3 and all(t == [] for t in workers.tokens)  # workers never see a token


# ---- the fit ------------------------------------------------------------------------------------
def _synthetic(alpha=50e-6, beta=1e-9, link="loopback", noise=0.0, seed=0):
    """Measurements generated by the core's model itself (what the fit must recover)."""
    from workbench.cluster.fit import MATCHED_ALGORITHM
    from workbench.cluster.programs import RUNTIME_ALGORITHM

    rng = np.random.default_rng(seed)
    rows = []
    for n in (2, 4, 8):
        for program in PROGRAMS:
            for m in (4, 4096, 1 << 20, 1 << 24):
                t = float(collective_latency(MATCHED_ALGORITHM[program], RUNTIME_ALGORITHM[program][0], n, m,
                                             1 / beta, alpha))
                rows.append({"link_class": link, "processes": n, "program": program, "message_bytes": m,
                             "median_s": t * (1 + noise * rng.standard_normal())})
    return pd.DataFrame(rows)


def test_fit_recovers_alpha_and_beta_from_model_data():
    fits = fit_all(_synthetic())
    assert fits.alpha_s[0] == pytest.approx(50e-6, rel=1e-6)
    assert fits.beta_s_per_byte[0] == pytest.approx(1e-9, rel=1e-6)
    assert fits.fit_points[0] == 4  # only the 2-process psum


def test_predict_marks_roles_and_is_exact_on_model_data():
    data = pd.concat([_synthetic(), _synthetic(200e-6, 8e-8, "tbf_100mbit")], ignore_index=True)
    table = predict(data, fit_all(data))
    assert (table.rel_error < 1e-6).all()
    calib = table[table.role == "calibration"]
    assert set(calib.program) == {"psum"} and set(calib.processes) == {2}
    assert validation_summary(table).points[0] == len(table) - len(calib)
    shifted = predict(data.assign(median_s=data.median_s * 2), fit_all(data))
    assert validation_summary(shifted).median_rel_error[0] == pytest.approx(0.5)


def test_fit_needs_points_and_links():
    with pytest.raises(WorkbenchError, match="at least 2"):
        fit_link(_synthetic().iloc[:1])
    with pytest.raises(WorkbenchError, match="no fit"):
        predict(_synthetic(link="other"), fit_all(_synthetic()))


def test_star_vs_ring_compares_measured_small_messages():
    data = _synthetic()
    data.loc[data.program == "star", "median_s"] = data.loc[data.program == "psum", "median_s"].to_numpy() * 0.5
    table = star_vs_ring(data, max_bytes=4096, min_processes=4)
    assert set(table.processes) == {4, 8} and table.message_bytes.max() <= 4096
    assert table.star_beats_psum_ring.all() and np.allclose(table.star_over_psum_ring, 0.5)
    assert (table.star_beats_ppermute_ring == (table.star_s < table.ppermute_ring_s)).all()
    with pytest.raises(WorkbenchError, match="star_vs_ring needs"):
        star_vs_ring(data[data.program != "ring_ppermute"])


def test_constants_toml_round_trips(tmp_path):
    fits = fit_all(_synthetic())
    path = tmp_path / "cluster.toml"
    path.write_text(constants_toml(fit_constants(fits, "data/cluster/collectives.csv", "m", "2020-01-01"), "hdr"))
    consts = load_constants(path)
    assert consts["loopback_message_latency"].kind == "fitted"
    assert "processes=2" in consts["loopback_byte_cost"].fitted_on
    back = fits_from_constants(consts)
    assert back.alpha_s[0] == pytest.approx(fits.alpha_s[0], rel=1e-5)


# ---- the stored measurements ----------------------------------------------------------------------
STORED = (DATA_DIR / "cluster" / "collectives.csv").exists()
needs_data = pytest.mark.skipif(not STORED, reason="data/cluster/collectives.csv not measured yet")


@needs_data
def test_stored_fit_matches_a_refit_of_the_stored_measurements():
    from workbench.papers.cluster import measurements, stored_fits

    refit = fit_all(measurements()).set_index("link_class")
    stored = stored_fits().set_index("link_class")
    assert sorted(refit.index) == sorted(stored.index)
    for link in refit.index:
        assert stored.loc[link, "alpha_s"] == pytest.approx(refit.loc[link, "alpha_s"], rel=1e-4)
        assert stored.loc[link, "beta_s_per_byte"] == pytest.approx(refit.loc[link, "beta_s_per_byte"], rel=1e-4)
    consts = load_constants("constants/cluster.toml")
    assert all(c.kind == "fitted" and "data/cluster/collectives.csv" in c.fitted_on for c in consts.values())


@needs_data
def test_stored_measurements_cover_the_campaign():
    from workbench.papers.cluster import machine_info, measurements

    data = measurements()
    loop = data[data.link_class == "loopback"]
    assert set(loop.processes) >= {2, 4, 8} and set(loop.program) == set(PROGRAMS)
    assert loop.message_bytes.min() <= 32 and loop.message_bytes.max() >= 64 * 2**20
    assert (data.median_s > 0).all() and data.date.notna().all() and data.machine.notna().all()
    assert "caveat" in machine_info() and "runs" in machine_info()


@needs_data
def test_notebook_tables_from_stored_data():
    from workbench.papers import cluster as wb

    table = wb.collective_comparison()
    assert set(table.role) == {"calibration", "validation"}
    overall = wb.validation_tables(table)["overall"]
    assert 0 < overall.median_rel_error[0] < np.inf
    e2e = wb.e2e_table()
    assert e2e.tokens_match_reference.all()
    assert (e2e.predicted_ttft_s > 0).all() and (e2e.measured_per_token_s > 0).all()
    accel = wb.accelerator_table()
    assert (accel.predicted_s > 0).all() and (accel.h100_roofline_s < accel.predicted_s).all()


# ---- predictions and the accelerator roofline -----------------------------------------------------
def test_roofline_regimes_on_the_h100_preset():
    h100 = load_device("h100_sxm")
    assert all(c.kind in ("datasheet", "assumed") for c in h100.provenance.values())
    assert h100.memory_level("HBM").bandwidth_bytes_per_s == 3.35e12
    cfg = get_model("Llama 2-7B")
    decode = roofline(cfg, h100, "decode", 1, 1024, "bf16")
    assert (decode.bound == "memory").all()
    assert decode.latency_s.sum() == pytest.approx(decode.bytes.sum() / 3.35e12)
    prefill = roofline(cfg, h100, "prefill", 2048, None, "bf16")
    ffn = prefill.set_index("operator").loc["ffn"]
    assert ffn.bound == "compute" and ffn.latency_s == pytest.approx(ffn.flops / 989.5e12)
    assert ridge_point(h100, "bf16") == pytest.approx(989.5e12 / 3.35e12)


def test_block_operators_add_up_to_the_model_flops():
    cfg = get_model("Llama 2-7B")
    ops = block_operators(cfg, "prefill", 128)
    assert sum(o.flops for o in ops) == pytest.approx(cfg.block_flops(128))
    decode = block_operators(cfg, "decode", 1, 300)
    assert sum(o.flops for o in decode) == pytest.approx(cfg.block_flops(1, 300))
    weights = sum(o.bytes for o in block_operators(cfg, "decode", 1, 1, weight_bits=16, activation_bits=0.001))
    assert weights == pytest.approx(cfg.block_weight_bytes(16) - cfg.norm_params() * 2, rel=1e-3)
    with pytest.raises(WorkbenchError, match="phase"):
        block_operators(cfg, "train", 1)


def test_measured_cpu_layer_beside_the_roofline(cpu_devices):
    cfg = tiny_config("llama")
    meas = pd.DataFrame([measure_layer_latency(cfg, "prefill", 16, reps=3),
                         measure_layer_latency(cfg, "decode", 1, 16, reps=3)])
    assert (meas.measured_s > 0).all() and set(meas.backend) == {"cpu"}
    cpu = device_from_table({"meta": {"memory_levels": ["DRAM"]},
                             "peak_flops_fp32": {"value": 1e11, "unit": "FLOP/s", "kind": "assumed", "source": "t"},
                             "mem_DRAM_capacity": {"value": 1e10, "unit": "B", "kind": "assumed", "source": "t"},
                             "mem_DRAM_bandwidth": {"value": 1e10, "unit": "B/s", "kind": "assumed", "source": "t"}},
                            "test")
    table = compare(meas, cpu, {cfg.name: cfg})
    assert table.predicted_s.tolist() == pytest.approx(
        [layer_latency(cfg, cpu, "prefill", 16), layer_latency(cfg, cpu, "decode", 1, 16)])
    assert np.allclose(table.measured_over_predicted, table.measured_s / table.predicted_s)


def test_tp_prediction_splits_compute_and_counts_star_messages():
    device = load_device("h100_sxm")
    link = LinkFit(1e-4, 1e-9)
    cfg = get_model("TinyLlama-42M")
    two = tp_step_latency(cfg, device, link, 2, "decode", 32, 40)
    four = tp_step_latency(cfg, device, link, 4, "decode", 32, 40)
    # each process gets 1/n of the machine and 1/n of the block
    assert four["compute_s"] == pytest.approx(
        cfg.n_layers * layer_latency(device_slice(cfg, 4), shared_device(device, 4), "decode", 32, 40))
    assert two["compute_s"] * 0.99 <= four["compute_s"] <= two["compute_s"] * 1.5
    # star: 2 traversals per all-reduce, 2 all-reduces per block, plus one broadcast traversal
    assert four["comm_link_latency_s"] == pytest.approx((2 * 2 * cfg.n_layers + 1) * 1e-4)
    pred = predict_generation(cfg, device, link, 4, 32, 8)
    assert pred["ttft_s"] > pred["per_token_s"] > 0
    with pytest.raises(WorkbenchError, match="divisible"):
        device_slice(cfg, 3)


def test_shared_device_and_cpu_preset_toml(tmp_path):
    bench = pd.DataFrame([{"benchmark": "gemm_fp32", "size": 512, "seconds": 1.0, "rate": 2e11, "unit": "FLOP/s"},
                          {"benchmark": "gemm_fp32", "size": 1024, "seconds": 1.0, "rate": 3e11, "unit": "FLOP/s"},
                          {"benchmark": "stream_scale_fp32", "size": 1, "seconds": 1.0, "rate": 8e9, "unit": "B/s"}])
    path = tmp_path / "dev.toml"
    path.write_text(device_toml(device_constants(bench, "bench.csv", "test machine", "2020-01-01"), "m", "d"))
    import tomllib

    dev = device_from_table(tomllib.loads(path.read_text()), "dev.toml")
    assert dev.peak("fp32") == 3e11 and dev.memory_level("DRAM").bandwidth_bytes_per_s == 8e9
    assert dev.provenance["peak_flops_fp32"].kind == "measured"
    half = shared_device(dev, 2)
    assert half.peak("fp32") == 1.5e11 and half.memory_level("DRAM").bandwidth_bytes_per_s == 4e9
    assert shared_device(dev, 1) is dev


def test_this_machine_preset_is_a_micro_benchmark():
    path = DATA_DIR / "devices" / "this_machine_cpu.toml"
    if not path.exists():
        pytest.skip("this_machine_cpu.toml not measured yet")
    dev = load_device("this_machine_cpu")
    assert dev.provenance["peak_flops_fp32"].kind == "measured"
    assert "micro-benchmark" in dev.provenance["peak_flops_fp32"].source
    assert dev.provenance["mem_DRAM_bandwidth"].kind == "measured"
