"""Monolithic pure-JAX reference forward passes for the three families (BERT, GPT/OPT, Llama).

Every partitioned kernel in `workbench.kernels` is checked against these. One sequence at a time
(edge inference is batch 1): activations are (S, E); per-head tensors are (S, H, D).
The building blocks (`attention_core`, `ffn`, norms, `rotary`) are public so partitioned kernels
apply exactly the same math to their slices.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.model.models import TransformerConfig

Params = dict[str, Any]
LN_EPS = 1e-5
ROPE_THETA = 10000.0


# ---- elementary ops ---------------------------------------------------------------------------
def layer_norm(x_se, gamma_e, beta_e, eps: float = LN_EPS):
    """LayerNorm over the last axis."""
    mean = x_se.mean(-1, keepdims=True)
    var = ((x_se - mean) ** 2).mean(-1, keepdims=True)
    return (x_se - mean) * jax.lax.rsqrt(var + eps) * gamma_e + beta_e


def rms_norm(x_se, gamma_e, eps: float = LN_EPS):
    """RMSNorm over the last axis (Llama)."""
    return x_se * jax.lax.rsqrt((x_se**2).mean(-1, keepdims=True) + eps) * gamma_e


def gelu(x, approximate: bool = True):
    """GELU, tanh approximation by default (as GPT-2 and most BERT ports use); exact erf when False."""
    return jax.nn.gelu(x, approximate=approximate)


def norm_eps(cfg: TransformerConfig) -> float:
    """LayerNorm epsilon: `cfg.extra["ln_eps"]` when a real checkpoint needs it (MiniLM: 1e-12), else LN_EPS."""
    return float(cfg.extra.get("ln_eps", LN_EPS))


def gelu_is_approximate(cfg: TransformerConfig) -> bool:
    """tanh GELU unless `cfg.extra["gelu"] == "erf"` (real BERT checkpoints use the exact erf form)."""
    return cfg.extra.get("gelu", "tanh") != "erf"


def rotary(x_shd, positions_s):
    """Rotary position embedding (rotate-half convention) on (S, H, D) at integer `positions_s`."""
    d = x_shd.shape[-1]
    inv_freq_h = 1.0 / (ROPE_THETA ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))  # (D/2,)
    angles_sd = positions_s.astype(jnp.float32)[:, None] * inv_freq_h[None, :]  # (S, D/2)
    cos = jnp.cos(jnp.concatenate([angles_sd, angles_sd], -1))[:, None, :]  # (S, 1, D)
    sin = jnp.sin(jnp.concatenate([angles_sd, angles_sd], -1))[:, None, :]
    x1, x2 = x_shd[..., : d // 2], x_shd[..., d // 2 :]
    rotated = jnp.concatenate([-x2, x1], -1)
    return (x_shd * cos + rotated * sin).astype(x_shd.dtype)


def attention_core(q_shd, k_thd, v_thd, q_pos_s, k_pos_t, causal: bool, k_valid_t=None):
    """softmax(Q K^T / sqrt(D)) V per head; K/V heads are repeated for grouped-query attention.

    q_shd (S, H, D); k_thd, v_thd (T, Hkv, D); positions give the causal mask; `k_valid_t` masks
    unused cache slots. Returns (S, H, D).
    """
    n_heads, n_kv = q_shd.shape[1], k_thd.shape[1]
    if n_heads != n_kv:
        k_thd = jnp.repeat(k_thd, n_heads // n_kv, axis=1)
        v_thd = jnp.repeat(v_thd, n_heads // n_kv, axis=1)
    scores_hst = jnp.einsum("shd,thd->hst", q_shd, k_thd)
    scores_hst = scores_hst / jnp.sqrt(jnp.asarray(q_shd.shape[-1], scores_hst.dtype))  # keeps bf16 in bf16
    mask_st = jnp.ones((q_shd.shape[0], k_thd.shape[0]), dtype=bool)
    if causal:
        mask_st = mask_st & (k_pos_t[None, :] <= q_pos_s[:, None])
    if k_valid_t is not None:
        mask_st = mask_st & k_valid_t[None, :]
    scores_hst = jnp.where(mask_st[None], scores_hst, -1e30)
    probs_hst = jax.nn.softmax(scores_hst.astype(jnp.float32), axis=-1).astype(v_thd.dtype)  # fp32 softmax
    return jnp.einsum("hst,thd->shd", probs_hst, v_thd)


def ffn(cfg: TransformerConfig, p: Params, x_se):
    """The block's FFN on (S, E): SwiGLU for Llama, GELU MLP with biases otherwise. Works on slices too."""
    if cfg.gated_ffn:
        return (jax.nn.silu(x_se @ p["w_gate"]) * (x_se @ p["w_up"])) @ p["w_down"]
    return gelu(x_se @ p["w1"] + p["b1"], gelu_is_approximate(cfg)) @ p["w2"] + p["b2"]


