"""Two more papers' partitioned kernels across real processes: Galaxy's layer stack and the MCU head-wise stack.

Each process holds one device of a global 1-D mesh (`jax.distributed`, gloo). The kernels are the same
`shard_map` programs the tests hold equal to the reference (`workbench.kernels.galaxy.program`,
`workbench.kernels.mcu_siracusa.stack_program`); here they run one prefill of the block stack on
`seq_len` tokens, timed per call on every process (after one warm-up call that compiles), and the output
gathered on every process is compared with the reference stack (`reference.block_forward`).
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.model.models import TransformerConfig, get_model, tiny_config
from workbench.schemes.galaxy import HMP, PARALLEL_SCHEMES
from workbench.schemes.mcu_siracusa import SCHEME as MCU_SCHEME

MATCH_ATOL = 2e-3  # float32 stack vs the reference: summation order differs across devices


def layer_model(name: str, n_layers: int) -> TransformerConfig:
    """'tiny-bert' (the kernel-test BERT) or a registered model, cut to `n_layers` blocks."""
    require_int("n_layers", n_layers, low=1, high=64)
    cfg = tiny_config("bert") if name == "tiny-bert" else get_model(name)
    return replace(cfg, n_layers=n_layers)




def check_stack_parameters(scheme: str = HMP, model: str = "BERT-base", n_layers: int = 1,
                           seq_len: int = 16, reps: int = 1, seed: int = 0) -> None:
    """One line naming the parameter when a stack run's parameters are out of range (no JAX needed, so the
    launcher can refuse them before any process starts)."""
    if scheme not in PARALLEL_SCHEMES:
        raise WorkbenchError(f"scheme must be one of {', '.join(PARALLEL_SCHEMES)}, got {scheme!r}")
    cfg = layer_model(model, n_layers)
    require_int("seq_len", seq_len, low=1, high=cfg.max_positions)
    require_int("reps", reps, low=1, high=10_000)
    require_int("seed", seed, low=0)


def _stack_inputs(cfg: TransformerConfig, seq_len: int, seed: int):
    """(params, x_se, positions_s): the reference's random weights and an embedded random prompt."""
    import jax.numpy as jnp

    from workbench.kernels import reference as ref
    from workbench.measure.cluster.e2e import e2e_params

    require_int("seq_len", seq_len, low=1, high=cfg.max_positions)
    params = e2e_params(cfg, seed)
    tokens = np.random.default_rng(seed).integers(0, cfg.vocab_size, seq_len)
    positions = jnp.arange(seq_len)
    return params, ref.embed(cfg, params, jnp.asarray(tokens), positions), positions


def _reference_stack(cfg: TransformerConfig, params, x_se, positions_s) -> np.ndarray:
    from workbench.kernels import reference as ref

    for block in params["blocks"]:
        x_se = ref.block_forward(cfg, block, x_se, positions_s)[0]
    return np.asarray(x_se)


def _timed(call, reps: int) -> list[float]:
    import jax

    jax.block_until_ready(call())  # compile and warm up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return times


def _gathered(out) -> np.ndarray:
    """A global array's full value on every process."""
    from jax.experimental import multihost_utils

    if out.is_fully_addressable:
        return np.asarray(out)
    return np.asarray(multihost_utils.process_allgather(out, tiled=True))


def run_galaxy_stack(ctx, mesh, scheme: str = HMP, model: str = "BERT-base", n_layers: int = 1,
                     seq_len: int = 128, reps: int = 10, seed: int = 0) -> list[dict]:
    """One Galaxy-partitioned prefill of `n_layers` blocks on `seq_len` tokens (uniform partition), timed."""
    import jax

    from workbench.kernels.galaxy import program

    check_stack_parameters(scheme, model, n_layers, seq_len, reps, seed)
    cfg = layer_model(model, n_layers)
    params, x_se, positions = _stack_inputs(cfg, seq_len, seed)
    prog = program(cfg, params["blocks"], seq_len, mesh, scheme)
    fn = jax.jit(prog.fn)
    x_in = prog.pad(x_se)
    times = _timed(lambda: fn(*prog.weights, x_in), reps)
    out = prog.unpad(_gathered(fn(*prog.weights, x_in)))
    error = float(np.max(np.abs(np.asarray(out) - _reference_stack(cfg, params, x_se, positions))))
    return [{"kernel": "galaxy", "scheme": scheme, "model": cfg.name, "n_layers": n_layers, "seq_len": seq_len,
             "n_devices": ctx.n_devices, "reps": reps, "times_s": times, "max_abs_error": error,
             "matches_reference": error <= MATCH_ATOL}]


def run_mcu_stack(ctx, mesh, model: str = "TinyLlama-42M", n_layers: int = 1, seq_len: int = 16, reps: int = 10,
                  seed: int = 0) -> list[dict]:
    """One MCU head-wise prefill (partial sums reduced through the chip tree) of `n_layers` blocks, timed."""
    import jax

    from workbench.kernels.mcu_siracusa import stack_program

    check_stack_parameters(HMP, model, n_layers, seq_len, reps, seed)
    cfg = layer_model(model, n_layers)
    params, x_se, positions = _stack_inputs(cfg, seq_len, seed)
    fn, blocks = stack_program(cfg, params, ctx.n_devices)
    run = jax.jit(fn)
    times = _timed(lambda: run(x_se, positions, blocks), reps)
    out = _gathered(run(x_se, positions, blocks))
    error = float(np.max(np.abs(out - _reference_stack(cfg, params, x_se, positions))))
    return [{"kernel": "mcu_siracusa", "scheme": MCU_SCHEME, "model": cfg.name, "n_layers": n_layers,
             "seq_len": seq_len, "n_devices": ctx.n_devices, "reps": reps, "times_s": times,
             "max_abs_error": error, "matches_reference": error <= MATCH_ATOL}]
