"""Issue 32, deliverable 1 (the rest): a TP scheme's result carries its busiest device's operator rows for one
layer (`SchemeResult.operators`, a `common.Breakdown`), and its memory / arithmetic split is those rows' share,
exact, in place of the whole unpartitioned step's approximate `common.memory_share`."""

from __future__ import annotations

import sys

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.model.models import get_model
from workbench.schemes import common
from workbench.schemes.base import SCHEMES, SchemeResult, Workload, load_all, spec_of

sys.path.insert(0, str(REPO_ROOT / "tests"))
from streaming_cases import cluster  # noqa: E402

LLAMA = get_model("Llama 2-7B")
# scheme -> each device's slice (heads, FFN columns) as a fraction of the model's, on n devices
EVEN = ("megatron_tp", "tp_ring_allreduce", "tpi_star_tp_resident", "dllama_allgather_tp", "dllama_root_tp")


def _run(name: str, cluster_name: str, phase: str) -> SchemeResult:
    load_all()
    return SCHEMES[name][1](LLAMA, cluster(cluster_name), Workload(phase, 128, 128, 4.5))


def _layer_time(device, rows) -> float:
    """One device's layer: its rows' time + its layer overhead (what 'busiest' ranks)."""
    return sum(float(r.time_s) for r in rows) + float(device.layer_overhead_s)


@pytest.mark.parametrize("name", EVEN)
def test_even_tp_schemes_carry_the_busiest_devices_rows(name):
    """On the mixed cluster each device holds 1/4 of the heads and columns: the result's rows are the fused table
    of that slice on the device whose layer takes longest (not device 0), for every layer of the model."""
    c = cluster("mixed x4")
    w = Workload("decode", 128, 128, 4.5)
    if spec_of(name).engine:  # an engine's scheme costs its rows with its kernels (Q40 for 4.5 bits)
        w = Workload("decode", 128, 128, 4.5, engine=spec_of(name).engine, weight_format="q4_0")
    result = _run(name, "mixed x4", "decode")
    bd = result.operators
    assert isinstance(bd, common.Breakdown)
    assert bd.layers == LLAMA.n_layers
    assert tuple(r.operator.name for r in bd.rows) == common.FUSED_OPERATORS
    tables = [common.cost(d, common.layer_operators(LLAMA, w, LLAMA.n_heads / 4, LLAMA.d_ff / 4, 1))
              for d in c.devices]
    times = [_layer_time(d, rows) for d, rows in zip(c.devices, tables)]
    assert bd.device == times.index(max(times)) != 0  # the Nano-L CPU here, not the first Pi
    for got, want in zip(bd.rows, tables[bd.device]):
        assert float(got.memory_s) == float(want.memory_s) and float(got.compute_s) == float(want.compute_s)


def test_capability_split_rows_are_the_devices_share():
    """TPI-LLM's capability split: the busiest device's rows hold its share p_i of the heads (not 1/n)."""
    from workbench.schemes.tpi_llm import default_options, device_shares, evaluate_tpi

    c = cluster("mixed x4")  # resident weights: these boards state no storage rate for the loader
    options = default_options(scheduler=False, split="capability", first_token_loads=False)
    bd = evaluate_tpi(LLAMA, c, Workload("decode", 128, 128, 4.5), options).operators
    shares = device_shares(c, "capability")
    assert shares[bd.device] != pytest.approx(0.25)
    qkv = bd.rows[0].operator
    assert float(qkv.flops) == pytest.approx(float(common.qkv_flops(LLAMA, shares[bd.device] * LLAMA.n_heads, 1)))


def test_root_engines_prefill_has_no_single_layer_table():
    """distributed-llama's root engine prefills as S one-token forwards: no one table, so no rows (its split
    stays the whole step's); its decode carries them."""
    assert _run("dllama_root_tp", "nano-m x4", "prefill").operators is None
    assert _run("dllama_root_tp", "nano-m x4", "decode").operators is not None


def test_galaxy_rows_take_each_devices_partition():
    """Galaxy's HMP: the busiest device's GEMMs on its planned heads / columns over the whole sequence, its
    connective blocks on its sequence shard only; SP: the whole weights on its token shard."""
    c = cluster("mixed x4")
    w = Workload("prefill", 128, 128, 4.5)
    hmp = _run("galaxy_hmp", "mixed x4", "prefill")
    part, bd = hmp.extra["partition"], hmp.operators
    i = bd.device
    want = common.cost(c.devices[i], common.layer_operators(LLAMA, w, part.heads[i], part.mlp_cols[i], 128)[:-1]
                       + common.layer_operators(LLAMA, w, tokens=part.seq[i])[-1:])
    assert part.seq[i] != 128
    assert [float(r.time_s) for r in bd.rows] == [float(r.time_s) for r in want]
    sp = _run("sp", "mixed x4", "prefill")
    j = sp.operators.device
    qkv = sp.operators.rows[0].operator
    assert float(qkv.flops) == float(common.qkv_flops(LLAMA, LLAMA.n_heads, sp.extra["partition"].seq[j]))


