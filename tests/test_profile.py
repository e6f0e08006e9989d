"""`python -m workbench profile --quick` writes a device TOML a deployment can name, every number measured."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "me.toml"
    run = subprocess.run([sys.executable, "-m", "workbench", "profile", "--quick", "--out", str(out),
                          "--storage-dir", str(out.parent), "--name", "test box"],
                         capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    return out, run.stdout


def test_profile_writes_a_measured_device_preset(profiled):
    out, stdout = profiled
    table = tomllib.loads(out.read_text())
    assert table["meta"]["name"] == "test box"
    constants = {k: v for k, v in table.items() if k != "meta"}
    for key in ("peak_flops_fp32", "mem_DRAM_bandwidth", "memory_efficiency", "kernel_launch", "layer_overhead",
                "storage_read_bandwidth", "mem_DRAM_capacity", "cores"):
        assert key in constants, key
    assert constants["efficiency_gemv"]["kind"] == "assumed"  # a GEMV is costed memory-bound, not measured
    for key, c in constants.items():
        assert c["kind"] in ("measured", "derived") or key == "efficiency_gemv", key
        assert c["value"] >= 0 and c["source"], key
        if c["kind"] == "measured":
            assert "2 cores" in c["source"] or "cores" in c["source"] or "MemTotal" in c["source"] or key == "cores"
    assert 0 < constants["memory_efficiency"]["value"] <= 1
    assert "kernel_launch" in stdout and (out.with_suffix(".csv")).exists()


def test_a_deployment_names_the_profile_by_path_and_the_arena_runs_on_it(profiled, tmp_path):
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    out, _ = profiled
    (tmp_path / "me.toml").write_text(out.read_text())
    (tmp_path / "deploy.toml").write_text("""
