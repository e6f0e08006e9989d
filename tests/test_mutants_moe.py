"""Tests that kill mutmut survivors in the MoE / MLA cost code (workbench/model/models.py's expert and latent-attention
parts, workbench/model/routing.py, and the MoE rows of workbench/schemes/common.py; see docs/mutation.md).

Every expected number is worked by hand from a model card's dimensions (the config.json of each Hugging Face
repository, as the registry's `source` quotes them), not read back from the code:

* Qwen3-30B-A3B: 48 layers, d 2048, 32 heads x 128, 4 KV heads, 128 experts of 768, top-8, vocab 151936, untied.
* Mixtral-8x7B: 32 layers, d 4096, 32 heads x 128, 8 KV heads, 8 experts of 14336, top-2, vocab 32000, untied.
* DeepSeek-V2-Lite: 27 layers, d 2048, 16 heads, MLA (latent 512, qk 128 + rope 64 = d_head 192, v 128),
  64 routed experts of 1408, top-6, 2 shared, 1 dense layer of 10944, vocab 102400, untied.
* gpt-oss-20b: 24 layers, d 2880, 64 heads x 64, 8 KV heads, 32 experts of 2880, top-4, vocab 201088, untied.

The routing model's special cases are worked on small popularity vectors (a hand-written trace CSV, Zipf
weights 1, 1/2, 1/3, 1/4) and on the cards' expert counts under uniform routing, where every analytic value has
a closed form. JAX-free and fast (well under a second per test).

The memoised popularity (`routing._popularity`, `_grouped`, `_read_counts`) and layer parts
(`common._LAYER_PARTS`) are cleared before every test here: mutmut forks each mutant's run from a process
whose caches the unmutated code already filled, so a cached value would hide the mutant.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.fields import FieldSpec, TomlKey, declared_fields
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.model import models, routing
from workbench.model.models import TransformerConfig, get_model, tiny_config
from workbench.schemes import common

QWEN = get_model("Qwen3-30B-A3B")
MIXTRAL = get_model("Mixtral-8x7B")
DSV2 = get_model("DeepSeek-V2-Lite")
GPTOSS = get_model("gpt-oss-20b")


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Every test computes its popularity and layer parts afresh (see the module docstring)."""
    for memo in (routing._popularity, routing._grouped, routing._read_counts):
        memo.cache_clear()
    common._LAYER_PARTS.clear()


# ---- the declared count fields ---------------------------------------------------------------------------------
def test_the_moe_and_mla_counts_are_declared_integers_that_may_be_zero():
    """`_count`: an integer field >= 0 (no upper bound but the file's), unitless, under its own [model] key."""
    specs = {f.name: spec for f, spec in declared_fields(TransformerConfig)}
    assert specs["n_experts"] == FieldSpec("routed experts per MoE layer (0: a dense model)", "", 0, math.inf,
                                           file_high=4096, kind="integer", toml=(TomlKey("n_experts", 1.0, ""),))
    assert specs["n_dense_layers"] == FieldSpec("dense layers before the MoE layers", "", 0, math.inf,
                                                file_high=1000, kind="integer",
                                                toml=(TomlKey("n_dense_layers", 1.0, ""),))
    assert specs["kv_lora_rank"].file_high == 1 << 16 and specs["qk_rope_dim"].toml[0].key == "qk_rope_dim"
    assert specs["n_experts"].check("n_experts", 0) == 0  # 0 is allowed (a dense model) ...
    with pytest.raises(WorkbenchError, match=r"n_experts must be an integer in \[0, 4096\], got 4097"):
        specs["n_experts"].check("n_experts", 4097, from_file=True)  # ... more than 4096 from a file is not
    assert specs["n_experts"].range_text() == "an integer >= 0"
    # the declarations run at import; the helper itself, called afresh, builds the same kind of field
    assert models._count("latent rank", "rank", 7) == FieldSpec("latent rank", "", 0, math.inf, file_high=7,
                                                                 kind="integer", toml=(TomlKey("rank", 1.0, ""),))


# ---- construction checks ---------------------------------------------------------------------------------------
def _one_line(changes: dict, match: str) -> None:
    with pytest.raises(WorkbenchError, match=match) as caught:
        tiny_config(**changes)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("changes, match", [
    (dict(n_experts=-1), r"^n_experts must be an integer >= 0, got -1$"),
    (dict(n_experts=8, n_active_experts=-1), r"^n_active_experts must be an integer >= 0, got -1$"),
    (dict(n_shared_experts=-1), r"^n_shared_experts must be an integer >= 0, got -1$"),
    (dict(n_dense_layers=-1), r"^n_dense_layers must be an integer >= 0, got -1$"),
    (dict(n_experts=2.0), r"^n_experts must be an integer >= 0, got 2.0$"),
    (dict(router="greedy"), r"^unknown router 'greedy'; allowed: softmax_topk_norm, softmax_topk, topk_softmax$"),
    (dict(n_shared_experts=1), r"^n_active_experts, n_shared_experts and n_dense_layers need n_experts >= 1, "
                               r"in 'tiny-llama'$"),
    (dict(n_dense_layers=1), r"^n_active_experts, n_shared_experts and n_dense_layers need n_experts >= 1, "
                             r"in 'tiny-llama'$"),
    (dict(n_experts=4, n_active_experts=5), r"^n_active_experts must be an integer in 1\.\.4 \(n_experts\), got 5 "
                                            r"in 'tiny-llama'$"),
    (dict(n_experts=4, n_active_experts=1, n_dense_layers=2), r"^n_dense_layers must be in 0\.\.1 \(n_layers - 1\), "
                                                              r"got 2 in 'tiny-llama'$"),
    (dict(n_experts=4, n_active_experts=1, n_dense_layers=3), r"^n_dense_layers must be in 0\.\.1"),
    (dict(n_layers=1, n_experts=4, n_active_experts=1, n_dense_layers=1), r"^n_dense_layers must be in 0\.\.0 "),
    (dict(d_dense_ff=0), r"^d_dense_ff must be an integer >= 1, got 0$"),
    (dict(kv_lora_rank=-1), r"^kv_lora_rank must be an integer >= 0, got -1$"),
    (dict(qk_rope_dim=1), r"^qk_rope_dim must be an integer >= 0 and <= 0, got 1$"),  # no latent: no rotary part
    (dict(kv_lora_rank=4, qk_rope_dim=-1), r"^qk_rope_dim must be an integer >= 0 and <= 8, got -1$"),
    (dict(kv_lora_rank=4, qk_rope_dim=9), r"^qk_rope_dim must be an integer >= 0 and <= 8, got 9$"),
    (dict(v_head_dim=0), r"^v_head_dim must be an integer >= 1, got 0$"),
])
def test_bad_expert_and_latent_fields_get_their_own_line(changes, match):
    """tiny_config: 2 layers, d_model 64, 8 heads of 8; each bad field names itself and its exact range."""
    _one_line(changes, match)


def test_gelu_experts_name_the_family_and_the_model():
    with pytest.raises(WorkbenchError, match=r"^n_experts needs family 'llama' \(SwiGLU experts\), got 'gpt' in "
                                             r"'tiny-gpt'$"):
        tiny_config("gpt", n_experts=4, n_active_experts=1)


def test_the_edges_of_the_moe_and_mla_ranges_are_accepted():
    """k = 1 and k = n, the last layer left for experts (n_dense_layers = n_layers - 1), a rotary key as wide as
    the head, explicit dense and value widths; the defaults fill d_dense_ff = d_ff and v_head_dim = d_head."""
    assert tiny_config(n_experts=4, n_active_experts=1).experts_per_token == 1
    assert tiny_config(n_experts=4, n_active_experts=4).experts_per_token == 4
    last = tiny_config(n_experts=4, n_active_experts=2, n_dense_layers=1, n_shared_experts=3)
    assert (last.moe_layers, last.experts_per_token, last.d_dense_ff) == (1, 5, 128)
    assert tiny_config(kv_lora_rank=4, qk_rope_dim=8).qk_rope_dim == 8
    assert tiny_config(kv_lora_rank=4, qk_rope_dim=0).is_mla
    assert tiny_config(n_experts=4, n_active_experts=1, d_dense_ff=1).d_dense_ff == 1
    assert tiny_config(v_head_dim=1).v_head_dim == 1
    dense = tiny_config()
    assert (dense.d_dense_ff, dense.v_head_dim, dense.is_moe, dense.is_mla, dense.moe_layers,
            dense.experts_per_token) == (128, 8, False, False, 0, 1)
    for router in ("softmax_topk_norm", "softmax_topk", "topk_softmax"):
        assert tiny_config(router=router).router == router


