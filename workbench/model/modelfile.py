"""The model a user has, as they have it: a GGUF file or a Hugging Face config.json, read into [model] keys.

`read_model_file(path)` returns a frozen `ModelFile`: the architecture, the [model] keys it gives (family and
dimensions, as a deployment TOML would write them) and, for a GGUF file, every tensor's stored format. A deployment
names it with ``[model] file = "..."`` (a path relative to the deployment file; a folder holding a config.json
works too), and a speculative draft with ``[speculative] draft_file = "..."``; `userconfig` expands the file into
the keys before it validates them, so keys the table gives beside ``file`` (a changed ``n_layers``, a what-if
``weight_format``) win over the file's.

**GGUF** (ggml-org/ggml docs/gguf.md; read with the ``gguf`` package's `GGUFReader`, which memory-maps the file:
only the header, the metadata and the tensor infos are read, never the weights): ``general.architecture`` and its
``<arch>.block_count``, ``.embedding_length``, ``.feed_forward_length``, ``.attention.head_count``,
``.attention.head_count_kv``, ``.context_length``, optional ``.attention.key_length`` (head size) and
``.vocab_size`` (else the tokenizer's token list, else token_embd's rows); embeddings are tied when the file has
no ``output.weight``. Each tensor's ggml type is named as `workbench.model.formats` names block formats (Q4_K -> q4_k);
when every matrix has one format the deployment gets that ``weight_format``, otherwise ``weight_bits``, the file's
exact average (its tensors' bytes x 8 over their weights, as `formats.recipe_bits` counts a recipe).

**config.json** (transformers' ``PretrainedConfig`` keys): ``model_type``, ``hidden_size``, ``num_hidden_layers``,
``num_attention_heads``, ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``; optional
``num_key_value_heads`` (default: the heads), ``head_dim`` (default: hidden / heads), ``tie_word_embeddings``
(default false, as LlamaConfig, Qwen2Config, MistralConfig and Phi3Config default it). Weights are not stored in it,
so no format: the deployment's ``weight_format`` (or 16-bit) applies.

Costed architectures (`HF_ARCHITECTURES`, `GGUF_ARCHITECTURES`): pre-RMSNorm SwiGLU decoders with grouped-query
rotary attention, the workbench's ``llama`` family. `SLIDING_WINDOW_RULE`: a model whose every layer attends over
a sliding window is costed with max_positions capped at the window, where sliding attention equals full attention
(exact there; longer prompts are refused by the [workload] check). Architectures mixing sliding and global layers or
soft-capping logits (Gemma 2/3) are refused in one line, as is anything else, naming the supported ones.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.model.formats import weight_formats
from workbench.model.models import TransformerConfig

# transformers model_type -> the architecture class it names (all costed as the llama family)
HF_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                    "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM"}
GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3")  # general.architecture values (Mistral GGUFs say "llama")
# Architectures read but refused, with why (one line each).
REFUSED = {
    "gemma": "GeGLU with an embedding scaled by sqrt(hidden); its norms add 1 to the weight",
    "gemma2": "sliding-window layers alternate with global ones and logits are soft-capped; four norms per block",
    "gemma3": "sliding-window layers (5 of 6) mix with global ones; QK-norm and four norms per block",
}
SLIDING_WINDOW_RULE = ("every layer attends over a sliding window W: costed with max_positions = min(max positions, W), "
                       "where sliding attention is full attention")
HF_REQUIRED = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "vocab_size", "max_position_embeddings")
GGUF_REQUIRED = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count", "context_length")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: its name, stored format (ggml's type in `formats` naming), shape in ggml order
    (row length first), weights and bytes."""

    name: str
    format: str
    shape: tuple[int, ...]
    params: int
    n_bytes: int

    @property
    def is_matrix(self) -> bool:
        """A weight matrix (2-D or more), what a quantized file stores in block formats; 1-D norms stay f32."""
        return len(self.shape) >= 2


