"""Mixture-of-experts layers in JAX: a monolithic reference and the three ways engines partition them.

**Reference** (`moe_ffn_reference`, `moe_block_forward`): the router's logits are computed in f32
(x @ router, d_model x n_experts, no bias; distributed-llama stores the router in F32), then the config's
`router` kind (`models.ROUTERS`) turns them into k = `n_active_experts` experts and their weights:

* ``softmax_topk_norm``: softmax over all experts, top-k, weights renormalised to sum to 1 (Hugging Face
  transformers `models/qwen3_moe/modeling_qwen3_moe.py` Qwen3MoeSparseMoeBlock with norm_topk_prob; Mixtral's
  top-k of the logits then a softmax over the k is the same numbers);
* ``softmax_topk``: softmax over all experts, top-k, not renormalised (`models/olmoe/modeling_olmoe.py`
  norm_topk_prob=False, `models/deepseek_v2` DeepseekV2MoE);
* ``topk_softmax``: top-k of the logits, softmax over those k (`models/gpt_oss/modeling_gpt_oss.py`
  GptOssTopKRouter). These are the same weights as ``softmax_topk_norm`` up to rounding (renormalised top-k
  probabilities are the softmax of the top-k logits); gpt-oss's router bias, its experts' biases and clamped
  SwiGLU are not modelled - every expert here is the plain bias-free SwiGLU of `reference.ffn`.

Each routed expert is a SwiGLU FFN of hidden size `d_ff`; the `n_shared_experts` always-on experts are held as
one SwiGLU of hidden size n_shared x d_ff (DeepSeek-V2's DeepseekV2MLP(intermediate_size = moe_intermediate_size
x n_shared_experts): the same sum as separate experts). The reference computes every expert on every token and
weights them by the (S, n_experts) combine matrix, so it shares no gather/scatter code with the kernels.

**Kernels** (`shard_map` on a 1-D mesh from `kernels.mesh`), each equal to the reference:

* `make_tp_ffn(cfg, mesh, sync)` - TP inside every expert, router replicated: each device holds d_ff/N
  columns of every expert's gate/up and the matching rows of down (and 1/N of the shared experts), computes its
  slices of the k routed experts per token (a gather of the routed experts' slices only) and a full-width
  partial sum; ``sync="allgather"`` all-gathers the N partials and adds them locally (distributed-llama's
  syncNodeSlices + merge-add), ``sync="psum"`` all-reduces them (exo's all_sum). Collectives per call: one
  all-gather of N x S x d_model, or one all-reduce of S x d_model (`moe_traffic.tp_partials_allgather_bytes`,
  `tp_psum_bytes`).
* `make_pipeline(cfg, mesh, plan)` - whole layers with all their experts: each device holds the contiguous
  layers a `schemes.pipeline.PipelinePlan` gives it and runs `moe_block_forward`; the activation goes once
  round the ring (`kernels.pipeline.ring_pairs`: master -> ... -> last -> master), `plan.handoffs`
  collective-permutes of S x d_model each (`moe_traffic.pipeline_handoff_bytes`).
* `make_ep_ffn(cfg, mesh, capacity)` - expert parallelism: device i holds experts [i X/N, (i+1) X/N) and the
  shared experts, and S/N of the tokens. It routes its tokens, writes each (token, choice) into a dispatch
  buffer (n_experts, capacity, d_model), all_to_alls it to the experts' owners, runs its experts, all_to_alls
  the results back and combines them with the routing weights (`moe_traffic.ep_all_to_all_bytes`: two
  buffers of n_experts x capacity x d_model). **Capacity and drops**: `capacity` is the slots each expert
  keeps for each source device. A device fills them in (token, choice) row-major order of its own tokens: the
  j-th assignment to expert e (counting from 0) takes slot j; an assignment with j >= capacity is dropped - that
  token's output simply lacks that expert's term (its other weights are not renormalised). capacity = S/N
  (`moe_traffic.ep_no_drop_capacity`) can never drop: a token picks an expert at most once.

    params = init_moe_params(cfg, key)                    # one MoE FFN
    y = moe_ffn_reference(cfg, params, x_se)
    y = make_tp_ffn(cfg, mesh, "psum")(params, x_se)      # == y
    y = make_ep_ffn(cfg, mesh, capacity)(params, x_se)    # == y when nothing is dropped
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.kernels import reference as ref
from workbench.kernels.mesh import check_line_mesh
from workbench.kernels.pipeline import ring_pairs
from workbench.model.models import TransformerConfig
from workbench.schemes.pipeline import PipelinePlan

Params = dict[str, Any]
TP_SYNCS = ("allgather", "psum")
EXPERT_KEYS = ("w_gate", "w_up", "w_down")  # (X, E, F), (X, E, F), (X, F, E)
SHARED_KEYS = ("shared_gate", "shared_up", "shared_down")  # (E, Fs), (E, Fs), (Fs, E)
ROUTER_STD = 0.5  # router weights' init spread: well separated logits, so top-k has no near-ties (test choice)


def check_moe(cfg: TransformerConfig) -> TransformerConfig:
    """`cfg` if it is a mixture of experts, else one line naming n_experts."""
    if not cfg.is_moe:
        raise WorkbenchError(f"n_experts must be >= 1 for a MoE kernel, got 0 in {cfg.name!r}")
    return cfg


# ---- parameters -------------------------------------------------------------------------------------
def init_moe_params(cfg: TransformerConfig, key, dtype=jnp.float32, std: float = 0.02) -> Params:
    """Random weights of one MoE FFN: router (E, X) in f32, routed experts stacked on a leading X axis,
    shared experts as one SwiGLU of n_shared x d_ff (absent without shared experts)."""
    check_moe(cfg)
    e, f, x = cfg.d_model, cfg.d_ff, cfg.n_experts
    k_router, k_gate, k_up, k_down, k_shared = jax.random.split(key, 5)
    p: Params = {"router": ROUTER_STD / np.sqrt(e) * jax.random.normal(k_router, (e, x), jnp.float32),
                 "w_gate": (std * jax.random.normal(k_gate, (x, e, f))).astype(dtype),
                 "w_up": (std * jax.random.normal(k_up, (x, e, f))).astype(dtype),
                 "w_down": (std * jax.random.normal(k_down, (x, f, e))).astype(dtype)}
    if cfg.n_shared_experts:
        fs = cfg.n_shared_experts * f
        ks = jax.random.split(k_shared, 3)
        p["shared_gate"] = (std * jax.random.normal(ks[0], (e, fs))).astype(dtype)
        p["shared_up"] = (std * jax.random.normal(ks[1], (e, fs))).astype(dtype)
        p["shared_down"] = (std * jax.random.normal(ks[2], (fs, e))).astype(dtype)
    return p


def init_moe_block_params(cfg: TransformerConfig, key, dtype=jnp.float32, std: float = 0.02) -> Params:
    """Random weights of one MoE Transformer block: `reference.init_block_params`' attention and norms,
    its dense FFN replaced by the MoE FFN under "moe"."""
    check_moe(cfg)
    k_block, k_moe = jax.random.split(key)
    p = {k: v for k, v in ref.init_block_params(cfg, k_block, dtype).items() if k not in EXPERT_KEYS}
    p["moe"] = init_moe_params(cfg, k_moe, dtype, std)
    return p


# ---- reference ----------------------------------------------------------------------------------------
def route(cfg: TransformerConfig, router_ex, x_se):
    """The router: f32 logits x @ router, then the config's rule -> (weights (S, k) f32, experts (S, k) int32)."""
    logits_sx = x_se.astype(jnp.float32) @ router_ex.astype(jnp.float32)
    k = cfg.n_active_experts
    if cfg.router == "topk_softmax":
        top_sk, experts_sk = jax.lax.top_k(logits_sx, k)
        return jax.nn.softmax(top_sk, axis=-1), experts_sk
    weights_sk, experts_sk = jax.lax.top_k(jax.nn.softmax(logits_sx, axis=-1), k)
    if cfg.router == "softmax_topk_norm":
        weights_sk = weights_sk / weights_sk.sum(-1, keepdims=True)
    return weights_sk, experts_sk


