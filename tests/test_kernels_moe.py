"""Mixture-of-experts kernels: the reference's routing rules and block, and the three partitions (TP inside every
expert with an all-gather or a psum, a whole-layer pipeline, expert parallelism with all-to-all) equal to it on
1, 2, 4 and 8 devices, their compiled collectives and bytes equal to `schemes.moe_traffic`'s closed forms, and
expert parallelism's capacity drops as documented."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.kernels import moe as M
from workbench.kernels import reference as ref
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_hlo, parse_collectives
from workbench.model.models import ROUTERS, tiny_config
from workbench.schemes import moe_traffic as T
from workbench.schemes.pipeline import PipelinePlan

CFG = tiny_config(n_layers=8, n_experts=8, n_active_experts=2, n_shared_experts=1, d_ff=32)
TOKENS = 8
BITS = 32.0  # the kernels run and move f32


@pytest.fixture(scope="module")
def moe():
    """One MoE FFN's weights (spread 0.2 so outputs are O(1)), 8 tokens of input and the reference's output."""
    params = M.init_moe_params(CFG, jax.random.PRNGKey(0), std=0.2)
    x_se = jax.random.normal(jax.random.PRNGKey(1), (TOKENS, CFG.d_model))
    return params, x_se, M.moe_ffn_reference(CFG, params, x_se)


def collectives(jitted, *args) -> list[tuple[str, int]]:
    """(kind, result bytes) of every collective the compiled program performs (an 8-way all-to-all's tuple
    shape carries /*index=N*/ comments: `traffic.parse_collectives` reads through them)."""
    return sorted((c.kind, c.result_bytes) for c in parse_collectives(compiled_hlo(jitted, *args)))


def close(got, want) -> None:
    """Equal up to f32 summation order (relative to the output's scale)."""
    want = np.asarray(want)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# ---- the reference ----------------------------------------------------------------------------------------
def numpy_moe(cfg, p, x_se) -> np.ndarray:
    """Token by token in numpy, each family's routing rule written out (softmax over all then top-k, with or
    without renormalising; or top-k logits then softmax) and every chosen expert run alone."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    silu = lambda z: z / (1 + np.exp(-z))  # noqa: E731
    out = []
    for x in np.asarray(x_se, np.float64):
        logits = x @ p["router"]
        top = np.argsort(-logits)[: cfg.n_active_experts]
        if cfg.router == "topk_softmax":
            w = np.exp(logits[top] - logits[top].max())
            w = w / w.sum()
        else:
            probs = np.exp(logits - logits.max())
            w = (probs / probs.sum())[top]
            if cfg.router == "softmax_topk_norm":
                w = w / w.sum()
        y = sum(wi * (silu(x @ p["w_gate"][e]) * (x @ p["w_up"][e]) @ p["w_down"][e]) for wi, e in zip(w, top))
        y = y + silu(x @ p["shared_gate"]) * (x @ p["shared_up"]) @ p["shared_down"]
        out.append(y)
    return np.array(out)


@pytest.mark.parametrize("router", ROUTERS)
def test_reference_routes_as_each_family_does(router, moe):
    cfg = CFG.with_changes(router=router, n_active_experts=3)
    params, x_se, _ = moe
    close(M.moe_ffn_reference(cfg, params, x_se), numpy_moe(cfg, params, x_se))


def test_only_the_unnormalised_rule_gives_other_weights(moe):
    """Renormalised top-k probabilities are the softmax of the top-k logits (Qwen3 == Mixtral == gpt-oss's rule,
    weights summing to 1); OLMoE / DeepSeek-V2 keep the full softmax's smaller share. All pick the same experts."""
    params, x_se, _ = moe
    routes = [M.route(CFG.with_changes(router=r), params["router"], x_se) for r in ROUTERS]
    weights = {r: np.asarray(w) for r, (w, _) in zip(ROUTERS, routes)}
    np.testing.assert_allclose(weights["softmax_topk_norm"], weights["topk_softmax"], rtol=1e-5)
    np.testing.assert_allclose(weights["topk_softmax"].sum(-1), 1.0, rtol=1e-6)
    assert (weights["softmax_topk"].sum(-1) < 1 - 1e-3).all()
    assert all((np.asarray(e) == np.asarray(routes[0][1])).all() for _, e in routes)


def test_moe_block_with_identical_experts_is_the_dense_block():
    """k renormalised weights over k copies of one SwiGLU sum to that SwiGLU: the MoE block then equals
    `reference.block_forward` (so attention, norms and residuals are the reference's)."""
    cfg = CFG.with_changes(n_shared_experts=0)
    block = M.init_moe_block_params(cfg, jax.random.PRNGKey(2), std=0.2)
    dense = {k: v for k, v in block.items() if k != "moe"}
    for key in M.EXPERT_KEYS:
        dense[key] = block["moe"][key][3]
        block["moe"][key] = jnp.broadcast_to(dense[key], block["moe"][key].shape)
    x_se = jax.random.normal(jax.random.PRNGKey(3), (TOKENS, cfg.d_model))
    positions = jnp.arange(TOKENS)
    moe_block = jax.jit(M.moe_block_forward, static_argnums=0)
    dense_block = jax.jit(lambda p, x, pos: ref.block_forward(cfg, p, x, pos)[0])
    close(moe_block(cfg, block, x_se, positions), dense_block(dense, x_se, positions))


# ---- (a) TP inside every expert -----------------------------------------------------------------------------
@pytest.mark.parametrize("n", (1, 2, 4, 8))
@pytest.mark.parametrize("sync", M.TP_SYNCS)
def test_tp_inside_experts_equals_reference_and_moves_the_closed_form(sync, n, moe, cpu_devices):
    params, x_se, want_se = moe
    mesh = make_mesh(n)
    placed = M.place(mesh, params, M.tp_specs("x"))
    x, e, f = CFG.n_experts, CFG.d_model, CFG.d_ff  # each device: d_ff/n columns of every expert, router whole
    assert {k: placed[k].addressable_shards[-1].data.shape for k in ("router", "w_gate", "w_down", "shared_up")} == \
        {"router": (e, x), "w_gate": (x, e, f // n), "w_down": (x, f // n, e), "shared_up": (e, f // n)}
    kernel = M.make_tp_ffn(CFG, mesh, sync)
    close(kernel(placed, x_se), want_se)
    if sync == "allgather":
        want = T.tp_partials_allgather_bytes(CFG.d_model, n, TOKENS, BITS)
        kind = "all-gather"
    else:
        want = T.tp_psum_bytes(CFG.d_model, n, TOKENS, BITS)
        kind = "all-reduce"
    assert collectives(kernel, placed, x_se) == ([(kind, want)] if n > 1 else [])


# ---- (b) whole-layer pipeline -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def layers(moe):
    """Eight MoE blocks and the hidden states after them (the monolithic reference, run once)."""
    keys = jax.random.split(jax.random.PRNGKey(4), CFG.n_layers)
    blocks = [M.init_moe_block_params(CFG, k, std=0.2) for k in keys]
    return blocks, jax.jit(M.moe_layers_reference, static_argnums=0)(CFG, blocks, moe[1])


@pytest.mark.parametrize("n, plan", [(1, None), (2, None), (4, None), (8, None), (4, (1, 0, 3, 4))])
def test_pipeline_equals_reference_and_hands_off_the_closed_form(n, plan, layers, moe, cpu_devices):
    blocks, want_se = layers
    mesh = make_mesh(n)
    plan = PipelinePlan(plan) if plan else M.even_plan(CFG.n_layers, n)
    stacked, valid = M.stack_stages(CFG, blocks, mesh, plan)
    kernel, x0 = M.make_pipeline(CFG, mesh, plan), M.master_input(mesh, moe[1])
    close(kernel(stacked, valid, x0)[0], want_se)
    handoff = T.pipeline_handoff_bytes(CFG.d_model, TOKENS, BITS)
    assert collectives(kernel, stacked, valid, x0) == [("collective-permute", handoff)] * plan.handoffs
    assert plan.handoffs == ((n if n > 1 else 0) if plan.layers.count(0) == 0 else 3)  # an empty device is skipped


def test_pipeline_forward_runs_an_even_plan_by_default(layers, moe, cpu_devices):
    blocks, want_se = layers
    close(M.pipeline_forward(CFG, blocks[:4], make_mesh(2), moe[1]),
          jax.jit(M.moe_layers_reference, static_argnums=0)(CFG, blocks[:4], moe[1]))


# ---- (c) expert parallelism ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", (1, 2, 4, 8))
def test_expert_parallel_equals_reference_and_moves_the_closed_form(n, moe, cpu_devices):
    params, x_se, want_se = moe
    mesh = make_mesh(n)
    capacity = T.ep_no_drop_capacity(TOKENS, n)
    placed = M.place(mesh, params, M.ep_specs("x"))
    x, e, f = CFG.n_experts, CFG.d_model, CFG.d_ff  # each device: n_experts/n whole experts, router and shared
    assert {k: placed[k].addressable_shards[-1].data.shape for k in ("router", "w_up", "shared_down")} == \
        {"router": (e, x), "w_up": (x // n, e, f), "shared_down": (f, e)}
    kernel = M.make_ep_ffn(CFG, mesh, capacity)
    close(kernel(placed, x_se), want_se)
    each = T.ep_all_to_all_bytes(CFG.d_model, CFG.n_experts, n, capacity, BITS) / 2
    assert collectives(kernel, placed, x_se) == ([("all-to-all", each)] * 2 if n > 1 else [])


def test_expert_parallel_drops_assignments_over_capacity_as_documented(moe, cpu_devices):
    """Capacity 1 on 2 devices of 4 tokens: the second (token, choice) a device sends one expert is dropped, and
    the output is the reference with exactly those weights zeroed."""
    params, x_se, want_se = moe
    n, capacity = 2, 1
    weights, experts = M.route(CFG, params["router"], x_se)
    kept = M.kept_assignments(experts, n, capacity)
    assert 0 < (~kept).sum() < kept.size  # the case really drops some and keeps some
    want = M.moe_ffn_from_routes(CFG, params, x_se, weights * kept, experts)
    got = M.make_ep_ffn(CFG, make_mesh(n), capacity)(params, x_se)
    close(got, want)
    assert not np.allclose(np.asarray(got), np.asarray(want_se), rtol=1e-3)


def test_kept_assignments_counts_per_device_in_token_then_choice_order():
    experts = np.array([[0, 1], [1, 2], [1, 0], [3, 1]])  # two devices of two tokens
    kept = M.kept_assignments(experts, n=2, capacity=1)
    assert kept.tolist() == [[True, True], [False, True], [True, True], [True, False]]
    got = np.asarray(M.assign_slots(jnp.asarray(experts[:2]), 4))
    assert got.tolist() == [[0, 0], [1, 0]]


# ---- closed forms and bad input -----------------------------------------------------------------------------
def test_closed_forms_by_hand():
    assert T.tp_partials_allgather_bytes(64, 4, 8, 32) == 4 * 8 * 64 * 4
    assert T.tp_psum_bytes(64, 4, 8, 16) == 8 * 64 * 2
    assert T.pipeline_handoff_bytes(64, 8, 32) == 8 * 64 * 4
    assert T.ep_all_to_all_bytes(64, 8, 4, 3, 32) == 2 * 8 * 3 * 64 * 4
    assert T.ep_all_to_all_bytes(64, 8, 1, 3, 32) == T.tp_psum_bytes(64, 1, 8, 32) == 0.0
    assert (T.ep_no_drop_capacity(8, 4), T.ep_no_drop_capacity(9, 4)) == (2, 3)


def test_bad_input_is_one_line_naming_the_parameter(moe, cpu_devices):
    params, x_se, _ = moe
    cases = [(lambda: M.make_tp_ffn(CFG.with_changes(d_ff=36), make_mesh(8)), "d_ff"),
             (lambda: M.make_tp_ffn(CFG, make_mesh(2), "ring"), "sync"),
             (lambda: M.make_ep_ffn(CFG.with_changes(n_experts=6), make_mesh(4), 2), "n_experts"),
             (lambda: M.make_ep_ffn(CFG, make_mesh(4), 2)(params, x_se[:6]), "tokens"),
             (lambda: M.make_ep_ffn(CFG, make_mesh(2), 0), "capacity"),
             (lambda: M.even_plan(8, 3), "n_layers"),
             (lambda: M.init_moe_params(tiny_config(), jax.random.PRNGKey(0)), "n_experts"),
             (lambda: T.ep_all_to_all_bytes(64, 8, 0, 2, 32), "devices")]
    for call, name in cases:
        with pytest.raises(WorkbenchError, match=name) as err:
            call()
        assert "\n" not in str(err.value)