# ---- parameter counts: every expert stored, k of them active ---------------------------------------------------
def test_qwen3_30b_a3b_counts_by_hand():
    """q 2048 x 4096, k and v 2048 x 512 each, o 4096 x 2048; an expert 3 x 2048 x 768 = 4,718,592; the router
    2048 x 128; 48 MoE layers; embedding and the untied head 151936 x 2048 each, the final RMSNorm 2048."""
    m = QWEN
    assert m.qkv_weight_params() == 2048 * 4096 + 2 * 2048 * 512 == 10_485_760
    assert m.out_weight_params() == 8_388_608
    assert m.attention_params() == 18_874_368
    assert m.dense_ffn_params(768) == m.expert_params() == 4_718_592
    assert m.router_params() == 262_144
    assert m.moe_ffn_params() == 128 * 4_718_592 + 262_144 == 604_241_920
    assert m.active_moe_ffn_params() == 8 * 4_718_592 + 262_144 == 38_010_880
    assert m.ffn_params() == 604_241_920 and m.active_ffn_params() == 38_010_880  # no dense layers: no mean
    assert m.block_params() == 18_874_368 + 604_241_920 + 4096
    assert m.total_params() == 311_164_928 + 48 * 623_120_384 + 311_166_976 == 30_532_110_336
    assert m.active_params() == 311_164_928 + 48 * 56_889_344 + 311_166_976 == 3_353_020_416
    assert m.active_params(include_embedding=False) == 3_353_020_416 - 311_164_928
    assert (m.is_moe, m.moe_layers, m.experts_per_token, m.is_mla) == (True, 48, 8, False)


def test_mixtral_8x7b_counts_by_hand():
    """Attention 41,943,040 (GQA 8 KV heads); an expert 3 x 4096 x 14336; router 4096 x 8; 46.70B / 12.88B."""
    m = MIXTRAL
    assert m.attention_params() == 4096 * 4096 * 2 + 2 * 4096 * 1024 == 41_943_040
    assert m.moe_ffn_params() == 8 * 176_160_768 + 32_768
    assert m.active_moe_ffn_params() == 2 * 176_160_768 + 32_768
    assert m.total_params() == 2 * 131_072_000 + 4096 + 32 * (41_943_040 + 1_409_318_912 + 8192) == 46_702_792_704
    assert m.active_params() == 2 * 131_072_000 + 4096 + 32 * (41_943_040 + 352_354_304 + 8192) == 12_879_925_248


def test_gpt_oss_20b_counts_by_hand():
    """64 heads of 64 (q 2880 x 4096), 8 KV heads; 32 experts of 3 x 2880 x 2880, top-4; active without the
    input embedding (the card's convention): 3.607B, total 20.908B."""
    m = GPTOSS
    assert m.attention_params() == 2880 * 4096 + 2 * 2880 * 512 + 4096 * 2880 == 26_542_080
    assert m.expert_params() == 24_883_200 and m.router_params() == 92_160
    assert m.total_params() == 579_133_440 + 24 * (26_542_080 + 32 * 24_883_200 + 92_160 + 5760) + 579_136_320
    assert m.total_params() == 20_907_927_360
    assert m.active_params(False) == 24 * (26_542_080 + 4 * 24_883_200 + 92_160 + 5760) + 579_136_320 == 3_607_283_520


def test_deepseek_v2_lite_latent_attention_and_dense_first_layer_by_hand():
    """MLA: q 2048 x (16 x 192); KV down 2048 x (512 + 64); up 512 x 16 x (128 + 128); o (16 x 128) x 2048; the
    latent's RMSNorm 512. FFN: layer 0 dense (3 x 2048 x 10944), 26 MoE layers of 64 routed + 2 shared experts
    of 3 x 2048 x 1408 and a 2048 x 64 router; a token computes 6 + 2 experts."""
    m = DSV2
    assert m.qkv_weight_params() == 6_291_456 + 1_179_648 + 2_097_152 == 9_568_256
    assert m.out_weight_params() == 16 * 128 * 2048 == 4_194_304
    assert m.attention_params() == 9_568_256 + 4_194_304 + 512 == 13_763_072
    assert m.dense_ffn_params(10944) == 67_239_936
    assert m.expert_params() == 8_650_752 and m.router_params() == 131_072
    assert m.moe_ffn_params() == 66 * 8_650_752 + 131_072 == 571_080_704
    assert m.active_moe_ffn_params() == 8 * 8_650_752 + 131_072 == 69_337_088
    assert m.ffn_params() == pytest.approx((67_239_936 + 26 * 571_080_704) / 27, rel=1e-15)
    assert m.active_ffn_params() == pytest.approx((67_239_936 + 26 * 69_337_088) / 27, rel=1e-15)
    assert m.block_params() == pytest.approx(13_763_072 + (67_239_936 + 26 * 571_080_704) / 27 + 4096, rel=1e-15)
    blocks = 27 * (13_763_072 + 4096) + 67_239_936
    assert m.total_params() == 209_715_200 + blocks + 26 * 571_080_704 + 209_717_248 == 15_706_484_224
    assert m.active_params() == 209_715_200 + blocks + 26 * 69_337_088 + 209_717_248 == 2_661_150_208
    assert m.active_params(include_embedding=False) == 2_451_435_008
    assert isinstance(m.total_params(), int) and isinstance(m.active_params(), int)  # exact integer sums
    assert (m.moe_layers, m.experts_per_token, m.is_mla, m.kv_elements_per_token) == (26, 8, True, 576)


def test_a_dense_model_is_one_expert_and_no_router():
    """A dense Llama's FFN is its one 'expert'; no router, every block alike (Llama 2-7B: 202,383,360 per block)."""
    m = get_model("Llama 2-7B")
    assert m.router_params() == 0 and m.experts_per_token == 1 and m.moe_layers == 0
    assert m.ffn_params() == m.active_ffn_params() == 3 * 4096 * 11008 == 135_266_304
    assert m.block_params() == 4 * 4096 * 4096 + 135_266_304 + 8192 == 202_383_360
    assert m.total_params() == m.active_params() == 2 * 32000 * 4096 + 4096 + 32 * 202_383_360
    gpt = get_model("GPT2-L")  # a GELU FFN: up and down with their biases
    assert gpt.dense_ffn_params(5120) == 2 * 1280 * 5120 + 5120 + 1280
    assert gpt.ffn_params() == gpt.active_ffn_params() == 13_113_600
    # GPT-2 large's attention: 4 x 1280 x 1280 weights and the Q, K, V, O biases of 1280 each
    assert gpt.attention_params() == 4 * 1280 * 1280 + 4 * 1280 == 6_558_720
    opt = get_model("OPT-L")  # 16 heads of 128 (the head count does not change the size)
    assert opt.attention_params() == 4 * 2048 * 2048 + 4 * 2048


