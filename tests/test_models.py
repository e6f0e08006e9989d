"""Model registry: sizes pinned to published numbers with stated tolerances; bad configs rejected."""

import pytest

from workbench.core.errors import WorkbenchError
from workbench.model.models import MODELS, TransformerConfig, get_model, tiny_config

MIB = 2**20


@pytest.mark.parametrize("name", [n for n, m in MODELS.items() if m.reported_params])
def test_parameter_counts_within_1_percent_of_published(name):
    m = MODELS[name]
    assert m.total_params() == pytest.approx(m.reported_params, rel=0.01)


def test_tpi_llm_table4_block_sizes_llama2_7b():
    # TPI-LLM Table 4 (n=4, p=0.25, fp32): preprocess 500 MB, attention 64 MB, FFN 129 MB.
    m = get_model("Llama 2-7B")
    assert m.vocab_size * m.d_model * 4 / MIB == pytest.approx(500, rel=0.01)
    assert m.attention_params() * 0.25 * 4 / MIB == pytest.approx(64, rel=0.01)
    assert m.ffn_params() * 0.25 * 4 / MIB == pytest.approx(129, rel=0.01)


@pytest.mark.parametrize("name,reported_mb", [
    ("DistilBERT", 130), ("BERT-L", 680), ("GPT2-L", 1600), ("OPT-L", 2600), ("OPT-XL", 5400)])
def test_galaxy_table1_memory_footprints_fp16(name, reported_mb):
    # Galaxy Table I footprints match fp16 weights (rounded in the paper: 6 % tolerance).
    assert get_model(name).weight_bytes(16) / 1e6 == pytest.approx(reported_mb, rel=0.06)


def test_sti_full_model_418mb():
    # STI: the full 12x12 model (fp32) is 418 MB.
    assert get_model("DynaBERT-12x12").weight_bytes(32) / MIB == pytest.approx(418, rel=0.01)


def test_flops_decode_and_prompt():
    m = get_model("Llama 2-7B")
    # ~2 x params FLOPs per token when attention over a short cache is negligible
    assert m.flops_per_token(kv_len=1) == pytest.approx(2 * m.total_params(), rel=0.05)
    assert m.block_flops(16) > 16 * m.block_flops(1, kv_len=1) * 0.99


def test_kv_cache_bytes_gqa():
    m = get_model("Llama 2-70B")
    assert m.kv_cache_bytes_per_block(1024, bits=16) == 2 * 1024 * 8 * 128 * 2


def test_unknown_model_lists_registry():
    with pytest.raises(WorkbenchError, match="unknown model 'GPT-5'.*TinyLlama-42M"):
        get_model("GPT-5")


def test_heads_not_divisible_by_kv_heads():
    with pytest.raises(WorkbenchError, match="n_heads .* divisible by n_kv_heads"):
        TransformerConfig("bad", "llama", 2, 64, 8, 128, 100, n_kv_heads=3)


def test_negative_sequence_length():
    with pytest.raises(WorkbenchError, match="seq_len"):
        get_model("BERT-L").block_flops(-4)


def test_bad_family_and_sizes():
    with pytest.raises(WorkbenchError, match="family"):
        TransformerConfig("bad", "rnn", 2, 64, 8, 128, 100)
    with pytest.raises(WorkbenchError, match="d_model"):
        TransformerConfig("bad", "gpt", 2, 0, 8, 128, 100)
    with pytest.raises(WorkbenchError, match="divisible by n_heads"):
        tiny_config("gpt", d_model=60, n_heads=8)


@pytest.mark.parametrize("name,expected", [("Llama 3 8B", "Llama 3.1-8B"), ("llama-2-7b", "Llama 2-7B"),
                                           ("BERT-LARGE", "BERT-L"), ("yi 34b", "Yi-34B"),
                                           ("TinyLlama-42M-64h", "TinyLlama-42M-64h")])
def test_model_names_any_case_and_aliases(name, expected):
    from workbench.model.models import ALIASES, MODELS, get_model

    assert get_model(name).name == expected
    assert all(target in MODELS for target in ALIASES.values())


def test_unknown_model_lists_the_registry():
    from workbench.model.models import get_model

    with pytest.raises(WorkbenchError, match="registered models"):
        get_model("Llama 9 1T")


# Dense models people run on boards, each pinned to its published size (levanter-style): the model card's figure,
# which cards round or cut to the digits shown, so the tolerance is one unit of its last digit.
PUBLISHED = {"Llama 3.2-1B": (1.23e9, 0.01e9), "Llama 3.2-3B": (3.21e9, 0.01e9), "Qwen2.5-0.5B": (0.49e9, 0.01e9),
             "Qwen2.5-3B": (3.09e9, 0.01e9), "Qwen2.5-7B": (7.61e9, 0.01e9), "Phi-3-mini-4k": (3.8e9, 0.1e9)}
# keras-hub's exact counts of Qwen3 (its presets' "params"), which include the Q/K RMSNorms the workbench does not
# cost (2 x d_head per layer): the rest must match to the parameter.
KERAS_QWEN3 = {"Qwen3-1.7B": 1_720_574_976, "Qwen3-4B": 4_022_468_096, "Qwen3-8B": 8_190_735_360}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_dense_edge_models_match_their_published_size_to_its_last_digit(name):
    published, unit = PUBLISHED[name]
    assert abs(MODELS[name].total_params() - published) <= unit, MODELS[name].total_params()
    assert MODELS[name].reported_params == published and "config.json" in MODELS[name].source


@pytest.mark.parametrize("name", sorted(KERAS_QWEN3))
def test_qwen3_matches_keras_hubs_exact_count_less_its_qk_norms(name):
    m = MODELS[name]
    assert m.total_params() + 2 * m.d_head * m.n_layers == KERAS_QWEN3[name]


def test_a_sliding_window_caps_phi3s_positions():
    # Phi-3-mini-4k's config.json: max_position_embeddings 4096, sliding_window 2047 (modelfile.SLIDING_WINDOW_RULE)
    assert MODELS["Phi-3-mini-4k"].max_positions == 2047
    assert get_model("qwen2.5 7b").name == "Qwen2.5-7B" and get_model("phi-3-mini").name == "Phi-3-mini-4k"
