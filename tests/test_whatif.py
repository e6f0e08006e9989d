"""`whatif`'s options mean one thing each: --seq-len / --kv-len, one value = one run, where files go, full n/a
reasons, tokens/s and the best scheme per phase and per device count."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.scenarios import whatif

SBC = REPO_ROOT / "examples" / "sbc_gigabit.toml"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    whatif.add_arguments(parser)
    return whatif.main(parser.parse_args([str(a) for a in argv]))


@pytest.fixture
def figures(tmp_path, monkeypatch) -> Path:
    """The default output root, redirected so a test sees what a run would write into the repository."""
    root = tmp_path / "figures"
    monkeypatch.setattr(whatif, "FIGURES_DIR", root)
    return root


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_seq_len_sets_the_prompt_only_and_kv_len_the_attended_tokens(tmp_path, figures):
    assert "kv_len = 128" in SBC.read_text()
    assert run([SBC, "--seq-len", "64", "--out", tmp_path / "a"]) == 0
    table = pd.read_csv(tmp_path / "a" / "arena.csv")
    assert set(table.seq_len) == {64} and set(table.kv_len) == {128}  # the file's kv_len stays
    assert run([SBC, "--kv-len", "300", "--out", tmp_path / "b"]) == 0
    table = pd.read_csv(tmp_path / "b" / "arena.csv")
    assert set(table.seq_len) == {128} and set(table.kv_len) == {300}


@pytest.mark.parametrize("option", ["--seq-len", "--kv-len"])
@pytest.mark.parametrize("value", ["0", "4097"])
def test_lengths_out_of_range_are_one_line_naming_the_option(option, value, figures):
    with pytest.raises(WorkbenchError, match=rf"^{option} must be in \[1, 4096\] for Llama 2-13B, got {value}$"):
        run([SBC, option, value, "--no-charts"])
    assert files_under(figures) == []


def test_one_value_per_key_is_a_single_run_with_charts_and_png(tmp_path, capsys, figures):
    out = tmp_path / "one"
    assert run([SBC, "--set", "network.bandwidth_mbps=100", "--devices", "2", "--png", "--out", out]) == 0
    names = files_under(out)
    assert "sweep.csv" not in names
    assert {"arena.csv", "breakdown.svg", "breakdown.png", "ranking.png", "memory.png"} <= set(names)
    table = pd.read_csv(out / "arena.csv")
    assert set(table.n_devices) == {2} and set(table.bandwidth_mbps) == {100}
    assert "best: prefill" in capsys.readouterr().out


def test_several_values_sweep(tmp_path, figures):
    assert run([SBC, "--set", "network.bandwidth_mbps=100,1000", "--out", tmp_path]) == 0
    assert files_under(tmp_path) == ["sweep.csv"]


def test_no_charts_writes_nothing_unless_out_is_given(tmp_path, figures):
    assert run([SBC, "--no-charts"]) == 0
    assert run([SBC, "--no-charts", "--devices", "1,2"]) == 0
    assert files_under(figures) == []
    assert run([SBC, "--no-charts", "--out", tmp_path / "t"]) == 0
    assert files_under(tmp_path / "t") == ["arena.csv", "breakdown.csv", "memory.csv"]
    assert run([SBC, "--no-charts", "--devices", "1,2", "--out", tmp_path / "s"]) == 0
    assert files_under(tmp_path / "s") == ["sweep.csv"]
    assert files_under(figures) == []


def test_the_plain_command_writes_its_documented_default_folder(figures):
    assert run([SBC]) == 0
    assert "whatif/sbc_gigabit/arena.csv" in files_under(figures)
    assert "whatif/sbc_gigabit/ranking.svg" in files_under(figures)


def _na_notes(devices: int) -> dict[str, str]:
    from dataclasses import replace

    from workbench.machine.network import Topology
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config
    from workbench.schemes import Cluster

    config = load_config(SBC)
    cluster = Cluster(config.cluster.devices[:1] * devices,
                      Topology(config.cluster.topology.kind, devices, config.cluster.topology.link))
    table = arena_for_config(replace(config, cluster=cluster)).table()
    na = table[(table.status == "n/a") & (table.phase == "decode")]
    return dict(zip(na.scheme, na.notes))


def test_n_a_reasons_are_never_cut(tmp_path, capsys, figures):
    notes = _na_notes(3)
    assert max(map(len, notes.values())) > 100  # the case the old 90-character cut lost text on
    assert run([SBC, "--devices", "3,4", "--out", tmp_path]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    sweep = pd.read_csv(tmp_path / "sweep.csv", keep_default_na=False)
    at3 = sweep[sweep.devices == 3].set_index("scheme")["time_per_token_breakdown"]
    for scheme, note in notes.items():
        assert at3[scheme] == f"n/a: {note}"
        assert f"n/a: {note}" in printed


def test_the_table_shows_every_n_a_reason_whole():
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    config = load_config(SBC)
    text = " ".join(whatif.format_table(arena_for_config(config)).split())
    table = arena_for_config(config).table()
    for note in table[(table.status == "n/a") & (table.phase == "decode")].notes:
        assert f"n/a: {note}" in text


def test_tokens_per_s_is_one_over_time_per_token(tmp_path, capsys, figures):
    assert run([SBC, "--devices", "1,4", "--out", tmp_path]) == 0
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    ran = sweep[sweep.time_per_token_s.notna()]
    assert len(ran) > 10
    assert (ran.tokens_per_s * ran.time_per_token_s - 1).abs().max() < 1e-8  # the CSV keeps 10 significant digits
    assert "tokens/s" in capsys.readouterr().out
    assert whatif.tokens_per_s(0.25) == 4.0 and math.isnan(whatif.tokens_per_s(math.nan))


def test_the_single_run_table_has_a_tokens_per_s_column(capsys, figures):
    assert run([SBC, "--no-charts"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(ln for ln in lines if "tokens/s" in ln and "scheme" in ln)
    local = next(ln for ln in lines if ln.split()[:1] == ["local"])
    per_token_ms = float(local.split("ms")[0].split()[-1])  # the time/token cell, '429.2 ms'
    assert header and f"{1e3 / per_token_ms:.3g}" in local.split("ms", 1)[1].split()


def test_best_per_device_count_is_the_fastest_that_runs(tmp_path, capsys, figures):
    assert run([SBC, "--devices", "1,2,4", "--out", tmp_path]) == 0
    out = capsys.readouterr().out
    best_block = out.split("best per device count:")[1].splitlines()
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    for devices in (1, 2, 4):
        ok = sweep[(sweep.devices == devices) & (sweep.decode_status == "ok")]
        fastest = ok.sort_values(["time_per_token_s", "scheme"]).iloc[0]
        tied = ok[ok.time_per_token_s <= fastest.time_per_token_s * (1 + 1e-12)].scheme
        expected = "local" if "local" in set(tied) else sorted(tied)[0]
        line = next(ln for ln in best_block if ln.split()[:1] == [str(devices)])
        assert line.split()[5] == expected, line


def test_best_schemes_prefers_local_on_a_tie_and_skips_oom():
    table = pd.DataFrame({"phase": ["decode"] * 4 + ["prefill"] * 2,
                          "scheme": ["megatron_tp", "local", "hepti_ws", "tiny_oom", "a", "b"],
                          "latency_s": [1.0, 1.0, 1.5, 0.1, 2.0, 1.0],
                          "status": ["ok", "ok", "ok", "OOM", "ok", "ok"]})
    assert whatif.best_schemes(table) == {"decode": "local", "prefill": "b"}
    assert whatif.best_schemes(table[table.scheme != "local"]) == {"decode": "megatron_tp", "prefill": "b"}


def test_seq_len_does_not_move_a_decode_step_at_fixed_kv_len(tmp_path, figures):
    """tp_ring_allreduce (TPI-LLM's simulator) used to attend seq_len + t keys in its decode steps: a one-line
    --seq-len change moved its time per token with kv_len fixed (`tpi_llm.attended`). Now only --kv-len does."""
    def per_token(*options: str) -> pd.Series:
        out = tmp_path / "_".join(options)
        assert run([SBC, *options, "--out", out, "--no-charts"]) == 0
        table = pd.read_csv(out / "arena.csv")
        return table[table.phase == "decode"].set_index("scheme").latency_s

    base, longer, attends = per_token("--seq-len", "128"), per_token("--seq-len", "512"), per_token("--kv-len", "512")
    for scheme in ("tp_ring_allreduce", "tpi_star_tp_resident"):
        assert longer[scheme] == pytest.approx(base[scheme], rel=1e-9)
        assert attends[scheme] > base[scheme] * (1 + 1e-4)


MOE = REPO_ROOT / "examples" / "qwen3_moe_pi5.toml"


def test_the_bound_column_says_it_is_the_decode_steps(capsys, figures):
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    assert run([SBC, "--no-charts"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(ln for ln in lines if "tokens/s" in ln and "scheme" in ln)
    assert "decode bound by" in header
    table = arena_for_config(load_config(SBC)).table()
    bound = table[(table.phase == "decode") & (table.scheme == "local")].bound.iloc[0]
    local = next(ln for ln in lines if ln.split()[:1] == ["local"])
    cells = local.split()
    assert cells[cells.index("GiB") + 2] == bound  # peak mem, of budget, then the decode step's bound


def test_a_sweep_prints_each_n_a_reason_once_per_scheme_with_its_counts(tmp_path, capsys, figures):
    assert run([MOE, "--devices", "1,2,4,8", "--no-charts", "--out", tmp_path]) == 0
    out = capsys.readouterr().out
    hepti = [ln for ln in out.splitlines() if ln.split()[:1] == ["hepti_ws"]]
    assert len(hepti) == 1 and hepti[0].startswith("hepti_ws (devices 1, 2, 4, 8) n/a: hepti_ws costs")
    moe_tp = [ln for ln in out.splitlines() if ln.startswith("dllama_allgather_tp (devices 8) n/a: n_devices must be")]
    assert len(moe_tp) == 1
    sweep = pd.read_csv(tmp_path / "sweep.csv", keep_default_na=False)
    both = sweep[(sweep.prefill_status == "n/a") & (sweep.decode_status == "n/a")]
    assert len(both) >= 32  # the rows the old table printed one by one (4 counts x the 8 dense-only schemes, more)
    table = out.split("\n\n")[0].splitlines()
    assert not any(" n/a: " in ln for ln in table) and len(table) == len(sweep) - len(both) + 1


def spec_file(tmp_path, speculative: str, base: Path = SBC) -> Path:
    path = tmp_path / f"{base.stem}_spec.toml"
    path.write_text(base.read_text() + "\n[speculative]\n" + speculative)
    return path


def test_a_sweep_applies_the_speculative_keys_and_writes_their_columns(tmp_path, capsys, figures):
    path = spec_file(tmp_path, 'draft = "ngram"\ngamma = 4\nalpha = 0.7\n')
    assert run([path, "--set", "speculative.gamma=1,4,16", "--set", "speculative.alpha=0.5,0.95", "--no-charts",
                "--out", tmp_path / "s"]) == 0
    sweep = pd.read_csv(tmp_path / "s" / "sweep.csv")
    assert {"with_draft_s", "speedup", "best_gamma", "best_gamma_s", "costliest_part"} <= set(sweep.columns)
    megatron = sweep[sweep.scheme == "megatron_tp"].set_index(["speculative.gamma", "speculative.alpha"])
    assert megatron.with_draft_s.nunique() == 6  # every point its own time with the draft
    assert megatron.time_per_token_s.nunique() == 1  # plain decode does not depend on the draft
    for _, r in megatron.iterrows():
        assert r.speedup == pytest.approx(r.time_per_token_s / r.with_draft_s, rel=1e-9)
        assert r.best_gamma_s <= r.with_draft_s * (1 + 1e-12) or r.name[0] > 16
    assert megatron.loc[(16, 0.95)].best_gamma > megatron.loc[(1, 0.5)].best_gamma  # alpha moves the best gamma
    assert set(megatron.groupby(level=1).best_gamma.nunique()) == {1}  # gamma does not
    out = capsys.readouterr().out
    assert "with draft" in out and "best gamma" in out
    assert "tp_ring_allreduce (every point of speculative.gamma x speculative.alpha) n/a: costed on TPI-LLM" in out


def test_a_single_run_says_why_a_losing_draft_loses(tmp_path, capsys, figures):
    path = spec_file(tmp_path, 'draft = "ngram"\ngamma = 4\nalpha = 0.7\n', MOE)
    assert run([path, "--no-charts"]) == 0
    out = capsys.readouterr().out
    why = out.split("why (each losing scheme's costliest part")[1].splitlines()
    moe_tp = next(ln for ln in why if ln.strip().startswith("dllama_allgather_tp: communication: "))
    assert "per-message time is 5.0x a one-token step's (each sync sent once per batch row: gamma + 1 = 5" in moe_tp
    pipeline = next(ln for ln in why if ln.strip().startswith("moe_layer_pipeline: "))
    assert "expert streaming n/a: moe_layer_pipeline attaches no operator rows" in pipeline


@pytest.mark.parametrize("value", ["3:1:0:0", '"3,1,0,0"', "3/1/0/0"])
def test_a_tensor_split_can_be_set_on_the_command_line(value, tmp_path, figures):
    assert run([SBC, "--set", f"schemes.llamacpp.tensor_split={value}", "--no-charts", "--out", tmp_path]) == 0
    table = pd.read_csv(tmp_path / "arena.csv")
    notes = table[table.scheme == "llamacpp_rpc"].notes
    assert notes.str.contains("RPC layer split 31 / 9 / 0 / 0").all()  # il / 41 < 0.75 for il <= 30


def test_quoted_values_with_commas_sweep_as_one_value_each(tmp_path, figures):
    assert run([SBC, "--set", 'schemes.llamacpp.tensor_split="3,1,0,0","1,1,1,1"', "--no-charts", "--out",
                tmp_path]) == 0
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert set(sweep["schemes.llamacpp.tensor_split"]) == {"3,1,0,0", "1,1,1,1"}
    with pytest.raises(WorkbenchError, match=r"^t\.toml: schemes\.llamacpp\.tensor_split must be 4 comma-separated "
                                             r"numbers .*got '2,1,1' \(3 given\)$"):
        from workbench.scenarios.userconfig import parse_config, read_document, set_key

        doc = read_document(SBC)
        set_key(doc, "schemes.llamacpp.tensor_split", whatif.parse_set('schemes.llamacpp.tensor_split="2,1,1"')[1][0])
        parse_config(doc, "t.toml", SBC.parent)


def test_a_missing_routing_trace_is_named_even_where_the_model_fits(figures):
    with pytest.raises(WorkbenchError) as info:
        run([MOE, "--devices", "8", "--set", 'workload.routing="trace"', "--set",
             "workload.routing_trace=missing.csv", "--no-charts"])
    message = str(info.value)
    assert message.startswith("qwen3_moe_pi5.toml: workload.routing_trace file 'missing.csv' does not exist")
    assert "infeasible" not in message and "\n" not in message


def doc_blocks() -> list[tuple[str, str]]:
    """(example stem, TOML text) of every ```toml block in docs/whatif.md ('# added to examples/<stem>.toml')."""
    import re

    text = (REPO_ROOT / "docs" / "whatif.md").read_text()
    return re.findall(r"```toml\n# added to examples/(\w+)\.toml\n(.*?)```", text, re.S)


def test_docs_whatif_has_a_section_and_an_example_for_each_key_family():
    text = (REPO_ROOT / "docs" / "whatif.md").read_text()
    for heading in ("`[speculative]`", "routing and expert cache", "`link_class`"):
        assert any(heading in line for line in text.splitlines() if line.startswith("### ")), heading
    blocks = "\n".join(body for _, body in doc_blocks())
    for key in ("[speculative]", "routing_skew", "cache_policy", "link_class", "gamma", "alpha"):
        assert key in blocks, key
    assert "tensor_split=\"3,1,1,1\"" in text and "3:1:1:1" in text


@pytest.mark.parametrize("stem,body", doc_blocks(), ids=[stem for stem, _ in doc_blocks()])
def test_every_docs_whatif_example_loads(stem, body):
    """Each block's tables, put in place of the example's, make a deployment the parser accepts."""
    import tomllib

    from workbench.scenarios.userconfig import parse_config

    doc = tomllib.loads((REPO_ROOT / "examples" / f"{stem}.toml").read_text())
    added = tomllib.loads(body)
    config = parse_config({**doc, **added}, f"{stem}.toml", REPO_ROOT / "examples")
    if "speculative" in added:
        assert config.speculation.draft == added["speculative"]["draft"]
    if "link_class" in added.get("network", {}):
        assert config.cluster.topology.link.latency_s == pytest.approx(added["network"]["latency_ms"] * 1e-3)
    if "routing" in added.get("workload", {}):
        assert config.routing.kind == added["workload"]["routing"] and config.expert_cache.policy == "lru"
