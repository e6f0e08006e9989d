"""The arena over the scheme registry: tidy table, OOM and n/a rows, charts, the registry contract,
the `whatif` command on every example, and agreement with the paper modules' own numbers."""

from __future__ import annotations

import argparse
import math
import re

import numpy as np
import pandas as pd
import pytest

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.machine.network import Link, Topology, on_topology
from workbench.model.models import get_model, tiny_config
from workbench.scenarios.arena import (
    COMPONENTS,
    arena_for_config,
    breakdown_frame,
    run_arena,
)
from workbench.scenarios.arena_charts import (
    VEGA_LITE_VERSION,
    as_altair,
    breakdown_chart,
    breakdown_spec,
    memory_chart,
    memory_spec,
    ranking_chart,
    ranking_spec,
    records,
    with_data,
)
from workbench.scenarios.whatif import add_arguments, format_table, main
from workbench.schemes.base import Cluster, SchemeResult, Workload, load_all, spec_of

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.toml"))
GIB = 2**30


# ---- stand-in evaluators (tests only; never shipped) ---------------------------------------------
def standin_tp(model, cluster, workload):
    """Head-wise TP with a ring all-reduce per block; n must divide the heads."""
    n = cluster.n
    if model.n_heads % n:
        raise WorkbenchError(f"n_devices ({n}) must divide n_heads ({model.n_heads})")
    flops = model.model_flops(workload.new_tokens, workload.attended) / n
    compute = float(cluster.devices[0].compute_time(flops, "fp16"))
    message = workload.new_tokens * model.d_model * workload.activation_bits / 8
    link, data = on_topology(cluster.topology, "ring", "all_reduce", message, breakdown=True)
    link, data = 2 * model.n_layers * float(link), 2 * model.n_layers * float(data)
    peak = model.weight_bytes(workload.weight_bits) / n
    budget = tuple(d.memory_bytes for d in cluster.devices)
    return SchemeResult("standin_tp", "paper_a", workload.phase, compute + link + data, compute, link, data,
                        peak_memory_bytes=(peak,) * n, memory_budget_bytes=budget)


def standin_single(model, cluster, workload):
    """Everything on device 0."""
    device = cluster.devices[0]
    compute = float(device.compute_time(model.model_flops(workload.new_tokens, workload.attended), "fp16"))
    peak = model.weight_bytes(workload.weight_bits)
    return SchemeResult("standin_single", "paper_b", workload.phase, compute, compute, peak_memory_bytes=(peak,),
                        memory_budget_bytes=(device.memory_bytes,))


REGISTRY = {"standin_tp": ("paper_a", standin_tp), "standin_single": ("paper_b", standin_single)}


def make_cluster(n: int = 4, memory_gib: float = 16.0, bandwidth_mbps: float = 1000, latency_ms: float = 0.1,
                 kind: str = "switch") -> Cluster:
    device = DeviceSpec("dev", {"fp32": 50e9, "fp16": 100e9}, 0.5, 0.5,
                        memory=(MemoryLevel("LLC", 2**21, 50e9), MemoryLevel("DRAM", memory_gib * GIB, 20e9)),
                        storage_read_bytes_per_s=200e6)
    return Cluster((device,) * n, Topology(kind, n, Link.from_mbps(bandwidth_mbps, latency_ms)))


# ---- the tidy table ------------------------------------------------------------------------------
def test_table_has_one_row_per_scheme_and_phase_with_breakdown_and_paper():
    arena = run_arena(get_model("Llama 2-7B"), make_cluster(), registry=REGISTRY)
    t = arena.table()
    assert len(t) == 4 and set(t["phase"]) == {"prefill", "decode"}
    assert set(t["paper"]) == {"paper_a", "paper_b"}
    assert set(t["metric"]) == {"TTFT", "time per token"}
    tp = t[(t.scheme == "standin_tp") & (t.phase == "prefill")].iloc[0]
    direct = standin_tp(get_model("Llama 2-7B"), make_cluster(), Workload("prefill", 128, 128))
    assert tp.latency_s == direct.latency_s and tp.comm_link_latency_s == direct.comm_link_latency_s
    assert tp.comm_link_latency_s > 0 and tp.comm_bytes_s > 0
    assert tp.peak_memory_bytes == pytest.approx(get_model("Llama 2-7B").weight_bytes(16) / 4)
    assert tp.status == "ok" and tp["rank"] == 1 and tp.vs_best == 1.0
    single = t[(t.scheme == "standin_single") & (t.phase == "prefill")].iloc[0]
    assert single.vs_best == pytest.approx(single.latency_s / tp.latency_s) and single["rank"] == 2