SPLIT_CASES = [(name, "mixed x4", "decode") for name in EVEN + ("galaxy_hmp", "sp")] + \
    [(name, "nano-m x4", "prefill") for name in EVEN if name != "dllama_root_tp"] + \
    [("tpi_star_tp", "m1 x2", "prefill")]


@pytest.mark.parametrize("name,cluster_name,phase", SPLIT_CASES)
def test_tp_split_is_the_busiest_devices_rows_share(name, cluster_name, phase):
    """memory_s / (memory_s + compute_s) is the busiest device's rows' memory-bound busy share (exact), not the
    whole step's `common.memory_share` (which differs on these cases)."""
    c = cluster(cluster_name)
    result = _run(name, cluster_name, phase)
    share = result.memory_s / (result.memory_s + result.compute_s)
    assert share == pytest.approx(result.operators.memory_share, rel=1e-9)
    whole = common.memory_share(LLAMA, c.devices, Workload(phase, 128, 128, 4.5))
    assert share != pytest.approx(whole, rel=1e-3)


def test_breakdown_sums_its_rows_over_its_layers():
    """part(side) is layers x the rows' busy seconds on that side; memory_share their ratio."""
    c = cluster("nano-m x1")
    w = Workload("decode", 128, 128, 4.5)
    rows = tuple(common.cost(c.devices[0], common.layer_operators(LLAMA, w)))
    bd = common.Breakdown(0, 3, rows)
    memory = sum(float(r.part("memory")) for r in rows)
    compute = sum(float(r.part("compute")) for r in rows)
    assert bd.part("memory") == pytest.approx(3 * memory) and bd.part("compute") == pytest.approx(3 * compute)
    assert bd.memory_share == pytest.approx(memory / (memory + compute))
    assert 0 < bd.memory_share < 1


def test_breakdown_and_result_reject_bad_input():
    """One line naming what is wrong: negative layers or device, no rows, an unknown side, a non-Breakdown."""
    c = cluster("nano-m x1")
    rows = tuple(common.cost(c.devices[0], common.layer_operators(LLAMA, Workload("decode", 128, 128, 4.5))))
    with pytest.raises(WorkbenchError, match="breakdown layers"):
        common.Breakdown(0, -1, rows)
    with pytest.raises(WorkbenchError, match="breakdown device"):
        common.Breakdown(-1, 1, rows)
    with pytest.raises(WorkbenchError, match="at least one OperatorCost"):
        common.Breakdown(0, 1, ())
    with pytest.raises(WorkbenchError, match="breakdown side"):
        common.Breakdown(0, 1, rows).part("launch")
    with pytest.raises(WorkbenchError, match="operators must be a common.Breakdown"):
        SchemeResult("x", "p", "decode", 1.0, operators=rows)
    with pytest.raises(WorkbenchError, match="one entry per device"):
        common.busiest_breakdown(LLAMA, c.devices, Workload(), (1, 2), (1,), (1,), 1)


def test_extra_holds_no_cost_rows():
    """`extra` keeps plans and timelines; cost rows live in `operators` only."""
    load_all()
    c = cluster("nano-m x4")
    for name, (_, evaluate) in sorted(SCHEMES.items()):
        try:
            result = evaluate(LLAMA, c, Workload("decode", 128, 128, 4.5))
        except WorkbenchError:
            continue
        for value in result.extra.values():
            items = value if isinstance(value, list | tuple) else (value,)
            assert not any(isinstance(v, common.OperatorCost | common.Breakdown) for v in items), name


def test_arena_bound_follows_the_busiest_device():
    """On the mixed cluster's decode the slowest board (the Nano-L CPU) is arithmetic-bound on its slice, so a TP
    step is compute-bound, though the whole step spread over every board would read memory-bound."""
    from workbench.scenarios.arena import run_arena

    table = run_arena(LLAMA, cluster("mixed x4"), weight_bits=4.5, phases=("decode",),
                      schemes=["megatron_tp", "tp_ring_allreduce", "dllama_allgather_tp"]).table()
    assert set(table["bound"]) == {"compute"}
    assert common.memory_share(LLAMA, cluster("mixed x4").devices, Workload("decode", 128, 128, 4.5)) > 0.5