def _swiglu(gate_ef, up_ef, down_fe, x_se):
    """One SwiGLU expert (or a slice of its hidden columns) on (S, E): `reference.ffn`'s gated form."""
    return jax.nn.silu(x_se @ gate_ef) * (x_se @ up_ef) @ down_fe


def shared_experts(p: Params, x_se):
    """The always-on experts' output (zeros without any); works on a slice of their hidden columns too."""
    if "shared_gate" not in p:
        return jnp.zeros_like(x_se)
    return _swiglu(p["shared_gate"], p["shared_up"], p["shared_down"], x_se)


def moe_ffn_from_routes(cfg: TransformerConfig, p: Params, x_se, weights_sk, experts_sk):
    """The MoE FFN for given routes: every expert on every token, weighted by the (S, X) combine matrix,
    plus the shared experts (the dense form the kernels are checked against)."""
    s = x_se.shape[0]
    combine_sx = jnp.zeros((s, cfg.n_experts), jnp.float32).at[jnp.arange(s)[:, None], experts_sk].add(weights_sk)
    every_xse = jax.vmap(_swiglu, in_axes=(0, 0, 0, None))(p["w_gate"], p["w_up"], p["w_down"], x_se)
    routed_se = jnp.einsum("sx,xse->se", combine_sx.astype(every_xse.dtype), every_xse)
    return routed_se + shared_experts(p, x_se)


