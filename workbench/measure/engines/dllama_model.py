"""Random-weight model and tokenizer files in distributed-llama's own format, so the engine runs any small shape here
without a download or its Python converter.

Layout read from the loader at each version measured (b4rtaz/distributed-llama):

* **Header** (both versions): int32 magic 0xA00ABCD, int32 header size in bytes (magic and size included), then
  int32 (key, value) pairs. v0.4.0 `src/transformer.cpp`:134-162 (`Transformer::loadSpecFromFile`; keys 0-12 of
  `TransformerHeaderKey`, `src/transformer.hpp`:24-38, any other key throws); v0.16.4 `src/llm.cpp`:52-97
  (`loadLlmHeader`; keys 0-21 of `LlmHeaderKey`, `src/llm.hpp`:8-31, WEIGHT_FLOAT_TYPE required at :99).
* **Weights**: v0.4.0 `src/transformer.cpp`:553-587 (`Transformer::loadRoot`): F32 embedding (vocab x d); per layer
  q, k, v, wo, w1, w2, w3 in the weights type, then F32 rms_att, rms_ffn; F32 final norm; wcls (vocab x d) in the
  weights type (:294-296). v0.16.4 `src/llm.cpp`:626-661 (`loadLlmNetWeight`): F32 embedding; per layer q, k, v, wo;
  a MoE layer's F32 gate (d x experts) and each expert's w1, w2, w3 (else w1, w2, w3); Qwen3's F32 q/k norms
  (head_dim each); F32 norm_0, norm_1; F32 final norm; wcls. A matrix of n inputs and d outputs is d rows of n/32
  Q40 blocks (`getBatchBytes`, v0.4.0 `src/quants.cpp`; `size2D`, v0.16.4 `src/nn/nn-core.cpp`).
* **Q40 block**: fp16 scale + 16 bytes of nibbles, 18 bytes per 32 values (v0.4.0 `src/quants.hpp`:16-19,
  v0.16.4 `src/nn/nn-quants.hpp` NnBlockQ40).
* **Tokenizer** (`.t`): v0.4.0 reads the old header (`src/tokenizer.hpp`:16-23: magic 0x567123, vocab size, max token
  length, bos, eos, pad; `src/tokenizer.cpp`:38-80) and falls back to byte tokens at id byte + 3
  (`src/tokenizer.cpp`:189); v0.16.4 reads magic 0x567124 with (key, value) pairs (`src/tokenizer.cpp`:65-115, keys
  `src/tokenizer.hpp`:21-33) and treats ids below bos as the regular vocabulary (:141). Each token: f32 score, int32
  length (>= 1: a zero-length fread fails), bytes.

The weights are seeded random values (Q40 blocks with random nibbles and a small scale, F32 N(0, 0.02), norms one):
the kernels' time and the bytes on the wire do not depend on them. The classifier rows of the special tokens are zero,
so greedy sampling never picks BOS, which ends a v0.4 run early (`src/main.cpp@v0.4.0`:104)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.io import atomic_path
from workbench.model.models import TransformerConfig

VERSIONS = ("v0.4.0", "v0.16.4")  # the tags this writer follows (vendored in third_party/distributed-llama/)
MODEL_MAGIC = 0xA00ABCD
OLD_TOKENIZER_MAGIC, TOKENIZER_MAGIC = 0x567123, 0x567124
Q40_BLOCK_VALUES, Q40_BLOCK_BYTES = 32, 18
F32_BYTES = 4
ARCH = {"llama": 0xABCD00, "qwen3_moe": 0xABCD02}  # v0.4.0 LLAMA2, v0.16.4 LLAMA / QWEN3_MOE (src/llm.hpp:38-42)
KEY = {"version": 0, "arch_type": 1, "dim": 2, "hidden_dim": 3, "n_layers": 4, "n_heads": 5, "n_kv_heads": 6,
       "n_experts": 7, "n_active_experts": 8, "vocab_size": 9, "seq_len": 10, "hidden_act": 11, "rope_theta": 12,
       "weight_float_type": 13, "head_dim": 19, "moe_hidden_dim": 21}
V04_KEYS = ("version", "arch_type", "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "n_experts",
            "n_active_experts", "vocab_size", "seq_len", "hidden_act", "rope_theta")
SILU, Q40_TYPE, ROPE_THETA = 1, 2, 10000
SPECIALS = 3  # unk, bos, eos
WEIGHT_STD = 0.02


def check_version(version: str) -> str:
    """Return `version` if this writer follows its loader, else a one-line error naming the allowed tags."""
    if version not in VERSIONS:
        raise WorkbenchError(f"version must be one of {', '.join(VERSIONS)} (the tags whose loader this writer "
                             f"follows), got {version!r}")
    return version


def check_shape(model: TransformerConfig, version: str) -> TransformerConfig:
    """Return `model` if `version` can load it as written here (Q40 rows of 32, a MoE model only on v0.16.4)."""
    check_version(version)
    if model.is_moe and version == "v0.4.0":
        raise WorkbenchError(f"model {model.name!r}: a Qwen3-MoE file needs version v0.16.4 (v0.4.0 has no Qwen3-MoE)")
    if model.is_moe and (model.n_shared_experts or model.n_dense_layers or model.is_mla):
        raise WorkbenchError(f"model {model.name!r}: distributed-llama's Qwen3-MoE has no shared experts, dense "
                             "layers or MLA")
    if version == "v0.4.0" and model.n_heads * model.d_head != model.d_model:
        raise WorkbenchError(f"model {model.name!r}: v0.4.0 derives head size as d_model / n_heads; d_head must be "
                             f"{model.d_model // model.n_heads}, got {model.d_head}")
    for name, size in (("d_model", model.d_model), ("d_ff", model.d_ff),
                       ("n_heads x d_head", model.n_heads * model.d_head)):
        if size % Q40_BLOCK_VALUES:
            raise WorkbenchError(f"{name} of {model.name!r} must be a multiple of 32 (Q40 blocks), got {size}")
    if model.vocab_size < 256 + SPECIALS + 1:
        raise WorkbenchError(f"vocab_size of {model.name!r} must be >= {256 + SPECIALS + 1} (byte tokens and "
                             f"specials), got {model.vocab_size}")
    return model


def header_pairs(model: TransformerConfig, version: str, seq_len: int) -> list[tuple[int, int]]:
    """The (key, value) pairs of the model header `version` reads."""
    values = {"version": 1, "arch_type": ARCH["qwen3_moe" if model.is_moe else "llama"], "dim": model.d_model,
              "hidden_dim": model.d_ff, "n_layers": model.n_layers, "n_heads": model.n_heads,
              "n_kv_heads": model.n_kv_heads, "n_experts": model.n_experts,
              "n_active_experts": model.n_active_experts, "vocab_size": model.vocab_size, "seq_len": seq_len,
              "hidden_act": SILU, "rope_theta": ROPE_THETA, "weight_float_type": Q40_TYPE,
              "head_dim": model.d_head, "moe_hidden_dim": model.d_ff if model.is_moe else 0}
    names = V04_KEYS if version == "v0.4.0" else V04_KEYS + ("weight_float_type", "head_dim") + \
        (("moe_hidden_dim",) if model.is_moe else ())
    return [(KEY[n], int(values[n])) for n in names]


def header_bytes(model: TransformerConfig, version: str, seq_len: int) -> bytes:
    """The model file's header: magic, size, (key, value) pairs."""
    pairs = header_pairs(model, version, seq_len)
    size = 8 + 8 * len(pairs)
    return struct.pack(f"<ii{2 * len(pairs)}i", MODEL_MAGIC, size, *[v for p in pairs for v in p])