def qkv_project(cfg: TransformerConfig, p: Params, x_se, positions_s):
    """Project (S, E) to q (S, H, D), k and v (S, Hkv, D) with whatever heads `p` holds; rotary for Llama."""
    d = cfg.d_head
    q = x_se @ p["wq"]
    k = x_se @ p["wk"]
    v = x_se @ p["wv"]
    if cfg.has_bias:
        q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]
    s = x_se.shape[0]
    q_shd, k_shd, v_shd = q.reshape(s, -1, d), k.reshape(s, -1, d), v.reshape(s, -1, d)
    if cfg.family == "llama":
        q_shd, k_shd = rotary(q_shd, positions_s), rotary(k_shd, positions_s)
    return q_shd, k_shd, v_shd


def _decoder_norm(cfg: TransformerConfig, p: Params, x_se, rms_key: str, ln_keys: tuple[str, str]):
    """The family's pre-norm of a decoder from `p`'s named weights: RMSNorm (Llama), LayerNorm (GPT),
    identity (post-LN BERT, which has neither)."""
    if cfg.family == "llama":
        return rms_norm(x_se, p[rms_key])
    if cfg.family == "gpt":
        return layer_norm(x_se, p[ln_keys[0]], p[ln_keys[1]], norm_eps(cfg))
    return x_se


def pre_attention_norm(cfg: TransformerConfig, p: Params, x_se):
    """The norm applied before attention (identity for post-LN BERT)."""
    return _decoder_norm(cfg, p, x_se, "attn_norm", ("ln1_g", "ln1_b"))


# ---- one block --------------------------------------------------------------------------------
def block_forward(cfg: TransformerConfig, p: Params, x_se, positions_s, cache: Params | None = None):
    """One Transformer block on (S, E) -> ((S, E), new cache).

    `cache` (decoders) holds k, v of shape (T_max, Hkv, D) and `length` (tokens already cached);
    new K/V are written at `length` and attention covers every valid slot.
    """
    h_se = pre_attention_norm(cfg, p, x_se)
    q_shd, k_shd, v_shd = qkv_project(cfg, p, h_se, positions_s)
    new_cache = None
    if cache is not None:
        start = cache["length"]
        k_all = jax.lax.dynamic_update_slice(cache["k"], k_shd, (start, 0, 0))
        v_all = jax.lax.dynamic_update_slice(cache["v"], v_shd, (start, 0, 0))
        t = k_all.shape[0]
        k_pos_t = jnp.arange(t)
        valid_t = k_pos_t < start + x_se.shape[0]
        attn_shd = attention_core(q_shd, k_all, v_all, positions_s, k_pos_t, cfg.is_decoder, valid_t)
        new_cache = {"k": k_all, "v": v_all, "length": start + x_se.shape[0]}
    else:
        attn_shd = attention_core(q_shd, k_shd, v_shd, positions_s, positions_s, cfg.is_decoder)
    attn_se = attn_shd.reshape(x_se.shape[0], -1) @ p["wo"]
    if cfg.has_bias:
        attn_se = attn_se + p["bo"]
    if cfg.family == "bert":  # post-LN
        x_se = layer_norm(x_se + attn_se, p["ln1_g"], p["ln1_b"], norm_eps(cfg))
        return layer_norm(x_se + ffn(cfg, p, x_se), p["ln2_g"], p["ln2_b"], norm_eps(cfg)), new_cache
    x_se = x_se + attn_se
    if cfg.family == "llama":
        h_se = rms_norm(x_se, p["ffn_norm"])
    else:
        h_se = layer_norm(x_se, p["ln2_g"], p["ln2_b"], norm_eps(cfg))
    return x_se + ffn(cfg, p, h_se), new_cache


# ---- parameters -------------------------------------------------------------------------------
def init_block_params(cfg: TransformerConfig, key, dtype=jnp.float32) -> Params:
    """Random weights for one block (normal, std 0.02 like GPT-2; norms at 1, biases small)."""
    e, f, pq, pkv = cfg.d_model, cfg.d_ff, cfg.q_dim, cfg.kv_dim
    ks = iter(jax.random.split(key, 16))

    def w(*shape, std=0.02):
        return (std * jax.random.normal(next(ks), shape)).astype(dtype)

    p: Params = {"wq": w(e, pq), "wk": w(e, pkv), "wv": w(e, pkv), "wo": w(pq, e)}
    if cfg.has_bias:
        p.update(bq=w(pq), bk=w(pkv), bv=w(pkv), bo=w(e))
    if cfg.gated_ffn:
        p.update(w_gate=w(e, f), w_up=w(e, f), w_down=w(f, e))
        p.update(attn_norm=(1 + w(e, std=0.1)), ffn_norm=(1 + w(e, std=0.1)))
    else:
        p.update(w1=w(e, f), b1=w(f), w2=w(f, e), b2=w(e))
        p.update(ln1_g=1 + w(e, std=0.1), ln1_b=w(e), ln2_g=1 + w(e, std=0.1), ln2_b=w(e))
    return p