def moe_ffn_reference(cfg: TransformerConfig, p: Params, x_se):
    """One MoE FFN on (S, E) -> (S, E): route (f32, the config's rule), SwiGLU experts, shared experts added."""
    check_moe(cfg)
    weights_sk, experts_sk = route(cfg, p["router"], x_se)
    return moe_ffn_from_routes(cfg, p, x_se, weights_sk, experts_sk)


def moe_block_forward(cfg: TransformerConfig, p: Params, x_se, positions_s):
    """One MoE Transformer block (no KV cache): `reference`'s pre-norm attention, then RMSNorm and the MoE FFN,
    each with its residual."""
    h_se = ref.pre_attention_norm(cfg, p, x_se)
    q_shd, k_shd, v_shd = ref.qkv_project(cfg, p, h_se, positions_s)
    attn_shd = ref.attention_core(q_shd, k_shd, v_shd, positions_s, positions_s, cfg.is_decoder)
    x_se = x_se + attn_shd.reshape(x_se.shape[0], -1) @ p["wo"]
    return x_se + moe_ffn_reference(cfg, p["moe"], ref.rms_norm(x_se, p["ffn_norm"]))


def moe_layers_reference(cfg: TransformerConfig, blocks: list[Params], x_se):
    """Hidden states after running `blocks` (MoE blocks) in order on (S, E) at positions 0..S-1."""
    positions_s = jnp.arange(x_se.shape[0])
    for p in blocks:
        x_se = moe_block_forward(cfg, p, x_se, positions_s)
    return x_se


# ---- (a) tensor parallelism inside every expert -------------------------------------------------------
def tp_specs(axis: str) -> Params:
    """Where TP puts each weight: the router replicated, gate/up split on their hidden columns, down on its rows."""
    cols, rows = P(None, None, axis), P(None, axis, None)
    return {"router": P(), "w_gate": cols, "w_up": cols, "w_down": rows,
            "shared_gate": P(None, axis), "shared_up": P(None, axis), "shared_down": P(axis, None)}


def check_tp_split(cfg: TransformerConfig, n: int) -> None:
    """One line unless every expert's d_ff splits evenly over n devices."""
    check_moe(cfg)
    if cfg.d_ff % n:
        raise WorkbenchError(f"devices must divide d_ff ({cfg.d_ff}) for TP inside every expert, got {n}")


def routed_partial(cfg: TransformerConfig, p: Params, x_se):
    """This device's partial sum (S, E) over its slices of each token's k routed experts and of the shared ones:
    only the routed experts' slices are gathered (what a node streams per token)."""
    weights_sk, experts_sk = route(cfg, p["router"], x_se)
    gate_skef, up_skef, down_skfe = (p[k][experts_sk] for k in EXPERT_KEYS)
    hidden_skf = jax.nn.silu(jnp.einsum("se,skef->skf", x_se, gate_skef)) * jnp.einsum("se,skef->skf", x_se, up_skef)
    out_ske = jnp.einsum("skf,skfe->ske", hidden_skf, down_skfe)
    return jnp.einsum("sk,ske->se", weights_sk.astype(out_ske.dtype), out_ske) + shared_experts(p, x_se)


def make_tp_ffn(cfg: TransformerConfig, mesh: Mesh, sync: str = "psum"):
    """The jitted TP MoE FFN (params, x (S, E) replicated) -> (S, E) on every device; `sync` "allgather"
    (gather the N partials, add locally) or "psum" (all-reduce)."""
    require_choice("sync", sync, TP_SYNCS)
    n = check_line_mesh(mesh)
    check_tp_split(cfg, n)
    axis = mesh.axis_names[0]
    specs = tp_specs(axis)

    def program(p, x_se):
        partial_se = routed_partial(cfg, p, x_se)
        if n == 1:  # nothing to sync (no collective is compiled, as the closed forms say)
            return partial_se
        if sync == "psum":
            return jax.lax.psum(partial_se, axis)
        return jax.lax.all_gather(partial_se, axis).sum(0)

    def run(p, x_se):
        p_specs = {k: specs[k] for k in p}
        mapped = jax.shard_map(program, mesh=mesh, in_specs=(p_specs, P()), out_specs=P(), check_vma=False)
        return mapped(p, x_se)

    return jax.jit(run)