def test_oom_and_not_applicable_rows_are_marked_and_not_ranked():
    cluster = make_cluster(n=3, memory_gib=4.0)  # 3 does not divide 32 heads; 13.5 GB fp16 > 4 GiB
    t = run_arena(get_model("Llama 2-7B"), cluster, registry=REGISTRY).table()
    tp = t[t.scheme == "standin_tp"]
    assert (tp.status == "n/a").all() and tp.latency_s.isna().all()
    assert tp.notes.str.contains("must divide n_heads").all()
    single = t[t.scheme == "standin_single"]
    assert (single.status == "OOM").all() and single.oom.all() and single["rank"].isna().all()
    assert (single.memory_use > 1).all()


def test_memory_frame_gives_every_device_against_its_budget():
    arena = run_arena(get_model("Llama 2-7B"), make_cluster(n=4, memory_gib=2.0), registry=REGISTRY)
    m = arena.memory()
    tp = m[(m.scheme == "standin_tp") & (m.phase == "decode")]
    assert list(tp.device) == [0, 1, 2, 3]
    assert (tp.budget_bytes == 2.0 * GIB).all()
    assert tp.over_budget.all() == (get_model("Llama 2-7B").weight_bytes(16) / 4 > 2 * GIB)


def test_infeasible_when_nothing_fits_and_error_when_registry_empty():
    arena = run_arena(get_model("Llama 2-7B"), make_cluster(n=3, memory_gib=1.0), registry=REGISTRY)
    with pytest.raises(InfeasibleError, match="nothing fits.*Llama 2-7B"):
        arena.check_feasible()
    with pytest.raises(WorkbenchError, match="no partition schemes"):
        run_arena(get_model("Llama 2-7B"), make_cluster(), registry={}).check_feasible()
    with pytest.raises(WorkbenchError, match="unknown scheme"):
        run_arena(get_model("Llama 2-7B"), make_cluster(), schemes=["nope"], registry=REGISTRY)


def test_a_bug_in_a_scheme_is_not_swallowed():
    def broken(model, cluster, workload):
        raise ZeroDivisionError("bug")

    with pytest.raises(ZeroDivisionError):
        run_arena(get_model("Llama 2-7B"), make_cluster(), registry={"broken": ("x", broken)})


def test_wide_table_and_text_table():
    arena = run_arena(get_model("Llama 2-7B"), make_cluster(n=3, memory_gib=4.0), registry=REGISTRY)
    wide = arena.wide()
    assert list(wide.scheme) == ["standin_single", "standin_tp"]  # n/a last
    text = format_table(arena)
    assert "OOM" in text and "n/a" in text and "paper_b" in text


def test_breakdown_frame_sums_to_the_components_and_charts_build():
    arena = run_arena(get_model("Llama 2-7B"), make_cluster(), registry=REGISTRY)
    long = breakdown_frame(arena)
    t = arena.table().set_index(["scheme", "phase"])
    sums = long.groupby(["scheme", "phase"])["seconds"].sum()
    for key, total in sums.items():
        assert total == pytest.approx(sum(t.loc[key, c] for c in COMPONENTS))
    for spec in (breakdown_spec(arena), ranking_spec(arena), memory_spec(arena)):
        as_altair(spec, validate=True)  # valid Vega-Lite (altair checks it against the schema)
        assert len(spec["datasets"]) == 1
    for chart in (breakdown_chart(arena), ranking_chart(arena), memory_chart(arena)):
        assert len(chart.to_dict()["datasets"]) == 1