# ---- bytes and FLOPs ------------------------------------------------------------------------------------------
def test_the_latent_cache_holds_the_latent_and_the_rotary_key():
    """DeepSeek-V2-Lite caches 512 + 64 elements per token and layer (not 2 x 16 x 192 = 6144)."""
    assert DSV2.kv_cache_bytes_per_block(1000, 16) == 1000 * 576 * 2
    assert DSV2.kv_cache_bytes_per_block(3, 8) == 3 * 576
    assert DSV2.kv_cache_bytes_per_block(0) == 0
    assert DSV2.kv_cache_bytes(10, 4) == 27 * 10 * 576 / 2
    assert QWEN.kv_cache_bytes_per_block(1000, 16) == 2 * 1000 * 512 * 2  # GQA: K and V of 4 heads x 128
    assert QWEN.kv_cache_bytes_per_block(1000) == 2_048_000  # 16 bits by default
    with pytest.raises(WorkbenchError, match=r"^kv_len must be an integer >= 0, got -1$"):
        DSV2.kv_cache_bytes_per_block(-1)


def test_activation_bytes_hold_every_computed_expert_hidden():
    """Qwen3-30B-A3B, 10 tokens over 20 keys at 16 bits: input 10 x 2048, Q/K/V 10 x (4096 + 1024), scores
    32 x 10 x 20, and the gate and up hidden of 8 experts of 768: 10 x 2 x 768 x 8."""
    elements = 10 * 2048 + 10 * 5120 + 32 * 10 * 20 + 10 * 2 * 768 * 8
    assert QWEN.activation_bytes(10, 20) == elements * 2
    assert QWEN.activation_bytes(10, 20, bits=8) == elements
    assert QWEN.activation_bytes(10) == (10 * 2048 + 10 * 5120 + 32 * 10 * 10 + 10 * 2 * 768 * 8) * 2
    gpt = get_model("GPT2-L")  # one GELU hidden of 5120, one "expert"
    assert gpt.activation_bytes(1, 1) == (1280 + 3 * 1280 + 20 + 5120) * 2
    with pytest.raises(WorkbenchError, match=r"^seq_len must be an integer >= 1, got 0$"):
        QWEN.activation_bytes(0)
    with pytest.raises(WorkbenchError, match=r"^kv_len must be an integer >= 1, got 0$"):
        QWEN.activation_bytes(1, 0)


def test_flops_of_a_moe_block_by_hand():
    """Qwen3-30B-A3B: projections 2 x S x 18,874,368; scores 4 x S x kv x 4096; FFN 2 x S x (8 experts + the
    router) = 2 x S x 38,010,880."""
    m = QWEN
    assert m.attention_matmul_flops(3) == 2.0 * 3 * 18_874_368
    assert m.attention_score_flops(3, 7) == 4.0 * 3 * 7 * 4096
    assert m.attention_score_flops(3) == 4.0 * 3 * 3 * 4096
    assert m.ffn_flops(3) == 2.0 * 3 * 38_010_880
    assert m.block_flops(1, 100) == 2.0 * 18_874_368 + 4.0 * 100 * 4096 + 2.0 * 38_010_880


def test_flops_of_latent_attention_and_the_dense_first_layer_by_hand():
    """DeepSeek-V2-Lite: projections 2 x S x (9,568,256 + 4,194,304) (the latent norm is no matmul); QK^T over
    192 and PV over 128 per head: 2 x S x kv x 16 x 320; FFN 2 x S x the mean active FFN of the 27 layers."""
    m = DSV2
    assert m.attention_matmul_flops(5) == 2.0 * 5 * 13_762_560
    assert m.attention_score_flops(5, 9) == 2.0 * 5 * 9 * 16 * 320
    assert m.attention_score_flops(5) == 2.0 * 5 * 5 * 16 * 320
    assert m.ffn_flops(5) == pytest.approx(2.0 * 5 * (67_239_936 + 26 * 69_337_088) / 27, rel=1e-15)
    dense = get_model("Llama 2-7B")
    assert dense.ffn_flops(5) == 2.0 * 5 * 3 * 4096 * 11008
    assert get_model("GPT2-L").ffn_flops(5) == 2.0 * 5 * 2 * 1280 * 5120


# ---- routing: popularity ---------------------------------------------------------------------------------------
# Zipf skew 1 over 4 experts, k = 2: weights 1, 1/2, 1/3, 1/4 (sum 25/12), so pi = 2 x 12/25 x w.
ZIPF4 = [0.96, 0.48, 0.32, 0.24]
SKEW1 = routing.Routing("skewed", skew=1.0)


def _trace(tmp_path, rows: list[list[int]], name: str = "counts.csv") -> str:
    """A hand-written count CSV (layer, expert, count, kind, source) with one row of counts per layer."""
    lines = ["layer,expert,count,kind,source"]
    lines += [f"{layer},{e},{c},assumed,hand-made test counts" for layer, row in enumerate(rows) for e, c in enumerate(row)]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_routing_and_cache_fields_refuse_bad_values_in_one_line():
    with pytest.raises(WorkbenchError, match=r"^routing_skew must be a finite number >= 0 \(or a tuple of them\), "
                                             r"got True$"):
        routing.Routing("skewed", skew=True)
    with pytest.raises(WorkbenchError, match=r"got inf$"):
        routing.Routing("skewed", skew=math.inf)
    with pytest.raises(WorkbenchError, match=r"^routing_skew must be a finite number >= 0 \(or a tuple of them\), "
                                             r"got \(\)$"):
        routing.Routing("skewed", skew=())
    with pytest.raises(WorkbenchError, match=r"^routing_trace must name a count CSV \(under data/routing/, or a path\) "
                                             r"for routing = 'trace'$"):
        routing.Routing("trace")
    with pytest.raises(WorkbenchError, match=r"^routing_locality must be a number in \[0, 1\), got True$"):
        routing.Routing(locality=True)
    assert routing.Routing(locality=np.float64(0.25), skew=np.int64(2)).locality == 0.25  # numpy numbers are real
    assert routing.Routing("skewed", skew=(0.0, 7.5)).skew == (0.0, 7.5)
    with pytest.raises(WorkbenchError, match=r"^cache_experts must be an integer >= 0, got -1$"):
        routing.ExpertCache(-1)
    assert routing.ExpertCache(0).experts == 0 and routing.ExpertCache(2, "lru").policy == "lru"


def test_water_filling_by_hand():
    """Proportional when nothing exceeds 1 (an expert at exactly 1 stays there); a capped expert's excess spreads
    in proportion, twice over in a cascade (10, 5, 1, 1, 1; k = 3 -> 1, 1, 1/3, 1/3, 1/3); a zero weight stays 0."""
    assert water_fill_list([4, 2, 1, 1], 2) == pytest.approx([1.0, 0.5, 0.25, 0.25], abs=1e-15)
    assert water_fill_list([6, 1, 1], 2) == pytest.approx([1.0, 0.5, 0.5], abs=1e-15)
    assert water_fill_list([10, 5, 1, 1, 1], 3) == pytest.approx([1, 1, 1 / 3, 1 / 3, 1 / 3], abs=1e-15)
    assert water_fill_list([3, 0, 1], 1) == [0.75, 0.0, 0.25]
    assert water_fill_list([1, 1], 2) == [1.0, 1.0]
    assert routing.water_fill([3, 0, 1], 1).dtype == np.float64
    single = np.array([0.637, 0.270, 0.041, 0.017, 0.813, 0.913, 0.607], dtype=np.float32)
    assert (routing.water_fill(single, 3) == routing.water_fill(single.astype(np.float64), 3)).all()  # float64 sums
    with pytest.raises(WorkbenchError, match=r"^routing popularity must give at least k = 2 experts a positive weight, "
                                             r"got 1$"):
        routing.water_fill([1, 0, 0], 2)


def water_fill_list(weights, k):
    return routing.water_fill(weights, k).tolist()


def test_zipf_weights_and_the_skewed_and_uniform_popularity_by_hand():
    assert routing.zipf_weights(4, 1.0).tolist() == [1.0, 0.5, 1 / 3, 0.25]
    assert routing.zipf_weights(3, 2).tolist() == [1.0, 0.25, 1 / 9]
    assert routing.zipf_weights(2, 0).tolist() == [1.0, 1.0]
    assert routing.popularity(SKEW1, 4, 2)[0] == pytest.approx(ZIPF4, abs=1e-15)
    two = routing.popularity(routing.Routing("skewed", skew=(0.0, 1.0)), 4, 2)
    assert two.shape == (2, 4) and two[0].tolist() == [0.5] * 4 and two[1] == pytest.approx(ZIPF4, abs=1e-15)
    uniform = routing.popularity(routing.Routing(), 128, 8)  # Qwen3-30B-A3B: 8 of 128, 1/16 each
    assert uniform.shape == (1, 128) and (uniform == 1 / 16).all() and not uniform.flags.writeable


