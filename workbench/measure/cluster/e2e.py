"""TPI-LLM's tensor-parallel decoder across real processes: same tokens as the reference, timed.

Uses the kernel's SPMD program (`workbench.kernels.tpi_llm.tp_backbone`, the all-reduces inside it
are TPI-LLM's ppermute star by default) on a mesh with one device per process. Every process builds
its own slice of the weights from the shared seed; only process 0 (the master) embeds, applies the
task head and picks tokens. Workers never see a token: each step they feed zeros, and the master's
embedding reaches them inside the program (TPI-LLM Step 2).

Timing on the master: time to first token = prompt embedding + backbone + head + argmax; per-token
latency = the median decode step (embedding of the last token to the next token). A warm-up
generation compiles both shapes first, so compilation is not timed.
"""

from __future__ import annotations

import time

import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.model.models import TransformerConfig, get_model, tiny_config


def e2e_model(name: str) -> TransformerConfig:
    """'tiny' (the kernel-test Llama) or a registered Llama model name."""
    cfg = tiny_config("llama") if name == "tiny" else get_model(name)
    if cfg.family != "llama":
        raise WorkbenchError(f"the TPI-LLM kernel runs Llama models; {name!r} is {cfg.family}")
    return cfg


def e2e_prompt(cfg: TransformerConfig, prompt_len: int, seed: int) -> list[int]:
    """A deterministic random prompt (token ids) from `seed`."""
    require_int("prompt_len", prompt_len, low=1, high=cfg.max_positions)
    return [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab_size, prompt_len)]


WEIGHT_STD = 0.1


def e2e_params(cfg: TransformerConfig, seed: int, weight_std: float = WEIGHT_STD) -> dict:
    """Random weights with the reference's structure, drawn with numpy (fast and identical everywhere).

    Same layout as `reference.init_params` (norms near 1), drawn without one XLA compilation per
    tensor (seconds for each of 4 processes on a loaded 2-core machine). The weights' std is 0.1, not
    the reference's 0.02: with 0.02 greedy decoding of random weights repeats one token, which would
    make "same tokens as the reference" a weak check.
    """
    import jax

    from workbench.kernels import reference as ref

    require_int("seed", seed, low=0)
    shapes = jax.eval_shape(lambda: ref.init_params(cfg, seed))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        name = str(getattr(path[-1], "key", ""))
        values = rng.standard_normal(leaf.shape).astype(np.float32)
        if name.endswith("norm") or name in ("final_norm_g",):
            return 1.0 + 0.1 * values
        return weight_std * values

    return jax.tree_util.tree_map_with_path(draw, shapes)