def test_specs_carry_json_ready_rows_and_altairs_vega_lite_version():
    from altair.utils._importers import vl_version_for_vl_convert

    assert vl_version_for_vl_convert().lstrip("v").replace("_", ".") == VEGA_LITE_VERSION
    rows = records(pd.DataFrame({"x": [1.5, math.nan], "n": pd.array([1, None], dtype="Int64"), "s": ["a", "b"]}))
    assert rows == [{"x": 1.5, "n": 1, "s": "a"}, {"x": None, "n": None, "s": "b"}]
    assert all(type(r["n"]) is int for r in rows[:1])


def test_with_data_swaps_the_rows_of_a_built_chart():
    a = run_arena(get_model("Llama 2-7B"), make_cluster(bandwidth_mbps=1000), registry=REGISTRY)
    b = run_arena(get_model("Llama 2-7B"), make_cluster(bandwidth_mbps=10), registry=REGISTRY)
    swapped = with_data(breakdown_spec(a, title=""), breakdown_frame(b))
    direct = breakdown_spec(b, title="")
    assert next(iter(swapped["datasets"].values())) == next(iter(direct["datasets"].values()))
    assert swapped["vconcat"] == direct["vconcat"]
    with pytest.raises(WorkbenchError, match="exactly one dataset"):
        with_data({"datasets": {}}, breakdown_frame(b))


# ---- the registry contract (real schemes) --------------------------------------------------------
REAL = load_all()
MOE_ONLY = set(REAL.filter(dense=False))  # the schemes that cost mixtures of experts only


def test_the_registry_holds_every_papers_schemes():
    """The contract tests below are parametrised over the registry: an empty one would test nothing."""
    papers = {paper for paper, _ in REAL.values()}
    assert {"galaxy", "tpi_llm", "sti", "hepti", "mcu_siracusa"} <= papers, papers
SMALL_MODEL = tiny_config("llama", n_layers=2, d_model=128, n_heads=8, d_ff=256, vocab_size=512, max_positions=256)
# the same with 8 experts of 128 (2 active): what a MoE-only scheme (`SchemeSpec.dense` False) is held to
SMALL_MOE = tiny_config("llama", n_layers=2, d_model=128, n_heads=8, d_ff=128, vocab_size=512, max_positions=256,
                        n_experts=8, n_active_experts=2)


def _check_result(name: str, paper: str, result: SchemeResult, cluster: Cluster, workload: Workload) -> None:
    """What every evaluator promises the arena."""
    assert isinstance(result, SchemeResult), f"{name} returned {type(result)}"
    assert (result.scheme, result.paper, result.phase) == (name, paper, workload.phase)
    parts = [getattr(result, c) for c in COMPONENTS]
    assert all(math.isfinite(x) and x >= 0 for x in [result.latency_s, *parts]), (name, result)
    assert result.latency_s > 0, name
    assert sum(parts) >= result.latency_s * (1 - 1e-6) - 1e-12, f"{name}: breakdown {parts} < latency {result.latency_s}"
    assert 1 <= len(result.peak_memory_bytes) <= cluster.n, f"{name}: peak memory per device {result.peak_memory_bytes}"
    assert all(math.isfinite(p) and p >= 0 for p in result.peak_memory_bytes)
    assert isinstance(result.oom, bool | np.bool_)
    if result.memory_budget_bytes:
        assert len(result.memory_budget_bytes) in (len(result.peak_memory_bytes), cluster.n)


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_every_registered_scheme_honours_the_contract(name, phase):
    paper, evaluate = REAL[name]
    cluster = make_cluster(n=2, memory_gib=8.0)
    workload = Workload(phase, seq_len=32, kv_len=32, weight_bits=16)
    if spec_of(name).engine == "distributed-llama":  # no f16 weight kernel: its q4_0 (Q40) one
        workload = Workload(phase, seq_len=32, kv_len=32, weight_bits=4.5, weight_format="q4_0")
    model = SMALL_MOE if name in MOE_ONLY else SMALL_MODEL
    _check_result(name, paper, evaluate(model, cluster, workload), cluster, workload)