def test_a_trace_file_by_name_or_relative_path_gives_its_water_filled_counts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _trace(tmp_path, [[4, 2, 1, 1], [6, 1, 1, 0]], "mine.csv")
    assert routing.trace_path("mine.csv") == routing.Path("mine.csv")
    assert routing.load_trace("mine.csv").tolist() == [[4, 2, 1, 1], [6, 1, 1, 0]]
    pi = routing.popularity(routing.Routing("trace", trace="mine.csv"), 4, 2)
    assert pi.tolist() == [[1.0, 0.5, 0.25, 0.25], [1.0, 0.5, 0.5, 0.0]]
    assert routing.trace_path("synthetic_8x2_4layers.csv") == routing.TRACE_DIR / "synthetic_8x2_4layers.csv"
    with pytest.raises(WorkbenchError, match=r"^routing trace mine.csv has 4 experts per layer; the model has "
                                             r"n_experts = 8$"):
        routing.popularity(routing.Routing("trace", trace="mine.csv"), 8, 2)


# ---- routing: the union of consecutive tokens ------------------------------------------------------------------
def test_expected_distinct_closed_forms():
    """Uniform: n (1 - (1 - k/n)^T) (Qwen3-30B-A3B 128 / 8: 8 at one token, 15.5 at two); skewed (pi above):
    sum 1 - (1 - pi)^2 = 2.688 at two tokens; per layer and their mean; 0 tokens touch none."""
    assert routing.expected_distinct(routing.Routing(), 128, 8, 1) == pytest.approx(8.0, rel=1e-14)
    assert routing.expected_distinct(routing.Routing(), 128, 8, 2) == pytest.approx(15.5, rel=1e-14)
    assert routing.expected_distinct(routing.Routing(), 128, 8, 0) == 0.0
    assert type(routing.expected_distinct(routing.Routing(), 128, 8, 2)) is float
    many = routing.expected_distinct(routing.Routing(), 4, 2, [0, 1, 2, 0.5])
    assert isinstance(many, np.ndarray) and many == pytest.approx([0, 2, 3, 4 * (1 - 0.5 ** 0.5)], rel=1e-14)
    assert routing.expected_distinct(SKEW1, 4, 2, 2) == pytest.approx(2.688, rel=1e-14)
    layered = routing.Routing("skewed", skew=(0.0, 1.0))
    assert routing.expected_distinct(layered, 4, 2, 2, layer=0) == pytest.approx(3.0, rel=1e-14)
    assert routing.expected_distinct(layered, 4, 2, 2, layer=1) == pytest.approx(2.688, rel=1e-14)
    assert routing.expected_distinct(layered, 4, 2, 2) == pytest.approx((3.0 + 2.688) / 2, rel=1e-14)
    with pytest.raises(WorkbenchError, match=r"^layer must be an integer >= 0 and <= 1, got 2$"):
        routing.expected_distinct(layered, 4, 2, 2, layer=2)
    with pytest.raises(WorkbenchError, match=r"^layer must be an integer >= 0 and <= 1, got -1$"):
        routing.expected_distinct(layered, 4, 2, 2, layer=-1)
    for bad in (math.inf, math.nan, -1):
        with pytest.raises(WorkbenchError, match=r"^tokens must be finite and >= 0, got"):
            routing.expected_distinct(routing.Routing(), 4, 2, bad)


def test_expected_distinct_with_locality_by_hand():
    """rho = 0.5, uniform 2 of 4 (pi = 0.5, enter b = 0.25): absent over 3 tokens 0.5 x 0.75^2, so
    4 x (1 - 0.28125) = 2.875; below one token locality does not matter: 4 (1 - 0.5^0.5)."""
    sticky = routing.Routing(locality=0.5)
    assert routing.expected_distinct(sticky, 4, 2, 3) == pytest.approx(2.875, rel=1e-14)
    assert routing.expected_distinct(sticky, 4, 2, 1) == pytest.approx(2.0, rel=1e-14)
    assert routing.expected_distinct(sticky, 4, 2, 0.5) == pytest.approx(4 * (1 - 0.5 ** 0.5), rel=1e-14)


# ---- routing: the expert cache ---------------------------------------------------------------------------------
def test_pinned_hit_rates_and_misses_by_hand():
    """Pinned keeps the C most popular: hit = their pi summed / k (skewed: 0.48 at C = 1, 0.72 at C = 2); misses
    per token k (1 - hit); a 2-token prompt misses sum over the unpinned of 1 - (1 - pi)^2 = 1.6896 experts."""
    assert routing.hit_rate(SKEW1, 4, 2, 1) == pytest.approx(0.48, rel=1e-14)
    assert routing.hit_rate(SKEW1, 4, 2, 2, "pinned") == pytest.approx(0.72, rel=1e-14)
    assert routing.hit_rate(SKEW1, 4, 2, 0) == 0.0 and routing.hit_rate(SKEW1, 4, 2, 4) == pytest.approx(1.0)
    layered = routing.Routing("skewed", skew=(0.0, 1.0))
    assert routing.hit_rate(layered, 4, 2, 1, layer=1) == pytest.approx(0.48, rel=1e-14)
    assert routing.hit_rate(layered, 4, 2, 1) == pytest.approx((0.25 + 0.48) / 2, rel=1e-14)
    assert routing.expected_misses_per_token(SKEW1, 4, 2, 1) == pytest.approx(1.04, rel=1e-14)
    assert routing.expected_misses_per_token(layered, 4, 2, 1, "pinned", layer=1) == pytest.approx(1.04, rel=1e-14)
    assert routing.expected_misses_per_token(layered, 4, 2, 1, layer=0) == pytest.approx(1.5, rel=1e-14)
    assert routing.expected_misses(SKEW1, 4, 2, 1, 2) == pytest.approx(0.7296 + 0.5376 + 0.4224, rel=1e-14)
    assert routing.expected_misses(SKEW1, 4, 2, 1, 1) == pytest.approx(1.04, rel=1e-14)
    assert routing.expected_misses(layered, 4, 2, 1, 1, layer=0) == pytest.approx(1.5, rel=1e-14)
    assert routing.expected_misses(layered, 4, 2, 1, 1) == pytest.approx((1.5 + 1.04) / 2, rel=1e-14)
    assert routing.expected_misses(SKEW1, 4, 2, 1, 0) == 0.0
    assert type(routing.expected_misses(SKEW1, 4, 2, 1, 1)) is float
    both = routing.expected_misses(SKEW1, 4, 2, 1, [1, 2])
    assert isinstance(both, np.ndarray) and both == pytest.approx([1.04, 1.6896], rel=1e-14)
    for bad in (math.inf, -1, -0.5):
        with pytest.raises(WorkbenchError, match=r"^tokens must be finite and >= 0, got"):
            routing.expected_misses(SKEW1, 4, 2, 1, bad)
    assert routing.pinned_set(np.array([0.2, 0.5, 0.5, 0.1]), 2).tolist() == [1, 2]  # ties to the lower id
    assert routing.pinned_set(np.array([0.2, 0.5, 0.5, 0.1]), 0).tolist() == []
    assert routing.pinned_set(np.array([0.1, 0.3] * 8), 3).tolist() == [1, 3, 5]  # 8 tied: the 3 lowest ids
    with pytest.raises(WorkbenchError, match=r"^layer must be an integer >= 0 and <= 1, got 2$"):
        routing.hit_rate(layered, 4, 2, 1, layer=2)


