"""Tests that kill mutmut survivors in the MoE / MLA cost code (workbench/models.py's expert and latent-attention
parts, workbench/routing.py, and the MoE rows of workbench/schemes/common.py; see docs/mutation.md).

Every expected number is worked by hand from a model card's dimensions (the config.json of each Hugging Face
repository, as the registry's `source` quotes them), not read back from the code:

* Qwen3-30B-A3B: 48 layers, d 2048, 32 heads x 128, 4 KV heads, 128 experts of 768, top-8, vocab 151936, untied.
* Mixtral-8x7B: 32 layers, d 4096, 32 heads x 128, 8 KV heads, 8 experts of 14336, top-2, vocab 32000, untied.
* DeepSeek-V2-Lite: 27 layers, d 2048, 16 heads, MLA (latent 512, qk 128 + rope 64 = d_head 192, v 128),
  64 routed experts of 1408, top-6, 2 shared, 1 dense layer of 10944, vocab 102400, untied.
* gpt-oss-20b: 24 layers, d 2880, 64 heads x 64, 8 KV heads, 32 experts of 2880, top-4, vocab 201088, untied.

JAX-free and fast (well under a second per test).
"""

from __future__ import annotations

import math

import pytest

from workbench.errors import WorkbenchError
from workbench.fields import FieldSpec, TomlKey, declared_fields
from workbench.models import TransformerConfig, get_model, tiny_config

QWEN = get_model("Qwen3-30B-A3B")
MIXTRAL = get_model("Mixtral-8x7B")
DSV2 = get_model("DeepSeek-V2-Lite")
GPTOSS = get_model("gpt-oss-20b")


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