BAD_COMBOS = {
    "more devices than heads": (SMALL_MODEL, 16, Workload("prefill", 32, 32)),
    "devices not dividing heads": (SMALL_MODEL, 3, Workload("decode", 32, 32)),
    "odd weight bits": (SMALL_MODEL, 2, Workload("prefill", 32, 32, weight_bits=3.3)),
    "tiny memory": (get_model("Llama 2-7B"), 2, Workload("decode", 64, 64)),
}


@pytest.mark.parametrize("combo", sorted(BAD_COMBOS))
def test_bad_combinations_raise_only_workbench_errors(combo):
    model, n, workload = BAD_COMBOS[combo]
    cluster = make_cluster(n=n, memory_gib=0.5 if combo == "tiny memory" else 8.0)
    for name, (paper, evaluate) in sorted(REAL.items()):
        try:
            result = evaluate(model, cluster, workload)
        except WorkbenchError:
            continue
        _check_result(name, paper, result, cluster, workload)
        if combo == "tiny memory" and not result.oom:
            assert max(result.peak_memory_bytes) <= 0.5 * GIB * (1 + 1e-9) or result.io_stall_s > 0 or \
                "stream" in name or "offload" in name, f"{name} fits 13 GB in 0.5 GiB without streaming"


# ---- the whatif command on every example ----------------------------------------------------------
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_whatif_runs_on_every_example(path, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert main(parser.parse_args([str(path), "--out", str(tmp_path), "--png"])) == 0
    out = capsys.readouterr().out
    for name in REAL:
        assert name in out
    for stem in ("breakdown", "ranking", "memory"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 1000 and (tmp_path / f"{stem}.svg").exists()
    table = pd.read_csv(tmp_path / "arena.csv")
    assert set(table.scheme) == set(REAL) and (table.status == "ok").any()


def test_whatif_command_stays_light(tmp_path):
    """The CLI path imports neither altair nor jax (that is what keeps `whatif` under 2 s) and writes
    every chart as SVG (PNG only with --png) and its tables."""
    import subprocess
    import sys

    code = ("import sys; from workbench.__main__ import main; "
            f"rc = main(['whatif', {str(EXAMPLES[0])!r}, '--out', {str(tmp_path)!r}]); "
            "print(sorted(m for m in ('altair', 'jax', 'scipy') if m in sys.modules)); sys.exit(rc)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{n}.svg" for n in ("breakdown", "ranking", "memory")]
        + ["arena.csv", "memory.csv", "breakdown.csv"])


def test_whatif_reports_a_bad_file_in_one_line(tmp_path, capsys):
    from workbench.__main__ import main as cli

    bad = tmp_path / "bad.toml"
    bad.write_text((REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text().replace("bandwidth_mbps = 1000",
                                                                                   "bandwidth_mbps = -5"))
    assert cli(["whatif", str(bad), "--no-charts"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "network.bandwidth_mbps" in err and "> 0" in err
    good = REPO_ROOT / "examples" / "sbc_gigabit.toml"
    assert cli(["whatif", str(good), "--no-charts", "--seq-len", "100000"]) == 2
    assert "--seq-len must be in [1, 4096]" in capsys.readouterr().err


# ---- one cost model: arena rows equal the paper modules' own numbers --------------------------------
def _arena_row(model, cluster, workload, scheme):
    arena = run_arena(model, cluster, workload.seq_len, workload.kv_len, workload.weight_bits,
                      workload.activation_bits, phases=(workload.phase,), schemes=[scheme],
                      output_head=workload.output_head)
    return arena.table().iloc[0]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_every_scheme_costs_the_output_head_of_a_generation_step(phase):
    """One cost model: a decoder's next-token logits are part of every scheme's step (a bigger vocabulary
    costs every scheme time), and none of it with output_head=False for the schemes that time blocks."""
    from dataclasses import replace

    model = tiny_config("llama", n_layers=2, d_model=256, n_heads=8, n_kv_heads=8, d_ff=512, vocab_size=1000)
    big_vocab = replace(model, vocab_size=64000)
    cluster = make_cluster(n=4, memory_gib=64.0, bandwidth_mbps=1000)
    # q4_0: a format every engine has a kernel for (distributed-llama has no f16 one)
    small, big = (run_arena(m, cluster, 16, 16, 4.5, phases=(phase,), weight_format="q4_0").table()
                  .set_index("scheme") for m in (model, big_vocab))
    ok = (small.status == "ok") & (big.status == "ok")
    assert ok.sum() >= len(REAL) - len(MOE_ONLY) - 2
    slower = big.latency_s[ok] > small.latency_s[ok]
    assert slower.all(), f"schemes without the output head: {sorted(slower.index[~slower])}"
    moe = replace(model, n_experts=8, n_active_experts=2, d_ff=128)
    small_moe, big_moe = (run_arena(m, cluster, 16, 16, 4.5, phases=(phase,), schemes=sorted(MOE_ONLY),
                                    weight_format="q4_0").table()
                          .set_index("scheme") for m in (moe, replace(moe, vocab_size=64000)))
    assert (small_moe.status == "ok").all() and (big_moe.latency_s > small_moe.latency_s).all()
    backbone = [run_arena(m, cluster, 16, 16, 16, phases=(phase,), schemes=["galaxy_hmp", "local", "mcu_headwise_tp"],
                          output_head=False).table().set_index("scheme").latency_s for m in (model, big_vocab)]
    assert (backbone[0] == backbone[1]).all()


def test_arena_equals_galaxy_module():
    from workbench.papers import galaxy

    frame = galaxy.compare("GPT2-L", "A", 125.0, 96)
    cluster = galaxy.environment("A", 125.0)
    workload = galaxy.workload(96)
    for row in frame.itertuples():
        arena_row = _arena_row(get_model("GPT2-L"), cluster, workload, row.scheme)
        assert arena_row.latency_s == row.latency_s and arena_row.comm_bytes_s == row.comm_bytes_s


def test_arena_equals_mcu_module():
    from workbench.papers import mcu_siracusa as mcu

    model = get_model("TinyLlama-42M")
    for chips in (2, 8):  # one chip splits nothing: the arena gives local's time there (tests/test_one_device.py)
        for mode in ("autoregressive", "prompt"):
            row = _arena_row(model, mcu.siracusa_cluster(chips), mcu.paper_workload(model, mode), "mcu_headwise_tp")
            assert row.latency_s == pytest.approx(mcu.timeline(model, mode, chips).makespan, rel=1e-12)


@pytest.mark.skipif("tpi_star_tp" not in REAL, reason="TPI-LLM scheme not registered")
def test_arena_equals_tpi_llm_module():
    from workbench.papers import tpi_llm

    table = tpi_llm.table1(models=("Llama 2-7B",))
    on = table[table.setting.str.startswith("scheduler=on")].iloc[0]
    prefill, decode = tpi_llm.workloads()
    model, cluster = get_model("Llama 2-7B"), tpi_llm.emulated_cluster()
    assert _arena_row(model, cluster, prefill, "tpi_star_tp").latency_s == pytest.approx(on.ttft, rel=1e-12)
    assert _arena_row(model, cluster, decode, "tpi_star_tp").latency_s == pytest.approx(on.token_latency, rel=1e-12)


def test_arena_for_config_uses_the_config_workload():
    from workbench.scenarios.userconfig import load_config

    config = load_config(EXAMPLES[0])
    arena = arena_for_config(config, registry=REGISTRY)
    assert {w.seq_len for w in arena.workloads} == {config.seq_len}
    assert {w.weight_bits for w in arena.workloads} == {config.weight_bits}


# ---- regime map and headline claims (stand-in evaluators) -------------------------------------------
def _base(**kw):
    from workbench.scenarios.regimes import Base

    return Base(get_model("Llama 2-7B"), make_cluster(**kw), 128, 16.0, 16.0)


def test_sweep_and_winners_pick_the_fastest_scheme_that_fits():
    from workbench.scenarios.regimes import NOTHING, sweep, winners

    swept = sweep(_base(), {"bandwidth_mbps": (1, 10000), "memory_gib": (1, 4, 32)}, ("prefill",),
                  registry=REGISTRY)
    assert len(swept) == 2 * 3 * 2
    win = winners(swept).set_index(["bandwidth_mbps", "memory_gib"])
    assert win.loc[(10000, 32), "winner"] == "standin_tp"  # fast link: TP wins
    assert win.loc[(1, 32), "winner"] == "standin_single"  # 1 Mbps: all-reduces cost more than 4x compute
    row = swept[(swept.axis_bandwidth_mbps == 1) & (swept.axis_memory_gib == 32)].set_index("scheme")
    assert win.loc[(1, 32), "margin"] == pytest.approx(row.loc["standin_tp", "latency_s"] /
                                                       row.loc["standin_single", "latency_s"])
    assert win.loc[(10000, 1), "winner"] == NOTHING  # 13.5 GB / 4 > 1 GiB and > 1 GiB on one device
    assert win.loc[(10000, 4), "winner"] == "standin_tp" and win.loc[(10000, 4), "feasible"] == 1


def test_regime_cells_draw_boundaries_between_different_winners():
    from workbench.scenarios.regimes import _edges, regime_cells

    edges = _edges([1, 100, 10000])
    assert edges[100] == pytest.approx((10, 1000)) and edges[1] == pytest.approx((0.1, 10))
    win = pd.DataFrame({"bandwidth_mbps": [1, 1, 100, 100], "latency_ms": [1, 10, 1, 10], "phase": "prefill",
                        "winner": ["a", "a", "b", "a"], "margin": [1.5, 1.2, 2.0, 1.1]})
    cells, segments = regime_cells(win, "bandwidth_mbps", "latency_ms")
    assert list(cells.label) == ["1.50x", "1.20x", "2.00x", "1.10x"]
    # b at (100, 1) borders a on its left (vertical line at x=10) and above (horizontal line at y=sqrt(10))
    assert len(segments) == 2
    assert {(round(s.x0, 6), round(s.x1, 6)) for s in segments.itertuples()} == {(10.0, 10.0), (10.0, 1000.0)}


def test_claims_hold_where_the_ratio_exceeds_the_threshold():
    from workbench.scenarios.regimes import Claim, claim_rows, claims_summary, crossover

    claim = Claim("paper_a", "TP beats one device", "standin_tp", "standin_single", "bandwidth_mbps",
                  (1, 10, 100, 1000, 10000), "prefill")
    rows = claim_rows(claim, _base(memory_gib=32), REGISTRY)
    assert list(rows.holds) == list(rows.ratio > 1)
    assert not rows.holds.iloc[0] and rows.holds.iloc[-1]
    x = crossover(rows)
    assert rows.value[~rows.holds].max() < x < rows.value[rows.holds].min()
    summary = claims_summary(rows).iloc[0]
    assert summary.holds_at.startswith("bandwidth_mbps = ") and "ratio" in summary.fails_at


def test_fits_and_superlinear_claims():
    from workbench.scenarios.regimes import Claim, claim_rows

    fits = Claim("paper_a", "TP fits where one device does not", "standin_tp", "standin_single", "memory_gib",
                 (1, 8, 32), "decode", kind="fits")
    rows = claim_rows(fits, _base(), REGISTRY)
    assert list(rows.outcome) == ["neither fits", "only standin_tp fits", "both fit"]
    assert list(rows.holds) == [False, True, False]
    scaling = Claim("paper_a", "super-linear", "standin_tp", "", "n_devices", (2, 4), "prefill")
    rows = claim_rows(scaling, _base(memory_gib=32, latency_ms=0.0, bandwidth_mbps=1e7), REGISTRY)
    assert (rows.ratio < 1).all() and (rows.ratio > 0.9).all()  # comm costs a little: sub-linear
    missing = claim_rows(Claim("x", "y", "nope", "standin_tp", "seq_len", (16,), "prefill"), _base(), REGISTRY)
    assert "not registered" in missing.detail.iloc[0]


def test_regime_result_rows_are_tidy_numbers():
    from workbench.report.results import RESULT_COLUMNS
    from workbench.scenarios.regimes import Claim, claim_rows, regime_result_rows, sweep, winners

    win = winners(sweep(_base(), {"bandwidth_mbps": (10, 1000), "latency_ms": (0.1, 1)}, ("prefill",),
                        registry=REGISTRY))
    claims = claim_rows(Claim("paper_a", "c", "standin_tp", "standin_single", "seq_len", (16, 64), "prefill"),
                        _base(memory_gib=32), REGISTRY)
    rows = regime_result_rows({"network": win, "claims": claims}, "Llama 2-7B")
    assert list(rows.columns) == RESULT_COLUMNS and rows["value"].notna().all()
    assert set(rows.artifact) == {"regime_network", "headline_claims"}


def test_whatif_table_shows_each_schemes_breakdown_and_why_na():
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config
    from workbench.scenarios.whatif import format_table

    text = format_table(arena_for_config(load_config(REPO_ROOT / "examples" / "laptops_wifi.toml")))
    assert "time/token breakdown" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("tpi_star_tp"))
    # the laptops' decode streams its weights: memory streaming, not compute, and IO bounds the step
    assert "memory" in line and "compute" not in line and "msg" in line and "IO" in line
    assert re.search(r"% +IO +memory \d+% ", line) and "bound by" in text  # bound by IO, then the breakdown


def test_whatif_sweeps_devices_and_set_keys(tmp_path, capsys):
    from workbench.scenarios.whatif import add_arguments, main

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([str(REPO_ROOT / "examples" / "sbc_gigabit.toml"), "--devices", "1,2,4",
                              "--set", "network.bandwidth_mbps=100,1000", "--out", str(tmp_path)])
    assert main(args) == 0
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert sorted(sweep["devices"].unique()) == [1, 2, 4]
    assert sorted(sweep["network.bandwidth_mbps"].unique()) == [100, 1000]
    tp = sweep[sweep.scheme == "megatron_tp"].set_index(["devices", "network.bandwidth_mbps"])["time_per_token_s"]
    assert tp[(4, 100)] > tp[(4, 1000)]  # a slower network costs the 4-device TP more
    assert tp[(1, 100)] == tp[(1, 1000)]  # one device sends nothing


@pytest.mark.parametrize("argv,match", [
    (["--devices", "0"], "--devices values must be integers in"),
    (["--devices", "two"], "--devices values must be integers in"),
    (["--set", "network.bandwidth_mbps"], "--set must be KEY=VALUE"),
    (["--set", "devices[5].count=2"], r"devices\[5\] does not exist"),
    (["--set", "network.bandwidth_mbps=-1"], "bandwidth_mbps must be a number"),
])
def test_whatif_sweep_bad_input_is_one_line(argv, match, tmp_path):
    from workbench.scenarios.whatif import add_arguments, main

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(WorkbenchError, match=match):
        main(parser.parse_args([str(REPO_ROOT / "examples" / "sbc_gigabit.toml"), "--out", str(tmp_path), *argv]))


def test_whatif_out_must_be_a_folder(tmp_path):
    from workbench.scenarios.whatif import add_arguments, main

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    target = tmp_path / "file.txt"
    target.write_text("x")
    with pytest.raises(WorkbenchError, match="is a file"):
        main(parser.parse_args([str(REPO_ROOT / "examples" / "sbc_gigabit.toml"), "--out", str(target)]))


def test_register_refuses_a_second_evaluator_under_a_taken_name():
    from workbench.schemes.base import SCHEMES, register

    load_all()
    held = SCHEMES.spec("tpi_star_tp")
    with pytest.raises(WorkbenchError, match="already registered"):
        register("tpi_star_tp", "tpi_llm", origin="a test", partition="tp", no_moe="a test")(lambda model, cluster, workload: None)
    assert SCHEMES.spec("tpi_star_tp") is held  # the refused evaluator replaced nothing