def test_lru_below_k_holds_a_share_of_the_previous_token():
    """C < k: a read hits if the previous token read it (stay = rho + (1 - rho) pi) and it is among the C of k
    kept: skewed, C = 1: sum pi^2 / 2 / 2 = 0.328 (rho = 0), sum pi (0.5 + 0.5 pi) / 4 = 0.414 (rho = 0.5); a
    prompt token then misses sum pi (1 - pi / 2) = 1.344."""
    assert routing.hit_rate(SKEW1, 4, 2, 1, "lru") == pytest.approx(0.328, rel=1e-14)
    sticky = routing.Routing("skewed", skew=1.0, locality=0.5)
    assert routing.hit_rate(sticky, 4, 2, 1, "lru") == pytest.approx(0.414, rel=1e-14)
    assert routing.expected_misses(SKEW1, 4, 2, 1, 1, "lru") == pytest.approx(1.344, rel=1e-14)


def test_lru_at_or_above_k_by_che_closed_forms():
    """Uniform: the window T solves n (1 - (1 - p)(1 - b)^(T - 1)) = C, so a read hits with probability
    rho + (1 - rho) C / n: C / n without locality (Qwen3 128 / 8, C = 32: 0.25), 0.3 + 0.7 x 0.25 = 0.475 with
    rho = 0.3; a cache as large as the experts read at all always hits (a zero-count expert is never read)."""
    assert routing.hit_rate(routing.Routing(), 128, 8, 32, "lru") == pytest.approx(0.25, rel=1e-9)
    assert routing.hit_rate(routing.Routing(locality=0.3), 128, 8, 32, "lru") == pytest.approx(0.475, rel=1e-9)
    assert routing.hit_rate(routing.Routing(locality=0.5), 4, 2, 3, "lru") == pytest.approx(0.875, rel=1e-9)
    assert routing.expected_misses(routing.Routing(), 4, 2, 3, 1, "lru") == pytest.approx(0.5, rel=1e-9)
    assert routing.expected_misses(routing.Routing(locality=0.5), 4, 2, 3, 1, "lru") == pytest.approx(0.5, rel=1e-9)
    assert routing.expected_misses(routing.Routing(), 4, 2, 3, 2, "lru") == pytest.approx(3 * 0.25, rel=1e-9)


def test_lru_with_a_never_read_expert(tmp_path):
    """Counts 2, 1, 1, 0 (k = 2): pi = 1, 0.5, 0.5, 0; three experts are ever read, so an LRU cache of 3 holds
    them all: every read hits and a prompt misses nothing."""
    trace = routing.Routing("trace", trace=_trace(tmp_path, [[2, 1, 1, 0]]))
    assert routing.hit_rate(trace, 4, 2, 3, "lru") == 1.0
    assert routing.expected_misses(trace, 4, 2, 3, 5, "lru") == 0.0
    assert routing.hit_rate(trace, 4, 2, 4, "lru") == 1.0
    both = routing.expected_misses(trace, 4, 2, 3, [1, 5], "lru")
    assert both.dtype == np.float64 and both.tolist() == [0.0, 0.0]


def test_lru_holding_every_read_expert_needs_no_window(tmp_path):
    """Counts 10^17 and 1 (k = 1): the rare expert's pi (1e-17) is below float64's resolution next to 1, so no
    finite window would ever fill a cache of both; the cache holds every expert ever read and always hits."""
    trace = routing.Routing("trace", trace=_trace(tmp_path, [[10**17, 1]]))
    assert routing.popularity(trace, 2, 1)[0, 1] == pytest.approx(1e-17)
    assert routing.hit_rate(trace, 2, 1, 2, "lru") == 1.0


def test_che_window_by_hand():
    """Uniform 0.5 x 4: 4 (1 - 0.5^T) = 3 at T = 2; with rho = 0.5, 0.5 x 0.75^(T - 1) = 0.25 at
    T = 1 + ln 0.5 / ln 0.75; a cache one token fills: 1; 127 of Qwen3's 128 (pi 1/16): T = ln 128 / ln(16/15)."""
    half = np.full(4, 0.5)
    assert routing.che_window(half, 0.0, 3) == pytest.approx(2.0, abs=1e-9)
    assert routing.che_window(half, 0.5, 3) == pytest.approx(1 + math.log(0.5) / math.log(0.75), abs=1e-9)
    assert routing.che_window(half, 0.0, 2) == 1.0
    assert routing.che_window(half, 0.0, 1) == 1.0
    assert routing.che_window(np.full(128, 1 / 16), 0.0, 127) == pytest.approx(math.log(128) / math.log(16 / 15),
                                                                               abs=1e-8)


def test_a_cache_only_float_underflowing_experts_could_fill_has_a_finite_window():
    """Zipf skew 8 (the file's limit) over 1024 experts, k = 2: 828 experts have pi < 1.1e-16, so 1 - pi == 1 and
    they never add to the expected union; an LRU cache of 500 then never fills. Che's window stops at 2^64 tokens
    (it used to double forever) and every expert with a readable popularity is resident: the hit rate is 1."""
    zipf8 = routing.Routing("skewed", skew=8.0)
    pi = routing.popularity(zipf8, 1024, 2)[0]
    assert (1.0 - pi < 1.0).sum() < 500 and routing.che_window(pi, 0.0, 500) == 2.0 ** 64
    assert routing.hit_rate(zipf8, 1024, 2, 500, "lru") == pytest.approx(1.0, abs=1e-12)
    assert routing.che_window(pi, 0.0, 150) < 2.0 ** 64  # a cache the readable experts fill: a real window


def test_bad_cache_arguments_get_one_line():
    with pytest.raises(WorkbenchError, match=r"^unknown cache_policy 'fifo'; allowed: pinned, lru$"):
        routing.expected_misses(SKEW1, 4, 2, 1, 1, "fifo")
    with pytest.raises(WorkbenchError, match=r"^cache_experts must be an integer in 0\.\.4 \(the model's experts "
                                             r"per layer; a cache larger than the model\), got 5$"):
        routing.hit_rate(SKEW1, 4, 2, 5)
    with pytest.raises(WorkbenchError, match=r"got True$"):
        routing.hit_rate(SKEW1, 4, 2, True)
    with pytest.raises(WorkbenchError, match=r"^active experts must be an integer in 1\.\.4 \(the experts\), got 0$"):
        routing.expected_distinct(SKEW1, 4, 0, 1)
    with pytest.raises(WorkbenchError, match=r"got True$"):
        routing.popularity(SKEW1, 4, True)
    with pytest.raises(WorkbenchError, match=r"^n_experts must be an integer >= 1, got 0$"):
        routing.popularity(SKEW1, 0, 1)
    assert routing.popularity(SKEW1, 4, 4).tolist() == [[1.0] * 4] and routing.popularity(SKEW1, 1, 1).shape == (1, 1)


# ---- routing: the Monte-Carlo ----------------------------------------------------------------------------------
def test_with_locality_repeats_the_predecessor_by_hand():
    """Tokens 1, 3 repeat (token 0's repeat flag is ignored): sources 0, 0, 2, 2, 4."""
    fresh = np.arange(10).reshape(5, 2)
    out = routing._with_locality(fresh, np.array([True, True, False, True, False]))
    assert out.tolist() == [[0, 1], [0, 1], [4, 5], [4, 5], [8, 9]]
    assert routing._with_locality(fresh[:3], np.array([True, False, True])).tolist() == [[0, 1], [2, 3], [2, 3]]


def test_lru_ranks_by_hand():
    """One expert per token, 3 experts: 0, 1, 0, 2, 1 -> never, never, 1 more recent (expert 1), never, 2 more
    recent (0 and 2); the same in blocks of 2 tokens."""
    ids = np.array([[0], [1], [0], [2], [1]])
    assert routing.lru_ranks(ids, 3).tolist() == [[3], [3], [1], [3], [2]]
    assert routing.lru_ranks(ids, 3, seed=5, block=2).tolist() == [[3], [3], [1], [3], [2]]
    pairs = routing.lru_ranks(np.array([[0, 1], [2, 0], [1, 2]]), 3)  # 0 and 1 share token 0's recency
    assert pairs[0].tolist() == [3, 3] and pairs[1, 0] == 3 and pairs[1, 1] in (0, 1) and pairs[2, 0] == 2
    assert pairs[2, 1] in (0, 1) and pairs.dtype == np.int64
    ties = np.array([[0, 1], [2, 3], [0, 2], [1, 3], [3, 0]])  # the default seed is 0; another breaks ties otherwise
    assert (routing.lru_ranks(ties, 4) == routing.lru_ranks(ties, 4, seed=0)).all()
    assert not (routing.lru_ranks(ties, 4) == routing.lru_ranks(ties, 4, seed=1)).all()