[model]
name = "TinyLlama-42M"
weight_bits = 32
activation_bits = 32
[network]
topology = "switch"
bandwidth_mbps = 1000
[[devices]]
preset = "me.toml"
count = 2
""")
    config = load_config(tmp_path / "deploy.toml")
    device = config.cluster.devices[0]
    assert device.name == "test box" and device.kernel_launch_s >= 0 and device.storage_read_bytes_per_s > 0
    assert device.provenance["kernel_launch"].kind == "measured"
    table = arena_for_config(config).table()
    assert (table["status"] == "ok").any()


@pytest.mark.parametrize("argv,match", [
    (["--storage-dir", "/nonexistent/dir", "--quick"], "--storage-dir"),
    (["network", "--shape", "-5"], "--shape must be a rate"),
    (["network", "--processes", "1"], "--processes"),
])
def test_profile_bad_input(argv, match, tmp_path):
    from workbench.__main__ import parse
    from workbench.measure.profile.cli import main

    args = parse(["profile", "--out", str(tmp_path / "x.toml"), *argv])
    with pytest.raises(WorkbenchError, match=match):
        main(args)


def test_the_profile_and_the_campaign_write_their_device_through_one_function(tmp_path, monkeypatch):
    import importlib.util

    import pandas as pd
    from profile_rows import base_profile_rows

    from workbench.__main__ import parse
    from workbench.measure.profile import cli, device_toml

    written = []
    real = device_toml.write_device_toml

    def recording(out, bench, source, name, header):
        written.append((out, source.where))
        return real(out, bench, source, name, header)

    monkeypatch.setattr(device_toml, "write_device_toml", recording)
    monkeypatch.setattr(cli, "measure", lambda request, progress=None: pd.DataFrame(base_profile_rows()))
    assert cli.main(parse(["profile", "--out", str(tmp_path / "me.toml")])) == 0
    spec = importlib.util.spec_from_file_location("measure_collectives", REPO_ROOT / "scripts" / "measure_collectives.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "microbench.csv").write_text((REPO_ROOT / "data" / "cluster" / "microbench.csv").read_text())
    script.build_preset(tmp_path)
    assert [out for out, _ in written] == [tmp_path / "me.toml", tmp_path / "devices" / "this_machine_cpu.toml"]
    assert "python -m workbench profile" in written[0][1] and "data/cluster/microbench.csv" in written[1][1]


def test_this_machine_preset_is_the_one_builder_on_the_stored_table(tmp_path):
    """data/devices/this_machine_cpu.toml is `write_this_machine_cpu` of data/cluster/microbench.csv: no other
    rule made it (cores and MemTotal are read from the machine the test runs on, so they are left out)."""
    import pandas as pd

    from workbench.measure.profile.device_toml import write_this_machine_cpu

    stored = REPO_ROOT / "data" / "devices" / "this_machine_cpu.toml"
    bench = pd.read_csv(REPO_ROOT / "data" / "cluster" / "microbench.csv")
    write_this_machine_cpu(tmp_path / "cpu.toml", bench, "data/cluster/microbench.csv")
    rebuilt, kept = tomllib.loads((tmp_path / "cpu.toml").read_text()), tomllib.loads(stored.read_text())
    for table in (rebuilt, kept):
        table.pop("cores"), table.pop("mem_DRAM_capacity")
    assert rebuilt == kept


def test_profile_out_must_not_be_a_folder(tmp_path):
    from workbench.__main__ import parse
    from workbench.measure.profile.cli import main

    with pytest.raises(WorkbenchError, match="is a folder"):
        main(parse(["profile", "--quick", "--out", str(tmp_path)]))


@pytest.mark.parametrize("what", [[], ["network"]])
def test_an_unusable_out_is_one_line_before_anything_is_measured(tmp_path, monkeypatch, capsys, what):
    from workbench.__main__ import main
    from workbench.measure.profile import cli, network

    def measured(*args, **kwargs):
        raise AssertionError("measured before --out was checked")

    monkeypatch.setattr(cli, "measure", measured)
    monkeypatch.setattr(network, "network_table", measured)
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "me.toml"  # its folder is a file: nothing can be written there
    assert main(["profile", *what, "--quick", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"error: --out {str(out)!r}: its folder {str(out.parent)!r} is a file; it "
                                       "must be a folder (new or existing)\n")


@pytest.mark.slow
def test_profile_network_measures_the_syncs_a_decode_step_sees_and_a_deployment_reads_them(tmp_path):
    # two real processes, syncs inside one program after a streaming step (sync_chain), fitted at that count
    import pandas as pd

    from workbench.__main__ import parse
    from workbench.measure.profile.cli import main
    from workbench.scenarios.userconfig import parse_network

    out = tmp_path / "net.toml"
    assert main(parse(["profile", "network", "--quick", "--processes", "2", "--phase", "decode",
                       "--out", str(out)])) == 0
    table = tomllib.loads(out.read_text())["network"]
    assert "star_after_stream less stream_only" in table["sources"]["message_overhead_us"]
    assert table["message_overhead_us"] > 0 and table["bandwidth_mbps"] > 0
    rows = pd.read_csv(out.with_suffix(".csv"))
    assert set(rows.program) == {"star_after_stream", "stream_only"} and set(rows.length) == {1, 8}
    topology = parse_network("net.toml", {k: v for k, v in table.items()}, 2)
    assert topology.link.message_overhead_s == pytest.approx(table["message_overhead_us"] * 1e-6)


@pytest.mark.slow
def test_profile_network_by_default_measures_the_syncs_among_a_decoder_layers_kernels(tmp_path):
    # the instrument the own_hardware notebook verifies: TPI-LLM's TP layer with its syncs less without them
    import pandas as pd

    from workbench.__main__ import parse
    from workbench.measure.profile.cli import main

    out = tmp_path / "net.toml"
    assert main(parse(["profile", "network", "--quick", "--out", str(out)])) == 0
    table = tomllib.loads(out.read_text())["network"]
    assert "star_in_decoder less decoder_only" in table["sources"]["message_overhead_us"]
    assert table["message_overhead_us"] > 0 and table["bandwidth_mbps"] > 0
    rows = pd.read_csv(out.with_suffix(".csv"))
    assert set(rows.program) == {"star_in_decoder", "decoder_only"} and set(rows.length) == {1, 4}
    assert set(rows.message_bytes) == {640 * 4, 8 * 640 * 4}  # 1 and 8 tokens of the chain's 640-wide layer


def test_an_unresolved_per_byte_cost_is_written_as_a_readable_ceiling_and_says_so():
    """A noisy quick fit can drive the per-byte cost to ~0 (CI once wrote 4e13 Mbit/s, which the parser then
    refused): the file keeps the largest bandwidth a deployment accepts and its source says why."""
    from workbench.measure.profile.network import resolved_bandwidth_mbps
    from workbench.scenarios.userconfig import NETWORK_FIELDS

    assert resolved_bandwidth_mbps(12.5e6, "x") == (100.0, "1 / per-byte cost of x")
    mbps, source = resolved_bandwidth_mbps(5.03e12, "x")
    assert mbps == NETWORK_FIELDS["bandwidth_mbps"].high and "not resolved" in source
    assert resolved_bandwidth_mbps(float("inf"), "x")[0] == mbps


def test_layers_flow_one_way_cluster_never_imports_profile_and_the_model_never_imports_its_fit():
    """profile/ uses cluster/ (the launcher, the fit) for the network table; cluster/ runs programs and campaigns
    and never imports profile/ (not even inside a function); the collectives' cost model never imports its fit."""
    from pathlib import Path

    from test_layers import imported_modules

    import workbench

    cluster = Path(workbench.__file__).parent / "measure" / "cluster"
    upward = {p.name: sorted(n for n in imported_modules(p.read_text(), "workbench.measure.cluster")
                             if n.startswith("workbench.measure.profile")) for p in sorted(cluster.glob("*.py"))}
    assert len(upward) > 5 and {k: v for k, v in upward.items() if v} == {}
    model = imported_modules((cluster / "collectives.py").read_text(), "workbench.measure.cluster")
    assert not any(n.startswith("workbench.measure.cluster.fit") for n in model)
