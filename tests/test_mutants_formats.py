"""Tests that kill mutmut survivors in `workbench/model/formats.py` (see docs/mutation.md, "Speculative decoding,
GGUF formats, MoE advice, scaling").

* Every tensor of three tiny models (a llama MoE with a dense first layer and shared experts, a GPT-2-style and a
  BERT-style model) is listed by name, class, layer and shape as llama.cpp's GGUF writer names them
  (``blk.<i>.<class>.weight``; shared experts as one FFN of n_shared x d_ff).
* llama-quant.cpp's rules are exercised at their boundaries on `ModelFacts` written by hand: layer counts whose
  n/8 and n/16 are not whole, n_gqa at 4, the 70B lift, 8-expert attention, tied embeddings.
* The GGUF header arithmetic (gguf.md) is worked by hand for one tensor info record and one tiny file.

`BLOCK_FORMATS` and `PLAIN_FORMATS` are built at import, which mutmut's forked test runs never see: the tests
here build block formats afresh (`_fmt`, `BlockFormat`).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.core.errors import WorkbenchError
from workbench.model import formats as fm
from workbench.model.models import get_model, tiny_config

MOE = tiny_config(n_layers=3, d_model=64, n_heads=4, n_kv_heads=2, d_ff=32, n_experts=4, n_active_experts=2,
                  n_shared_experts=2, n_dense_layers=1, d_dense_ff=96, vocab_size=100)
GPT = tiny_config("gpt", n_layers=1, d_model=64, n_heads=4, d_ff=128, vocab_size=100, max_positions=50)
BERT = tiny_config("bert", n_layers=1, d_model=64, n_heads=4, d_ff=128, vocab_size=100, max_positions=50)


def listing(model) -> list[tuple]:
    return [(t.name, t.kind, t.layer, t.shape) for t in fm.model_tensors(model)]


# ---- block formats ---------------------------------------------------------------------------------------------
def test_a_quoted_format_is_a_block_format_citing_its_line():
    made = fm._fmt("qx", 32, [("d", 2), ("qs", 16)], 4, "int4", "block_qx", 77)
    assert made == fm.BlockFormat("qx", 32, (("d", 2), ("qs", 16)), 4, "int4", "block_qx", f"{fm.GGML_COMMON}:77",
                                  True)
    assert made.source.endswith("src/ggml-common.h @ d99724f2b141fed9e1a9f402213506c081433465:77")
    other = fm._fmt("fx", 1, [("float", 4)], 32, "fp32", "f", 9, fm.GGML_C, for_weights=False)
    assert other.source == f"{fm.GGML_C}:9" and other.for_weights is False and other.parts == (("float", 4),)
    assert (made.block_bytes, made.bits, made.code_bits, made.arithmetic) == (18, 4.5, 4, "int4")


def test_the_smallest_valid_block_format():
    one = fm.BlockFormat("one", 1, (("b", 1),), 8, "int8", "one byte", "here")
    assert one.bits == pytest.approx(8.0, rel=1e-12)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"block_weights": 0}, r"^block_weights of 'x' must be an integer >= 1, got 0$"),
    ({"block_weights": 2.0}, r"^block_weights of 'x' must be an integer >= 1, got 2\.0$"),
    ({"parts": ()}, r"^parts of 'x' must list fields of >= 1 byte, got \(\)$"),
    ({"parts": (("a", 2), ("b", 0))}, r"^parts of 'x' must list fields of >= 1 byte, got \(\('a', 2\), \('b', 0\)\)$"),
    ({"arithmetic": "int2"}, r"^arithmetic of 'x' must be one of int4, int8, fp16, fp32, got 'int2'$"),
])
def test_a_bad_block_format_is_one_line(kwargs, message):
    fields = {"name": "x", "block_weights": 32, "parts": (("d", 2),), "code_bits": 4, "arithmetic": "int4",
              "layout": "l", "source": "s", **kwargs}
    with pytest.raises(WorkbenchError, match=message):
        fm.BlockFormat(**fields)


def test_tensor_bytes_round_up_to_whole_blocks_in_integers():
    q4_k = fm.block_format("q4_k")
    assert q4_k.tensor_bytes(257) == 288 and isinstance(q4_k.tensor_bytes(257), int)  # 2 blocks of 144 B
    assert q4_k.tensor_bytes(256) == 144


def test_an_unknown_or_unhashable_format_name_is_one_line():
    every = "fp32, fp16, int8, int4, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, " \
            "q8_k, iq4_nl, iq4_xs, mxfp4"
    with pytest.raises(WorkbenchError, match=rf"^weight format must be one of {every}, got \['q4_k'\]$"):
        fm.block_format(["q4_k"])
    with pytest.raises(WorkbenchError, match=r"^weight format must be one of fp32, fp16, int8, int4, f32, f16, bf16, "
                                             r"q8_0, .*, mxfp4, got 'nope'$"):
        fm.weight_format_bits("nope")  # no model: no recipes offered
    with pytest.raises(WorkbenchError, match=r"^weight format must be one of fp32, fp16, int8, int4, f32, .*, mxfp4 "
                                             r"or a file type F32, F16, BF16, Q8_0, .*, MXFP4_MOE, got 'nope'$"):
        fm.weight_format_bits("nope", get_model("Llama 2-7B"))


# ---- tensors ------------------------------------------------------------------------------------------------------
def test_a_bad_tensor_class_lists_the_classes():
    with pytest.raises(WorkbenchError, match=r"^tensor class must be one of token_embd, position_embd, token_types, "
                                             r"output, attn_q, .*, norm, bias, got 'attn_z'$"):
        fm.Tensor("x", "attn_z", 0, (4, 4))
    assert fm.Tensor("x", "norm", 0, (1,)).params == 1  # a dimension of 1 is fine


def test_a_moe_models_tensors_with_a_dense_layer_and_shared_experts():
    assert listing(MOE) == [
        ("token_embd.weight", "token_embd", None, (64, 100)),
        ("blk.0.attn_norm.weight", "norm", 0, (64,)),
        ("blk.0.attn_q.weight", "attn_q", 0, (64, 64)),
        ("blk.0.attn_k.weight", "attn_k", 0, (64, 32)),
        ("blk.0.attn_v.weight", "attn_v", 0, (64, 32)),
        ("blk.0.attn_output.weight", "attn_output", 0, (64, 64)),
        ("blk.0.ffn_norm.weight", "norm", 0, (64,)),
        ("blk.0.ffn_gate.weight", "ffn_gate", 0, (64, 96)),
        ("blk.0.ffn_up.weight", "ffn_up", 0, (64, 96)),
        ("blk.0.ffn_down.weight", "ffn_down", 0, (96, 64)),
        *[t for i in (1, 2) for t in (
            (f"blk.{i}.attn_norm.weight", "norm", i, (64,)),
            (f"blk.{i}.attn_q.weight", "attn_q", i, (64, 64)),
            (f"blk.{i}.attn_k.weight", "attn_k", i, (64, 32)),
            (f"blk.{i}.attn_v.weight", "attn_v", i, (64, 32)),
            (f"blk.{i}.attn_output.weight", "attn_output", i, (64, 64)),
            (f"blk.{i}.ffn_norm.weight", "norm", i, (64,)),
            (f"blk.{i}.ffn_gate_inp.weight", "ffn_gate_inp", i, (64, 4)),
            (f"blk.{i}.ffn_gate_exps.weight", "ffn_gate_exps", i, (64, 32, 4)),
            (f"blk.{i}.ffn_up_exps.weight", "ffn_up_exps", i, (64, 32, 4)),
            (f"blk.{i}.ffn_down_exps.weight", "ffn_down_exps", i, (32, 64, 4)),
            (f"blk.{i}.ffn_gate_shexp.weight", "ffn_gate_shexp", i, (64, 64)),  # 2 shared x 32
            (f"blk.{i}.ffn_up_shexp.weight", "ffn_up_shexp", i, (64, 64)),
            (f"blk.{i}.ffn_down_shexp.weight", "ffn_down_shexp", i, (64, 64)))],
        ("output_norm.weight", "norm", None, (64,)),
        ("output.weight", "output", None, (64, 100)),
    ]
    assert sum(t.params for t in fm.model_tensors(MOE)) == MOE.total_params()


def test_a_gpt_models_tensors_fuse_qkv_and_carry_biases_and_positions():
    assert listing(GPT) == [
        ("token_embd.weight", "token_embd", None, (64, 100)),
        ("position_embd.weight", "position_embd", None, (64, 50)),
        ("blk.0.attn_norm.weight", "norm", 0, (64,)),
        ("blk.0.attn_qkv.weight", "attn_qkv", 0, (64, 192)),
        ("blk.0.attn_output.weight", "attn_output", 0, (64, 64)),
        ("blk.0.ffn_norm.weight", "norm", 0, (64,)),
        ("blk.0.attn_norm.bias", "bias", 0, (64,)),
        ("blk.0.ffn_norm.bias", "bias", 0, (64,)),
        ("blk.0.attn_qkv.bias", "bias", 0, (192,)),
        ("blk.0.attn_output.bias", "bias", 0, (64,)),
        ("blk.0.ffn_up.bias", "bias", 0, (128,)),
        ("blk.0.ffn_down.bias", "bias", 0, (64,)),
        ("blk.0.ffn_up.weight", "ffn_up", 0, (64, 128)),
        ("blk.0.ffn_down.weight", "ffn_down", 0, (128, 64)),
        ("output_norm.weight", "norm", None, (64,)),
        ("output_norm.bias", "bias", None, (64,)),
    ]  # tied embeddings: no output.weight


def test_a_bert_models_tensors_add_token_types_an_embedding_norm_and_a_pooler():
    names = [t[0] for t in listing(BERT)]
    assert names[:5] == ["token_embd.weight", "position_embd.weight", "token_types.weight", "token_embd_norm.weight",
                         "token_embd_norm.bias"]
    assert names[-2:] == ["cls.pooler.weight", "cls.pooler.bias"] and "output_norm.weight" not in names
    assert listing(BERT)[2:5] == [("token_types.weight", "token_types", None, (64, 2)),
                                  ("token_embd_norm.weight", "norm", None, (64,)),
                                  ("token_embd_norm.bias", "bias", None, (64,))]
    assert listing(BERT)[-2:] == [("cls.pooler.weight", "pooler", None, (64, 64)), ("cls.pooler.bias", "bias", None,
                                                                                    (64,))]
    bare = [t.name for t in fm.model_tensors(replace(BERT, extra={"token_types": False, "pooler": False}))]
    assert "token_types.weight" not in bare and "cls.pooler.weight" not in bare


def test_latent_attention_is_not_enumerated():
    with pytest.raises(WorkbenchError, match=r"^model 'DeepSeek-V2-Lite': GGUF tensors of multi-head latent attention "
                                             r"\(kv_lora_rank > 0\) are not enumerated; allowed: models with "
                                             r"kv_lora_rank = 0$"):
        fm.model_tensors(get_model("DeepSeek-V2-Lite"))


# ---- what the rules read from a model -----------------------------------------------------------------------------
def test_model_facts_of_registered_models():
    assert fm.ModelFacts.of(get_model("Qwen3-30B-A3B")) == fm.ModelFacts(48, 8, 128, False, False)
    facts = fm.ModelFacts.of(get_model("Llama 3.1-8B"))
    assert type(facts.n_gqa) is int and facts.n_gqa == 4
    assert fm.ModelFacts.of(get_model("TinyLlama-42M")).tied_embeddings is True
    assert fm.ModelFacts.of(get_model("Llama 2-70B")).is_70b


@pytest.mark.parametrize(("kv_heads", "is_70b"), [(64, False), (32, True)])
def test_the_70b_type_needs_grouped_kv_heads(kv_heads, is_70b):
    """An 80-layer llama with n_gqa 1 is not LLM_TYPE_70B; with n_gqa 2 it is (llama.cpp: n_gqa > 1)."""
    assert fm.ModelFacts.of(replace(get_model("Llama 2-70B"), n_kv_heads=kv_heads)).is_70b is is_70b


def test_the_rule_categories():
    assert [fm._category(k) for k in ("ffn_up_exps", "ffn_gate_shexp", "ffn_down", "ffn_gate_inp", "attn_qkv",
                                      "pooler", "norm")] == \
        ["ffn_up", "ffn_gate", "ffn_down", "ffn_gate", "attn_v", "other", "other"]


# ---- llama-quant.cpp's rules at their boundaries -----------------------------------------------------------------------
def pick(recipe: str, kind: str, layer, facts: fm.ModelFacts, row: int = 4096, imatrix: bool = False) -> str:
    name = f"blk.{layer}.{kind}.weight" if layer is not None else f"{kind}.weight"
    shape = (row, 4096, 8) if kind.endswith("_exps") else (row, 4096)
    return fm.Recipe(recipe, imatrix).format_for(fm.Tensor(name, kind, layer, shape), facts).name


DENSE = fm.ModelFacts(32, 1)


def test_a_float_file_type_applies_no_rule():
    assert pick("F32", "output", None, DENSE) == "f32" and pick("F16", "output", None, DENSE) == "f16"
    assert pick("BF16", "attn_v", 0, DENSE) == "bf16"


def test_tied_token_embeddings_follow_the_output_rule():
    tied = fm.ModelFacts(32, 1, tied_embeddings=True)
    assert pick("Q4_K_M", "token_embd", None, tied) == "q6_k" and pick("Q4_K_M", "token_embd", None, DENSE) == "q4_k"
    assert pick("Q4_K_M", "attn_q", 5, tied) == "q4_k"  # only the embeddings move


def test_the_output_matrix_under_mxfp4_moe_is_q8_0_even_when_q6_k_blocks_fit():
    assert pick("MXFP4_MOE", "output", None, fm.ModelFacts(24, 8, 32)) == "q8_0"


@pytest.mark.parametrize(("recipe", "layer", "facts", "want"), [
    ("Q3_K_L", 7, DENSE, "q5_k"),
    ("IQ4_NL", 7, fm.ModelFacts(32, 4), "q5_k"), ("IQ4_XS", 7, fm.ModelFacts(32, 4), "q5_k"),
    ("IQ4_XS", 7, fm.ModelFacts(32, 3), "iq4_xs"),
    ("Q5_K_M", 0, DENSE, "q6_k"), ("Q5_K_M", 4, DENSE, "q5_k"),
    ("Q2_K", 7, fm.ModelFacts(80, 2, is_70b=True), "q5_k"),  # q3_k lifted for the 70B type
    ("Q2_K", 7, fm.ModelFacts(80, 2), "q3_k"),
])
def test_attn_v_rules(recipe, layer, facts, want):
    assert pick(recipe, "attn_v", layer, facts) == want


@pytest.mark.parametrize(("recipe", "layer", "n_layers", "imatrix", "want"), [
    ("Q3_K_L", 20, 32, False, "q5_k"),
    ("Q3_K_M", 2, 40, False, "q4_k"), ("Q3_K_M", 1, 40, False, "q5_k"),  # 40 // 16 = 2 (not 2.5)
    ("IQ4_NL", 0, 32, False, "q5_k"), ("IQ4_NL", 3, 32, False, "q5_k"), ("IQ4_NL", 4, 32, False, "iq4_nl"),
    ("IQ4_XS", 4, 36, False, "iq4_xs"),  # 36 // 8 = 4 (not 4.5)
    ("Q4_K_S", 4, 36, False, "q4_k"), ("Q4_K_S", 3, 36, False, "q5_k"),
    ("Q5_0", 0, 32, True, "q5_1"), ("Q5_0", 3, 32, True, "q5_1"), ("Q5_0", 4, 32, True, "q5_0"),
    ("Q4_0", 4, 36, True, "q4_0"), ("Q4_0", 3, 36, True, "q4_1"), ("Q5_0", 0, 32, False, "q5_0"),
])
def test_ffn_down_rules(recipe, layer, n_layers, imatrix, want):
    assert pick(recipe, "ffn_down", layer, fm.ModelFacts(n_layers, 1), imatrix=imatrix) == want


@pytest.mark.parametrize("recipe", ["Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS"])
def test_eight_expert_models_move_attn_output_to_q5_k(recipe):
    assert pick(recipe, "attn_output", 3, fm.ModelFacts(32, 4, 8)) == "q5_k"


def test_attn_output_rules_of_other_file_types():
    assert pick("Q8_0", "attn_output", 3, fm.ModelFacts(32, 4, 8)) == "q8_0"
    assert pick("Q2_K", "attn_output", 3, DENSE) == "q3_k" and pick("Q3_K_L", "attn_output", 3, DENSE) == "q5_k"
    assert pick("Q3_K_M", "attn_output", 3, DENSE) == "q4_k" and pick("Q5_K_M", "attn_output", 3, DENSE) == "q5_k"


def test_an_unknown_recipe_and_a_missing_class_list_the_allowed():
    with pytest.raises(WorkbenchError, match=r"^recipe must be one of F32, F16, BF16, Q8_0, Q6_K, .*, MXFP4_MOE, got "
                                             r"'Q4_K_X'$"):
        fm.Recipe("Q4_K_X")
    with pytest.raises(WorkbenchError, match=r"^model 'TinyLlama-42M' has no attn_qkv tensor in layer 0; allowed "
                                             r"classes: attn_k, attn_output, attn_q, attn_v, ffn_down, ffn_gate, "
                                             r"ffn_up, norm, token_embd, layers 0\.\.7$"):
        fm.Recipe("Q4_K_M").for_class(get_model("TinyLlama-42M"), "attn_qkv", 0)


# ---- the file ---------------------------------------------------------------------------------------------------
def test_alignment_rounds_up_to_32_bytes_in_integers():
    assert [fm._aligned(n) for n in (0, 1, 32, 33)] == [0, 32, 32, 64] and isinstance(fm._aligned(33), int)


def test_one_tensor_info_record():
    """u64 name length + 19 name bytes + u32 n_dims + 2 x u64 dims + u32 type + u64 offset = 59 bytes."""
    assert fm._info_bytes(fm.Tensor("blk.0.attn_q.weight", "attn_q", 0, (4096, 4096))) == 59
    assert fm._info_bytes(fm.Tensor("blk.0.ffn_up_exps.weight", "ffn_up_exps", 0, (8, 8, 4))) == 8 + 24 + 4 + 24 + 4 + 8


def test_a_tiny_files_bytes_by_hand():
    """GPT above, all f16 under F16 but the f32 norms and biases: header 24 B + 100 x 40 B tokenizer + 16 KiB keys +
    16 info records, aligned to 32; then each tensor's bytes aligned to 32."""
    tensors = fm.model_tensors(GPT)
    infos = sum(8 + len(t.name) + 4 + 8 * len(t.shape) + 4 + 8 for t in tensors)
    head = -(-(24 + 100 * 40 + 16 * 1024 + infos) // 32) * 32
    data = sum(-(-(t.params * (2 if t.quantizable else 4)) // 32) * 32 for t in tensors)
    assert fm.gguf_file_bytes(GPT, "F16") == head + data