def read_header(path: str | Path) -> dict[int, int]:
    """The (key -> value) pairs of a model file's header, read the way the loader does (magic, size, pairs)."""
    with open(path, "rb") as handle:
        magic, size = struct.unpack("<ii", handle.read(8))
        if magic != MODEL_MAGIC:
            raise WorkbenchError(f"{path}: magic must be 0x{MODEL_MAGIC:X}, got 0x{magic:X}")
        values = struct.unpack(f"<{(size - 8) // 4}i", handle.read(size - 8))
    return dict(zip(values[0::2], values[1::2], strict=True))


def tensor_plan(model: TransformerConfig, version: str) -> list[tuple[str, str, int, int]]:
    """Every tensor in file order as (name, type "f32"/"q40", rows, columns), per the loader of `version`."""
    d, f, v, q, kv = model.d_model, model.d_ff, model.vocab_size, model.n_heads * model.d_head, \
        model.n_kv_heads * model.d_head
    plan = [("embedding", "f32", v, d)]
    for i in range(model.n_layers):
        plan += [(f"{i}.q", "q40", q, d), (f"{i}.k", "q40", kv, d), (f"{i}.v", "q40", kv, d), (f"{i}.wo", "q40", d, q)]
        if model.is_moe:
            plan.append((f"{i}.moe_gate", "f32", model.n_experts, d))
            for e in range(model.n_experts):
                plan += [(f"{i}.{e}.w1", "q40", f, d), (f"{i}.{e}.w2", "q40", d, f), (f"{i}.{e}.w3", "q40", f, d)]
        else:
            plan += [(f"{i}.w1", "q40", f, d), (f"{i}.w2", "q40", d, f), (f"{i}.w3", "q40", f, d)]
        if model.is_moe:  # Qwen3's q/k norms (v0.16.4 src/llm.cpp:648-651)
            plan += [(f"{i}.norm_q", "f32", 1, model.d_head), (f"{i}.norm_k", "f32", 1, model.d_head)]
        plan += [(f"{i}.norm_0", "f32", 1, d), (f"{i}.norm_1", "f32", 1, d)]
    return plan + [("final_norm", "f32", 1, d), ("wcls", "q40", v, d)]