@dataclass(frozen=True)
class ModelFile:
    """A model read from a file: where, which kind (gguf | hf), its architecture, the [model] keys it gives
    (name, family, dimensions) and, for a GGUF file, its tensors and file type."""

    path: str
    kind: str
    architecture: str
    keys: tuple[tuple[str, object], ...]
    tensors: tuple[TensorInfo, ...] = ()
    file_type: str = ""
    note: str = ""  # an approximation applied (the sliding-window rule), "" when none

    def model_keys(self) -> dict:
        """The [model] keys the file gives: dimensions, and a GGUF's weight format (or exact bits)."""
        keys = dict(self.keys)
        fmt = self.weight_format
        if fmt:
            keys["weight_format"] = fmt
        elif self.weight_bits is not None:
            keys["weight_bits"] = self.weight_bits
        return keys

    @property
    def weight_format(self) -> str:
        """The one format every weight matrix is stored in, if it is a named weight format, else ""."""
        formats = {t.format for t in self.tensors if t.is_matrix}
        return formats.pop() if len(formats) == 1 and formats <= set(weight_formats()) else ""

    @property
    def weight_bits(self) -> float | None:
        """Exact bits per weight of the file's tensors (their bytes x 8 over their weights); None without tensors."""
        params = sum(t.params for t in self.tensors)
        return 8 * sum(t.n_bytes for t in self.tensors) / params if params else None

    def format_counts(self) -> dict[str, int]:
        """Stored format -> how many tensors use it, most used first."""
        return dict(Counter(t.format for t in self.tensors).most_common())

    def config(self) -> TransformerConfig:
        """The `TransformerConfig` of the file's dimensions (one line naming the file when they disagree)."""
        keys = dict(self.keys)
        try:
            return TransformerConfig(source=f"{self.kind} file {self.path}", **keys)
        except WorkbenchError as exc:
            raise WorkbenchError(f"{Path(self.path).name}: {exc}") from None

    def summary(self) -> str:
        """One line: the file, its architecture and, for a GGUF, its tensors' formats."""
        what = f"model file {Path(self.path).name}: {self.kind} {self.architecture}"
        if self.tensors:
            counts = ", ".join(f"{fmt} x{n}" for fmt, n in self.format_counts().items())
            bits = f"{self.weight_bits:.3f}"
            what += f", {len(self.tensors)} tensors ({counts}), {bits} bit per weight"
            what += f", file type {self.file_type}" if self.file_type else ""
        return what + (f"; {self.note}" if self.note else "")


# ---- reading ------------------------------------------------------------------------------------------------
def resolve_path(text, base_dir: Path | None, key: str, where: str) -> Path:
    """The file a [model] file / [speculative] draft_file value names (relative to the deployment's folder; a
    folder means its config.json), or one line naming the key when it is not a path that exists."""
    if not isinstance(text, str) or not text.strip():
        raise WorkbenchError(f"{where}: {key} must be a path to a .gguf file or a config.json, got {text!r}")
    path = Path(text) if Path(text).is_absolute() or base_dir is None else Path(base_dir) / text
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise WorkbenchError(f"{where}: {key} file {str(path)!r} does not exist (a .gguf file or a Hugging Face "
                             "config.json, relative to the deployment file)")
    return path


def read_model_file(path: str | Path) -> ModelFile:
    """A GGUF file (by its .gguf suffix) or a Hugging Face config.json (.json) as a `ModelFile`; one line else."""
    path = Path(path)
    if path.suffix.lower() == ".gguf":
        return read_gguf(path)
    if path.suffix.lower() == ".json":
        return read_hf_config(path)
    raise WorkbenchError(f"{path.name}: a model file must be a .gguf file or a Hugging Face config.json, "
                         f"got suffix {path.suffix or '(none)'!r}")


def _refuse(where: str, key: str, architecture, supported) -> WorkbenchError:
    """The one-line error for an architecture the workbench does not cost."""
    why = f" ({REFUSED[architecture]})" if architecture in REFUSED else ""
    return WorkbenchError(f"{where}: {key} {architecture!r} is not costed{why}; supported: {', '.join(supported)}")


