"""GGUF weight formats as the files store them: ggml's block types and llama.cpp's per-tensor recipes.

A **block format** (`BlockFormat`) is one ggml tensor type: a block of `block_weights` weights stored in
`block_bytes` bytes (its scales included), so its bits per weight are exact; its dot product runs in the
arithmetic class of its element codes (q4_k: 4-bit codes -> int4; q6_k: 6-bit -> int8; the fractional share is
the per-block scales, applied outside the multiply-accumulate, as `schemes.common.code_bits` reads it). Layouts
are quoted from ``src/ggml-common.h`` of ggml-org/ggml at commit d99724f2b141fed9e1a9f402213506c081433465 (the
`static_assert(sizeof(block_...))` line each cites; the same header is ``ggml/src/ggml-common.h`` in llama.cpp).

A **recipe** (`Recipe`) is one llama.cpp file type (``llama-quantize ... Q4_K_M``): a default block format and
the rules of ``llama_tensor_get_type_impl`` that move some tensors to other formats (the output matrix to q6_k,
half the attn_v / ffn_down layers to q6_k under Q4_K_M, ...), then ``tensor_type_fallback`` for rows that do
not divide into the format's blocks. Rules are transcribed from ``src/llama-quant.cpp`` of ggml-org/llama.cpp
at commit 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714 (`LLAMA_QUANT`; line numbers below); tensors llama.cpp
never quantizes (1-D norms and biases, the MoE router ``ffn_gate_inp``, learned positions, token types) keep
the type ``convert_hf_to_gguf.py`` gives them, f32. Names: block formats are lower case as ggml names them
(``q4_k``), recipes upper case as llama-quantize names them (``Q4_K_M``), so ``q8_0`` is the block and ``Q8_0``
the file.

`gguf_file_bytes(model, recipe)` enumerates a `TransformerConfig`'s tensors as a GGUF file names them and sums
their bytes plus the file's header (GGUF spec, ``docs/gguf.md`` of ggml-org/ggml at the commit above: 24-byte
header, one info record per tensor, 32-byte alignment) and an assumed tokenizer allowance per vocabulary entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.core.errors import WorkbenchError

GGML_COMMON = "ggml-org/ggml src/ggml-common.h @ d99724f2b141fed9e1a9f402213506c081433465"
GGML_C = "ggml-org/ggml src/ggml.c @ d99724f2b141fed9e1a9f402213506c081433465"
LLAMA_QUANT = "ggml-org/llama.cpp src/llama-quant.cpp @ 007dbbf3fd17eefe9b47fee45f48f7ba5e62b714"
LLAMA_MODEL = "ggml-org/llama.cpp src/models/llama.cpp @ 069be0ae22f391c64e26e8da4c7da0143ede8cf3"
GGUF_SPEC = "ggml-org/ggml docs/gguf.md @ d99724f2b141fed9e1a9f402213506c081433465"
ARITHMETIC = ("int4", "int8", "fp16", "fp32")  # the workbench's arithmetic classes (schemes.common)


@dataclass(frozen=True)
class BlockFormat:
    """One ggml tensor type: `block_weights` weights in the bytes of `parts` (field, bytes), quoted from ggml."""

    name: str
    block_weights: int
    parts: tuple[tuple[str, int], ...]
    code_bits: int  # bits of one element's code inside the dot product
    arithmetic: str  # the class that holds those codes: int4 | int8 | fp16 | fp32
    layout: str  # one line: the struct as ggml declares it
    source: str  # file:line it is quoted from
    for_weights: bool = True  # False: an activation-only intermediate (q8_k)

    def __post_init__(self) -> None:
        if not isinstance(self.block_weights, int) or self.block_weights < 1:
            raise WorkbenchError(f"block_weights of {self.name!r} must be an integer >= 1, got {self.block_weights!r}")
        if not self.parts or any(size < 1 for _, size in self.parts):
            raise WorkbenchError(f"parts of {self.name!r} must list fields of >= 1 byte, got {self.parts!r}")
        if self.arithmetic not in ARITHMETIC:
            raise WorkbenchError(f"arithmetic of {self.name!r} must be one of {', '.join(ARITHMETIC)}, "
                                 f"got {self.arithmetic!r}")

    @property
    def block_bytes(self) -> int:
        """Bytes of one block: the sum of its fields."""
        return sum(size for _, size in self.parts)

    @property
    def bits(self) -> float:
        """Exact bits per weight, scales included (q4_k: 144 B x 8 / 256 = 4.5)."""
        return self.block_bytes * 8 / self.block_weights

    def tensor_bytes(self, n_weights: int) -> int:
        """Bytes of `n_weights` weights stored in whole blocks (each row a multiple of the block)."""
        return -(-n_weights // self.block_weights) * self.block_bytes


def _fmt(name, weights, parts, code_bits, arithmetic, layout, line, file=GGML_COMMON, for_weights=True):
    """A `BlockFormat` quoted from `file` at `line`."""
    return BlockFormat(name, weights, tuple(parts), code_bits, arithmetic, layout, f"{file}:{line}", for_weights)


_H = 2  # sizeof(ggml_half): fp16 scale
_QK_K = 256  # QK_K, ggml-common.h:89
BLOCK_FORMATS: dict[str, BlockFormat] = {f.name: f for f in (
    _fmt("f32", 1, [("float", 4)], 32, "fp32", "[GGML_TYPE_F32] blck_size 1, type_size sizeof(float)", 662, GGML_C),
    _fmt("f16", 1, [("ggml_fp16_t", 2)], 16, "fp16", "[GGML_TYPE_F16] blck_size 1, type_size sizeof(ggml_fp16_t)",
         668, GGML_C),
    # bf16 is a 16-bit float: the workbench's class for it is fp16 (schemes.common.operand_dtype has no bf16)
    _fmt("bf16", 1, [("ggml_bf16_t", 2)], 16, "fp16", "[GGML_TYPE_BF16] blck_size 1, type_size sizeof(ggml_bf16_t)",
         885, GGML_C),
    _fmt("q8_0", 32, [("d", _H), ("qs", 32)], 8, "int8", "block_q8_0: d (fp16) + 32 x int8 = 34 B per 32", 256),
    _fmt("q4_0", 32, [("d", _H), ("qs", 16)], 4, "int4", "block_q4_0: d (fp16) + 16 B nibbles = 18 B per 32", 199),
    _fmt("q4_1", 32, [("d", _H), ("m", _H), ("qs", 16)], 4, "int4",
         "block_q4_1: d, m (2 x fp16) + 16 B nibbles = 20 B per 32", 212),
    _fmt("q5_0", 32, [("d", _H), ("qh", 4), ("qs", 16)], 5, "int8",
         "block_q5_0: d (fp16) + 4 B 5th bits + 16 B nibbles = 22 B per 32", 235),
    _fmt("q5_1", 32, [("d", _H), ("m", _H), ("qh", 4), ("qs", 16)], 5, "int8",
         "block_q5_1: d, m (2 x fp16) + 4 B 5th bits + 16 B nibbles = 24 B per 32", 249),
    _fmt("q2_k", _QK_K, [("scales", 16), ("qs", 64), ("d", _H), ("dmin", _H)], 2, "int4",
         "block_q2_K: 16 B 4-bit scales/mins + 64 B quants + d, dmin (2 x fp16) = 84 B per 256", 309),
    _fmt("q3_k", _QK_K, [("hmask", 32), ("qs", 64), ("scales", 12), ("d", _H)], 3, "int4",
         "block_q3_K: 32 B high bits + 64 B low 2 bits + 12 B 6-bit scales + d (fp16) = 110 B per 256", 321),
    _fmt("q4_k", _QK_K, [("d", _H), ("dmin", _H), ("scales", 12), ("qs", 128)], 4, "int4",
         "block_q4_K: d, dmin (2 x fp16) + 12 B scales + 128 B quants = 144 B per 256", 338),
    _fmt("q5_k", _QK_K, [("d", _H), ("dmin", _H), ("scales", 12), ("qh", 32), ("qs", 128)], 5, "int8",
         "block_q5_K: d, dmin (2 x fp16) + 12 B scales + 32 B high bits + 128 B low 4 bits = 176 B per 256", 356),
    _fmt("q6_k", _QK_K, [("ql", 128), ("qh", 64), ("scales", 16), ("d", _H)], 6, "int8",
         "block_q6_K: 128 B low 4 bits + 64 B high 2 bits + 16 B int8 scales + d (fp16) = 210 B per 256", 368),
    # only an intermediate for activations in k-quant dot products: its bsums make 9.125 bits of 8-bit codes
    _fmt("q8_k", _QK_K, [("d", 4), ("qs", 256), ("bsums", 32)], 8, "int8",
         "block_q8_K: d (float) + 256 x int8 + 16 x int16 sums = 292 B per 256", 376, for_weights=False),
    _fmt("iq4_nl", 32, [("d", _H), ("qs", 16)], 4, "int4",
         "block_iq4_nl: d (fp16) + 16 B non-linear nibbles = 18 B per 32", 452),
    _fmt("iq4_xs", _QK_K, [("d", _H), ("scales_h", 2), ("scales_l", 4), ("qs", 128)], 4, "int4",
         "block_iq4_xs: d (fp16) + 2 B + 4 B 6-bit scales + 128 B non-linear nibbles = 136 B per 256", 460),
    _fmt("mxfp4", 32, [("e", 1), ("qs", 16)], 4, "int4",
         "block_mxfp4: e (E8M0 scale) + 16 B of 4-bit E2M1 = 17 B per 32", 219),
)}
# The workbench's own names for plain element types (no per-block scale), kept beside ggml's blocks.
PLAIN_FORMATS: dict[str, BlockFormat] = {f.name: f for f in (
    BlockFormat("fp32", 1, (("float", 4),), 32, "fp32", "a plain 32-bit float per weight", "IEEE 754 binary32"),
    BlockFormat("fp16", 1, (("half", 2),), 16, "fp16", "a plain 16-bit float per weight", "IEEE 754 binary16"),
    BlockFormat("int8", 1, (("int8", 1),), 8, "int8", "a plain 8-bit integer per weight, no scale", "assumed"),
    BlockFormat("int4", 2, (("2 x int4", 1),), 4, "int4", "a plain 4-bit integer per weight, no scale", "assumed"),
)}


def weight_formats() -> dict[str, float]:
    """Format name -> bits per weight of every format weights may be stored in (plain ones, then ggml's)."""
    return {f.name: f.bits for f in (*PLAIN_FORMATS.values(), *BLOCK_FORMATS.values()) if f.for_weights}


def block_format(name: str) -> BlockFormat:
    """The `BlockFormat` called `name` (ggml's lower-case names, or the plain fp32/fp16/int8/int4)."""
    found = BLOCK_FORMATS.get(name) or PLAIN_FORMATS.get(name) if isinstance(name, str) else None
    if found is None:
        raise WorkbenchError(f"weight format must be one of {', '.join([*PLAIN_FORMATS, *BLOCK_FORMATS])}, "
                             f"got {name!r}")
    return found


def format_bits(name: str) -> float:
    """Bits per weight of a named format, scales included (q4_k -> 4.5, q6_k -> 6.5625, mxfp4 -> 4.25)."""
    return block_format(name).bits


# ---- tensors as a GGUF file names them ------------------------------------------------------------------
# Tensor classes: the name a GGUF file gives each (blk.<layer>.<class>.weight), plus `norm` and `bias` for the
# 1-D tensors and `pooler` for BERT's.
TENSOR_CLASSES = ("token_embd", "position_embd", "token_types", "output", "attn_q", "attn_k", "attn_v", "attn_qkv",
                  "attn_output", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
                  "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "ffn_gate_inp", "pooler", "norm", "bias")
# Kept as converted (f32), never quantized: llama-quant.cpp:293 (1-D), :302 (norms), :308 (ffn_gate_inp),
# :321-322 (position embeddings, token types); convert_hf_to_gguf.py writes all of these as F32.
KEEP_F32 = ("norm", "bias", "ffn_gate_inp", "position_embd", "token_types")


@dataclass(frozen=True)
class Tensor:
    """One tensor of a GGUF file: its class, layer (None outside the blocks) and shape in ggml order (row length
    first; a third dimension counts experts)."""

    name: str
    kind: str
    layer: int | None
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.kind not in TENSOR_CLASSES:
            raise WorkbenchError(f"tensor class must be one of {', '.join(TENSOR_CLASSES)}, got {self.kind!r}")
        if not self.shape or any(not isinstance(n, int) or n < 1 for n in self.shape):
            raise WorkbenchError(f"shape of {self.name} must be integers >= 1, got {self.shape!r}")

    @property
    def params(self) -> int:
        """Weights in the tensor."""
        n = 1
        for size in self.shape:
            n *= size
        return n

    @property
    def row_length(self) -> int:
        """ne[0]: the length of one row, which the block size must divide."""
        return self.shape[0]

    @property
    def is_experts(self) -> bool:
        """A stacked-experts tensor (ne[2] > 1), what MXFP4_MOE stores as mxfp4."""
        return len(self.shape) > 2 and self.shape[2] > 1

    @property
    def quantizable(self) -> bool:
        """Whether llama-quantize may change its type (2-D or 3-D weights, not norms, router or positions)."""
        return len(self.shape) >= 2 and self.kind not in KEEP_F32


def _block_tensors(model, i: int) -> list[Tensor]:
    """Block `i`'s tensors: norms, attention (fused QKV for GPT), FFN (dense, or experts + router + shared)."""
    d, blk, bias = model.d_model, f"blk.{i}.", model.has_bias
    out = [Tensor(f"{blk}attn_norm.weight", "norm", i, (d,))]
    if model.family == "gpt":
        out.append(Tensor(f"{blk}attn_qkv.weight", "attn_qkv", i, (d, model.q_dim + 2 * model.kv_dim)))
    else:
        out += [Tensor(f"{blk}attn_q.weight", "attn_q", i, (d, model.q_dim)),
                Tensor(f"{blk}attn_k.weight", "attn_k", i, (d, model.kv_dim)),
                Tensor(f"{blk}attn_v.weight", "attn_v", i, (d, model.kv_dim))]
    out.append(Tensor(f"{blk}attn_output.weight", "attn_output", i, (model.q_dim, d)))
    out.append(Tensor(f"{blk}ffn_norm.weight", "norm", i, (d,)))
    if model.family != "llama":  # LayerNorm shifts beside the scales
        out += [Tensor(f"{blk}attn_norm.bias", "bias", i, (d,)), Tensor(f"{blk}ffn_norm.bias", "bias", i, (d,))]
    if bias:
        out += [Tensor(f"{blk}attn_qkv.bias", "bias", i, (model.q_dim + 2 * model.kv_dim,)),
                Tensor(f"{blk}attn_output.bias", "bias", i, (d,)),
                Tensor(f"{blk}ffn_up.bias", "bias", i, (model.d_ff,)), Tensor(f"{blk}ffn_down.bias", "bias", i, (d,))]
    return out + _ffn_tensors(model, i)


def _ffn_tensors(model, i: int) -> list[Tensor]:
    """Block `i`'s FFN weights: gate/up/down (dense), or router + stacked experts + shared experts (MoE)."""
    d, blk = model.d_model, f"blk.{i}."
    n_experts = model.n_experts  # 0 on a dense model
    if n_experts and i >= model.n_dense_layers:
        ff, e = model.d_ff, n_experts
        out = [Tensor(f"{blk}ffn_gate_inp.weight", "ffn_gate_inp", i, (d, e)),
               Tensor(f"{blk}ffn_gate_exps.weight", "ffn_gate_exps", i, (d, ff, e)),
               Tensor(f"{blk}ffn_up_exps.weight", "ffn_up_exps", i, (d, ff, e)),
               Tensor(f"{blk}ffn_down_exps.weight", "ffn_down_exps", i, (ff, d, e))]
        shared = model.n_shared_experts * ff  # shared experts stored as one FFN of their total width
        if shared:
            out += [Tensor(f"{blk}ffn_gate_shexp.weight", "ffn_gate_shexp", i, (d, shared)),
                    Tensor(f"{blk}ffn_up_shexp.weight", "ffn_up_shexp", i, (d, shared)),
                    Tensor(f"{blk}ffn_down_shexp.weight", "ffn_down_shexp", i, (shared, d))]
        return out
    ff = model.d_dense_ff
    out = [Tensor(f"{blk}ffn_up.weight", "ffn_up", i, (d, ff)), Tensor(f"{blk}ffn_down.weight", "ffn_down", i, (ff, d))]
    if model.gated_ffn:
        out.insert(0, Tensor(f"{blk}ffn_gate.weight", "ffn_gate", i, (d, ff)))
    return out


def model_tensors(model) -> tuple[Tensor, ...]:
    """Every tensor of a `TransformerConfig` as its GGUF file lists them (llama.cpp's names)."""
    if model.kv_lora_rank:  # MLA hook: its attn_kv_a_mqa / attn_k_b / attn_v_b are not listed yet
        raise WorkbenchError(f"model {model.name!r}: GGUF tensors of multi-head latent attention (kv_lora_rank > 0) "
                             "are not enumerated; allowed: models with kv_lora_rank = 0")
    d = model.d_model
    out = [Tensor("token_embd.weight", "token_embd", None, (d, model.vocab_size))]
    if model.family != "llama":
        out.append(Tensor("position_embd.weight", "position_embd", None, (d, model.max_positions)))
    if model.family == "bert":
        if model.extra.get("token_types", True):
            out.append(Tensor("token_types.weight", "token_types", None, (d, 2)))
        out += [Tensor("token_embd_norm.weight", "norm", None, (d,)), Tensor("token_embd_norm.bias", "bias", None, (d,))]
    for i in range(model.n_layers):
        out += _block_tensors(model, i)
    if model.family == "bert":
        if model.extra.get("pooler", True):
            out += [Tensor("cls.pooler.weight", "pooler", None, (d, d)), Tensor("cls.pooler.bias", "bias", None, (d,))]
        return tuple(out)
    out.append(Tensor("output_norm.weight", "norm", None, (d,)))
    if model.family == "gpt":
        out.append(Tensor("output_norm.bias", "bias", None, (d,)))
    if not model.tie_embeddings:
        out.append(Tensor("output.weight", "output", None, (d, model.vocab_size)))
    return tuple(out)


# ---- recipes: llama.cpp's file types -------------------------------------------------------------------
# File type -> its default block format: llama_ftype_get_default_type, llama-quant.cpp:810-854.
RECIPE_DEFAULTS = {"F32": "f32", "F16": "f16", "BF16": "bf16", "Q8_0": "q8_0", "Q6_K": "q6_k", "Q5_K_M": "q5_k",
                   "Q5_K_S": "q5_k", "Q5_1": "q5_1", "Q5_0": "q5_0", "Q4_K_M": "q4_k", "Q4_K_S": "q4_k",
                   "Q4_1": "q4_1", "Q4_0": "q4_0", "IQ4_NL": "iq4_nl", "IQ4_XS": "iq4_xs", "Q3_K_L": "q3_k",
                   "Q3_K_M": "q3_k", "Q3_K_S": "q3_k", "Q2_K": "q2_k", "MXFP4_MOE": "mxfp4"}
# Where a row does not divide into the format's blocks: tensor_type_fallback, llama-quant.cpp:385-403.
FALLBACK = {"iq4_xs": "iq4_nl", "q2_k": "q4_0", "q3_k": "q4_0", "q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}


@dataclass(frozen=True)
class ModelFacts:
    """What llama.cpp's rules read from a model: layers, query heads per KV head (n_gqa), experts, whether it is
    LLM_TYPE_70B (a llama with 80 layers and grouped KV heads, src/models/llama.cpp:27) and tied embeddings."""

    n_layers: int
    n_gqa: int
    n_experts: int = 0
    is_70b: bool = False
    tied_embeddings: bool = False

    @classmethod
    def of(cls, model) -> ModelFacts:
        """The facts of a `TransformerConfig`."""
        gqa = model.n_heads // model.n_kv_heads
        return cls(model.n_layers, gqa, model.n_experts,  # 0: dense
                   model.family == "llama" and model.n_layers == 80 and gqa > 1, model.tie_embeddings)


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp:430-432: the first and last eighth of the layers and every third one between."""
    eighth = n_layers // 8
    return i_layer < eighth or i_layer >= 7 * n_layers // 8 or (i_layer - eighth) % 3 == 2


@dataclass(frozen=True)
class Recipe:
    """One llama.cpp file type (`name`, e.g. Q4_K_M): the block format each tensor gets. `imatrix`: made with
    an importance matrix (moves IQ4_XS's / IQ4_NL's first ffn_down layers and Q4_0's, llama-quant.cpp:616-628)."""

    name: str
    imatrix: bool = False

    def __post_init__(self) -> None:
        if self.name not in RECIPE_DEFAULTS:
            raise WorkbenchError(f"recipe must be one of {', '.join(RECIPE_DEFAULTS)}, got {self.name!r}")

    @property
    def default(self) -> str:
        """The block format of every tensor no rule moves."""
        return RECIPE_DEFAULTS[self.name]

    def format_for(self, tensor: Tensor, facts: ModelFacts) -> BlockFormat:
        """The block format llama-quantize gives `tensor` (llama_tensor_get_type, llama-quant.cpp:679-721)."""
        if not tensor.quantizable:
            return BLOCK_FORMATS["f32"]
        default = BLOCK_FORMATS[self.default]
        if default.name in ("f32", "f16", "bf16"):  # not a quantized type: no rules, no fallback (:693)
            return default
        chosen = BLOCK_FORMATS[_rule(self, tensor, facts)]
        return _fallback(chosen, tensor)


    def for_class(self, model, kind: str, layer: int | None = None) -> BlockFormat:
        """The block format of `model`'s tensor of class `kind` in block `layer` (None: outside the blocks)."""
        facts = ModelFacts.of(model)
        for tensor in model_tensors(model):
            if tensor.kind == kind and tensor.layer == layer:
                return self.format_for(tensor, facts)
        raise WorkbenchError(f"model {model.name!r} has no {kind} tensor in layer {layer!r}; allowed classes: "
                             f"{', '.join(sorted({t.kind for t in model_tensors(model)}))}, layers 0..{model.n_layers - 1}")


def _fallback(chosen: BlockFormat, tensor: Tensor) -> BlockFormat:
    """tensor_type_fallback (llama-quant.cpp:374-421): a row the blocks do not divide takes a 32-weight format,
    f16 where even that does not divide it."""
    if tensor.row_length % chosen.block_weights == 0:
        return chosen
    if chosen.name not in FALLBACK:
        raise WorkbenchError(f"infeasible: {tensor.name} rows of {tensor.row_length} do not divide into "
                             f"{chosen.name} blocks of {chosen.block_weights} and llama.cpp has no fallback for it")
    backup = BLOCK_FORMATS[FALLBACK[chosen.name]]
    return backup if tensor.row_length % backup.block_weights == 0 else BLOCK_FORMATS["f16"]


_CATEGORIES = {"token_embd": "token_embd", "output": "output", "attn_q": "attn_q", "attn_k": "attn_k",
               "attn_v": "attn_v", "attn_qkv": "attn_v", "attn_output": "attn_output"}


def _category(kind: str) -> str:
    """tensor_get_category (llama-quant.cpp:116-151), with attn_qkv in the attn_v class (category_is_attn_v,
    :154-158, whose branch comes first, so the ATTENTION_QKV branch at :651 is never reached)."""
    if kind in _CATEGORIES:
        return _CATEGORIES[kind]
    for part in ("ffn_up", "ffn_gate", "ffn_down"):  # substring matches: exps and shexp tensors included
        if kind.startswith(part):
            return part
    return "other"


def _rule(recipe: Recipe, tensor: Tensor, facts: ModelFacts) -> str:
    """llama_tensor_get_type_impl (llama-quant.cpp:424-676) for the modelled file types."""
    ftype, default, category = recipe.name, recipe.default, _category(tensor.kind)
    if category == "output" or (facts.tied_embeddings and category == "token_embd"):
        return _output_rule(ftype, default, tensor)
    if ftype == "MXFP4_MOE":  # :474-486: stacked experts mxfp4, every other tensor q8_0
        return "mxfp4" if tensor.is_experts else "q8_0"
    if category == "attn_v":
        return _attn_v_rule(ftype, default, tensor.layer, facts)
    if category == "attn_k":  # :567-572
        return "q8_0" if facts.n_experts == 8 else default
    if category == "ffn_down":
        return _ffn_down_rule(recipe, default, tensor.layer, facts)
    if category == "attn_output":
        return _attn_output_rule(ftype, default, facts)
    return default  # token_embd (:487-503), attn_q, ffn_gate, ffn_up: no rule for these file types


def _output_rule(ftype: str, default: str, tensor: Tensor) -> str:
    """The output matrix (and tied token embeddings), llama-quant.cpp:452-473: q8_0 under MXFP4_MOE or where the
    row does not divide into the default's blocks, else q6_k unless the default is q8_0."""
    if ftype == "MXFP4_MOE" or tensor.row_length % BLOCK_FORMATS[default].block_weights:
        return "q8_0"
    return default if default == "q8_0" else "q6_k"


def _attn_v_rule(ftype: str, default: str, layer: int, facts: ModelFacts) -> str:
    """attn_v (and fused attn_qkv), llama-quant.cpp:529-566; `layer` is i_attention_wv, n_attention_wv the layers."""
    chosen = default
    if ftype == "Q2_K":
        chosen = "q4_k" if facts.n_gqa >= 4 else "q3_k"
    elif ftype == "Q3_K_M":
        chosen = "q5_k" if layer < 2 else "q4_k"
    elif ftype == "Q3_K_L":
        chosen = "q5_k"
    elif ftype in ("IQ4_NL", "IQ4_XS") and facts.n_gqa >= 4:
        chosen = "q5_k"
    elif ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, facts.n_layers):
        chosen = "q6_k"
    elif ftype == "Q4_K_S" and layer < 4:
        chosen = "q5_k"
    if facts.is_70b and chosen in ("q3_k", "q4_k"):  # :555-560
        chosen = "q5_k"
    return "q8_0" if facts.n_experts == 8 else chosen  # :561-565


def _ffn_down_rule(recipe: Recipe, default: str, layer: int, facts: ModelFacts) -> str:
    """ffn_down (dense, ffn_down_exps and ffn_down_shexp alike, by their layer), llama-quant.cpp:586-630."""
    ftype, n = recipe.name, facts.n_layers
    if ftype == "Q2_K":
        return "q3_k"
    if ftype == "Q3_K_M":  # not Falcon: q4_k past the first sixteenth
        return "q5_k" if layer < n // 16 else "q4_k"
    if ftype == "Q3_K_L":
        return "q5_k"
    if ftype == "Q4_K_M":
        return "q6_k" if use_more_bits(layer, n) else default
    if layer < n // 8 and ftype in ("IQ4_NL", "IQ4_XS") and not recipe.imatrix:
        return "q5_k"
    if ftype == "Q5_K_M" and use_more_bits(layer, n):
        return "q6_k"
    if ftype == "Q4_K_S" and layer < n // 8:
        return "q5_k"
    if ftype in ("Q4_0", "Q5_0") and recipe.imatrix and layer < n // 8:
        return "q4_1" if ftype == "Q4_0" else "q5_1"
    return default


def _attn_output_rule(ftype: str, default: str, facts: ModelFacts) -> str:
    """attn_output, llama-quant.cpp:631-649 (not Falcon): q5_k for 8-expert models, else Q2_K / Q3_K_* moves."""
    if facts.n_experts == 8:
        return "q5_k" if ftype in ("Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS") else default
    return {"Q2_K": "q3_k", "Q3_K_M": "q4_k", "Q3_K_L": "q5_k"}.get(ftype, default)


# ---- file bytes ----------------------------------------------------------------------------------------
GGUF_HEADER_BYTES = 24  # magic u32, version u32, tensor_count u64, metadata_kv_count u64: gguf.md:283-296
GGUF_ALIGNMENT = 32  # default general.alignment, gguf.md:384; tensor data and the info block padded to it
# Assumed (kind=assumed): the tokenizer's metadata per vocabulary entry (the token string with its 8-byte
# length, a score and a type, a BPE merge string on average) and the other metadata keys (architecture,
# hyper-parameters, chat template); a 128k vocabulary makes 5 MB of a 5 GB file (0.1 %).
TOKENIZER_BYTES_PER_ENTRY = 40
OTHER_METADATA_BYTES = 16 * 1024


def as_recipe(recipe: Recipe | str) -> Recipe:
    """A `Recipe` from itself or its name (Q4_K_M, ...)."""
    return recipe if isinstance(recipe, Recipe) else Recipe(recipe)


def tensor_formats(model, recipe: Recipe | str) -> dict[str, BlockFormat]:
    """Tensor name -> the block format `recipe` stores it in, for every tensor of `model`."""
    recipe, facts = as_recipe(recipe), ModelFacts.of(model)
    return {t.name: recipe.format_for(t, facts) for t in model_tensors(model)}


def _aligned(n: int) -> int:
    """`n` rounded up to the file's alignment (gguf.md:301-303, align_offset)."""
    return -(-n // GGUF_ALIGNMENT) * GGUF_ALIGNMENT


def _info_bytes(tensor: Tensor) -> int:
    """One gguf_tensor_info_t (gguf.md:305-325): name (u64 length + bytes), n_dims u32, dims u64 each, type u32,
    offset u64."""
    return 8 + len(tensor.name) + 4 + 8 * len(tensor.shape) + 4 + 8


def gguf_file_bytes(model, recipe: Recipe | str) -> int:
    """Bytes of `model`'s GGUF file under `recipe`: each tensor's blocks (padded to the alignment), the header,
    one info record per tensor, and the assumed metadata allowance (tokenizer + keys)."""
    recipe, facts = as_recipe(recipe), ModelFacts.of(model)
    tensors = model_tensors(model)
    metadata = model.vocab_size * TOKENIZER_BYTES_PER_ENTRY + OTHER_METADATA_BYTES
    head = _aligned(GGUF_HEADER_BYTES + metadata + sum(_info_bytes(t) for t in tensors))
    return head + sum(_aligned(recipe.format_for(t, facts).tensor_bytes(t.params)) for t in tensors)


def recipe_bits(model, recipe: Recipe | str) -> float:
    """Average bits per weight of `model`'s tensors under `recipe` (the tensor data only, no header): what a
    workbench weight_bits means for the file (Llama 3.1-8B at Q4_K_M: about 4.9)."""
    recipe, facts = as_recipe(recipe), ModelFacts.of(model)
    tensors = model_tensors(model)
    data = sum(recipe.format_for(t, facts).tensor_bytes(t.params) for t in tensors)
    return 8 * data / sum(t.params for t in tensors)


def weight_format_bits(name: str, model=None) -> float:
    """Bits per weight of a format (q4_k) or, for `model`, a recipe's average (Q4_K_M); unknown names list both."""
    if isinstance(name, str) and name in RECIPE_DEFAULTS and model is not None:
        return recipe_bits(model, name)
    if isinstance(name, str) and name in weight_formats():
        return format_bits(name)
    recipes = f" or a file type {', '.join(RECIPE_DEFAULTS)}" if model is not None else ""
    raise WorkbenchError(f"weight format must be one of {', '.join(weight_formats())}{recipes}, got {name!r}")


def layer_bytes(model, recipe: Recipe | str) -> tuple[int, ...]:
    """Bytes of each block's tensors under `recipe`, layer by layer: Q4_K_M's layers differ (q6_k attn_v and
    ffn_down in a layer use_more_bits picks), so a pipeline stage's share is not n_layers-proportional."""
    recipe, facts = as_recipe(recipe), ModelFacts.of(model)
    out = [0] * model.n_layers
    for t in model_tensors(model):
        if t.layer is not None:
            out[t.layer] += recipe.format_for(t, facts).tensor_bytes(t.params)
    return tuple(out)
