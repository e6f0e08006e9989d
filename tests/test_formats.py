"""GGUF weight formats: each block's bytes from ggml's layout, llama.cpp's recipes choose what its source says
for named tensors, and published GGUF files' sizes follow from the recipes within 2 %."""

from __future__ import annotations

import csv

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.model.formats import (
    BLOCK_FORMATS,
    RECIPE_DEFAULTS,
    ModelFacts,
    Recipe,
    Tensor,
    block_format,
    format_bits,
    gguf_file_bytes,
    layer_bytes,
    model_tensors,
    recipe_bits,
    tensor_formats,
    use_more_bits,
    weight_format_bits,
    weight_formats,
)
from workbench.model.models import MODELS, find_model, tiny_config
from workbench.schemes.common import operand_dtype

# sizeof(block_*) as each static_assert in ggml-common.h writes it (QK_K = 256, ggml_half = 2 B), and the
# "Effectively N bits per weight" comments of the k-quants: typed here independently of the parts lists.
STATIC_ASSERT_BYTES = {
    "q4_0": (2 + 32 // 2, 32), "q4_1": (2 * 2 + 32 // 2, 32), "q5_0": (2 + 4 + 32 // 2, 32),
    "q5_1": (2 * 2 + 4 + 32 // 2, 32), "q8_0": (2 + 32, 32), "mxfp4": (1 + 32 // 2, 32),
    "q2_k": (2 * 2 + 256 // 16 + 256 // 4, 256), "q3_k": (2 + 256 // 4 + 256 // 8 + 12, 256),
    "q4_k": (2 * 2 + 12 + 256 // 2, 256), "q5_k": (2 * 2 + 12 + 256 // 2 + 256 // 8, 256),
    "q6_k": (2 + 256 // 16 + 3 * 256 // 4, 256), "q8_k": (4 + 256 + 256 // 16 * 2, 256),
    "iq4_nl": (2 + 32 // 2, 32), "iq4_xs": (2 + 2 + 256 // 64 + 256 // 2, 256),
    "f32": (4, 1), "f16": (2, 1), "bf16": (2, 1),
}
EFFECTIVE_BITS = {"q2_k": 2.625, "q3_k": 3.4375, "q4_k": 4.5, "q5_k": 5.5, "q6_k": 6.5625}
GGUF_FILES = REPO_ROOT / "data" / "formats" / "gguf_files.csv"


def published_files() -> list[dict]:
    with open(GGUF_FILES, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("name", sorted(BLOCK_FORMATS))
def test_block_bytes_follow_the_quoted_layout(name):
    fmt = BLOCK_FORMATS[name]
    assert (fmt.block_bytes, fmt.block_weights) == STATIC_ASSERT_BYTES[name]
    assert str(fmt.block_bytes) in fmt.layout or name in ("f32", "f16", "bf16")
    assert "ggml" in fmt.source and fmt.source.rsplit(":", 1)[1].isdigit()


def test_named_bits_per_weight():
    assert block_format("q4_k").block_bytes == 144 and format_bits("q4_k") == 4.5
    assert format_bits("mxfp4") == 4.25 and format_bits("q8_0") == 8.5 and format_bits("iq4_xs") == 4.25
    for name, bits in EFFECTIVE_BITS.items():
        assert format_bits(name) == bits


@pytest.mark.parametrize("name", sorted(weight_formats()))
def test_arithmetic_is_the_workbench_class_of_the_codes(name):
    fmt = block_format(name)
    assert operand_dtype(fmt.code_bits, fmt.code_bits) == fmt.arithmetic


def test_bits_alone_misread_only_q4_1():
    """schemes.common reads code bits off the bits per weight (the fractional share is the scales): right for
    every format but q4_1, whose 4-bit codes plus d and m make a whole 5.0 bits, read as 5-bit codes (int8)."""
    misread = {n for n in weight_formats() if operand_dtype(format_bits(n), format_bits(n)) != block_format(n).arithmetic}
    assert misread == {"q4_1"}


def test_q8_k_is_an_activation_intermediate_not_a_weight_format():
    assert "q8_k" not in weight_formats() and format_bits("q8_k") == 9.125


def test_use_more_bits_is_llama_cpps_pattern():
    # n = 32: first 4, last 4 (28..31) and every third from layer 6 (6, 9, ..., 27): 16 of 32
    chosen = [i for i in range(32) if use_more_bits(i, 32)]
    assert chosen == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]


def test_q4_k_m_chooses_what_llama_quant_says_for_llama_3_1_8b():
    chosen = {name: fmt.name for name, fmt in tensor_formats(MODELS["Llama 3.1-8B"], "Q4_K_M").items()}
    assert chosen["output.weight"] == "q6_k" and chosen["token_embd.weight"] == "q4_k"
    assert chosen["blk.0.attn_v.weight"] == "q6_k" and chosen["blk.4.attn_v.weight"] == "q4_k"
    assert chosen["blk.6.ffn_down.weight"] == "q6_k" and chosen["blk.7.ffn_down.weight"] == "q4_k"
    assert chosen["blk.5.attn_q.weight"] == chosen["blk.5.ffn_up.weight"] == "q4_k"
    assert chosen["blk.0.attn_norm.weight"] == chosen["output_norm.weight"] == "f32"
    assert sum(v == "q6_k" for k, v in chosen.items() if k.endswith("attn_v.weight")) == 16


def test_recipes_for_named_tensors():
    llama2, llama70 = MODELS["Llama 2-7B"], MODELS["Llama 2-70B"]

    def pick(model, recipe, name, imatrix=False):
        return tensor_formats(model, Recipe(recipe, imatrix))[name].name

    assert pick(llama2, "Q4_0", "output.weight") == "q6_k"  # q4_0 default is not q8_0 (llama-quant.cpp:470)
    assert pick(llama2, "Q8_0", "output.weight") == "q8_0"
    assert pick(llama2, "Q4_K_S", "blk.3.attn_v.weight") == "q5_k" and pick(llama2, "Q4_K_S", "blk.4.attn_v.weight") == "q4_k"
    assert pick(llama2, "Q4_K_S", "blk.3.ffn_down.weight") == "q5_k" and pick(llama2, "Q4_K_S", "blk.4.ffn_down.weight") == "q4_k"
    assert pick(llama2, "Q3_K_M", "blk.1.attn_v.weight") == "q5_k" and pick(llama2, "Q3_K_M", "blk.2.attn_v.weight") == "q4_k"
    assert pick(llama2, "Q3_K_M", "blk.1.ffn_down.weight") == "q5_k" and pick(llama2, "Q3_K_M", "blk.2.ffn_down.weight") == "q4_k"
    assert pick(llama2, "Q3_K_M", "blk.9.attn_output.weight") == "q4_k"
    assert pick(llama2, "Q2_K", "blk.9.attn_v.weight") == "q3_k"  # n_gqa = 1
    assert pick(MODELS["Llama 3.1-8B"], "Q2_K", "blk.9.attn_v.weight") == "q4_k"  # n_gqa = 4
    assert pick(llama70, "Q4_K_M", "blk.10.attn_v.weight") == "q5_k"  # LLM_TYPE_70B lifts q4_k attn_v
    assert pick(llama70, "Q4_K_M", "blk.10.ffn_down.weight") == "q4_k"
    assert pick(llama2, "IQ4_XS", "blk.0.ffn_down.weight") == "q5_k"
    assert pick(llama2, "IQ4_XS", "blk.0.ffn_down.weight", imatrix=True) == "iq4_xs"
    assert pick(llama2, "Q4_0", "blk.0.ffn_down.weight", imatrix=True) == "q4_1"
    assert pick(llama2, "F16", "output.weight") == "f16" and pick(llama2, "F16", "blk.0.ffn_norm.weight") == "f32"


def test_fallback_when_rows_do_not_divide_into_blocks():
    odd = tiny_config(d_model=96, n_heads=8, d_ff=160)  # rows of 96 and 160: not multiples of 256, of 32
    chosen = {k: v.name for k, v in tensor_formats(odd, "Q4_K_M").items()}
    assert chosen["blk.0.attn_q.weight"] == "q5_0"  # q4_k -> q5_0 (llama-quant.cpp:400)
    assert chosen["output.weight"] == "q8_0"  # rows not divisible by q4_k's 256 (:462-463)
    assert chosen["blk.1.ffn_down.weight"] == "q8_0"  # the last layer wants q6_k, which falls back to q8_0
    assert chosen["blk.0.ffn_down.weight"] == "q5_0"
    odd32 = tiny_config(d_model=72, n_heads=4, n_kv_heads=4, d_ff=144)  # rows of 72: not even a multiple of 32
    attn_q = next(t for t in model_tensors(odd32) if t.name == "blk.0.attn_q.weight")
    assert Recipe("Q4_K_M").format_for(attn_q, ModelFacts.of(odd32)).name == "f16"  # q5_0 does not fit either
    with pytest.raises(WorkbenchError, match="infeasible: output.weight rows of 72"):  # q8_0 has no fallback
        tensor_formats(odd32, "Q4_K_M")


def test_mxfp4_moe_stores_experts_in_mxfp4_and_the_rest_in_q8_0():
    facts = ModelFacts(n_layers=24, n_gqa=8, n_experts=32)
    recipe = Recipe("MXFP4_MOE")
    experts = Tensor("blk.3.ffn_down_exps.weight", "ffn_down_exps", 3, (2880, 2880, 32))
    attn = Tensor("blk.3.attn_q.weight", "attn_q", 3, (2880, 4096))
    router = Tensor("blk.3.ffn_gate_inp.weight", "ffn_gate_inp", 3, (2880, 32))
    output = Tensor("output.weight", "output", None, (2880, 201088))
    assert recipe.format_for(experts, facts).name == "mxfp4" and recipe.format_for(attn, facts).name == "q8_0"
    assert recipe.format_for(router, facts).name == "f32" and recipe.format_for(output, facts).name == "q8_0"


def test_moe_down_experts_follow_the_layer_rule_and_8_expert_models_bump_attention():
    recipe, facts = Recipe("Q4_K_M"), ModelFacts(n_layers=48, n_gqa=8, n_experts=128)
    down = [Tensor(f"blk.{i}.ffn_down_exps.weight", "ffn_down_exps", i, (768, 2048, 128)) for i in (0, 7, 8)]
    assert [recipe.format_for(t, facts).name for t in down] == ["q6_k", "q4_k", "q6_k"]  # 48/8 = 6: (7-6)%3 = 1 no, (8-6)%3 = 2 yes
    mixtral = ModelFacts(n_layers=32, n_gqa=4, n_experts=8)
    assert recipe.format_for(Tensor("blk.5.attn_k.weight", "attn_k", 5, (4096, 1024)), mixtral).name == "q8_0"
    assert recipe.format_for(Tensor("blk.5.attn_v.weight", "attn_v", 5, (4096, 1024)), mixtral).name == "q8_0"
    assert recipe.format_for(Tensor("blk.5.attn_output.weight", "attn_output", 5, (4096, 4096)), mixtral).name == "q5_k"


@pytest.mark.parametrize("model", sorted(MODELS))
def test_tensors_hold_every_parameter(model):
    m = MODELS[model]
    if getattr(m, "kv_lora_rank", 0):
        pytest.skip("multi-head latent attention is not enumerated")
    assert sum(t.params for t in model_tensors(m)) == m.total_params()


@pytest.mark.parametrize("row", published_files(), ids=lambda r: r["file"])
def test_published_gguf_sizes_follow_their_recipes(row):
    assert row["kind"] == "quoted" and row["source"].startswith("https://")
    model = find_model(row["model"])
    if model is None:
        pytest.skip(f"{row['model']} is not registered in workbench.model.models on this branch")
    if row["rules"] != "current":
        pytest.skip("made with older llama.cpp rules for this file type (see the row's note)")
    predicted = gguf_file_bytes(model, Recipe(row["recipe"], imatrix=row["imatrix"] == "yes"))
    assert predicted == pytest.approx(float(row["bytes"]), rel=0.02)


def test_three_published_files_are_compared():
    compared = {(r["model"], r["recipe"]) for r in published_files()
                if r["rules"] == "current" and find_model(r["model"]) is not None}
    assert len(compared) >= 3


def test_recipe_bits_average_the_file():
    llama = MODELS["Llama 3.1-8B"]
    bits = recipe_bits(llama, "Q4_K_M")
    assert 4.5 < bits < 5.0 and weight_format_bits("Q4_K_M", llama) == bits
    assert recipe_bits(llama, "Q8_0") == pytest.approx(8.5, abs=0.01)  # norms in f32 add a trace
    assert weight_format_bits("q4_k") == 4.5


@pytest.mark.parametrize("call, fragment", [
    (lambda: format_bits("q4_z"), "weight format must be one of"),
    (lambda: Recipe("Q4_K_X"), "recipe must be one of"),
    (lambda: weight_format_bits("Q4_K_M"), "weight format must be one of"),
    (lambda: weight_format_bits("nope", MODELS["Llama 2-7B"]), "Q4_K_M"),
    (lambda: Tensor("x", "attn_z", 0, (4, 4)), "tensor class must be one of"),
    (lambda: Tensor("x", "attn_q", 0, (0, 4)), "shape of x"),
])
def test_bad_input_is_one_line(call, fragment):
    with pytest.raises(WorkbenchError) as info:
        call()
    assert "\n" not in str(info.value) and fragment in str(info.value)


def test_every_recipe_default_is_a_block_format():
    assert all(default in BLOCK_FORMATS for default in RECIPE_DEFAULTS.values())


def deployment(weight: dict) -> dict:
    """The sbc_gigabit example with its [model] weight keys replaced by `weight`."""
    import tomllib

    with open(REPO_ROOT / "examples" / "sbc_gigabit.toml", "rb") as f:
        table = tomllib.load(f)
    model = {k: v for k, v in table["model"].items() if not k.startswith("weight_")}
    table["model"] = {**model, **weight}
    return table


@pytest.mark.parametrize("name, bits", [("q4_k", 4.5), ("q6_k", 6.5625), ("mxfp4", 4.25), ("q4_0", 4.5)])
def test_a_toml_names_a_block_format(name, bits):
    from workbench.scenarios.userconfig import parse_config

    config = parse_config(deployment({"weight_format": name}), "x.toml")
    assert config.weight_bits == bits and config.weight_format == name


def test_a_toml_names_a_recipe_and_gets_its_models_average_bits():
    from workbench.scenarios.userconfig import parse_config

    config = parse_config(deployment({"weight_format": "Q4_K_M"}), "x.toml")
    assert config.weight_bits == recipe_bits(config.model, "Q4_K_M") and config.weight_format == "Q4_K_M"
    assert config.weight_bits != format_bits("q4_k")  # the q6_k layers and f32 norms move the average


@pytest.mark.parametrize("weight, fragment", [
    ({"weight_format": "q4_z"}, "model.weight_format must be one of"),
    ({"weight_format": "Q4_K_M", "weight_bits": 4.8}, "not both"),
])
def test_a_toml_with_a_bad_weight_format_gets_one_line(weight, fragment):
    from workbench.scenarios.userconfig import parse_config

    with pytest.raises(WorkbenchError) as info:
        parse_config(deployment(weight), "x.toml")
    message = str(info.value)
    assert "\n" not in message and fragment in message
    if "must be one of" in message:
        assert "q6_k" in message and "Q4_K_M" in message and "mxfp4" in message


def test_a_recipe_maps_a_tensor_class_and_layer_to_a_format():
    llama = MODELS["Llama 3.1-8B"]
    recipe = Recipe("Q4_K_M")
    assert recipe.for_class(llama, "attn_v", 0).name == "q6_k" and recipe.for_class(llama, "attn_v", 4).name == "q4_k"
    assert recipe.for_class(llama, "output").name == "q6_k" and recipe.for_class(llama, "norm", 3).name == "f32"
    with pytest.raises(WorkbenchError, match="no ffn_down_exps tensor in layer 0; allowed classes"):
        recipe.for_class(llama, "ffn_down_exps", 0)


def test_layer_bytes_follow_the_layers_formats():
    llama = MODELS["Llama 3.1-8B"]
    per_layer = layer_bytes(llama, "Q4_K_M")
    assert len(per_layer) == 32 and per_layer[0] > per_layer[4]  # layer 0: q6_k attn_v and ffn_down; 4: q4_k
    assert per_layer[0] == per_layer[6] and per_layer[4] == per_layer[5]
    assert len(set(layer_bytes(llama, "Q8_0"))) == 1
    outside = sum(BLOCK_FORMATS[f.name].tensor_bytes(t.params) for t in model_tensors(llama) if t.layer is None
                  for f in [Recipe("Q4_K_M").format_for(t, ModelFacts.of(llama))])
    assert sum(per_layer) + outside == pytest.approx(recipe_bits(llama, "Q4_K_M") * llama.total_params() / 8, rel=1e-12)