def _integer(where: str, key: str, value) -> int:
    """A file's integer value, else one line naming the key."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WorkbenchError(f"{where}: {key} must be an integer >= 1, got {value!r}")
    return value


def _model_keys(name: str, layers: int, d: int, heads: int, kv: int, d_head: int, ff: int, vocab: int,
                positions: int, tie: bool) -> tuple[tuple[str, object], ...]:
    """The [model] keys of a llama-family model with these dimensions."""
    return (("name", name), ("family", "llama"), ("n_layers", layers), ("d_model", d), ("n_heads", heads),
            ("n_kv_heads", kv), ("d_head", d_head), ("d_ff", ff), ("vocab_size", vocab), ("max_positions", positions),
            ("tie_embeddings", tie))


def _window(where: str, table: dict, positions: int) -> tuple[int, str]:
    """max_positions under `SLIDING_WINDOW_RULE` and the note saying so ("" when no sliding window applies);
    a model mixing sliding and full-attention layers is refused."""
    window = table.get("sliding_window")
    layer_types = table.get("layer_types")
    kinds = set(map(str, layer_types)) if isinstance(layer_types, list) else set()
    if len(kinds) > 1:
        raise WorkbenchError(f"{where}: layer_types mixes {', '.join(sorted(kinds))}: layers of different attention "
                             "are not costed; supported: every layer full or every layer sliding")
    if window is None or table.get("use_sliding_window") is False or kinds == {"full_attention"}:
        return positions, ""
    window = _integer(where, "sliding_window", window)
    if window >= positions:
        return positions, ""
    return window, f"sliding_window {window}: {SLIDING_WINDOW_RULE}"


def hf_model_file(table, where: str, name: str) -> ModelFile:
    """A parsed config.json as a `ModelFile` (keys checked one by one, each error naming the key and `where`)."""
    if not isinstance(table, dict):
        raise WorkbenchError(f"{where}: a config.json must hold a JSON object, got {type(table).__name__}")
    kind = table.get("model_type")
    if kind not in HF_ARCHITECTURES:
        raise _refuse(where, "model_type", kind, HF_ARCHITECTURES)
    for key in HF_REQUIRED:
        if key not in table:
            raise WorkbenchError(f"{where}: missing key {key} (a config.json of model_type {kind!r} needs "
                                 f"{', '.join(HF_REQUIRED)})")
    d, heads = (_integer(where, k, table[k]) for k in ("hidden_size", "num_attention_heads"))
    kv = _integer(where, "num_key_value_heads", table.get("num_key_value_heads") or heads)
    d_head = _integer(where, "head_dim", table.get("head_dim") or (d // heads if d % heads == 0 else d / heads))
    tie = table.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise WorkbenchError(f"{where}: tie_word_embeddings must be true or false, got {tie!r}")
    positions, note = _window(where, table, _integer(where, "max_position_embeddings",
                                                      table["max_position_embeddings"]))
    keys = _model_keys(name, _integer(where, "num_hidden_layers", table["num_hidden_layers"]), d, heads, kv, d_head,
                       _integer(where, "intermediate_size", table["intermediate_size"]),
                       _integer(where, "vocab_size", table["vocab_size"]), positions, tie)
    return ModelFile(where, "hf", HF_ARCHITECTURES[kind], keys, note=note)


def read_hf_config(path: str | Path) -> ModelFile:
    """A Hugging Face config.json (named by its folder when the file is config.json) as a `ModelFile`."""
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorkbenchError(f"{path}: not a readable config.json: {exc}") from None
    stem = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return hf_model_file(table, str(path), f"{stem} ({path.name})")


# ---- GGUF ----------------------------------------------------------------------------------------------------
def ggml_format(type_name: str) -> str:
    """A ggml tensor type's name as `workbench.model.formats` names block formats (Q4_K -> q4_k, F16 -> f16); a type the
    workbench has no block format for keeps ggml's name in lower case (its bits still come from the file)."""
    return type_name.lower()


def _field(reader, key: str):
    """A GGUF metadata value (None when the file has no such key)."""
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _tensors(reader) -> tuple[TensorInfo, ...]:
    """Every tensor's name, format, shape (ggml order), weights and bytes, from the tensor infos (no data read)."""
    return tuple(TensorInfo(t.name, ggml_format(t.tensor_type.name), tuple(int(n) for n in t.shape),
                            int(t.n_elements), int(t.n_bytes)) for t in reader.tensors)


