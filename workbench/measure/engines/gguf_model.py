"""Random-weight GGUF files of a Llama-shaped `TransformerConfig` (dense, or a Qwen3-MoE-shaped mixture of experts),
written with the `gguf` package, so llama.cpp can run a model of any size here without a download.

Tensor names and metadata keys follow llama.cpp's loader (`src/llama-arch.cpp` LLM_TENSOR_NAMES, `LLM_KV_*` in the
llama.cpp vendored by llama-cpp-python 0.3.36). The weights are N(0, 0.02) in f16 (norms f32 ones): the kernels'
time does not depend on the values, and llama.cpp quantizes the file to each format itself
(`workbench.measure.engines.llamacpp.quantize`). The tokenizer is a placeholder list of `vocab_size` tokens; runs feed token
ids directly."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.model.models import TransformerConfig

WEIGHT_STD = 0.02  # N(0, 0.02): GPT-2's initialisation; any finite values time the same


def _architecture(model: TransformerConfig) -> str:
    """The GGUF architecture name llama.cpp loads this shape as: llama (dense) or qwen3moe (a MoE model)."""
    if model.family != "llama" or model.is_mla or model.n_shared_experts or model.n_dense_layers:
        raise WorkbenchError(f"model {model.name!r}: a random GGUF is written for Llama-shaped dense models and "
                             "Qwen3-shaped MoE models (no MLA, shared experts or dense layers)")
    return "qwen3moe" if model.is_moe else "llama"


def _header(writer, model: TransformerConfig, arch: str) -> None:
    """Hyper-parameters and a placeholder tokenizer, as llama.cpp's loader reads them."""
    writer.add_block_count(model.n_layers)
    writer.add_context_length(model.max_positions)
    writer.add_embedding_length(model.d_model)
    writer.add_feed_forward_length(model.d_ff)
    writer.add_head_count(model.n_heads)
    writer.add_head_count_kv(model.n_kv_heads)
    writer.add_key_length(model.d_head)
    writer.add_value_length(model.d_head)
    writer.add_rope_dimension_count(model.d_head)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(1)  # MOSTLY_F16
    if arch == "qwen3moe":
        writer.add_expert_count(model.n_experts)
        writer.add_expert_used_count(model.n_active_experts)
        writer.add_expert_feed_forward_length(model.d_ff)
    writer.add_tokenizer_model("llama")
    writer.add_token_list([f"<t{i}>".encode() for i in range(model.vocab_size)])
    writer.add_token_scores([0.0] * model.vocab_size)
    writer.add_token_types([1] * model.vocab_size)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def _weight(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """A random f16 matrix of numpy `shape` (GGUF stores the dimensions reversed)."""
    return (rng.standard_normal(shape, dtype=np.float32) * WEIGHT_STD).astype(np.float16)


def _block_tensors(writer, model: TransformerConfig, i: int, rng: np.random.Generator) -> None:
    """One decoder block's tensors, llama.cpp's names (blk.N.*)."""
    d, q, kv, f = model.d_model, model.q_dim, model.kv_dim, model.d_ff
    p = f"blk.{i}."
    writer.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
    writer.add_tensor(p + "attn_q.weight", _weight(rng, q, d))
    writer.add_tensor(p + "attn_k.weight", _weight(rng, kv, d))
    writer.add_tensor(p + "attn_v.weight", _weight(rng, kv, d))
    writer.add_tensor(p + "attn_output.weight", _weight(rng, d, q))
    writer.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
    if model.is_moe:
        writer.add_tensor(p + "attn_q_norm.weight", np.ones(model.d_head, np.float32))
        writer.add_tensor(p + "attn_k_norm.weight", np.ones(model.d_head, np.float32))
        e = model.n_experts
        writer.add_tensor(p + "ffn_gate_inp.weight", (rng.standard_normal((e, d), dtype=np.float32) * WEIGHT_STD))
        writer.add_tensor(p + "ffn_gate_exps.weight", _weight(rng, e, f, d))
        writer.add_tensor(p + "ffn_up_exps.weight", _weight(rng, e, f, d))
        writer.add_tensor(p + "ffn_down_exps.weight", _weight(rng, e, d, f))
    else:
        writer.add_tensor(p + "ffn_gate.weight", _weight(rng, f, d))
        writer.add_tensor(p + "ffn_up.weight", _weight(rng, f, d))
        writer.add_tensor(p + "ffn_down.weight", _weight(rng, d, f))


def write_gguf(model: TransformerConfig, path: str | Path, seed: int = 0) -> Path:
    """Write `model` with random f16 weights to `path` (atomically: a .tmp file renamed); returns the path."""
    import gguf  # the engine extra

    path = Path(path)
    arch = _architecture(model)
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(path.suffix + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    _header(writer, model, arch)
    writer.add_tensor("token_embd.weight", _weight(rng, model.vocab_size, model.d_model))
    writer.add_tensor("output_norm.weight", np.ones(model.d_model, np.float32))
    writer.add_tensor("output.weight", _weight(rng, model.vocab_size, model.d_model))
    for i in range(model.n_layers):
        _block_tensors(writer, model, i, rng)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path
