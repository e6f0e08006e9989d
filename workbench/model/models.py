"""Transformer configurations and their derived sizes, bytes and FLOPs.

One frozen `TransformerConfig` covers the three families the five papers use:
  * ``bert``  - encoder, post-LN, GELU FFN, learned positions (BERT, DistilBERT, MobileBERT, MiniLM)
  * ``gpt``   - decoder, pre-LN, GELU FFN, learned positions (GPT-2, OPT)
  * ``llama`` - decoder, pre-RMSNorm, SwiGLU FFN, grouped KV heads, rotary positions (Llama, TinyLlama, Yi)
Counting conventions (stated once, used everywhere): a multiply-add is 2 FLOPs; prompt-mode attention
counts the full S x S score matrix (no causal halving), as the papers' analytical models do.

**Mixtures of experts** (`n_experts` > 0): every layer after the first `n_dense_layers` replaces its FFN by
`n_experts` routed experts of hidden size `d_ff` each (what Hugging Face configs call
``moe_intermediate_size``), `n_active_experts` of which a router picks per token, plus `n_shared_experts`
always-on experts of the same size; the router is a d_model x n_experts matrix (bias-free). The dense first
layers use `d_dense_ff`. So a tensor-parallel split of `d_ff` columns is a split inside every expert, as
distributed-llama and exo's tensor mode do. Parameters and FLOPs are *stored* (every expert: `total_params`)
or *active per token* (`active_params`, `flops_per_token`); a block's figures are the mean over the model's
layers (`block_params`), so layer-by-layer sums stay exact. **Multi-head latent attention** (`kv_lora_rank` >
0, DeepSeek-V2): K and V come from a rank-`kv_lora_rank` latent (plus a shared rotary key of `qk_rope_dim`)
that is all the KV cache stores; `d_head` is the query/key head size and `v_head_dim` the value head size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.core.fields import FieldSpec, TomlKey, declared

Family = Literal["bert", "gpt", "llama"]
FAMILIES = ("bert", "gpt", "llama")
# How a router turns its logits into the k experts' weights (which experts it picks is the same top-k):
# softmax over all experts, top-k, renormalised over the k (Qwen3-MoE norm_topk_prob, Mixtral's top-k then
# softmax is the same); softmax, top-k, not renormalised (OLMoE, DeepSeek-V2-Lite); top-k of the logits, then a
# softmax over the k (gpt-oss).
ROUTERS = ("softmax_topk_norm", "softmax_topk", "topk_softmax")


def _dimension(help: str, key: str, file_high: int, unit: str = "") -> FieldSpec:
    """A model dimension: an integer >= 1, at most `file_high` from a file (a [model] key)."""
    return FieldSpec(help, unit, 1, math.inf, file_high=file_high, kind="integer", toml=(TomlKey(key, 1.0, unit),))


def _count(help: str, key: str, file_high: int) -> FieldSpec:
    """A count that may be 0 (experts, dense layers, latent rank): an integer >= 0 (a [model] key)."""
    return FieldSpec(help, "", 0, math.inf, file_high=file_high, kind="integer", toml=(TomlKey(key, 1.0, ""),))


@dataclass(frozen=True)
class TransformerConfig:
    """Architecture of one Transformer model; invariants are checked on construction."""

    name: str
    family: Family
    n_layers: int = declared(_dimension("layers", "n_layers", 1000))
    d_model: int = declared(_dimension("hidden size", "d_model", 1 << 17))
    n_heads: int = declared(_dimension("attention heads", "n_heads", 4096))
    d_ff: int = declared(_dimension("feed-forward size (a MoE model's: each expert's)", "d_ff", 1 << 19))
    vocab_size: int = declared(_dimension("vocabulary size", "vocab_size", 10_000_000))
    max_positions: int = declared(_dimension("longest sequence", "max_positions", 1 << 21, "tokens"), 2048)
    n_kv_heads: int | None = declared(  # None -> n_heads (multi-head attention)
        _dimension("key/value heads (grouped-query attention)", "n_kv_heads", 4096), None)
    d_head: int | None = declared(_dimension("head size", "d_head", 4096), None)  # None -> d_model // n_heads
    # ---- mixture of experts (0 experts: a dense model) ----
    n_experts: int = declared(_count("routed experts per MoE layer (0: a dense model)", "n_experts", 4096), 0)
    n_active_experts: int = declared(_count("experts the router picks per token (top-k)", "n_active_experts", 4096), 0)
    n_shared_experts: int = declared(_count("always-on experts per MoE layer", "n_shared_experts", 64), 0)
    n_dense_layers: int = declared(_count("dense layers before the MoE layers", "n_dense_layers", 1000), 0)
    d_dense_ff: int | None = declared(  # None -> d_ff
        _dimension("feed-forward size of a MoE model's dense layers", "d_dense_ff", 1 << 19), None)
    router: str = "softmax_topk_norm"
    # ---- multi-head latent attention (0: none) ----
    kv_lora_rank: int = declared(_count("latent KV rank (multi-head latent attention; 0: none)", "kv_lora_rank",
                                        1 << 16), 0)
    qk_rope_dim: int = declared(_count("rotary key size shared across heads (MLA)", "qk_rope_dim", 4096), 0)
    v_head_dim: int | None = declared(_dimension("value head size (MLA; default: d_head)", "v_head_dim", 4096), None)
    tie_embeddings: bool = True
    source: str = ""
    reported_params: float | None = None  # published parameter count, for tests
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        require_choice("family", self.family, FAMILIES)
        for name in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_positions"):
            require_int(name, getattr(self, name), low=1)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        require_int("n_kv_heads", self.n_kv_heads, low=1, high=self.n_heads)
        if self.n_heads % self.n_kv_heads:
            raise WorkbenchError(
                f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads}) in {self.name!r}"
            )
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise WorkbenchError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) "
                    f"unless d_head is given, in {self.name!r}"
                )
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        require_int("d_head", self.d_head, low=1)
        self._check_moe()
        self._check_mla()
        if self.family == "llama" and self.d_head % 2:
            raise WorkbenchError(f"d_head must be even for rotary positions, got {self.d_head} in {self.name!r}")

    def _check_moe(self) -> None:
        """Experts, active experts, shared experts and dense layers agree (a dense model has none of them)."""
        for name in ("n_experts", "n_active_experts", "n_shared_experts", "n_dense_layers"):
            require_int(name, getattr(self, name), low=0)
        require_choice("router", self.router, ROUTERS)
        if self.n_experts and self.family != "llama":
            raise WorkbenchError(f"n_experts needs family 'llama' (SwiGLU experts), got {self.family!r} in {self.name!r}")
        if self.n_experts == 0:
            if self.n_active_experts or self.n_shared_experts or self.n_dense_layers:
                raise WorkbenchError(f"n_active_experts, n_shared_experts and n_dense_layers need n_experts >= 1, "
                                     f"in {self.name!r}")
        elif not 1 <= self.n_active_experts <= self.n_experts:
            raise WorkbenchError(f"n_active_experts must be an integer in 1..{self.n_experts} (n_experts), got "
                                 f"{self.n_active_experts!r} in {self.name!r}")
        if self.n_dense_layers >= max(self.n_layers, 1) and self.n_experts:
            raise WorkbenchError(f"n_dense_layers must be in 0..{self.n_layers - 1} (n_layers - 1), got "
                                 f"{self.n_dense_layers!r} in {self.name!r}")
        if self.d_dense_ff is None:
            object.__setattr__(self, "d_dense_ff", self.d_ff)
        require_int("d_dense_ff", self.d_dense_ff, low=1)

    def _check_mla(self) -> None:
        """A latent KV rank needs a rotary key part below the head size; the value head size defaults to d_head."""
        require_int("kv_lora_rank", self.kv_lora_rank, low=0)
        require_int("qk_rope_dim", self.qk_rope_dim, low=0, high=self.d_head if self.kv_lora_rank else 0)
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.d_head)
        require_int("v_head_dim", self.v_head_dim, low=1)

    # ---- architecture flags -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """A mixture of experts: its MoE layers route each token to a few of many experts."""
        return self.n_experts > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts (all after the dense ones; 0 for a dense model)."""
        return self.n_layers - self.n_dense_layers if self.is_moe else 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention: the KV cache stores a low-rank latent, not per-head K and V."""
        return self.kv_lora_rank > 0

    @property
    def experts_per_token(self) -> int:
        """Experts one token computes in a MoE layer: the routed top-k and the shared ones (1 for dense)."""
        return self.n_active_experts + self.n_shared_experts if self.is_moe else 1

    @property
    def is_decoder(self) -> bool:
        """Causal decoder (GPT/OPT/Llama) rather than bidirectional encoder (BERT)."""
        return self.family != "bert"

    @property
    def gated_ffn(self) -> bool:
        """SwiGLU FFN with gate, up and down projections (Llama) instead of two GELU matrices."""
        return self.family == "llama"

    @property
    def has_bias(self) -> bool:
        """Linear layers carry biases (BERT/GPT/OPT) or not (Llama)."""
        return self.family != "llama"

    @property
    def q_dim(self) -> int:
        """Width of the query projection, n_heads * d_head (the MCU paper's P)."""
        return self.n_heads * self.d_head

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projections, n_kv_heads * d_head."""
        return self.n_kv_heads * self.d_head

    # ---- parameter counts ---------------------------------------------------------------------
    def qkv_weight_params(self) -> int:
        """Weights of the Q, K and V projections (MLA: the query, the KV down-projection with its rotary key,
        and the latent's up-projection to every head's key and value)."""
        if self.is_mla:
            up = self.kv_lora_rank * self.n_heads * (self.d_head - self.qk_rope_dim + self.v_head_dim)
            return self.d_model * self.q_dim + self.d_model * (self.kv_lora_rank + self.qk_rope_dim) + up
        return self.d_model * self.q_dim + 2 * self.d_model * self.kv_dim

    def out_weight_params(self) -> int:
        """Weights of the attention output projection (from every head's value width to d_model)."""
        return self.n_heads * self.v_head_dim * self.d_model

    def attention_params(self) -> int:
        """Parameters of one attention sub-block: Q, K, V, O projections (+ biases; + MLA's latent norm)."""
        if self.is_mla:
            return self.qkv_weight_params() + self.out_weight_params() + self.kv_lora_rank
        weights = self.d_model * self.q_dim + 2 * self.d_model * self.kv_dim + self.q_dim * self.d_model
        bias = (self.q_dim + 2 * self.kv_dim + self.d_model) if self.has_bias else 0
        return weights + bias

    def dense_ffn_params(self, width: int) -> int:
        """Parameters of one dense FFN of hidden size `width` (gate/up/down for SwiGLU; up/down + biases)."""
        if self.gated_ffn:
            return 3 * self.d_model * width
        return 2 * self.d_model * width + width + self.d_model

    def expert_params(self) -> int:
        """Parameters of one expert (a dense FFN of hidden size d_ff; a dense model's FFN)."""
        return self.dense_ffn_params(self.d_ff)

    def router_params(self) -> int:
        """Parameters of one MoE layer's router (d_model x n_experts, no bias); 0 for a dense model."""
        return self.d_model * self.n_experts

    def moe_ffn_params(self) -> int:
        """Stored parameters of one MoE layer's FFN: every routed and shared expert and the router."""
        return (self.n_experts + self.n_shared_experts) * self.expert_params() + self.router_params()

    def active_moe_ffn_params(self) -> int:
        """Parameters one token computes with in a MoE layer's FFN: its k routed experts, the shared, the router."""
        return self.experts_per_token * self.expert_params() + self.router_params()

    def ffn_params(self) -> float:
        """Stored parameters of one FFN sub-block (a MoE model's: the mean over its dense and MoE layers)."""
        if not self.is_moe:
            return self.expert_params()
        dense = self.n_dense_layers * self.dense_ffn_params(self.d_dense_ff)
        return (dense + self.moe_layers * self.moe_ffn_params()) / self.n_layers

    def active_ffn_params(self) -> float:
        """Parameters of one FFN sub-block one token computes with (a MoE model's: the mean over its layers)."""
        if not self.is_moe:
            return self.expert_params()
        dense = self.n_dense_layers * self.dense_ffn_params(self.d_dense_ff)
        return (dense + self.moe_layers * self.active_moe_ffn_params()) / self.n_layers

    def norm_params(self) -> int:
        """Parameters of the two norms in a block (LayerNorm has scale and shift, RMSNorm scale only)."""
        per_norm = self.d_model if self.family == "llama" else 2 * self.d_model
        return 2 * per_norm

    def block_params(self) -> float:
        """Stored parameters of one Transformer block (a MoE model's: the mean over its layers)."""
        return self.attention_params() + self.ffn_params() + self.norm_params()

    def embedding_params(self) -> int:
        """Token (+ learned position, + BERT token-type and LayerNorm) embedding parameters."""
        n = self.vocab_size * self.d_model
        if self.family != "llama":
            n += self.max_positions * self.d_model
        if self.family == "bert":
            n += 2 * self.d_model  # embedding LayerNorm
            if self.extra.get("token_types", True):
                n += 2 * self.d_model
        return n

    def head_params(self) -> int:
        """Final norm and output head (LM head when untied; BERT's pooler)."""
        if self.family == "bert":
            return self.d_model * self.d_model + self.d_model if self.extra.get("pooler", True) else 0
        final_norm = self.d_model if self.family == "llama" else 2 * self.d_model
        lm_head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        return final_norm + lm_head

    def _blocks_params(self, ffn_of_moe_layer: int) -> int:
        """All blocks' parameters, a MoE layer's FFN counted as `ffn_of_moe_layer` (integers, exact)."""
        if not self.is_moe:
            return self.n_layers * (self.attention_params() + self.expert_params() + self.norm_params())
        shared = self.n_layers * (self.attention_params() + self.norm_params())
        return shared + self.n_dense_layers * self.dense_ffn_params(self.d_dense_ff) + \
            self.moe_layers * ffn_of_moe_layer

    def total_params(self) -> int:
        """All parameters of the model (a MoE model's: every expert, what its file stores)."""
        return self.embedding_params() + self._blocks_params(self.moe_ffn_params()) + self.head_params()

    def active_params(self, include_embedding: bool = True) -> int:
        """Parameters one token computes with: the total less the experts the router did not pick (a dense
        model's: all). Without `include_embedding`, less the input embedding (a gather, no arithmetic), the
        convention some model cards count active parameters by (gpt-oss)."""
        n = self.embedding_params() + self._blocks_params(self.active_moe_ffn_params()) + self.head_params()
        return n if include_embedding else n - self.embedding_params()

    # ---- bytes --------------------------------------------------------------------------------
    def block_weight_bytes(self, bits: float = 16) -> float:
        """Bytes of one block's weights at `bits` per parameter."""
        return self.block_params() * bits / 8

    def weight_bytes(self, bits: float = 16) -> float:
        """Bytes of all weights at `bits` per parameter."""
        return self.total_params() * bits / 8

    @property
    def kv_elements_per_token(self) -> int:
        """Elements one token adds to one block's KV cache: K and V of every KV head (MLA: the latent and the
        shared rotary key, all a latent-attention cache stores)."""
        return self.kv_lora_rank + self.qk_rope_dim if self.is_mla else 2 * self.kv_dim

    def kv_cache_bytes_per_block(self, kv_len: int, bits: float = 16) -> float:
        """Bytes of one block's K and V cache for `kv_len` cached tokens."""
        require_int("kv_len", kv_len, low=0)
        if self.is_mla:
            return kv_len * self.kv_elements_per_token * bits / 8
        return 2 * kv_len * self.kv_dim * bits / 8

    def kv_cache_bytes(self, kv_len: int, bits: float = 16) -> float:
        """Bytes of the whole model's KV cache for `kv_len` cached tokens."""
        return self.n_layers * self.kv_cache_bytes_per_block(kv_len, bits)

    def activation_bytes(self, seq_len: int, kv_len: int | None = None, bits: float = 16) -> float:
        """Bytes of one block's largest intermediate tensors for `seq_len` new tokens.

        Sum of block input (S, E), Q/K/V (S, P + 2 Pkv), attention scores (H, S, S_kv) and FFN hidden
        (S, F) [x2 for SwiGLU's gate]; a footprint estimate, not an allocator trace.
        """
        require_int("seq_len", seq_len, low=1)
        kv_len = seq_len if kv_len is None else require_int("kv_len", kv_len, low=1)
        ffn_width = self.d_ff * (2 if self.gated_ffn else 1) * self.experts_per_token
        elements = (
            seq_len * self.d_model
            + seq_len * (self.q_dim + 2 * self.kv_dim)
            + self.n_heads * seq_len * kv_len
            + seq_len * ffn_width
        )
        return elements * bits / 8

    # ---- FLOPs --------------------------------------------------------------------------------
    def attention_matmul_flops(self, seq_len: int) -> float:
        """FLOPs of the Q/K/V/O projections for `seq_len` tokens."""
        proj = self.d_model * self.q_dim + 2 * self.d_model * self.kv_dim + self.q_dim * self.d_model
        if self.is_mla:
            proj = self.qkv_weight_params() + self.out_weight_params()
        return 2.0 * seq_len * proj

    def attention_score_flops(self, seq_len: int, kv_len: int | None = None) -> float:
        """FLOPs of QK^T and softmax(QK^T)V for `seq_len` queries over `kv_len` keys."""
        kv_len = seq_len if kv_len is None else kv_len
        if self.is_mla:  # QK^T over the query/key head size, PV over the value head size
            return 2.0 * seq_len * kv_len * self.n_heads * (self.d_head + self.v_head_dim)
        return 2.0 * 2.0 * seq_len * kv_len * self.q_dim

    def ffn_flops(self, seq_len: int) -> float:
        """FLOPs of the FFN for `seq_len` tokens (a MoE model's: its active experts and router, the mean over
        its layers)."""
        if self.is_moe:
            return 2.0 * seq_len * self.active_ffn_params()
        mats = 3 if self.gated_ffn else 2
        return 2.0 * seq_len * mats * self.d_model * self.d_ff

    def block_flops(self, seq_len: int, kv_len: int | None = None) -> float:
        """FLOPs of one block: prompt mode (kv_len=None -> S) or decode (seq_len=1, kv_len=cache+1)."""
        require_int("seq_len", seq_len, low=1)
        if kv_len is not None:
            require_int("kv_len", kv_len, low=1)
        return self.attention_matmul_flops(seq_len) + self.attention_score_flops(seq_len, kv_len) + self.ffn_flops(seq_len)

    def model_flops(self, seq_len: int, kv_len: int | None = None, include_head: bool = True) -> float:
        """FLOPs of all blocks (+ the LM head for decoders) for `seq_len` tokens."""
        total = self.n_layers * self.block_flops(seq_len, kv_len)
        if include_head and self.is_decoder:
            total += 2.0 * seq_len * self.vocab_size * self.d_model
        return total

    def flops_per_token(self, kv_len: int = 1) -> float:
        """FLOPs to produce one token in autoregressive mode attending to `kv_len` positions."""
        return self.model_flops(1, kv_len)

    def with_changes(self, **changes) -> TransformerConfig:
        """A copy with some fields changed (re-validated), e.g. more heads for a scaled-up variant."""
        return replace(self, **changes)


# ---- registry ---------------------------------------------------------------------------------
def _bert(name, layers, d, heads, ff, source, vocab=30522, positions=512, params=None, **kw):
    return TransformerConfig(name, "bert", layers, d, heads, ff, vocab, positions, source=source,
                             reported_params=params, **kw)


def _gpt(name, layers, d, heads, ff, vocab, positions, source, params=None, **kw):
    return TransformerConfig(name, "gpt", layers, d, heads, ff, vocab, positions, source=source,
                             reported_params=params, **kw)


def _llama(name, layers, d, heads, kv, ff, vocab, source, params=None, positions=4096, tie=False, **kw):
    return TransformerConfig(name, "llama", layers, d, heads, ff, vocab, positions, n_kv_heads=kv,
                             tie_embeddings=tie, source=source, reported_params=params, **kw)


def _moe(name, layers, d, heads, kv, d_expert, vocab, experts, active, source, params, active_params, **kw):
    """A SwiGLU mixture of experts (untied embeddings unless `tie`); `params` / `active_params` published."""
    extra = {"reported_active_params": active_params, **kw.pop("extra", {})}
    return TransformerConfig(name, "llama", layers, d, heads, d_expert, vocab, kw.pop("positions", 32768),
                             n_kv_heads=kv, tie_embeddings=kw.pop("tie", False), source=source,
                             reported_params=params, n_experts=experts, n_active_experts=active, extra=extra, **kw)


# Where the dense models' configs and sizes were found (repository file @ commit).
_LLAMA32_1B = "MatthewGoldsberry/LLM-Projects Llama-3.2-1B/config.json @ bf1733705e944f312bf5564d13932a9b6de21606"
_LLM_PROF = "citsjtu2020/LLM-Prof sglang/Model_Config.md @ 8434c8d19c396b2f95d92a67845a7c0a0e0dd512"
_PADDLE_CARDS = "ZHUI/paddlenlp_model_readme @ 40a7101e89dcf9a0dedb0e0d48c8c357fcc95996"
_CARD_L32 = f"(copy: {_PADDLE_CARDS} meta-llama/Llama-3.2-1B/index.md, Params column)"
_KERAS_QWEN3 = "keras-team/keras-hub keras_hub/src/models/qwen3/qwen3_presets.py @ 1df65dab96fb417c6df011c25802017109e96c66"


def _card_qwen25(size: str) -> str:
    """Where a Qwen2.5 model card's 'Number of Parameters' line was read."""
    return f"(copy: {_PADDLE_CARDS} Qwen/Qwen2.5-{size}/index.md)"


_MODELS: tuple[TransformerConfig, ...] = (
    # MCU paper (Bochem et al.), Sec. V-A: E=512, intermediate 2048, 8 layers, 8 heads; S=128/16.
    _llama("TinyLlama-42M", 8, 512, 8, 8, 2048, 32000,
           "mcu_siracusa Sec. V-A (E=512, FFN 2048, 8 layers, 8 heads; tied embeddings assumed). "
           "The paper's stated dims give ~50M parameters, not 42M; the paper's dims are used.",
           positions=1024, tie=True),
    _llama("TinyLlama-42M-64h", 8, 512, 64, 64, 2048, 32000,
           "mcu_siracusa Sec. V-C: heads 8 -> 64, all other parameters unchanged (so d_head = 512/64 = 8)",
           positions=1024, tie=True),
    _bert("MobileBERT", 24, 512, 4, 512,
          "mcu_siracusa Sec. V-A: embedding dim and intermediate size 512, 4 heads, S=268 "
          "(the paper's simplified description of MobileBERT, not its bottleneck structure)"),
    _bert("DistilBERT", 6, 768, 12, 3072, "Sanh et al. 2019 (66.4M: no token types, no pooler); Galaxy Table IV",
          params=66.36e6, extra={"token_types": False, "pooler": False}),
    _bert("BERT-base", 12, 768, 12, 3072, "Devlin et al. 2019 (110M)", params=110e6),
    _bert("DynaBERT-12x12", 12, 768, 12, 3072, "Hou et al. 2020, width/depth 1.0 = BERT-base; STI Sec. 6",
          params=110e6),
    _bert("BERT-L", 24, 1024, 16, 4096, "Devlin et al. 2019 (BERT-large, 335M); Galaxy Table IV",
          params=335e6),
    _bert("MiniLM-L6-H384", 6, 384, 12, 1536,
          "sentence-transformers/all-MiniLM-L6-v2 (config.json: 6 layers, 384 hidden, 12 heads, 1536 FFN)",
          params=22.7e6),
    _gpt("GPT2-L", 36, 1280, 20, 5120, 50257, 1024, "Radford et al. 2019 (GPT-2 large, 774M); Galaxy Table IV",
         params=774e6),
    _gpt("OPT-L", 24, 2048, 16, 8192, 50272, 2048,
         "Zhang et al. 2022, OPT-1.3B; 16 heads as Galaxy Table IV lists them (the released model has 32; "
         "the head count does not change parameters or FLOPs)", params=1.3158e9),
    _gpt("OPT-XL", 32, 2560, 32, 10240, 50272, 2048, "Zhang et al. 2022, OPT-2.7B (2.65B); Galaxy Table IV",
         params=2.6516e9),
    _llama("Llama 2-3B", 26, 3200, 32, 32, 8640, 32000,
           "OpenLLaMA-3B (openlm-research/open_llama_3b_v2 config), the 3B Llama-2-architecture model "
           "TPI-LLM evaluates", params=3.43e9, positions=2048),
    _llama("Llama 2-7B", 32, 4096, 32, 32, 11008, 32000, "Touvron et al. 2023 (Llama 2, 6.74B)", params=6.74e9),
    _llama("Llama 2-13B", 40, 5120, 40, 40, 13824, 32000, "Touvron et al. 2023 (Llama 2, 13.0B)", params=13.0e9),
    _llama("Llama 2-70B", 80, 8192, 64, 8, 28672, 32000, "Touvron et al. 2023 (Llama 2, 69.0B, GQA 8 KV heads)",
           params=69.0e9),
    _llama("Llama 3.1-8B", 32, 4096, 32, 8, 14336, 128256, "Meta 2024 (Llama 3.1, 8.03B)", params=8.03e9,
           positions=131072),
    _llama("Llama 3.1-70B", 80, 8192, 64, 8, 28672, 128256, "Meta 2024 (Llama 3.1, 70.6B)", params=70.6e9,
           positions=131072),
    _llama("Yi-34B", 60, 7168, 56, 8, 20480, 64000, "01.AI 2023 (Yi-34B, 34.4B)", params=34.4e9),
    # ---- dense models people run on boards: each from its config.json as published on Hugging Face, found copied
    # verbatim in the public repository + file cited (the HF repositories themselves are not in the searchable
    # index); published sizes from the model cards cited. Costed as family llama (pre-RMSNorm, SwiGLU, GQA, rotary):
    # Qwen2's Q/K/V biases (q_dim + 2 kv_dim per layer, under 0.01 %) and Qwen3's Q/K RMSNorms (2 d_head per
    # layer) are not counted.
    _llama("Llama 3.2-1B", 16, 2048, 32, 8, 8192, 128256,
           f"meta-llama/Llama-3.2-1B config.json (copy: {_LLAMA32_1B}; 16 layers, hidden 2048, 32 heads x 64, "
           f"8 KV heads, intermediate 8192, vocab 128256, tied, 131072 positions); model card {_CARD_L32}: 1.23B",
           params=1.23e9, positions=131072, tie=True),
    _llama("Llama 3.2-3B", 28, 3072, 24, 8, 8192, 128256,
           f"meta-llama/Llama-3.2-3B config.json (copy: {_LLM_PROF}, 'Llama-3.2-3B'; 28 layers, hidden 3072, 24 heads "
           f"x 128, 8 KV heads, intermediate 8192, vocab 128256, tied, 131072 positions); model card {_CARD_L32}: "
           "3.21B", params=3.21e9, positions=131072, tie=True),
    _llama("Qwen2.5-0.5B", 24, 896, 14, 2, 4864, 151936,
           "Qwen/Qwen2.5-0.5B-Instruct config.json (copy: infinityarpan/qwen-25-api "
           "models/Qwen2.5-0.5B-Instruct/config.json @ 88ec35fc849f376d0bb2c797f2579874e4d076ea; 24 layers, hidden "
           "896, 14 heads, 2 KV heads, intermediate 4864, vocab 151936, tied, 32768 positions, use_sliding_window "
           f"false; the base model shares the architecture); model card {_card_qwen25('0.5B')}: 0.49B",
           params=0.49e9, positions=32768, tie=True),
    _llama("Qwen2.5-3B", 36, 2048, 16, 2, 11008, 151936,
           f"Qwen/Qwen2.5-3B config.json (copy: {_LLM_PROF}, 'Qwen2.5-3B'; 36 layers, hidden 2048, 16 heads, 2 KV "
           "heads, intermediate 11008, vocab 151936, tied, 32768 positions, use_sliding_window false); model card "
           f"{_card_qwen25('3B')}: 3.09B", params=3.09e9, positions=32768, tie=True),
    _llama("Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064,
           f"Qwen/Qwen2.5-7B config.json (copy: {_LLM_PROF}, 'Qwen2.5-7B'; 28 layers, hidden 3584, 28 heads, 4 KV "
           "heads, intermediate 18944, vocab 152064, untied, 131072 positions, use_sliding_window false); model card "
           f"{_card_qwen25('7B')}: 7.61B", params=7.61e9, positions=131072),
    _llama("Qwen3-1.7B", 28, 2048, 16, 8, 6144, 151936,
           "Qwen/Qwen3-1.7B config.json (copy: mephisto1484/Neko-LoRA-Build-Your-AI-Catgirl Qwen3-1.7B/config.json @ "
           "1d5d0234975c08fb04966e5c0058add27f1ae315; 28 layers, hidden 2048, 16 heads x 128, 8 KV heads, "
           f"intermediate 6144, vocab 151936, tied, 40960 positions, every layer full attention); {_KERAS_QWEN3} "
           "qwen3_1.7b_en: 1,720,574,976", params=1720574976, positions=40960, tie=True, d_head=128),
    _llama("Qwen3-4B", 36, 2560, 32, 8, 9728, 151936,
           f"Qwen/Qwen3-4B config.json (copy: {_LLM_PROF}, 'Qwen3-4B'; 36 layers, hidden 2560, 32 heads x 128, 8 KV "
           f"heads, intermediate 9728, vocab 151936, tied, 40960 positions); {_KERAS_QWEN3} qwen3_4b_en: "
           "4,022,468,096", params=4022468096, positions=40960, tie=True, d_head=128),
    _llama("Qwen3-8B", 36, 4096, 32, 8, 12288, 151936,
           f"Qwen/Qwen3-8B config.json (copy: {_LLM_PROF}, 'Qwen3-8B'; 36 layers, hidden 4096, 32 heads x 128, 8 KV "
           f"heads, intermediate 12288, vocab 151936, untied, 40960 positions); {_KERAS_QWEN3} qwen3_8b_en: "
           "8,190,735,360", params=8190735360, positions=40960, d_head=128),
    _llama("Phi-3-mini-4k", 32, 3072, 32, 32, 8192, 32064,
           "microsoft/Phi-3-mini-4k-instruct config.json (copy: NVIDIA/TensorRT-LLM "
           "tests/unittest/_torch/modeling/test_modeling_phi3.py @ 43b18bdf762a7df3f2c0d2611c7ad87e57802310, "
           "PHI3_MINI_4K_CONFIG; 32 layers, hidden 3072, 32 heads, 32 KV heads, intermediate 8192, vocab 32064, "
           "untied; fused qkv_proj and gate_up_proj hold the same weights as separate ones). Its sliding_window 2047 "
           "is costed by capping max_positions at 2047 (of max_position_embeddings 4096): within the window sliding "
           "attention is full attention, so the costing is exact there (modelfile.SLIDING_WINDOW_RULE); model card "
           "(asgaardlab/model-card-reorganization verified_model_cards/microsoft@Phi-3-mini-128k-instruct/"
           "2_original_model_card.md @ 3a0a6702b42ac2a960774259f4573059561b8dd8, the Mini's 4K and 128K variants): "
           "3.8B", params=3.8e9, positions=2047),
    # ---- mixtures of experts (config.json of each Hugging Face repository; published totals in their cards) ----
    _moe("Qwen3-30B-A3B", 48, 2048, 32, 4, 768, 151936, 128, 8,
         "Qwen/Qwen3-30B-A3B config.json (48 layers, hidden 2048, 32 heads x 128, 4 KV heads, 128 experts of 768, "
         "top-8, norm_topk_prob); model card: 30.5B total, 3.3B activated", 30.5e9, 3.3e9, d_head=128,
         positions=40960),
    _moe("Qwen3-235B-A22B", 94, 4096, 64, 4, 1536, 151936, 128, 8,
         "Qwen/Qwen3-235B-A22B config.json (94 layers, hidden 4096, 64 heads x 128, 4 KV heads, 128 experts of "
         "1536, top-8); model card: 235B total, 22B activated", 235e9, 22e9, d_head=128, positions=40960),
    _moe("Mixtral-8x7B", 32, 4096, 32, 8, 14336, 32000, 8, 2,
         "mistralai/Mixtral-8x7B-v0.1 config.json (32 layers, hidden 4096, 8 KV heads, 8 experts of 14336, top-2); "
         "Jiang et al. 2024 (arXiv 2401.04088) Sec. 2: 46.7B total, 12.9B active", 46.7e9, 12.9e9),
    _moe("OLMoE-1B-7B", 16, 2048, 16, 16, 1024, 50304, 64, 8,
         "allenai/OLMoE-1B-7B-0924 config.json (16 layers, hidden 2048, 16 heads, 64 experts of 1024, top-8, "
         "no renormalisation; QK-norm, 2 x 2048 per layer, not counted); Muennighoff et al. 2024 (arXiv 2409.02060): "
         "6.9B total, 1.3B active", 6.9e9, 1.3e9, router="softmax_topk", positions=4096),
    _moe("DeepSeek-V2-Lite", 27, 2048, 16, 16, 1408, 102400, 64, 6,
         "deepseek-ai/DeepSeek-V2-Lite config.json (27 layers, hidden 2048, 16 heads, MLA: kv_lora_rank 512, "
         "qk 128 + rope 64, v 128; 64 routed experts of 1408, top-6, 2 shared; first layer dense of 10944); "
         "DeepSeek-AI 2024 (arXiv 2405.04434) App. B: 15.7B total, 2.4B activated", 15.7e9, 2.4e9,
         d_head=192, n_shared_experts=2, n_dense_layers=1, d_dense_ff=10944, router="softmax_topk",
         kv_lora_rank=512, qk_rope_dim=64, v_head_dim=128, extra={"active_counts_embedding": False}),
    _moe("gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 32, 4,
         "openai/gpt-oss-20b config.json (24 layers, hidden 2880, 64 heads x 64, 8 KV heads, 32 experts of 2880, "
         "top-4, softmax over the top-4; attention and expert biases and sinks, under 0.1 %, not counted); "
         "OpenAI gpt-oss model card (arXiv 2508.10925) Table 1: 20.91B total, 3.61B active (without the "
         "input embedding)", 20.91e9, 3.61e9, d_head=64, router="topk_softmax", positions=131072,
         extra={"active_counts_embedding": False}),
)

MODELS: dict[str, TransformerConfig] = {m.name: m for m in _MODELS}


def model_names() -> list[str]:
    """Names of every registered model, in registry order."""
    return list(MODELS)


def model_key(name: str) -> str:
    """A name folded for lookup: case, spaces, dashes, underscores and dots ignored ('llama-2 7b' = 'Llama 2-7B')."""
    return "".join(ch for ch in name.lower() if ch.isalnum())


# Other names people use for registered models (folded by `model_key` like the names themselves).
ALIASES = {"llama27b": "Llama 2-7B", "llama213b": "Llama 2-13B", "llama270b": "Llama 2-70B", "llama23b": "Llama 2-3B",
           "llama38b": "Llama 3.1-8B", "llama318b": "Llama 3.1-8B", "llama370b": "Llama 3.1-70B",
           "llama3170b": "Llama 3.1-70B", "yi34b": "Yi-34B", "bertlarge": "BERT-L", "bertl": "BERT-L",
           "gpt2large": "GPT2-L", "opt13b": "OPT-L", "opt27b": "OPT-XL",
           "minilm": "MiniLM-L6-H384", "allminilml6v2": "MiniLM-L6-H384", "tinyllama": "TinyLlama-42M",
           "bertbase": "BERT-base", "qwen330b": "Qwen3-30B-A3B", "qwen3235b": "Qwen3-235B-A22B",
           "mixtral8x7b": "Mixtral-8x7B", "mixtral": "Mixtral-8x7B", "olmoe": "OLMoE-1B-7B", "olmoe1b7b0924": "OLMoE-1B-7B",
           "deepseekv2lite": "DeepSeek-V2-Lite", "gptoss20b": "gpt-oss-20b",
           "llama321b": "Llama 3.2-1B", "llama323b": "Llama 3.2-3B", "qwen2505b": "Qwen2.5-0.5B", "qwen2505binstruct": "Qwen2.5-0.5B",
           "qwen253b": "Qwen2.5-3B", "qwen257b": "Qwen2.5-7B", "qwen317b": "Qwen3-1.7B", "qwen34b": "Qwen3-4B",
           "qwen38b": "Qwen3-8B", "phi3mini": "Phi-3-mini-4k", "phi3mini4kinstruct": "Phi-3-mini-4k"}


def find_model(name: str) -> TransformerConfig | None:
    """The registered model a name (any case and punctuation) or alias denotes, or None."""
    key = model_key(name)
    by_key = {model_key(n): m for n, m in MODELS.items()}
    if key in by_key:
        return by_key[key]
    return MODELS.get(ALIASES.get(key, ""))


def get_model(name: str | TransformerConfig) -> TransformerConfig:
    """Look a model up by name, any case, or alias (a config passes through); unknown names list the registry."""
    if isinstance(name, TransformerConfig):
        return name
    if name in MODELS:
        return MODELS[name]
    found = find_model(name) if isinstance(name, str) else None
    if found is None:
        raise WorkbenchError(f"unknown model {name!r}; registered models: {', '.join(MODELS)} "
                             "(any case; aliases such as 'Llama 3 8B' or 'bert-large')")
    return found


def tiny_config(family: Family = "llama", **changes) -> TransformerConfig:
    """A small config of `family` for fast kernel tests (8 heads so meshes of 1/2/4/8 divide it)."""
    base = dict(name=f"tiny-{family}", family=family, n_layers=2, d_model=64, n_heads=8, d_ff=128,
                vocab_size=97, max_positions=64, source="test config")
    if family == "llama":
        base.update(n_kv_heads=8, tie_embeddings=False)
    base.update(changes)
    return TransformerConfig(**base)