def test_the_simulation_keeps_the_forced_experts_and_k_distinct(tmp_path):
    """pi = 1, 0.5, 0.5 (counts 6, 1, 1; k = 2): every token reads expert 0 and one of 1 and 2; a pinned cache of
    expert 0 serves exactly half the reads."""
    trace = routing.Routing("trace", trace=_trace(tmp_path, [[6, 1, 1]]))
    ids = routing.simulate_routing(trace, 3, 2, 20_000, seed=3)
    assert ids.shape == (20_000, 2) and ids.dtype == np.int64
    assert ((ids == 0).sum(axis=1) == 1).all() and ((ids == 1) | (ids == 2)).sum(axis=1).tolist() == [1] * 20_000
    assert (ids == 1).mean() * 2 == pytest.approx(0.5, abs=0.02)
    assert routing.simulated_hit_rate(trace, 3, 2, 1, tokens=2000, seed=3) == 0.5
    assert routing.simulated_hit_rate(trace, 3, 2, 3, "lru", tokens=2000) == 1.0
    assert routing.simulated_hit_rate(trace, 3, 2, 0, "lru", tokens=2000) == 0.0
    again = routing.simulate_routing(trace, 3, 2, 20_000, seed=3)
    assert (again == ids).all() and not (routing.simulate_routing(trace, 3, 2, 20_000, seed=4) == ids).all()
    with pytest.raises(WorkbenchError, match=r"^tokens must be > 1000 for an LRU simulation \(its warm-up\), got 1000$"):
        routing.simulated_hit_rate(trace, 3, 2, 1, "lru", tokens=1000)


def test_the_simulation_picks_each_expert_by_its_popularity():
    """Skewed 2 of 4 over 20,000 tokens: each expert's read share is its pi (0.96, 0.48, 0.32, 0.24) within
    0.02; 2 fresh experts per token; locality 0.5 repeats the previous pair about half the time."""
    ids = routing.simulate_routing(SKEW1, 4, 2, 20_000, seed=1)
    share = [(ids == e).any(axis=1).mean() for e in range(4)]
    assert share == pytest.approx(ZIPF4, abs=0.02)
    assert (ids[:, 0] != ids[:, 1]).all()
    sticky = routing.simulate_routing(routing.Routing("skewed", skew=1.0, locality=0.5), 4, 2, 20_000, seed=1)
    same = (np.sort(sticky[1:], axis=1) == np.sort(sticky[:-1], axis=1)).all(axis=1).mean()
    chance = (np.sort(ids[1:], axis=1) == np.sort(ids[:-1], axis=1)).all(axis=1).mean()
    assert same == pytest.approx(0.5 + 0.5 * chance, abs=0.02)
    assert [(sticky == e).any(axis=1).mean() for e in range(4)] == pytest.approx(ZIPF4, abs=0.02)
    with pytest.raises(WorkbenchError, match=r"^tokens must be an integer >= 1, got 0$"):
        routing.simulate_routing(SKEW1, 4, 2, 0)
    with pytest.raises(WorkbenchError, match=r"^seed must be an integer >= 0, got -1$"):
        routing.simulate_routing(SKEW1, 4, 2, 5, seed=-1)


def test_a_pinned_simulation_pins_its_own_layer_s_favourite(tmp_path):
    """Counts 4, 3, 2, 1 then 1, 2, 3, 4 (k = 1): layer 1 pins expert 3, read by 40 % of its tokens."""
    trace = routing.Routing("trace", trace=_trace(tmp_path, [[4, 3, 2, 1], [1, 2, 3, 4]]))
    assert routing.simulated_hit_rate(trace, 4, 1, 1, tokens=20_000, layer=1) == pytest.approx(0.4, abs=0.01)
    assert routing.simulated_hit_rate(trace, 4, 1, 1, tokens=20_000, layer=0) == pytest.approx(0.4, abs=0.01)
    assert routing.hit_rate(trace, 4, 1, 1, layer=1) == pytest.approx(0.4, rel=1e-14)


def test_the_simulated_hit_rate_defaults_and_layers():
    """10^5 tokens of seed 0 unless told; a per-layer routing simulates the layer asked for (pinned C = 1:
    0.25 under layer 0's uniform routing, 0.48 under layer 1's Zipf)."""
    default = routing.simulated_hit_rate(SKEW1, 4, 2, 1)
    assert default == routing.simulated_hit_rate(SKEW1, 4, 2, 1, "pinned", tokens=100_000, seed=0)
    assert default == pytest.approx(0.48, abs=0.005)
    layered = routing.Routing("skewed", skew=(0.0, 1.0))
    assert (routing.simulate_routing(layered, 4, 2, 100) == routing.simulate_routing(layered, 4, 2, 100, 0, 0)).all()
    assert routing.simulated_hit_rate(layered, 4, 2, 1, tokens=20_000, layer=1) == pytest.approx(0.48, abs=0.01)
    assert routing.simulated_hit_rate(layered, 4, 2, 1, tokens=20_000, layer=0) == pytest.approx(0.25, abs=0.01)


def test_simulated_distinct_by_hand():
    """Windows of 2 tokens of (0, 1), (1, 2), (0, 1), (0, 1): 3 and 2 distinct, mean 2.5; of 1 token: 2; of 3
    tokens: one window (the rest dropped) with 3."""
    ids = np.array([[0, 1], [1, 2], [0, 1], [0, 1]])
    assert routing.simulated_distinct(ids, 2) == 2.5
    assert routing.simulated_distinct(ids, 1) == 2.0
    assert routing.simulated_distinct(ids, 3) == 3.0
    with pytest.raises(WorkbenchError, match=r"^tokens must be an integer >= 1, got 0$"):
        routing.simulated_distinct(ids, 0)


# ---- the operator table's MoE and MLA rows (schemes/common.py) -------------------------------------------------
# 8-bit weights (1 B per parameter), 16-bit activations and cache; decode at 512 cached tokens, or a 4-token prompt.
DECODE8 = common.Workload("decode", seq_len=512, kv_len=512, weight_bits=8, activation_bits=16)
PREFILL8 = common.Workload("prefill", seq_len=4, weight_bits=8, activation_bits=16)
# Compute only (1 op/s, GEMV efficiency 0.5: a GEMV row takes 2 x FLOPs seconds) / streaming only (1 B/s).
COMPUTE = DeviceSpec("compute", {"fp16": 1.0, "fp32": 1.0}, efficiency_gemm=1.0, efficiency_gemv=0.5)
STREAM = DeviceSpec("stream", {"fp16": 1e30, "fp32": 1e30}, memory=(MemoryLevel("M", 1e12, 1.0),))
# Qwen3-30B-A3B's 4-token prompt touches 128 (1 - (15/16)^4) = 14911 / 512 distinct experts (uniform routing).
QWEN_UNION4 = 14911 / 512


def _rows(model, workload, **slice_):
    return {op.name: op for op in common.layer_operators(model, workload, **slice_)}


def _row(op) -> tuple:
    return (float(op.flops), float(op.bytes), op.kernels, op.dtype, op.kind, None if op.rows is None else float(op.rows))


def _close(op, expected: tuple) -> bool:
    """A row equals (flops, bytes, kernels, dtype, kind, rows): the numbers to 1e-12, the rest exactly."""
    got = _row(op)
    return all(g == e if isinstance(e, str) or e is None else g == pytest.approx(e, rel=1e-12)
               for g, e in zip(got, expected, strict=True))


