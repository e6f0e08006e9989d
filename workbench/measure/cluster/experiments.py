"""Experiments a local cluster can run: each is `fn(ctx, **params) -> rows` executed by every process.

Registered by name in `EXPERIMENTS`; the launcher checks names without importing JAX (this module
imports JAX lazily, inside the experiments). Rows are plain dicts; the worker gathers every
process's rows on process 0.

  hello        psum of (device index + 1) over the global mesh: a smoke test of the runtime
  collectives  median latency of psum / all_gather / psum_scatter / star over message sizes
  sync_chain   k all-reduces in a row inside one program: the per-sync time a running program pays
  tpi_llm      TPI-LLM's tensor-parallel greedy decoder: tokens, time to first token, per-token latency
  galaxy_stack Galaxy's partitioned block stack (HMP, Megatron TP, SP): one prefill, timed, checked
  mcu_stack    the MCU paper's head-wise stack with its hierarchical reduce: one prefill, timed, checked
  sleep, crash test hooks for teardown (Ctrl-C, a process that dies)
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable

from workbench.core.errors import WorkbenchError, require_int
from workbench.schemes.galaxy import HMP

Experiment = Callable[..., list[dict] | None]


def _global_mesh(axis: str = "x"):
    import jax
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()), (axis,))


def _allgather_max(value: float) -> float:
    """The largest `value` over all processes (a tiny collective: also a barrier)."""
    import numpy as np
    from jax.experimental import multihost_utils

    return float(np.max(multihost_utils.process_allgather(np.array([value], np.float32))))


def hello(ctx) -> list[dict]:
    """psum of (global device index + 1): every process must see n(n+1)/2."""
    import jax

    from workbench.measure.cluster.programs import check_output, global_input, make_program, program_input

    mesh = _global_mesh()
    pi = program_input("psum", 4 * ctx.devices_per_process, ctx.n_devices)
    out = make_program("psum", mesh)(global_input(pi, mesh))
    check_output(pi, out)
    return [{"pid": os.getpid(), "hostname": socket.gethostname(), "n_devices": len(jax.devices()),
             "local_devices": len(jax.local_devices()), "psum": float(out.addressable_shards[0].data[0])}]


CHECK_ATTEMPTS = 3


def _checked_call(fn, x, pi) -> int:
    """Run `fn(x)` on every process and check the output; if any process holds a wrong result, all run it
    again together (up to CHECK_ATTEMPTS calls in all) and the wrong calls are counted: gloo's psum_scatter
    after other large collectives has been seen to return a wrong result now and then on this runtime
    (jax 0.10.2). Raises when every attempt is wrong."""
    from workbench.measure.cluster.programs import check_output

    for attempt in range(CHECK_ATTEMPTS):
        try:
            check_output(pi, fn(x))
            bad, error = 0.0, None
        except AssertionError as exc:
            bad, error = 1.0, exc
        if _allgather_max(bad) == 0.0:
            return attempt
        if attempt == CHECK_ATTEMPTS - 1:
            raise error or AssertionError(f"{pi.program}: another process held a wrong result {CHECK_ATTEMPTS} times")
    return CHECK_ATTEMPTS


def _time_call(fn, x) -> float:
    """Seconds of one call of `fn` on `x` (a tuple: its arguments)."""
    args = x if isinstance(x, tuple) else (x,)
    start = time.perf_counter()
    fn(*args).block_until_ready()
    return time.perf_counter() - start


def collectives(ctx, programs=("psum", "all_gather", "psum_scatter", "star", "ring_ppermute", "tree_ppermute"),
                sizes=(4, 4096, 1 << 20), min_reps: int = 5, max_reps: int = 25, target_seconds: float = 1.0,
                rounds: int = 5, warmup: int = 1, max_reps_large: int | None = None,
                large_bytes: int = 8192) -> list[dict]:
    """Time each program at each message size; every process records its own per-call seconds.

    Repetitions adapt to the size (about `target_seconds` per point, within [min_reps, max_reps]; above
    `large_bytes`, within [min_reps, max_reps_large] when it is given: `measure.OSU_PROTOCOL`) and
    are spread over `rounds` passes through all sizes, so a burst of load from other users hits one
    round of every size instead of all repetitions of one size. All processes agree on the counts
    through a tiny all-gather; every output is checked once (a wrong result is retried and counted in
    `wrong_results`, see `_checked_call`).
    """
    from workbench.measure.cluster.programs import global_input, make_program, program_input

    mesh = _global_mesh()
    n_rounds = max(1, min(rounds, min_reps))
    rows = []
    for name in programs:
        fn = make_program(name, mesh)
        points = {}  # message_bytes -> (requested size, input, calls per round)
        for size in sizes:
            pi = program_input(name, float(size), ctx.n_devices)
            if pi.message_bytes in points:  # small sizes can round to the same buffer: measure it once
                continue
            x = global_input(pi, mesh)
            wrong = _checked_call(fn, x, pi)
            for _ in range(warmup):
                _time_call(fn, x)
            first = _allgather_max(_time_call(fn, x))
            cap = max_reps if max_reps_large is None or pi.message_bytes <= large_bytes else max_reps_large
            reps = int(min(cap, max(min_reps, math.ceil(target_seconds / max(first, 1e-6)))))
            per_round = math.ceil(reps / n_rounds)
            points[pi.message_bytes] = (int(size), x, per_round, wrong)
        times = {m: [] for m in points}
        for _ in range(n_rounds):
            _allgather_max(0.0)  # line the processes up before each round
            for m, (_, x, per_round, _) in points.items():
                times[m] += [_time_call(fn, x) for _ in range(per_round)]
        for m, (size, _, _, wrong) in points.items():
            rows.append({"program": name, "requested_bytes": size, "message_bytes": m,
                         "n_devices": ctx.n_devices, "reps": len(times[m]), "times_s": times[m],
                         "wrong_results": wrong})
        del points
    return rows


CHAIN_PROGRAMS = ("star", "psum", "star_after_gemm", "gemm_only", "star_after_stream", "stream_only",
                  "star_in_decoder", "decoder_only")
# Each compute step: (64, 512) @ (512, 512) fp32, the same cache-resident matrix every step (33 MFLOP, split across the
# runtime's worker threads; no memory traffic that would change with the chain's length)
GEMM_ROWS, GEMM_WIDTH = 64, 512
# Each streaming step: one row @ a (896, 896) fp32 matrix of its own (3.2 MB read from memory, 1.6 MFLOP), what a
# decode step streams between two syncs: a TinyLlama-42M layer's 12.6 MB of fp32 weights over 2 processes, 2 syncs
STREAM_WIDTH = 896
STREAMING = ("star_after_stream", "stream_only")
# Each decoder step: one layer of TPI-LLM's tensor-parallel decoder (`workbench.kernels.tpi_llm.make_backbone`, two
# star syncs per layer) on a Llama shape of its own (not a model the end-to-end runs use): what a sync costs among
# the kernels a real layer runs (norms, rotary, attention over a KV cache, GEMVs or GEMMs), with the same layers
# less their syncs (`NO_SYNC`) as the baseline. A chain's size is its tokens x DECODER_WIDTH x 4 bytes per sync.
DECODER = ("star_in_decoder", "decoder_only")
DECODER_WIDTH, DECODER_HEADS, DECODER_FFN, DECODER_KV_START = 640, 10, 1728, 40


def decoder_chain_config(length: int):
    """The decoder chain's Llama shape with `length` layers."""
    from workbench.model.models import TransformerConfig

    require_int("length", length, low=1, high=256)
    return TransformerConfig(f"decoder-chain-{length}", "llama", int(length), DECODER_WIDTH, DECODER_HEADS,
                             DECODER_FFN, 256, 1024, n_kv_heads=DECODER_HEADS, source="cluster sync chain shape")


