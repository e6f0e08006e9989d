"""Mixture-of-experts models: the registry's stored and active sizes against the published totals, the operator
table's expert rows (k experts for one token, the routing union for a prompt), latent attention's cache, and
the one-line refusals (a dense-only scheme, active > experts)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import MODELS, get_model, tiny_config
from workbench.model.routing import expected_distinct
from workbench.schemes import common
from workbench.schemes.base import Cluster, Workload, load_all

MOE = sorted(n for n, m in MODELS.items() if m.is_moe)


def test_the_registry_holds_the_six_moe_models_people_run_at_the_edge():
    assert set(MOE) >= {"Qwen3-30B-A3B", "Qwen3-235B-A22B", "Mixtral-8x7B", "OLMoE-1B-7B", "DeepSeek-V2-Lite",
                        "gpt-oss-20b"}


@pytest.mark.parametrize("name", MOE)
def test_stored_parameters_are_within_one_percent_of_the_published_total(name):
    m = MODELS[name]
    assert m.total_params() == pytest.approx(m.reported_params, rel=0.01)


def _digits_unit(value: float) -> float:
    """A published figure's last digit's unit: 3.3e9 -> 1e8, 12.9e9 -> 1e8, 3.61e9 -> 1e7, 22e9 -> 1e9."""
    text = f"{value / 1e9:g}"
    decimals = len(text.split(".")[1]) if "." in text else 0
    return 1e9 * 10.0 ** -decimals


@pytest.mark.parametrize("name", MOE)
def test_active_parameters_agree_with_the_published_figure(name):
    """Within 1 %, or, where the source gives two significant digits (3.3B, 1.3B, 2.4B), our count written to
    the same digits (rounded or cut) is the published figure: Qwen3-30B-A3B 3.353B reads "3.3B" cut."""
    m = MODELS[name]
    published = m.extra["reported_active_params"]
    ours = m.active_params(include_embedding=m.extra.get("active_counts_embedding", True))
    unit = _digits_unit(published)
    within = abs(ours / published - 1) <= 0.01
    same_digits = round(ours / unit) * unit == pytest.approx(published) or \
        math.floor(ours / unit) * unit == pytest.approx(published)
    assert within or same_digits, (ours, published)


def test_active_is_a_small_share_of_stored_and_the_expert_counts_are_the_cards():
    q = get_model("qwen3-30b")
    assert (q.n_experts, q.n_active_experts, q.d_ff, q.moe_layers) == (128, 8, 768, 48)
    assert q.active_params() / q.total_params() == pytest.approx(3.353 / 30.53, rel=2e-3)
    ds = get_model("DeepSeek-V2-Lite")
    assert (ds.n_shared_experts, ds.n_dense_layers, ds.d_dense_ff, ds.experts_per_token) == (2, 1, 10944, 8)


def test_latent_attention_caches_the_latent_not_the_heads():
    ds = get_model("DeepSeek-V2-Lite")
    assert ds.kv_elements_per_token == 512 + 64
    assert ds.kv_cache_bytes_per_block(1000, 16) == 1000 * 576 * 2
    dense = tiny_config()
    assert dense.kv_elements_per_token == 2 * dense.kv_dim


def test_flops_per_token_count_the_active_experts_only():
    m = get_model("Mixtral-8x7B")
    dense_equivalent = m.with_changes(n_experts=0, n_active_experts=0)
    per_layer_moe = m.block_flops(1, 1) - dense_equivalent.block_flops(1, 1)
    # two experts of the dense FFN's size and the router: one extra FFN and the gate
    assert per_layer_moe == pytest.approx(2.0 * (m.expert_params() + m.router_params()))


def _decode(model, kv=512, tokens=1):
    return Workload("decode", kv, kv, 4.5, 16) if tokens == 1 else Workload("prefill", tokens, tokens, 4.5, 16)


def test_one_token_streams_its_k_experts_and_the_router_a_prompt_the_union():
    m = get_model("Qwen3-30B-A3B")
    rows = {op.name: op for op in common.layer_operators(m, _decode(m))}
    per_expert = m.d_model * m.d_ff * 4.5 / 8
    assert float(rows["ffn2"].bytes) == pytest.approx(8 * per_expert)
    assert float(rows["ffn1"].bytes) == pytest.approx(2 * 8 * per_expert)
    assert float(rows["router"].bytes) == pytest.approx(m.d_model * 128 * 4)  # f32 gate
    prompt = {op.name: op for op in common.layer_operators(m, _decode(m, tokens=64))}
    union = expected_distinct(Workload().routing, 128, 8, 64)
    assert 120 < union < 128
    assert float(prompt["ffn2"].bytes) == pytest.approx(union * per_expert)
    assert common.kernels_per_layer(m) == common.KERNELS_PER_LAYER + 1
    assert [op.name for op in common.layer_operators(m, _decode(m))] == list(common.MOE_OPERATORS)


def test_a_column_slice_is_that_slice_of_every_expert_and_the_router_is_whole():
    m = get_model("Qwen3-30B-A3B")
    w = _decode(m)
    full = {op.name: op for op in common.layer_operators(m, w)}
    quarter = {op.name: op for op in common.layer_operators(m, w, cols=m.d_ff / 4)}
    assert float(quarter["ffn2"].bytes) == pytest.approx(float(full["ffn2"].bytes) / 4)
    assert float(quarter["router"].bytes) == float(full["router"].bytes)
    none = {op.name: op for op in common.layer_operators(m, w, cols=0)}
    assert float(none["router"].bytes) == 0.0 and float(none["ffn1"].flops) == 0.0


def test_a_dense_first_layer_blends_into_the_mean_layer():
    ds = get_model("DeepSeek-V2-Lite")
    w = Workload("prefill", 1, 1, 16, 16)
    rows = {op.name: op for op in common.layer_operators(ds, w)}
    mean_ffn = ds.active_ffn_params() - ds.moe_layers / ds.n_layers * ds.router_params()
    assert float(rows["ffn1"].flops + rows["ffn2"].flops) == pytest.approx(2.0 * mean_ffn)


def _pi_cluster(n=1):
    pi = load_device("tpi_dell_i7_1165g7")  # 16 GB: OLMoE's 3.9 GB of q4_0 weights fit
    return Cluster((pi,) * n, Topology("switch", n, Link(1e9 / 8, 1e-4)))


def test_a_dense_only_scheme_says_so_for_a_moe_model_and_a_table_scheme_costs_it():
    schemes = load_all()
    m = get_model("OLMoE-1B-7B")
    with pytest.raises(WorkbenchError, match="dense FFN.*mixture of experts"):
        schemes["hepti_ws"][1](m, _pi_cluster(2), _decode(m))
    moe = schemes["single_device_resident"][1](m, _pi_cluster(), _decode(m))
    dense_small = schemes["single_device_resident"][1](
        m.with_changes(name="OLMoE as dense of its active size", n_experts=0, n_active_experts=0, d_ff=8 * 1024),
        _pi_cluster(), _decode(m))
    assert moe.latency_s == pytest.approx(dense_small.latency_s, rel=0.05)  # decode streams the active experts
    assert moe.peak_memory_bytes[0] > 3.5 * dense_small.peak_memory_bytes[0]  # but stores them all


@pytest.mark.parametrize("changes, key", [
    (dict(n_experts=8, n_active_experts=9), "n_active_experts must be an integer in 1..8"),
    (dict(n_experts=8, n_active_experts=0), "n_active_experts must be an integer in 1..8"),
    (dict(n_active_experts=2), "need n_experts >= 1"),
    (dict(n_experts=8, n_active_experts=2, n_dense_layers=2), "n_dense_layers must be in 0..1"),
    (dict(n_experts=8, n_active_experts=2, router="greedy"), "unknown router 'greedy'"),
    (dict(kv_lora_rank=16, qk_rope_dim=9), "qk_rope_dim must be an integer >= 0 and <= 8"),
])
def test_bad_moe_dimensions_get_one_line(changes, key):
    with pytest.raises(WorkbenchError, match=key) as info:
        tiny_config(**changes) if "qk_rope_dim" not in changes else tiny_config(d_head=8, **changes)
    assert "\n" not in str(info.value)


def test_gelu_experts_are_refused():
    with pytest.raises(WorkbenchError, match="n_experts needs family 'llama'"):
        tiny_config("gpt", n_experts=4, n_active_experts=1)


def test_a_toml_describes_a_moe_model_by_its_dimensions(tmp_path):
    from workbench.scenarios.userconfig import load_config
    path = tmp_path / "moe.toml"
    path.write_text('''
[model]
name = "my-moe"
family = "llama"
n_layers = 4
d_model = 256
n_heads = 8
d_ff = 128
vocab_size = 1000
n_experts = 16
n_active_experts = 2
[workload]
seq_len = 16
[network]
topology = "switch"
bandwidth_mbps = 1000
[[devices]]
preset = "hepti_rpi4"
''')
    config = load_config(path)
    assert config.model.is_moe and config.model.n_experts == 16 and config.model.n_active_experts == 2
    bad = tmp_path / "bad.toml"
    bad.write_text(path.read_text().replace("n_active_experts = 2", "n_active_experts = 17"))
    with pytest.raises(WorkbenchError, match="n_active_experts must be an integer in 1..16") as info:
        load_config(bad)
    assert "\n" not in str(info.value)


def test_expected_distinct_is_k_for_one_token_and_tends_to_all_experts():
    assert expected_distinct(Workload().routing, 128, 8, 1) == pytest.approx(8)
    assert expected_distinct(Workload().routing, 128, 8, 10_000) == pytest.approx(128)
    assert np.all(np.diff(expected_distinct(Workload().routing, 64, 6, np.arange(1, 50))) > 0)


def test_the_workload_routing_keys_reach_the_operator_table(tmp_path):
    from workbench.scenarios.userconfig import load_config
    base = '''
[model]
name = "OLMoE-1B-7B"
weight_bits = 4.5
[workload]
seq_len = 64
{extra}
[network]
topology = "switch"
bandwidth_mbps = 1000
[[devices]]
preset = "tpi_dell_i7_1165g7"
'''
    path = tmp_path / "olmoe.toml"
    path.write_text(base.format(extra=""))
    uniform = load_config(path)
    path.write_text(base.format(extra='routing = "skewed"\nrouting_skew = 1.2\nrouting_locality = 0.3'))
    skewed = load_config(path)
    assert skewed.routing.kind == "skewed" and skewed.workload("prefill").routing.skew == 1.2
    m = uniform.model
    touched = [float(common.experts_touched(m, c.workload("prefill"), 64)) for c in (uniform, skewed)]
    assert touched[1] < touched[0] < m.n_experts  # popular experts shared: a skewed prompt touches fewer
    path.write_text(base.format(extra='routing = "skewed"\nrouting_locality = 1.0'))
    with pytest.raises(WorkbenchError, match="workload.routing_locality must be a number >= 0 and < 1") as info:
        load_config(path)
    assert "\n" not in str(info.value)


def test_a_swapping_moe_pages_in_only_the_experts_its_tokens_touch():
    """single_device_resident on a board too small for OLMoE: a decode step swaps in the attention and the 8
    routed experts of every layer, not all 64 (the untouched experts' pages are never read)."""
    schemes = load_all()
    m = get_model("OLMoE-1B-7B")
    small = Cluster((load_device("hepti_rpi4"),), Topology("switch", 1, Link(1e9 / 8, 1e-4)))
    result = schemes["single_device_resident"][1](m, small, _decode(m))
    from workbench.schemes.baselines import untouched_expert_bytes
    untouched = untouched_expert_bytes(m, _decode(m))
    assert untouched == pytest.approx(16 * (64 - 8) * m.expert_params() * 4.5 / 8)
    dense = get_model("Llama 2-7B")
    assert untouched_expert_bytes(dense, _decode(dense)) == 0.0
    every = m.with_changes(name="OLMoE, all experts active", n_active_experts=64)  # same stored bytes, all touched
    all_touched = schemes["single_device_resident"][1](every, small, _decode(every))
    weights = result.peak_memory_bytes[0]  # same for both: the same stored weights
    assert all_touched.peak_memory_bytes[0] == weights
    assert result.io_stall_s / all_touched.io_stall_s == pytest.approx(
        1 - untouched / (m.total_params() * 4.5 / 8), rel=1e-9)
