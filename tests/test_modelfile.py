"""The model a user has, as they have it: a GGUF file (written here with gguf.GGUFWriter, some tensors quantized)
or a published config.json read through a deployment's [model] file / [speculative] draft_file; bad files get one
line naming the key and the file."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import gguf  # a dependency (pyproject): its absence fails here, never skips
import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.model.modelfile import GGUF_ARCHITECTURES, HF_ARCHITECTURES, read_model_file
from workbench.model.models import MODELS, TransformerConfig
from workbench.scenarios.userconfig import WEIGHT_FORMATS, load_config

DATA = Path(__file__).parent / "data"
Q = gguf.GGMLQuantizationType
D, FF, VOCAB, LAYERS, HEADS, KV = 64, 128, 96, 2, 4, 2


def write_gguf(path: Path, arch: str = "llama", matrix: Q = Q.Q4_0, down: Q = Q.F16, tied: bool = False,
               skip: str = "") -> Path:
    """A tiny GGUF of `arch`: metadata (one key left out with `skip`), a 96-token list, and every tensor of a
    2-layer llama with small random weights; matrices in `matrix` (ffn_down in `down`), norms f32."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    for key, add in (("block_count", lambda: writer.add_block_count(LAYERS)),
                     ("embedding_length", lambda: writer.add_embedding_length(D)),
                     ("feed_forward_length", lambda: writer.add_feed_forward_length(FF)),
                     ("attention.head_count", lambda: writer.add_head_count(HEADS)),
                     ("attention.head_count_kv", lambda: writer.add_head_count_kv(KV)),
                     ("context_length", lambda: writer.add_context_length(256))):
        if key != skip:
            add()
    writer.add_rope_dimension_count(D // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    rng = np.random.default_rng(0)

    def tensor(name: str, shape: tuple[int, ...], qtype: Q = Q.F32) -> None:
        data = rng.standard_normal(shape).astype(np.float32)
        if qtype == Q.F32:
            writer.add_tensor(name, data)
        elif qtype == Q.F16:
            writer.add_tensor(name, data.astype(np.float16))
        else:
            packed = gguf.quants.quantize(data, qtype)
            writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=qtype)

    tensor("token_embd.weight", (VOCAB, D), Q.Q8_0)
    tensor("output_norm.weight", (D,))
    if not tied:
        tensor("output.weight", (VOCAB, D), Q.Q8_0)
    for i in range(LAYERS):
        for name in ("attn_norm", "ffn_norm"):
            tensor(f"blk.{i}.{name}.weight", (D,))
        for name, rows in (("attn_q", D), ("attn_k", KV * D // HEADS), ("attn_v", KV * D // HEADS),
                           ("attn_output", D), ("ffn_gate", FF), ("ffn_up", FF)):
            tensor(f"blk.{i}.{name}.weight", (rows, D), matrix)
        tensor(f"blk.{i}.ffn_down.weight", (D, FF), down)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def deployment(tmp_path: Path, model: str, speculative: str = "") -> Path:
    """A one-board deployment TOML in `tmp_path` with `model` as its [model] lines."""
    text = (f"[model]\n{model}\n[network]\ntopology = \"switch\"\nbandwidth_mbps = 1000\n"
            "[[devices]]\nname = \"board\"\npeak_gflops = { fp32 = 100 }\nmemory_efficiency = 1.0\n"
            "[[devices.memory]]\nname = \"DRAM\"\ncapacity_gib = 8\nbandwidth_gb_per_s = 17\n"
            "[workload]\nseq_len = 16\n" + speculative)
    path = tmp_path / "deploy.toml"
    path.write_text(text)
    return path


def one_line(exc_info, *fragments: str) -> str:
    message = str(exc_info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def dims(model: TransformerConfig) -> dict:
    """Every field of a config but its name, source, published size and extras."""
    return {f.name: getattr(model, f.name) for f in fields(model)
            if f.name not in ("name", "source", "reported_params", "extra")}


# ---- GGUF ---------------------------------------------------------------------------------------------------
def test_a_gguf_file_gives_the_deployment_its_dimensions_and_exact_bits(tmp_path):
    write_gguf(tmp_path / "tiny.gguf")
    config = load_config(deployment(tmp_path, 'file = "tiny.gguf"'))
    m = config.model
    assert (m.family, m.n_layers, m.d_model, m.n_heads, m.n_kv_heads, m.d_head, m.d_ff, m.vocab_size,
            m.max_positions, m.tie_embeddings) == ("llama", LAYERS, D, HEADS, KV, D // HEADS, FF, VOCAB, 256, False)
    assert m.name == "tiny (tiny.gguf)"
    found = read_model_file(tmp_path / "tiny.gguf")
    assert found.format_counts() == {"q4_0": 12, "f32": 5, "q8_0": 2, "f16": 2}
    assert found.file_type == "Q4_0"
    # mixed formats: the deployment gets the file's exact bits, every tensor's bytes over its weights
    q4, q8, f16, f32 = (WEIGHT_FORMATS[f] for f in ("q4_0", "q8_0", "fp16", "fp32"))
    matrices = 2 * (D * D + 2 * KV * D // HEADS * D + D * D + 2 * FF * D)
    bits = (matrices * q4 + 2 * VOCAB * D * q8 + 2 * D * FF * f16 + 5 * D * f32) / (
        matrices + 2 * VOCAB * D + 2 * D * FF + 5 * D)
    assert config.weight_bits == pytest.approx(bits, rel=1e-12)
    assert config.weight_format == ""  # no one format names a mixed file
    assert m.total_params() == sum(t.params for t in found.tensors)  # every tensor the file holds is costed


def test_a_gguf_with_one_matrix_format_names_it_and_no_output_means_tied(tmp_path):
    write_gguf(tmp_path / "q8.gguf", matrix=Q.Q8_0, down=Q.Q8_0, tied=True)
    config = load_config(deployment(tmp_path, 'file = "q8.gguf"'))
    assert config.weight_format == "q8_0"
    assert config.weight_bits == pytest.approx(WEIGHT_FORMATS["q8_0"], rel=1e-12)
    assert config.model.tie_embeddings


def test_keys_beside_the_file_win(tmp_path):
    write_gguf(tmp_path / "tiny.gguf")
    config = load_config(deployment(tmp_path, 'file = "tiny.gguf"\nn_layers = 1\nweight_format = "q4_k"'))
    assert config.model.n_layers == 1 and config.model.d_model == D
    assert config.weight_format == "q4_k"
    assert config.weight_bits == pytest.approx(WEIGHT_FORMATS["q4_k"], rel=1e-12)


def test_a_draft_read_from_its_file(tmp_path):
    write_gguf(tmp_path / "draft.gguf")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text((DATA / "Llama-3.2-1B" / "config.json").read_text())
    speculative = '[speculative]\ndraft_file = "draft.gguf"\ngamma = 4\nalpha = 0.7\n'
    # the draft is read from its file (its name and vocabulary), and refused: Llama 3.2's tokenizer is not its own
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, 'file = "target"', speculative))
    one_line(info, f"draft tiny (draft.gguf) has a vocabulary of {VOCAB} tokens")
    both = '[speculative]\ndraft = "ngram"\ndraft_file = "draft.gguf"\nalpha = 0.7\n'
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, 'file = "target"', both))
    one_line(info, "exactly one of speculative.draft and speculative.draft_file")