def decoder_chain(program: str, mesh, length: int, tokens: int, seed: int = 0):
    """(fn, args) of `length` TPI-LLM decoder layers on `tokens` tokens after DECODER_KV_START cached ones, with
    the star syncs (`star_in_decoder`) or without (`decoder_only`); fn(*args) returns the hidden state."""
    import jax.numpy as jnp
    import numpy as np

    from workbench.core.errors import require_choice
    from workbench.kernels.tpi_llm import NO_SYNC, make_backbone
    from workbench.measure.cluster.e2e import _local_rows, distributed_tp_params, e2e_params

    require_choice("program", program, DECODER)
    require_int("tokens", tokens, low=1, high=512)
    cfg = decoder_chain_config(length)
    tp = distributed_tp_params(cfg, e2e_params(cfg, seed), mesh)
    backbone = make_backbone(cfg, mesh, "star" if program == "star_in_decoder" else NO_SYNC, donate=False)
    cache = np.zeros((tp.n, cfg.n_layers, DECODER_KV_START + tokens, tp.kv_max, cfg.d_head), np.float32)
    rows = np.random.default_rng(seed).standard_normal((tp.n, tokens, cfg.d_model)).astype(np.float32)
    args = (tp.blocks, _local_rows(mesh, cache), _local_rows(mesh, cache), _local_rows(mesh, rows),
            jnp.int32(DECODER_KV_START))
    return (lambda *a: backbone(*a)[0]), args