def _local_rows(mesh, global_rows: np.ndarray):
    """A global (n, ...) array sharded on the mesh axis from this process's rows of `global_rows`."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    local = [i for i, d in enumerate(mesh.devices.flat) if d.process_index == jax.process_index()]
    sharding = NamedSharding(mesh, P(mesh.axis_names[0]))
    return jax.make_array_from_process_local_data(sharding, global_rows[local], global_rows.shape)


def distributed_tp_params(cfg: TransformerConfig, params: dict, mesh):
    """`TPParams` whose block slices are built per process (no cross-process device_put)."""
    import jax

    from workbench.kernels.tpi_llm import BLOCK_KEYS, TPParams, layout_block
    from workbench.schemes.planners.tpi_llm import check_devices, proportional_split

    n = int(mesh.devices.size)
    check_devices(cfg, n)
    split = proportional_split(cfg, n)
    heads_max, ffn_max = max(split.heads), max(split.ffn)
    kv_max = max(b - a for a, b in split.kv_ranges(cfg))
    per_layer = [layout_block(cfg, b, split, heads_max, kv_max, ffn_max) for b in params["blocks"]]
    blocks = {k: _local_rows(mesh, np.stack([layer[k] for layer in per_layer], axis=1)) for k in BLOCK_KEYS}
    master = {}
    master_device = mesh.devices.flat[0]
    if master_device.process_index == jax.process_index():
        head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
        master = {k: jax.device_put(v, master_device) for k, v in
                  (("embed", params["embed"]), ("final_norm_g", params["final_norm_g"]), ("lm_head", head))}
    return TPParams(cfg, mesh, split, blocks, master, heads_max, kv_max, ffn_max)


_HEAD = []


def _head(final_norm_e, lm_head_ev, h_se):
    """Final RMSNorm + task head on the master (jitted once per process)."""
    if not _HEAD:
        import jax

        from workbench.kernels import reference as ref

        _HEAD.append(jax.jit(lambda g, w, h: ref.rms_norm(h, g) @ w))
    return _HEAD[0](final_norm_e, lm_head_ev, h_se)


def _empty_cache(tp, max_len: int):
    shape = (tp.n, tp.cfg.n_layers, max_len, tp.kv_max, tp.cfg.d_head)
    zeros = np.zeros(shape, np.float32)
    return _local_rows(tp.mesh, zeros), _local_rows(tp.mesh, zeros)


def generate_timed(tp, prompt: list[int], n_new: int, allreduce: str, cache_len: int | None = None) -> dict:
    """Greedy generation on every process (tokens known only on the master) with per-step times.

    `cache_len` (default prompt + n_new) fixes the KV-cache shape, so a short warm-up compiles the
    same programs as the timed run."""
    import jax.numpy as jnp

    from workbench.kernels.tpi_llm import tp_backbone

    backbone = tp_backbone(tp, allreduce)
    is_master = bool(tp.master)
    e = tp.cfg.d_model
    k_cache, v_cache = _empty_cache(tp, cache_len or len(prompt) + max(n_new, 1))
    tokens: list[int] = []
    step_times: list[float] = []
    feed = list(prompt)
    start = 0
    for _ in range(max(n_new, 1)):
        t0 = time.perf_counter()
        s = len(feed)
        rows = np.zeros((tp.n, s, e), np.float32)
        if is_master:
            rows[0] = np.asarray(tp.master["embed"][jnp.asarray(feed)])
        h, k_cache, v_cache = backbone(tp.blocks, k_cache, v_cache, _local_rows(tp.mesh, rows), jnp.int32(start))
        if is_master:
            # the last position's hidden state only: the next token's logits, as engines compute them in a
            # prefill (llama.cpp's default; the TPI-LLM scheme's post block costs one token's head)
            h_last = h.addressable_shards[0].data[0][-1:]  # (1, E)
            logits = _head(tp.master["final_norm_g"], tp.master["lm_head"], h_last)
            tokens.append(int(jnp.argmax(logits[-1])))
        else:
            h.block_until_ready()
        step_times.append(time.perf_counter() - t0)
        start += s
        feed = tokens[-1:] if is_master else [0]
        if len(step_times) == n_new:
            break
    return {"tokens": tokens[:n_new], "step_times_s": step_times}


def run_tp_generation(ctx, mesh, model: str = "tiny", prompt_len: int = 8, n_new: int = 4, seed: int = 0,
                      allreduce: str = "star", repeats: int = 1, reference: bool = True) -> list[dict]:
    """Warm up, then `repeats` timed generations; the master also runs the single-process reference."""
    from workbench.kernels import reference as ref

    require_int("n_new", n_new, low=1)
    require_int("repeats", repeats, low=1)
    cfg = e2e_model(model)
    params = e2e_params(cfg, seed)
    prompt = e2e_prompt(cfg, prompt_len, seed)
    tp = distributed_tp_params(cfg, params, mesh)
    cache_len = len(prompt) + n_new
    generate_timed(tp, prompt, min(n_new, 2), allreduce, cache_len)  # compile prefill and decode shapes
    rows = []
    for r in range(repeats):
        out = generate_timed(tp, prompt, n_new, allreduce, cache_len)
        times = out["step_times_s"]
        rows.append({"repeat": r, "model": cfg.name, "allreduce": allreduce, "prompt_len": prompt_len,
                     "n_new": n_new, "n_devices": ctx.n_devices, "tokens": out["tokens"],
                     "ttft_s": times[0], "per_token_s": float(np.median(times[1:])) if len(times) > 1 else None,
                     "step_times_s": times})
    if ctx.is_root and reference:
        expected = ref.generate_greedy(cfg, params, prompt, n_new)
        for row in rows:
            row["reference_tokens"] = expected
            row["matches_reference"] = row["tokens"] == expected
    return rows