def init_params(cfg: TransformerConfig, seed: int, dtype=jnp.float32) -> Params:
    """Random weights for the whole model from an explicit `seed` (no downloads)."""
    require_int("seed", seed, low=0)
    key_embed, key_pos, key_head, key_blocks = jax.random.split(jax.random.PRNGKey(seed), 4)
    e = cfg.d_model
    params: Params = {"embed": (0.02 * jax.random.normal(key_embed, (cfg.vocab_size, e))).astype(dtype)}
    if cfg.family != "llama":
        params["pos"] = (0.02 * jax.random.normal(key_pos, (cfg.max_positions, e))).astype(dtype)
    if cfg.family == "bert":
        params["emb_ln_g"], params["emb_ln_b"] = jnp.ones(e, dtype), jnp.zeros(e, dtype)
    else:
        params["final_norm_g"] = jnp.ones(e, dtype)
        if cfg.family == "gpt":
            params["final_norm_b"] = jnp.zeros(e, dtype)
        if not cfg.tie_embeddings:
            params["lm_head"] = (0.02 * jax.random.normal(key_head, (e, cfg.vocab_size))).astype(dtype)
    params["blocks"] = [init_block_params(cfg, k, dtype) for k in jax.random.split(key_blocks, cfg.n_layers)]
    return params


# ---- whole model ------------------------------------------------------------------------------
def embed(cfg: TransformerConfig, params: Params, tokens_s, positions_s):
    """Token (+ position) embedding -> (S, E)."""
    x_se = params["embed"][tokens_s]
    if cfg.family != "llama":
        x_se = x_se + params["pos"][positions_s]
    if cfg.family == "bert":
        x_se = layer_norm(x_se, params["emb_ln_g"], params["emb_ln_b"], norm_eps(cfg))
    return x_se


def final_norm(cfg: TransformerConfig, params: Params, x_se):
    """Final norm of decoders (identity for BERT)."""
    return _decoder_norm(cfg, params, x_se, "final_norm_g", ("final_norm_g", "final_norm_b"))


def lm_logits(cfg: TransformerConfig, params: Params, h_se):
    """Decoder output head: (S, E) -> (S, V)."""
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    return h_se @ head


def _check_tokens(cfg: TransformerConfig, tokens) -> None:
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.size == 0:
        raise WorkbenchError(f"tokens must be a non-empty 1-D sequence, got shape {tokens.shape}")
    if tokens.size > cfg.max_positions:
        raise WorkbenchError(f"sequence length must be <= max_positions ({cfg.max_positions}), got {tokens.size}")


def forward(cfg: TransformerConfig, params: Params, tokens_s):
    """Full-sequence forward: hidden states (S, E) for BERT, logits (S, V) for decoders."""
    _check_tokens(cfg, tokens_s)
    tokens_s = jnp.asarray(tokens_s)
    positions_s = jnp.arange(tokens_s.shape[0])
    x_se = embed(cfg, params, tokens_s, positions_s)
    for p in params["blocks"]:
        x_se, _ = block_forward(cfg, p, x_se, positions_s)
    if cfg.family == "bert":
        return x_se
    return lm_logits(cfg, params, final_norm(cfg, params, x_se))


def empty_cache(cfg: TransformerConfig, max_len: int, dtype=jnp.float32) -> list[Params]:
    """An empty KV cache per block with room for `max_len` tokens."""
    require_int("max_len", max_len, low=1, high=cfg.max_positions)
    shape = (max_len, cfg.n_kv_heads, cfg.d_head)
    return [{"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype), "length": 0} for _ in range(cfg.n_layers)]


def forward_with_cache(cfg: TransformerConfig, params: Params, tokens_s, cache: list[Params]):
    """Run new tokens through the decoder, extending `cache`; returns (logits (S, V), new cache)."""
    if not cfg.is_decoder:
        raise WorkbenchError(f"model {cfg.name!r} is an encoder; a KV cache needs a decoder")
    tokens_s = jnp.asarray(tokens_s)
    start = cache[0]["length"]
    positions_s = start + jnp.arange(tokens_s.shape[0])
    x_se = embed(cfg, params, tokens_s, positions_s)
    new_cache = []
    for p, c in zip(params["blocks"], cache):
        x_se, c = block_forward(cfg, p, x_se, positions_s, c)
        new_cache.append(c)
    return lm_logits(cfg, params, final_norm(cfg, params, x_se)), new_cache


def generate_greedy(cfg: TransformerConfig, params: Params, prompt, n_new: int) -> list[int]:
    """Greedy decoding: prefill the prompt, then `n_new` single-token steps through the KV cache."""
    _check_tokens(cfg, prompt)
    require_int("n_new", n_new, low=0)
    prompt = list(map(int, np.asarray(prompt)))
    cache = empty_cache(cfg, len(prompt) + n_new)
    logits, cache = forward_with_cache(cfg, params, jnp.asarray(prompt), cache)
    out = []
    for _ in range(n_new):
        token = int(jnp.argmax(logits[-1]))
        out.append(token)
        logits, cache = forward_with_cache(cfg, params, jnp.asarray([token]), cache)
    return out