def make_chain(program: str, mesh, length: int, axis: str = "x"):
    """A jitted shard_map of `length` dependent steps in one program, as a decoder chains its layers: a star or
    psum all-reduce (scaled by 1/n so the values stay put); `star_after_gemm`, a small GEMM then the star (a sync
    that finds the runtime's worker threads just done computing); `gemm_only`, the GEMMs without the syncs;
    `star_after_stream` / `stream_only`, the same around a GEMV that streams a matrix of its own from memory (a
    decode step's weights). Called as fn(x, w) with w (GEMM_WIDTH, GEMM_WIDTH), replicated, or for the streaming
    programs a tuple of `length` (STREAM_WIDTH, STREAM_WIDTH) matrices (`chain_weights`)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec

    from workbench.core.errors import require_choice

    require_choice("program", program, CHAIN_PROGRAMS)
    require_int("length", length, low=1, high=256)
    n = mesh.shape[axis]
    if program in ("star", "star_after_gemm", "star_after_stream"):
        from workbench.kernels.tpi_llm import star_allreduce

        def reduce(x):
            return star_allreduce(x, axis, n) * (1.0 / n)
    elif program == "psum":
        def reduce(x):
            return jax.lax.psum(x, axis) * (1.0 / n)
    else:
        def reduce(x):
            return x
    compute = program in ("star_after_gemm", "gemm_only")
    stream = program in STREAMING

    def body(x, w):
        for i in range(length):
            if compute:  # the GEMM feeds the sync (a tiny weight keeps the values, not the dependency, out)
                rows = jnp.resize(x, (GEMM_ROWS, GEMM_WIDTH))
                x = x + 1e-30 * jnp.sum(jnp.tanh(rows @ w))
            if stream:  # step i reads its own matrix: nothing stays in cache from one step to the next
                x = x + 1e-30 * jnp.sum(jnp.tanh(jnp.resize(x, (1, STREAM_WIDTH)) @ w[i]))
            x = reduce(x)
        return x

    spec = PartitionSpec(axis)
    w_spec = tuple(PartitionSpec() for _ in range(length)) if stream else PartitionSpec()
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec, w_spec), out_specs=spec))


def chain_weights(mesh, program: str = "star_after_gemm", length: int = 1, seed: int = 0):
    """The compute programs' matrix, (GEMM_WIDTH, GEMM_WIDTH) fp32, or for a streaming program `length` matrices
    (STREAM_WIDTH, STREAM_WIDTH), the same on every process."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    rng = np.random.default_rng(seed)
    sharding = NamedSharding(mesh, PartitionSpec())
    if program in STREAMING:
        mats = [rng.standard_normal((STREAM_WIDTH, STREAM_WIDTH), dtype=np.float32) * 0.01 for _ in range(length)]
        return tuple(jax.make_array_from_process_local_data(sharding, w, w.shape) for w in mats)
    w = rng.standard_normal((GEMM_WIDTH, GEMM_WIDTH), dtype=np.float32) * 0.01
    return jax.make_array_from_process_local_data(sharding, w, w.shape)


def sync_chain(ctx, programs=CHAIN_PROGRAMS[:2], sizes=(2048, 16384, 131072), lengths=(1, 8, 32), reps: int = 15,
               rounds: int = 5, decoder_tokens=(1, 32), decoder_lengths=(1, 4, 16)) -> list[dict]:
    """Per-call seconds of `length` chained steps in one program (`make_chain`, or `decoder_chain` for the
    `DECODER` programs at `decoder_tokens` and `decoder_lengths`), per program, size and length.

    The slope over `length` is what one step costs inside a running program (a decoder step holds two syncs
    per layer); the intercept is the program's dispatch and first wait. Calls are spread over `rounds` passes
    through every point; every process records its own times (the slowest is the call's)."""
    import numpy as np

    from workbench.measure.cluster.programs import global_input, program_input

    mesh = _global_mesh()
    w = chain_weights(mesh)
    streamed = {length: chain_weights(mesh, STREAMING[0], int(length)) for length in lengths} \
        if set(programs) & set(STREAMING) else {}
    points = []
    for name in [p for p in programs if p in DECODER]:
        for tokens in decoder_tokens:
            for length in decoder_lengths:
                fn, args = decoder_chain(name, mesh, int(length), int(tokens))
                if not np.all(np.isfinite(np.asarray(fn(*args).addressable_shards[0].data))):  # compiles
                    raise AssertionError(f"sync_chain {name} x{length} at {tokens} tokens: non-finite result")
                points.append((name, int(tokens) * DECODER_WIDTH * 4, int(length), fn, args))
    for name in [p for p in programs if p not in DECODER]:
        for size in sizes:
            pi = program_input("psum", float(size), ctx.n_devices)
            x = global_input(pi, mesh)
            for length in lengths:
                fn = make_chain(name, mesh, int(length))
                weights = streamed[length] if name in STREAMING else w
                out = fn(x, weights)  # compiles; a chain of scaled sums leaves every element at the mean of 1..n
                want = (ctx.n_devices + 1) / 2 if name not in ("gemm_only", "stream_only") else None
                got = np.asarray(out.addressable_shards[0].data)
                if want is not None and not np.allclose(got, want, rtol=1e-4):
                    raise AssertionError(f"sync_chain {name} x{length} at {pi.message_bytes} B: wrong result")
                points.append((name, pi.message_bytes, int(length), fn, (x, weights)))
    per_round = max(1, math.ceil(reps / rounds))
    times: list[list[float]] = [[] for _ in points]
    for _ in range(rounds):
        _allgather_max(0.0)  # line the processes up before each round
        for i, (_, _, _, fn, args) in enumerate(points):
            times[i] += [_time_call(fn, args) for _ in range(per_round)]
    return [{"program": name, "message_bytes": m, "length": length, "n_devices": ctx.n_devices,
             "reps": len(times[i]), "times_s": times[i]} for i, (name, m, length, _, _) in enumerate(points)]


