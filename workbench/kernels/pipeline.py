"""Pipeline parallelism (llama.cpp RPC layer split, prima.cpp's piped ring) as a `shard_map` program.

Each device of a 1-D mesh holds the contiguous layer range a `PipelinePlan` gives it (uneven ranges are
padded to the longest and the padding masked: a padded layer returns its input). The master (mesh position
0) embeds the tokens; the activation then goes once round the ring of devices that hold layers, in ring
order: the holder runs its layers (`reference.block_forward`, the same math as the monolithic reference),
then one `ppermute` hands the (S, d_model) activation to the next ring member, the last one back to the
master, which applies the final norm and output head. Devices without layers are skipped, and with the
master alone there is no `ppermute`. So the compiled program performs `plan.handoffs` collective-permutes
of S x d_model x 4 bytes, what `workbench.schemes.pipeline` charges (`handoff_bytes` at 32-bit activations).

Offloading is a memory-placement decision, not a different computation: the kernel computes the same for
any `plan.offloaded`.

    stages = shard_stages(cfg, params, mesh, plan)
    logits_sv = pipeline_forward(stages, params, tokens)      # equals reference.forward
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError
from workbench.kernels import reference as ref
from workbench.model.models import TransformerConfig
from workbench.schemes.pipeline import PipelinePlan


def ring_pairs(plan: PipelinePlan) -> tuple[tuple[int, int], ...]:
    """(source, target) of each hand-off in ring order: member k to member k+1, the last to the master."""
    members = plan.participants
    if len(members) < 2:
        return ()
    return tuple((members[k], members[(k + 1) % len(members)]) for k in range(len(members)))


@dataclass(frozen=True)
class PipelineStages:
    """A plan's layer ranges laid out on a mesh: stacked (n, L_max, ...) block weights and a (n, L_max) mask."""

    cfg: TransformerConfig
    mesh: Mesh
    plan: PipelinePlan
    blocks: dict
    valid: jax.Array
    l_max: int

    @property
    def axis(self) -> str:
        """The mesh axis name."""
        return self.mesh.axis_names[0]


def shard_stages(cfg: TransformerConfig, params: dict, mesh: Mesh, plan: PipelinePlan) -> PipelineStages:
    """Give each mesh device its plan's contiguous layers (padded to the longest range, masked)."""
    if cfg.family != "llama":
        raise WorkbenchError(f"the pipeline kernel runs the Llama decoder; got family {cfg.family!r}")
    if len(mesh.axis_names) != 1:
        raise WorkbenchError(f"the pipeline kernel needs a 1-D mesh, got axes {mesh.axis_names}")
    n = int(mesh.devices.size)
    if plan.n_devices != n:
        raise WorkbenchError(f"plan layers must have one entry per mesh device ({n}), got {plan.n_devices}")
    if plan.n_layers != cfg.n_layers:
        raise WorkbenchError(f"plan layers must sum to n_layers ({cfg.n_layers}), got {plan.n_layers}")
    l_max = max(plan.layers)
    keys = list(params["blocks"][0])
    zero = {k: np.zeros_like(np.asarray(params["blocks"][0][k])) for k in keys}
    per_device, valid = [], np.zeros((n, l_max), dtype=bool)
    for i, (a, b) in enumerate(plan.ranges):
        layers = [{k: np.asarray(params["blocks"][j][k]) for k in keys} for j in range(a, b)]
        layers += [zero] * (l_max - (b - a))
        valid[i, :b - a] = True
        per_device.append({k: np.stack([layer[k] for layer in layers]) for k in keys})
    sharding = NamedSharding(mesh, P(mesh.axis_names[0]))
    blocks = {k: jax.device_put(np.stack([d[k] for d in per_device]), sharding) for k in keys}
    return PipelineStages(cfg, mesh, plan, blocks, jax.device_put(valid, sharding), l_max)


def make_backbone(cfg: TransformerConfig, mesh: Mesh, plan: PipelinePlan):
    """The jitted SPMD program (blocks, valid, h0 (n, S, E)) -> h (n, S, E): shard 0 of h0 is the master's
    embedding; shard 0 of the result is the last layer's output, back on the master."""
    axis = mesh.axis_names[0]
    spec = P(axis)
    pairs = ring_pairs(plan)
    members = plan.participants

    def run_layers(blocks, valid, x_se, positions_s):
        def layer(x, inputs):
            p, ok = inputs
            y, _ = ref.block_forward(cfg, p, x, positions_s)
            return jnp.where(ok, y, x), None

        return jax.lax.scan(layer, x_se, (blocks, valid))[0]

    def program(blocks, valid, h0_nse):
        local = {k: v[0] for k, v in blocks.items()}
        ok = valid[0]
        x_se = h0_nse[0]
        positions_s = jnp.arange(x_se.shape[0])
        me = jax.lax.axis_index(axis)
        for k, member in enumerate(members):
            x_se = jax.lax.cond(me == member, lambda x: run_layers(local, ok, x, positions_s), lambda x: x, x_se)
            if pairs:
                x_se = jax.lax.ppermute(x_se, axis, [pairs[k]])
        return x_se[None]

    mapped = jax.shard_map(program, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)
    return jax.jit(mapped)


def master_input(stages: PipelineStages, params: dict, tokens_s) -> jax.Array:
    """The backbone's input (n, S, E): the master's embedding of the tokens in shard 0, zeros elsewhere."""
    tokens = jnp.asarray(np.asarray(tokens_s), jnp.int32)
    if tokens.ndim != 1 or tokens.size == 0:
        raise WorkbenchError(f"tokens must be a non-empty 1-D sequence, got shape {tokens.shape}")
    h_se = ref.embed(stages.cfg, params, tokens, jnp.arange(tokens.shape[0]))
    n = int(stages.mesh.devices.size)
    h0 = jnp.zeros((n,) + h_se.shape, h_se.dtype).at[0].set(h_se)
    return jax.device_put(h0, NamedSharding(stages.mesh, P(stages.axis)))


@partial(jax.jit, static_argnums=0)
def _head(cfg: TransformerConfig, params: dict, h_se):
    return ref.lm_logits(cfg, params, ref.final_norm(cfg, params, h_se))


def pipeline_forward(stages: PipelineStages, params: dict, tokens_s):
    """Logits (S, V) of the whole sequence through the pipeline (equals `reference.forward`)."""
    backbone = make_backbone(stages.cfg, stages.mesh, stages.plan)
    h = backbone(stages.blocks, stages.valid, master_input(stages, params, tokens_s))
    head = {k: params[k] for k in ("embed", "final_norm_g", "lm_head") if k in params}
    return _head(stages.cfg, head, h[0])