def _gguf_keys(reader, where: str, arch: str, tensors: tuple[TensorInfo, ...]) -> tuple[tuple, str]:
    """The [model] keys from a GGUF's `<arch>.*` metadata (each missing or bad key named) and the window note."""
    for key in GGUF_REQUIRED:
        if _field(reader, f"{arch}.{key}") is None:
            raise WorkbenchError(f"{where}: missing key {arch}.{key} (a GGUF of architecture {arch} needs "
                                 f"{', '.join(f'{arch}.{k}' for k in GGUF_REQUIRED)})")
    value = {key: _field(reader, f"{arch}.{key}") for key in (*GGUF_REQUIRED, "attention.head_count_kv",
                                                             "attention.key_length", "vocab_size",
                                                             "attention.sliding_window")}
    d, heads = _integer(where, f"{arch}.embedding_length", value["embedding_length"]), \
        _integer(where, f"{arch}.attention.head_count", value["attention.head_count"])
    kv = _integer(where, f"{arch}.attention.head_count_kv", value["attention.head_count_kv"] or heads)
    d_head = _integer(where, f"{arch}.attention.key_length", value["attention.key_length"] or
                      (d // heads if d % heads == 0 else d / heads))
    names = {t.name: t for t in tensors}
    tokens = reader.get_field("tokenizer.ggml.tokens")  # counted, not decoded
    vocab = value["vocab_size"] or (len(tokens.data) if tokens is not None else 0) or \
        (names["token_embd.weight"].shape[-1] if "token_embd.weight" in names else None)
    positions, note = _window(where, {"sliding_window": value["attention.sliding_window"]},
                              _integer(where, f"{arch}.context_length", value["context_length"]))
    name = _field(reader, "general.name")
    keys = _model_keys(f"{name or Path(where).stem} ({Path(where).name})",
                       _integer(where, f"{arch}.block_count", value["block_count"]), d, heads, kv, d_head,
                       _integer(where, f"{arch}.feed_forward_length", value["feed_forward_length"]),
                       _integer(where, f"{arch}.vocab_size (or tokenizer.ggml.tokens)", vocab), positions,
                       "output.weight" not in names)
    return keys, note


def read_gguf(path: str | Path) -> ModelFile:
    """A GGUF file's architecture, dimensions and tensor formats (memory-mapped: header and infos only)."""
    import gguf

    path = Path(path)
    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise WorkbenchError(f"{path}: not a readable GGUF file: {exc}") from None
    arch = _field(reader, "general.architecture")
    if arch is None:
        raise WorkbenchError(f"{path}: missing key general.architecture (every GGUF file names its architecture)")
    if arch not in GGUF_ARCHITECTURES:
        raise _refuse(str(path), "general.architecture", arch, GGUF_ARCHITECTURES)
    tensors = _tensors(reader)
    keys, note = _gguf_keys(reader, str(path), arch, tensors)
    file_type = _field(reader, "general.file_type")
    type_name = ""
    if isinstance(file_type, int):
        try:
            type_name = gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_")
        except ValueError:
            type_name = str(file_type)
    return ModelFile(str(path), "gguf", arch, keys, tensors, type_name, note)


# ---- a deployment's [model] table ---------------------------------------------------------------------------
def expand_file(where: str, table, base_dir: Path | None, key: str = "model.file") -> tuple[dict, ModelFile | None]:
    """A [model] table with its `file` replaced by the keys the file gives (the table's own keys win), and the
    `ModelFile` (None when the table names no file)."""
    if not isinstance(table, dict) or "file" not in table:
        return table, None
    found = read_model_file(resolve_path(table["file"], base_dir, key, where))
    given = {k: v for k, v in table.items() if k != "file"}
    keys = found.model_keys()
    if any(k in given for k in ("weight_format", "weight_bits")):  # the table's format replaces the file's
        keys.pop("weight_format", None)
        keys.pop("weight_bits", None)
    return {**keys, **given}, found