# ---- a published config.json --------------------------------------------------------------------------------
def test_a_published_config_json_reads_into_the_registry_entry(tmp_path):
    path = deployment(tmp_path, f'file = "{DATA / "Llama-3.2-1B"}"')
    config = load_config(path)
    assert dims(config.model) == dims(MODELS["Llama 3.2-1B"])
    assert config.model.name == "Llama-3.2-1B (config.json)"
    assert config.weight_bits == pytest.approx(16.0)  # a config.json stores no weights: the default width


def test_every_layer_sliding_caps_the_positions_and_mixed_layers_are_refused(tmp_path):
    table = json.loads((DATA / "Llama-3.2-1B" / "config.json").read_text())
    table.update(model_type="mistral", sliding_window=4096, max_position_embeddings=32768)
    (tmp_path / "config.json").write_text(json.dumps(table))
    found = read_model_file(tmp_path / "config.json")
    assert dict(found.keys)["max_positions"] == 4096 and "sliding" in found.note
    table.update(layer_types=["sliding_attention", "full_attention"] * 8)
    (tmp_path / "config.json").write_text(json.dumps(table))
    with pytest.raises(WorkbenchError) as info:
        read_model_file(tmp_path / "config.json")
    one_line(info, "layer_types", "full_attention", "sliding_attention")


# ---- bad files: one line naming the key and the file -----------------------------------------------------------
def test_an_architecture_it_cannot_cost_names_it_and_the_supported_ones(tmp_path):
    write_gguf(tmp_path / "g.gguf", arch="gemma2")
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, 'file = "g.gguf"'))
    one_line(info, "g.gguf", "general.architecture 'gemma2' is not costed", "soft-capped", *GGUF_ARCHITECTURES)
    table = json.loads((DATA / "Llama-3.2-1B" / "config.json").read_text()) | {"model_type": "bert"}
    (tmp_path / "config.json").write_text(json.dumps(table))
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, 'file = "config.json"'))
    one_line(info, "config.json", "model_type 'bert'", *HF_ARCHITECTURES)


@pytest.mark.parametrize("key", ["block_count", "embedding_length", "attention.head_count"])
def test_a_gguf_missing_a_key_names_it_and_the_file(tmp_path, key):
    write_gguf(tmp_path / "bad.gguf", skip=key)
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, 'file = "bad.gguf"'))
    one_line(info, "bad.gguf", f"missing key llama.{key}")


@pytest.mark.parametrize("key,value,fragment", [("hidden_size", None, "missing key hidden_size"),
                                                ("num_hidden_layers", 0, "num_hidden_layers must be an integer >= 1"),
                                                ("tie_word_embeddings", "yes", "tie_word_embeddings must be true or false"),
                                                ("num_key_value_heads", 5, "n_heads (32) must be divisible")])
def test_a_config_json_with_a_bad_value_names_the_key_and_the_file(tmp_path, key, value, fragment):
    table = json.loads((DATA / "Llama-3.2-1B" / "config.json").read_text())
    if value is None:
        del table[key]
    else:
        table[key] = value
    (tmp_path / "config.json").write_text(json.dumps(table))
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, 'file = "config.json"'))
    one_line(info, "config.json", fragment)


@pytest.mark.parametrize("value,fragment", [('"nope.gguf"', "model.file file"), ('"weights.bin"', "suffix '.bin'"),
                                            ("3", "model.file must be a path")])
def test_a_path_that_does_not_exist_or_is_no_model_file(tmp_path, value, fragment):
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(WorkbenchError) as info:
        load_config(deployment(tmp_path, f"file = {value}"))
    one_line(info, fragment)


def test_a_file_that_is_not_gguf_says_so(tmp_path):
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all, just bytes")
    with pytest.raises(WorkbenchError) as info:
        read_model_file(tmp_path / "junk.gguf")
    one_line(info, "junk.gguf", "not a readable GGUF file")