def test_qwen3_decode_table_by_hand():
    """One token: Q/K/V 2 x 2048 x 5120 FLOPs over 10,485,760 B; scores 4 x 512 x 32 x 128 over K and V of
    4 heads x 128 x 512 tokens at 2 B; its 8 experts' gate+up (2 x 8 x 2 x 2048 x 768) and down; the f32 router
    (2048 x 128 x 4 B); two connective blocks of 6 passes x 2048 x 2 B."""
    rows = _rows(QWEN, DECODE8)
    assert list(rows) == ["qkv", "attn", "out", "router", "ffn1", "ffn2", "con"]
    assert _row(rows["qkv"]) == (20_971_520, 10_485_760, 1, "fp16", "gemv", 1)
    assert _row(rows["attn"]) == (8_388_608, 1_048_576, 1, "fp16", "gemv", None)
    assert _row(rows["out"]) == (16_777_216, 8_388_608, 1, "fp16", "gemv", 1)
    assert _row(rows["router"]) == (524_288, 1_048_576, 1, "fp32", "gemv", 1)
    assert _row(rows["ffn1"]) == (50_331_648, 25_165_824, 1, "fp16", "gemv", 1)
    assert _row(rows["ffn2"]) == (25_165_824, 12_582_912, 1, "fp16", "gemv", 1)
    assert _row(rows["con"]) == (0, 49_152, 2, "fp16", "elementwise", None)
    assert common.kernels_per_layer(QWEN) == 8 and common.kernels_per_layer(get_model("Llama 2-7B")) == 7
    assert common.layer_operator_names(QWEN) == common.MOE_OPERATORS
    assert common.layer_operator_names(get_model("Llama 2-7B")) == common.FUSED_OPERATORS


def test_qwen3_prompt_streams_the_union_of_experts():
    """4 tokens: each computes 8 experts (4 x 8 = 32 expert-rows over 14911/512 experts touched, 16384/14911
    rows each); the weights stream once; the router is a 4-row GEMM."""
    rows = _rows(QWEN, PREFILL8)
    assert _row(rows["qkv"]) == (83_886_080, 10_485_760, 1, "fp16", "gemm", 4)
    assert _row(rows["attn"]) == (4.0 * 4 * 4 * 32 * 128, 0.0, 1, "fp16", "gemm", None)
    assert _row(rows["router"]) == (2_097_152, 1_048_576, 1, "fp32", "gemm", 4)
    assert _close(rows["ffn1"], (201_326_592, QWEN_UNION4 * 768 * 2048 * 2, 1, "fp16", "gemm",
                                                16384 / 14911))
    assert _close(rows["ffn2"], (100_663_296, QWEN_UNION4 * 768 * 2048, 1, "fp16", "gemm",
                                                16384 / 14911))
    assert common.experts_touched(QWEN, PREFILL8, 4) == pytest.approx(QWEN_UNION4, rel=1e-14)


def test_a_slice_of_columns_heads_and_tokens_per_device():
    """A quarter of every expert's columns (192 of 768) streams and computes a quarter, the router stays whole;
    a device with no tokens reads nothing and routes nothing; one with no columns runs no router."""
    quarter = _rows(QWEN, DECODE8, cols=192)
    assert (float(quarter["ffn1"].flops), float(quarter["ffn1"].bytes)) == (50_331_648 / 4, 25_165_824 / 4)
    assert (float(quarter["ffn2"].flops), float(quarter["ffn2"].bytes)) == (25_165_824 / 4, 12_582_912 / 4)
    assert _row(quarter["router"]) == (524_288, 1_048_576, 1, "fp32", "gemv", 1)
    per_device = _rows(QWEN, PREFILL8, tokens=np.array([0, 4]), cols=np.array([768, 768]))
    assert per_device["router"].flops.tolist() == [0, 2_097_152]
    assert per_device["router"].bytes.tolist() == [0, 1_048_576]
    assert per_device["ffn2"].bytes == pytest.approx([0, QWEN_UNION4 * 768 * 2048], rel=1e-12)
    assert per_device["ffn2"].rows == pytest.approx([0, 16384 / 14911], rel=1e-12)
    assert per_device["qkv"].bytes.tolist() == [0, 10_485_760]
    no_cols = _rows(QWEN, DECODE8, cols=np.array([0, 768]))
    assert no_cols["router"].flops.tolist() == [0, 524_288] and no_cols["router"].bytes.tolist() == [0, 1_048_576]
    assert no_cols["ffn1"].bytes.tolist() == [0, 25_165_824]
    eight = _rows(QWEN, DECODE8, heads=8)  # a quarter of the heads: 1 KV head's cache
    assert (float(eight["attn"].flops), float(eight["attn"].bytes)) == (8_388_608 / 4, 262_144)
    assert float(eight["qkv"].bytes) == 10_485_760 / 4
    assert common.experts_touched(QWEN, PREFILL8, np.array([0, 1])).tolist() == [0, 8]


def test_deepseek_v2_lite_decode_table_by_hand():
    """MLA rows stream the whole Q/K/V (9,568,256) and output (4,194,304) weights; attention reads the whole
    latent (512 + 64 elements x 512 tokens x 2 B) at 2 x 512 x 16 x (192 + 128) FLOPs; the FFN rows blend the dense
    first layer (10944 columns, 1 of 27) and 26 MoE layers of 6 routed + 2 shared experts of 1408."""
    rows = _rows(DSV2, DECODE8)
    assert _row(rows["qkv"]) == (19_136_512, 9_568_256, 1, "fp16", "gemv", 1)
    assert _row(rows["out"]) == (8_388_608, 4_194_304, 1, "fp16", "gemv", 1)
    assert _row(rows["attn"]) == (5_242_880, 589_824, 1, "fp16", "gemv", None)
    assert _close(rows["router"], (26 / 27 * 262_144, 26 / 27 * 524_288, 1, "fp32", "gemv", 1))
    assert _close(rows["ffn1"], (2_488_795_136 / 27, 2 * 303_808 * 2048 / 27, 1, "fp16", "gemv", 1))
    assert _close(rows["ffn2"], (2_488_795_136 / 54, 303_808 * 2048 / 27, 1, "fp16", "gemv", 1))
    assert common.experts_touched(DSV2, DECODE8, 1) == pytest.approx(8.0, rel=1e-14)  # 6 routed + 2 shared
    # 2 tokens: 64 (1 - (58/64)^2) = 11.4375 routed + 2 shared; 16 expert-rows over them
    assert common.experts_touched(DSV2, PREFILL8, 2) == pytest.approx(13.4375, rel=1e-14)
    two = _rows(DSV2, PREFILL8, tokens=2)
    assert float(two["ffn2"].rows) == pytest.approx(16 / 13.4375, rel=1e-14)
    assert float(two["ffn2"].bytes) == pytest.approx((10944 + 26 * 13.4375 * 1408) * 2048 / 27, rel=1e-14)


def test_latent_attention_slices_by_heads():
    """4 of 16 heads: a quarter of the projections, the whole latent cache read; no heads, nothing read."""
    quarter = _rows(DSV2, DECODE8, heads=4)
    assert (float(quarter["qkv"].flops), float(quarter["qkv"].bytes)) == (4_784_128, 2_392_064)
    assert (float(quarter["out"].flops), float(quarter["out"].bytes)) == (2_097_152, 1_048_576)
    assert (float(quarter["attn"].flops), float(quarter["attn"].bytes)) == (1_310_720, 589_824)
    assert common.kv_read_bytes(DSV2, DECODE8, np.array([0, 1, 16])).tolist() == [0, 589_824, 589_824]
    assert common.kv_read_bytes(DSV2, common.Workload("decode", 512, 512, 8, 16, kv_bits=8), 16) == 294_912
    assert common.kv_read_bytes(DSV2, PREFILL8, np.array([4, 16])).tolist() == [0, 0]
    assert common.kv_read_bytes(QWEN, DECODE8, np.array([8, 32])).tolist() == [262_144, 1_048_576]
    assert common.score_flops(DSV2, 4, 3, 5) == 2.0 * 3 * 5 * 4 * 320
    assert common.score_flops(QWEN, 4, 3, 5) == 4.0 * 3 * 5 * 4 * 128