def tensor_bytes(kind: str, rows: int, cols: int) -> int:
    """Bytes of one tensor: F32 4 per value, Q40 18 per 32 values."""
    return rows * cols * F32_BYTES if kind == "f32" else rows * cols // Q40_BLOCK_VALUES * Q40_BLOCK_BYTES


def _q40(rng: np.random.Generator, rows: int, cols: int, zero_rows: tuple[int, ...] = ()) -> bytes:
    """Random Q40 blocks: fp16 scale WEIGHT_STD / 4 (nibbles -8..7 give about N(0, 0.02)) and random nibbles."""
    blocks = rows * cols // Q40_BLOCK_VALUES
    out = np.empty((blocks, Q40_BLOCK_BYTES), dtype=np.uint8)
    out[:, :2] = np.frombuffer(np.float16(WEIGHT_STD / 4).tobytes(), dtype=np.uint8)
    out[:, 2:] = rng.integers(0, 256, size=(blocks, Q40_BLOCK_BYTES - 2), dtype=np.uint8)
    per_row = cols // Q40_BLOCK_VALUES
    for r in zero_rows:
        out[r * per_row:(r + 1) * per_row, :2] = 0  # scale 0: every value of the row is 0
    return out.tobytes()


def _f32(rng: np.random.Generator, name: str, rows: int, cols: int) -> bytes:
    """F32 values: norms are ones, the rest N(0, WEIGHT_STD)."""
    if "norm" in name:
        return np.ones(rows * cols, dtype="<f4").tobytes()
    return rng.normal(0.0, WEIGHT_STD, rows * cols).astype("<f4").tobytes()


def special_ids(model: TransformerConfig, version: str) -> dict[str, int]:
    """Token ids of unk, bos and eos: first in v0.4.0 (bytes follow at +3), last in v0.16.4 (ids below bos regular)."""
    if version == "v0.4.0":
        return {"unk": 0, "bos": 1, "eos": 2}
    v = model.vocab_size
    return {"unk": v - 3, "bos": v - 2, "eos": v - 1}


