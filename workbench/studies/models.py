"""The model registry as tables: sizes, bytes and FLOPs of every model the five papers use."""

from __future__ import annotations

import pandas as pd

from workbench.core.units import GIB, MIB
from workbench.model.models import MODELS, get_model
from workbench.report.results import RESULT_COLUMNS


def model_table(seq_len: int = 128, kv_len: int = 128) -> pd.DataFrame:
    """One row per registered model: shape, parameters, weight bytes, FLOPs and KV bytes."""
    rows = []
    for m in MODELS.values():
        rows.append({
            "model": m.name, "family": m.family, "layers": m.n_layers, "d_model": m.d_model,
            "heads": m.n_heads, "kv_heads": m.n_kv_heads, "d_ff": m.d_ff, "vocab": m.vocab_size,
            "params": m.total_params(), "block_params": m.block_params(),
            "weights_fp32_bytes": m.weight_bytes(32), "weights_fp16_bytes": m.weight_bytes(16),
            "weights_int8_bytes": m.weight_bytes(8),
            "prompt_flops": m.model_flops(seq_len), "decode_flops_per_token": m.flops_per_token(kv_len),
            "kv_cache_bytes_per_token_fp16": m.kv_cache_bytes(1, 16) if m.is_decoder else 0.0,
            "source": m.source,
        })
    return pd.DataFrame(rows)


def _row(paper, artifact, model, setting, quantity, value, unit):
    return dict(zip(RESULT_COLUMNS, (paper, artifact, model, setting, quantity, float(value), unit)))


def size_fidelity_rows() -> pd.DataFrame:
    """Modelled sizes for every size the papers report (Galaxy Table I, TPI-LLM Tables 4-5, STI Sec. 5)."""
    rows = []
    for name in ("DistilBERT", "BERT-L", "GPT2-L", "OPT-L", "OPT-XL"):
        rows.append(_row("galaxy", "Table I", name, "fp16", "memory_footprint", get_model(name).weight_bytes(16) / 1e6, "MB"))
    m = get_model("Llama 2-7B")
    p = 0.25  # TPI-LLM Table 4: n=4 devices, p_i = 0.25, fp32
    table4 = {"preprocess": m.vocab_size * m.d_model, "attention": m.attention_params() * p + m.d_model,
              "ffn": m.ffn_params() * p + m.d_model, "postprocess": m.vocab_size * m.d_model + m.d_model}
    for block, params in table4.items():
        rows.append(_row("tpi_llm", "Table 4", "Llama 2-7B", "n=4,p=0.25,fp32", f"{block}_block_size",
                         params * 4 / MIB, "MiB"))
    for name in ("Llama 2-3B", "Llama 2-7B", "Llama 2-13B", "Llama 2-70B", "Llama 3.1-8B", "Llama 3.1-70B", "Yi-34B"):
        rows.append(_row("tpi_llm", "Table 5", name, "fp32", "required_memory", get_model(name).weight_bytes(32) / GIB, "GiB"))
    rows.append(_row("sti", "Sec. 5", "DynaBERT-12x12", "fp32", "full_model_storage",
                     get_model("DynaBERT-12x12").weight_bytes(32) / MIB, "MiB"))
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def registry_result_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Every modelled number of `model_table` as tidy result rows (paper = 'workbench')."""
    quantities = {"params": "count", "weights_fp16_bytes": "B", "prompt_flops": "FLOP",
                  "decode_flops_per_token": "FLOP", "kv_cache_bytes_per_token_fp16": "B"}
    parts = []
    for q, unit in quantities.items():
        parts.append(pd.DataFrame({"paper": "workbench", "artifact": "model registry", "model": table["model"],
                                   "setting": "", "quantity": q, "value": table[q].astype(float), "unit": unit}))
    return pd.concat(parts, ignore_index=True)[RESULT_COLUMNS]