def tpi_llm(ctx, model: str = "tiny", prompt_len: int = 8, n_new: int = 4, seed: int = 0,
            allreduce: str = "star", repeats: int = 1, reference: bool = True) -> list[dict]:
    """Run `workbench.kernels.tpi_llm.tp_generate` across the cluster (see `workbench.measure.cluster.e2e`)."""
    from workbench.measure.cluster.e2e import run_tp_generation

    return run_tp_generation(ctx, _global_mesh(), model=model, prompt_len=prompt_len, n_new=n_new, seed=seed,
                             allreduce=allreduce, repeats=repeats, reference=reference)


def galaxy_stack(ctx, scheme: str = HMP, model: str = "BERT-base", n_layers: int = 1, seq_len: int = 128,
                 reps: int = 10, seed: int = 0) -> list[dict]:
    """Galaxy's partitioned block stack (one prefill) across the cluster (see `workbench.measure.cluster.layer_runs`)."""
    from workbench.measure.cluster.layer_runs import run_galaxy_stack

    return run_galaxy_stack(ctx, _global_mesh(), scheme, model, n_layers, seq_len, reps, seed)


def mcu_stack(ctx, model: str = "TinyLlama-42M", n_layers: int = 1, seq_len: int = 16, reps: int = 10,
              seed: int = 0) -> list[dict]:
    """The MCU paper's head-wise block stack with its tree reduce (one prefill) across the cluster."""
    from workbench.measure.cluster.layer_runs import run_mcu_stack

    return run_mcu_stack(ctx, _global_mesh(), model, n_layers, seq_len, reps, seed)


def sleep(ctx, seconds: float = 60.0) -> list[dict]:
    """Idle for `seconds` (to test that Ctrl-C tears the cluster down)."""
    time.sleep(float(seconds))
    return [{"slept_s": float(seconds)}]


def crash(ctx, process: int = 1, exit_code: int = 7) -> list[dict]:
    """Process `process` exits with `exit_code`; the others wait in a collective (to test teardown)."""
    if ctx.process_id == process:
        os._exit(int(exit_code))
    _allgather_max(1.0)  # blocks: the crashed process never joins
    return []


EXPERIMENTS: dict[str, Experiment] = {"hello": hello, "collectives": collectives, "sync_chain": sync_chain, "tpi_llm": tpi_llm,
                                      "galaxy_stack": galaxy_stack, "mcu_stack": mcu_stack,
                                      "sleep": sleep, "crash": crash}


def check_parameters(name: str, params: dict) -> None:
    """Raise naming the parameter when `params` do not fit experiment `name` (before any process starts)."""
    import inspect

    signature = inspect.signature(get_experiment(name))
    allowed = [p for p in signature.parameters if p != "ctx"]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise WorkbenchError(f"experiment {name!r} has no parameter(s) {unknown}; "
                             f"its parameters: {', '.join(allowed) or 'none'}")
    if name in ("galaxy_stack", "mcu_stack"):
        from workbench.measure.cluster.layer_runs import check_stack_parameters

        check_stack_parameters(**params)


def get_experiment(name: str) -> Experiment:
    """The experiment called `name`; unknown names list the registry."""
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise WorkbenchError(f"unknown experiment {name!r}; experiments: {', '.join(EXPERIMENTS)}") from None