def place(mesh: Mesh, p: Params, specs: Params) -> Params:
    """`p`'s arrays laid out on `mesh` by `specs` (each device then holds only its part)."""
    return {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in p.items()}


# ---- (b) whole-layer pipeline -------------------------------------------------------------------------
def even_plan(n_layers: int, n: int) -> PipelinePlan:
    """Contiguous equal layer ranges over n devices (one line unless n divides n_layers)."""
    require_int("devices", n, low=1, high=n_layers)
    if n_layers % n:
        raise WorkbenchError(f"devices must divide n_layers ({n_layers}) for an even pipeline, got {n}")
    return PipelinePlan((n_layers // n,) * n)


def stack_stages(cfg: TransformerConfig, blocks: list[Params], mesh: Mesh, plan: PipelinePlan):
    """Each device's plan layers stacked (n, L_max, ...) and a (n, L_max) mask of real (not padding) layers."""
    check_moe(cfg)
    n = check_line_mesh(mesh)
    if plan.n_devices != n or plan.n_layers != len(blocks):
        raise WorkbenchError(f"plan layers must have one entry per mesh device ({n}) and sum to the blocks "
                             f"given ({len(blocks)}), got {plan.layers}")
    l_max = max(plan.layers)
    zero = jax.tree.map(np.zeros_like, blocks[0])
    per_device, valid = [], np.zeros((n, l_max), dtype=bool)
    for i, (a, b) in enumerate(plan.ranges):
        layers = [jax.tree.map(np.asarray, blocks[j]) for j in range(a, b)] + [zero] * (l_max - (b - a))
        valid[i, :b - a] = True
        per_device.append(jax.tree.map(lambda *xs: np.stack(xs), *layers))
    sharding = NamedSharding(mesh, P(mesh.axis_names[0]))
    stacked = jax.tree.map(lambda *xs: jax.device_put(np.stack(xs), sharding), *per_device)
    return stacked, jax.device_put(valid, sharding)


def make_pipeline(cfg: TransformerConfig, mesh: Mesh, plan: PipelinePlan):
    """The jitted pipeline (stacked blocks, valid, x0 (n, S, E) with the input in shard 0) -> (n, S, E) whose
    shard 0 holds the last layer's output, back on the master."""
    check_moe(cfg)
    axis = mesh.axis_names[0]
    pairs, members = ring_pairs(plan), plan.participants

    def run_layers(blocks, valid, x_se):
        positions_s = jnp.arange(x_se.shape[0])

        def layer(x, inputs):
            p, ok = inputs
            return jnp.where(ok, moe_block_forward(cfg, p, x, positions_s), x), None

        return jax.lax.scan(layer, x_se, (blocks, valid))[0]

    def program(blocks, valid, x0_nse):
        local, ok, x_se = jax.tree.map(lambda v: v[0], blocks), valid[0], x0_nse[0]
        me = jax.lax.axis_index(axis)
        for k, member in enumerate(members):
            x_se = jax.lax.cond(me == member, lambda x: run_layers(local, ok, x), lambda x: x, x_se)
            if pairs:
                x_se = jax.lax.ppermute(x_se, axis, [pairs[k]])
        return x_se[None]

    spec = P(axis)
    return jax.jit(jax.shard_map(program, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False))


def pipeline_forward(cfg: TransformerConfig, blocks: list[Params], mesh: Mesh, x_se, plan: PipelinePlan | None = None):
    """Hidden states (S, E) after `blocks` run as a whole-layer pipeline on `mesh` (equals
    `moe_layers_reference`); `plan` defaults to equal contiguous ranges."""
    plan = plan or even_plan(len(blocks), check_line_mesh(mesh))
    stacked, valid = stack_stages(cfg, blocks, mesh, plan)
    return make_pipeline(cfg, mesh, plan)(stacked, valid, master_input(mesh, x_se))[0]


def master_input(mesh: Mesh, x_se):
    """The pipeline's input (n, S, E): `x_se` in shard 0 (the master), zeros elsewhere."""
    x0 = jnp.zeros((check_line_mesh(mesh),) + x_se.shape, x_se.dtype).at[0].set(x_se)
    return jax.device_put(x0, NamedSharding(mesh, P(mesh.axis_names[0])))


# ---- (c) expert parallelism ---------------------------------------------------------------------------
def check_ep_split(cfg: TransformerConfig, n: int, tokens: int | None = None) -> None:
    """One line unless n devices divide n_experts and (when given) the step's tokens."""
    check_moe(cfg)
    if cfg.n_experts % n:
        raise WorkbenchError(f"devices must divide n_experts ({cfg.n_experts}) for expert parallelism, got {n}")
    if tokens is not None and tokens % n:
        raise WorkbenchError(f"devices must divide the step's tokens ({tokens}) for expert parallelism, got {n}")


def assign_slots(experts_sk, n_experts: int):
    """Each (token, choice)'s slot in its expert's buffer: how many earlier assignments (row-major) of this
    device's tokens went to the same expert (int32, (S, k))."""
    flat = experts_sk.reshape(-1)
    onehot_ax = jax.nn.one_hot(flat, n_experts, dtype=jnp.int32)
    before_ax = jnp.cumsum(onehot_ax, axis=0) - onehot_ax
    return jnp.take_along_axis(before_ax, flat[:, None], axis=1).reshape(experts_sk.shape)


def ep_specs(axis: str) -> Params:
    """Where EP puts each weight: experts split on their leading axis, router and shared experts replicated."""
    return {"router": P(), **{k: P(axis) for k in EXPERT_KEYS}, **{k: P() for k in SHARED_KEYS}}


def _run_local_experts(p: Params, received_nxce):
    """This device's X/N experts on every source's slots: (N, X/N, C, E) -> (N, X/N, C, E)."""
    n_src, x_loc, cap, e = received_nxce.shape
    per_expert = received_nxce.transpose(1, 0, 2, 3).reshape(x_loc, n_src * cap, e)
    out = jax.vmap(_swiglu)(p["w_gate"], p["w_up"], p["w_down"], per_expert)
    return out.reshape(x_loc, n_src, cap, e).transpose(1, 0, 2, 3)


def make_ep_ffn(cfg: TransformerConfig, mesh: Mesh, capacity: int):
    """The jitted EP MoE FFN (params, x (S, E) split by tokens) -> (S, E); `capacity` slots per expert per
    source device, assignments beyond it dropped (module docstring)."""
    n = check_line_mesh(mesh)
    check_ep_split(cfg, n)
    require_int("capacity", capacity, low=1)
    axis, x_all = mesh.axis_names[0], cfg.n_experts
    specs = ep_specs(axis)

    def program(p, x_le):
        weights_lk, experts_lk = route(cfg, p["router"], x_le)
        slots_lk = assign_slots(experts_lk, x_all)  # slots >= capacity fall outside the buffer: dropped
        rows_lke = jnp.broadcast_to(x_le[:, None, :], experts_lk.shape + x_le.shape[-1:])
        dispatch_xce = jnp.zeros((x_all, capacity, x_le.shape[-1]), x_le.dtype)
        dispatch_xce = dispatch_xce.at[experts_lk, slots_lk].set(rows_lke, mode="drop")
        send = dispatch_xce.reshape(n, x_all // n, capacity, -1)
        received = jax.lax.all_to_all(send, axis, 0, 0) if n > 1 else send
        done = _run_local_experts(p, received)
        back = jax.lax.all_to_all(done, axis, 0, 0) if n > 1 else done
        out_lke = back.reshape(x_all, capacity, -1).at[experts_lk, slots_lk].get(mode="fill", fill_value=0)
        routed_le = jnp.einsum("lk,lke->le", weights_lk.astype(out_lke.dtype), out_lke)
        return routed_le + shared_experts(p, x_le)

    def run(p, x_se):
        check_ep_split(cfg, n, x_se.shape[0])
        p_specs = {k: specs[k] for k in p}
        mapped = jax.shard_map(program, mesh=mesh, in_specs=(p_specs, P(axis)), out_specs=P(axis), check_vma=False)
        return mapped(p, x_se)

    return jax.jit(run)


def kept_assignments(experts_sk, n: int, capacity: int) -> np.ndarray:
    """(S, k) bool: which (token, choice) assignments EP keeps with S/N tokens per device and `capacity` slots
    per expert per device (the documented rule, in plain numpy)."""
    experts = np.asarray(experts_sk)
    per_device = experts.shape[0] // n
    kept = np.zeros(experts.shape, dtype=bool)
    for d in range(n):
        used: dict[int, int] = {}
        for t in range(d * per_device, (d + 1) * per_device):
            for j, e in enumerate(experts[t]):
                kept[t, j] = used.get(int(e), 0) < capacity
                used[int(e)] = used.get(int(e), 0) + 1
    return kept