def test_q4_0_weights_stream_their_block_bytes_in_the_latent_rows():
    """4.5-bit weights (q4_0: 0.5625 B per weight): DeepSeek-V2-Lite's Q/K/V rows stream 9,568,256 x 0.5625 B,
    the output 4,194,304 x 0.5625 B."""
    rows = _rows(DSV2, common.Workload("decode", seq_len=512, kv_len=512, weight_bits=4.5, activation_bits=16))
    assert float(rows["qkv"].bytes) == 5_382_144 and float(rows["out"].bytes) == 2_359_296


def test_shared_experts_need_a_token_and_a_top_1_router_one_row_per_token():
    """No token touches no shared expert; a top-1 MoE (tiny: 4 experts of 128, d_model 64) gives each token's
    expert one GEMM row, and half a token (a fractional slice) 0.5 / (4 (1 - 0.75^0.5)) rows per touched expert;
    a device with a single column of each expert still runs the whole router."""
    assert common.experts_touched(DSV2, DECODE8, np.array([0, 1])).tolist() == pytest.approx([0, 8], rel=1e-14)
    top1 = tiny_config(n_experts=4, n_active_experts=1)
    one = _rows(top1, DECODE8)
    assert float(one["ffn2"].rows) == pytest.approx(1.0, rel=1e-14)
    half = _rows(top1, PREFILL8, tokens=0.5)
    assert float(half["ffn2"].rows) == pytest.approx(0.5 / (4 * (1 - 0.75 ** 0.5)), rel=1e-12)
    single = _rows(QWEN, DECODE8, cols=np.array([1, 0]))
    assert single["router"].flops.tolist() == [524_288, 0] and single["router"].bytes.tolist() == [1_048_576, 0]


def test_float32_slices_cost_as_float64():
    """Token, head and column counts given as float32 (exact small integers) cost what float64 ones do: the blend
    of DeepSeek-V2-Lite's dense layer (26/27, 10944/1408) and a 3-head latent model's 1/3 share are not float32."""
    f32, f64 = np.array([1, 2], dtype=np.float32), np.array([1.0, 2.0])
    for slice_ in ("tokens", "cols"):
        a, b = _rows(DSV2, PREFILL8, **{slice_: f32}), _rows(DSV2, PREFILL8, **{slice_: f64})
        for name in ("router", "ffn1", "ffn2"):
            assert (a[name].flops == b[name].flops).all() and (a[name].bytes == b[name].bytes).all(), (slice_, name)
    three = TransformerConfig("mla-3", "llama", n_layers=2, d_model=50, n_heads=3, d_ff=64, vocab_size=10,
                              kv_lora_rank=16, qk_rope_dim=4, d_head=16)
    assert three.qkv_weight_params() == 50 * 48 + 50 * (16 + 4) + 16 * 3 * (16 - 4 + 16) == 4744  # not a multiple of 3
    a = _rows(three, DECODE8, heads=np.array([1], dtype=np.float32))
    b = _rows(three, DECODE8, heads=np.array([1.0]))
    assert a["qkv"].bytes.tolist() == b["qkv"].bytes.tolist() == pytest.approx([4744 / 3], rel=1e-15)
    assert a["out"].flops.tolist() == b["out"].flops.tolist() == pytest.approx([2 * 3 * 16 * 50 / 3], rel=1e-15)


def test_the_unfused_table_is_the_whole_layer_only():
    with pytest.raises(WorkbenchError, match=r"^fused=False costs the whole layer: leave heads, cols and tokens at "
                                             r"their defaults$"):
        common.layer_operators(QWEN, DECODE8, heads=8, fused=False)


def test_layer_time_adds_the_rows_two_connective_blocks_and_the_overhead():
    """Qwen3 decode: streaming at 1 B/s, the rows' bytes (two connective blocks of 24,576 B each) = 58,769,408 s;
    computing at 1 op/s x 0.5 (GEMV), 2 x 122,159,104 FLOPs; plus a 0.25 s layer overhead."""
    assert common.layer_time(QWEN, STREAM, DECODE8) == 58_769_408
    assert common.layer_time(QWEN, COMPUTE, DECODE8) == 244_318_208
    assert common.layer_time(QWEN, STREAM.with_changes(layer_overhead_s=0.25), DECODE8) == 58_769_408.25
    memory = common.layer_time(QWEN, STREAM, DECODE8, bound="memory")
    assert memory == 58_769_408 and common.layer_time(QWEN, STREAM, DECODE8, bound="compute") == 0.0


def test_step_fixed_time_charges_the_router_kernel():
    """Launch 0.5 s, layer overhead 0.25 s, step overhead 2 s: a MoE layer's 8 kernels = 4.25 s; 48 layers + the
    head's launch and the step overhead = 206.5 s; 2 layers 11 s; no head 204 s."""
    dev = COMPUTE.with_changes(kernel_launch_s=0.5, layer_overhead_s=0.25, step_overhead_s=2.0)
    assert common.step_fixed_time(QWEN, dev, DECODE8) == 206.5
    assert common.step_fixed_time(QWEN, dev, DECODE8, n_layers=2) == 11.0
    assert common.step_fixed_time(QWEN, dev, DECODE8, lm_head=False) == 204.0
    assert common.step_fixed_time(QWEN, dev, common.Workload("decode", output_head=False)) == 204.0


# ---- a speculative verify step's logits (common.head_tokens, lm_head_time) and the expert cache's checks ----------
def test_a_verify_step_computes_one_row_of_logits_per_token_and_a_prompt_one():
    from dataclasses import replace

    verify = replace(DECODE8, verify_tokens=5)
    assert (common.head_tokens(DECODE8), common.head_tokens(verify), common.head_tokens(PREFILL8)) == (1, 5, 1)
    m = tiny_config()  # d_model 64, vocab 97, untied: a 64 x 97 output matrix, 8-bit (1 B per weight)
    per_row = 2.0 * 64 * 97
    # compute only: one token is a GEMV at efficiency 0.5; five are a GEMM of 5 rows at 1.0, held to 5 / (5 + 3)
    assert common.lm_head_time(m, COMPUTE, DECODE8) == pytest.approx(per_row / 0.5, rel=1e-12)
    assert common.lm_head_time(m, COMPUTE, verify) == pytest.approx(5 * per_row, rel=1e-12)
    skinny = COMPUTE.with_changes(gemm_half_rows=3.0)
    assert common.lm_head_time(m, skinny, verify) == pytest.approx(5 * per_row / (5 / 8), rel=1e-12)
    # streaming only: the matrix is read once whatever the rows
    assert common.lm_head_time(m, STREAM, verify) == pytest.approx(64 * 97, rel=1e-12)
    assert common.lm_head_time(m, STREAM, DECODE8) == pytest.approx(64 * 97, rel=1e-12)


def test_the_expert_cache_names_its_keys_and_refuses_a_cache_larger_than_the_model():
    cache = routing.ExpertCache(16, "lru", "prefetch")
    assert cache.check(16) is cache and cache.check(128) is cache
    with pytest.raises(WorkbenchError, match=r"^cache_experts must be an integer in 0\.\.8 \(the model's experts per "
                                             r"layer; a cache larger than the model\), got 16$"):
        cache.check(8)
    with pytest.raises(WorkbenchError, match=r"^unknown expert_reads 'mmap'; allowed: routed, prefetch$"):
        routing.ExpertCache(4, "pinned", "mmap")
    with pytest.raises(WorkbenchError, match=r"^unknown cache_policy 'fifo'; allowed: pinned, lru$"):
        routing.ExpertCache(4, "fifo")
    assert (routing.ExpertCache().experts, routing.ExpertCache().policy, routing.ExpertCache().reads) == \
        (0, "pinned", "routed")