def write_model(path: str | Path, model: TransformerConfig, version: str, seq_len: int = 256, seed: int = 0) -> Path:
    """Write a seeded random-weight model file of `model` that `version` loads; the same inputs give the same bytes."""
    check_shape(model, version)
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or not 8 <= seq_len <= 65535:
        raise WorkbenchError(f"seq_len must be an integer in [8, 65535], got {seq_len!r}")
    rng = np.random.default_rng(seed)
    zero = tuple(special_ids(model, version).values())
    with atomic_path(path) as tmp, open(tmp, "wb") as handle:
        handle.write(header_bytes(model, version, seq_len))
        for name, kind, rows, cols in tensor_plan(model, version):
            if kind == "f32":
                handle.write(_f32(rng, name, rows, cols))
            else:
                handle.write(_q40(rng, rows, cols, zero if name == "wcls" else ()))
    return Path(path)


def model_file_bytes(model: TransformerConfig, version: str) -> int:
    """Size of the file `write_model` writes: header plus every tensor."""
    pairs = header_pairs(model, version, 256)
    return 8 + 8 * len(pairs) + sum(tensor_bytes(k, r, c) for _, k, r, c in tensor_plan(model, version))


def _piece(b: int) -> bytes:
    """The byte token of b: the character itself when printable ASCII, else <0xXX> (the loader's byte-piece form)."""
    return bytes([b]) if 32 <= b <= 126 else f"<0x{b:02X}>".encode()


def vocabulary(model: TransformerConfig, version: str) -> list[bytes]:
    """The tiny vocabulary: 256 byte tokens, fillers <fN> (never formed from a text prompt) and unk/bos/eos."""
    ids = special_ids(model, version)
    specials = {ids["unk"]: b"<unk>", ids["bos"]: b"<s>", ids["eos"]: b"</s>"}
    regular = [_piece(b) for b in range(256)]
    regular += [f"<f{i}>".encode() for i in range(model.vocab_size - SPECIALS - 256)]
    it = iter(regular)
    return [specials[i] if i in specials else next(it) for i in range(model.vocab_size)]


def tokenizer_bytes(model: TransformerConfig, version: str) -> bytes:
    """The `.t` file `version` reads: its header, then every token's score, length and bytes."""
    check_shape(model, version)
    vocab, ids = vocabulary(model, version), special_ids(model, version)
    longest = max(len(t) for t in vocab)
    if version == "v0.4.0":
        head = struct.pack("<IIIiii", OLD_TOKENIZER_MAGIC, model.vocab_size, longest, ids["bos"], ids["eos"], -1)
    else:  # TOK_VERSION 1, TOK_VOCAB_SIZE, MAX_TOKEN_LENGTH, BOS_ID, EOS_ID, ADD_BOS
        pairs = [(0, 1), (1, model.vocab_size), (2, longest), (3, ids["bos"]), (4, ids["eos"]), (10, 1)]
        head = struct.pack(f"<ii{2 * len(pairs)}i", TOKENIZER_MAGIC, 8 + 8 * len(pairs), *[v for p in pairs for v in p])
    body = b"".join(struct.pack("<fi", 0.0, len(t)) + t for t in vocab)
    return head + body


def write_tokenizer(path: str | Path, model: TransformerConfig, version: str) -> Path:
    """Write the tokenizer file of `model`'s tiny vocabulary for `version`, atomically."""
    data = tokenizer_bytes(model, version)
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)
    return Path(path)


@dataclass(frozen=True)
class ModelFiles:
    """A model file and its tokenizer, written for one version."""

    model: Path
    tokenizer: Path


def write_files(folder: str | Path, model: TransformerConfig, version: str, seq_len: int = 256,
                seed: int = 0) -> ModelFiles:
    """Write `model`'s weights and tokenizer for `version` into `folder` (named after the model and version)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{model.name}-{version}"
    return ModelFiles(write_model(folder / f"{stem}.m", model, version, seq_len, seed),
                      write_tokenizer(folder / f"{stem}.t", model, version))
