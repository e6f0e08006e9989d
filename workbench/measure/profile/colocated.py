"""How much of the machine each of k processes running the same programs at once gets (`run_colocated`).

Plain processes (no jax.distributed) started together run one decode token through TinyLlama-42M's layers and
chains of distinct 1 MiB and 16 MiB fp32 GEMVs; a process's share of the machine is (time alone) / (time with
k - 1 others) (`colocated_shares`), what `workbench.measure.cluster.predict.shared_device` divides a preset by.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from workbench.measure.profile.microbench import gemv_chain_calls

COLOCATED_PROGRAMS = ("decode_layers", "gemv_1mib", "gemv_16mib")


def colocated_calls(model: str = "TinyLlama-42M") -> dict:
    """{program: a call} for the co-location benchmark: one token through every layer of `model` (distinct
    weights per layer, the reference block), and chains of distinct 1 MiB and 16 MiB fp32 GEMVs (64 MiB and
    256 MiB in all: past the cache)."""
    import jax
    import jax.numpy as jnp

    from workbench.kernels import reference as ref
    from workbench.model.models import get_model

    cfg = get_model(model)
    blocks = [ref.init_block_params(cfg, jax.random.PRNGKey(i)) for i in range(cfg.n_layers)]
    h = jnp.ones((1, cfg.d_model), jnp.float32)
    pos = jnp.zeros((1,), jnp.int32)

    def layers(x, ps):
        for p in ps:
            x = ref.block_forward(cfg, p, x, pos)[0]
        return x

    forward = jax.jit(layers)
    calls = {"decode_layers": lambda: forward(h, blocks).block_until_ready()}
    calls["gemv_1mib"] = gemv_chain_calls(512, (64,))[("gemv_chain_fp32", 64)]
    calls["gemv_16mib"] = gemv_chain_calls(2048, (16,))[("gemv_chain_fp32", 16)]
    return calls


def colocated_worker(start_at: float, reps: int = 15) -> dict[str, list[float]]:
    """In one of k processes started together: compile, wait for the common start time, then `reps` rounds
    of one call of each co-location program: {program: seconds per call}."""
    calls = colocated_calls()
    for fn in calls.values():
        fn()
    while time.time() < start_at:
        time.sleep(0.005)
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(reps):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def run_colocated(process_counts=(1, 2, 4), reps: int = 15, warmup_s: float = 25.0) -> pd.DataFrame:
    """Each program's best time in each of k plain processes (no jax.distributed) running it at the same time,
    for every k: a process's share of the machine is (time alone) / (time with k - 1 others)."""
    import json
    import subprocess
    import sys

    rows = []
    for k in process_counts:
        start_at = time.time() + warmup_s
        code = ("import json, sys; from workbench.measure.profile.colocated import colocated_worker; "
                f"print(json.dumps(colocated_worker({start_at!r}, {int(reps)})))")
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "JAX_PLATFORMS": "cpu"}) for _ in range(k)]
        for i, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"co-located process {i} of {k} failed (exit {proc.returncode})")
            for program, seconds in json.loads(out.strip().splitlines()[-1]).items():
                rows.append({"processes": k, "process": i, "program": program, "best_s": min(seconds),
                             "median_s": float(np.median(seconds))})
    return pd.DataFrame(rows)


COLOCATED_STATISTIC = "median_s"  # calls while the others run too (a best call may find the others idle)


def colocated_shares(table: pd.DataFrame, stat: str = COLOCATED_STATISTIC) -> pd.DataFrame:
    """Per program and process count: the slowest process's time (`stat` over its calls), and each process's
    share of the machine, time alone / that time (1 / k when k processes split the machine evenly)."""
    from workbench.core.errors import WorkbenchError

    if stat not in table or not (table.processes == 1).any():
        raise WorkbenchError(f"co-location rows need a {stat} column and a 1-process run")
    slowest = table.groupby(["program", "processes"], as_index=False)[stat].max()
    alone = slowest[slowest.processes == 1].set_index("program")[stat]
    slowest["share"] = slowest["program"].map(alone) / slowest[stat]
    slowest["even_share"] = 1.0 / slowest["processes"]
    return slowest
