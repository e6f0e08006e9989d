"""Measure an accelerator (a lent GPU) for the per-layer roofline: microbenchmarks and reference layers.

Microbenchmarks (`micro.csv`, one row per measurement): the time of one jitted call waited for and of
calls issued back to back (the fixed cost a jit call pays), a chain of K dependent small matmuls (the
in-program cost of each kernel launched), streaming reads and copies of 1 MiB to 1 GiB (the memory
bandwidth, and how small kernels fall short of it), a GEMV over a 512 MiB matrix (what a decode step
streams), and 8192-wide GEMMs of 1 to 8192 rows in bf16 and fp32 (JAX's default precision, TF32 on
Hopper; and at full precision). Layers (`layers.csv`): the reference block of every paper model
(`workbench.model.models.MODELS`), prefill at 128 and 512 tokens and (decoders) one decode step at 128 and
1024 cached tokens, in bf16 and fp32, each call rotating over enough weight sets to stream 256 MiB (the
H100's 50 MB L2 would otherwise hold a small model's layer), with the kernels the compiled block
launches. `info.json` names the device, driver, clocks and software; `hlo.tar.gz` keeps a few compiled
blocks for reading. Wall times are measured and vary run to run; everything else is deterministic.

    PYTHONUNBUFFERED=1 python3 scripts/measure_accelerator.py --out $OUT
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2**20
PREFILL_TOKENS = (128, 512)
DECODE_CACHED = (128, 1024)
DTYPES = ("bf16", "fp32")
ROTATE_BYTES = 256 * MIB
STACK_LAYERS = 8  # blocks run in turn in one jitted call, as in a model: per-block time without per-call dispatch
REPS = 20
HLO_SAMPLES = {("Llama 2-7B", "prefill", 128, "bf16"), ("TinyLlama-42M", "decode", 128, "bf16")}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def write_csv(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    pd.DataFrame(rows).to_csv(tmp, index=False)
    os.replace(tmp, path)


def timed(fn, args_list, reps: int) -> tuple[float, float]:
    """(median seconds of a call waited for, mean seconds per call of `reps` calls issued back to back)."""
    from workbench.kernels.accelerator import time_calls

    times, pipelined_s = time_calls(fn, args_list, reps)
    return float(np.median(times)), pipelined_s


def micro(out: Path, smoke: bool = False) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from workbench.kernels.accelerator import kernel_count

    rows: list[dict] = []

    def add(test: str, size: float, unit: str, sync_s: float, pipelined_s: float, work: float = 0.0,
            work_unit: str = "", kernels: int | None = None, dtype: str = "") -> None:
        rows.append({"test": test, "size": size, "size_unit": unit, "dtype": dtype, "sync_s": sync_s,
                     "pipelined_s": pipelined_s, "work": work, "work_unit": work_unit, "kernels": kernels})
        rate = f", {work / pipelined_s:.4g} {work_unit}/s" if work else ""
        log(f"{test} {size:g} {unit} {dtype}: sync {sync_s * 1e6:.1f} us, pipelined {pipelined_s * 1e6:.1f} us{rate}")
        write_csv(out / "micro.csv", rows)

    key = jax.random.PRNGKey(0)
    one = jnp.ones((1,), jnp.float32)
    f = jax.jit(lambda x: x + 1)
    add("empty_call", 1, "element", *timed(f, [(one,)], 300), kernels=kernel_count(f.lower(one).compile().as_text()))

    w_kk = [jax.random.normal(jax.random.fold_in(key, i), (64, 64)) / 8 for i in range(256)]
    x = jax.random.normal(key, (16, 64))
    for k in (1, 16, 64, 256):
        def chain(x, ws):
            for w in ws:
                x = jnp.tanh(x @ w)
            return x
        fk = jax.jit(chain)
        args = (x, w_kk[:k])
        add("matmul_chain", k, "matmuls", *timed(fk, [args], 100),
            kernels=kernel_count(fk.lower(*args).compile().as_text()), dtype="fp32")

    for mib in ((1, 4) if smoke else (1, 4, 16, 64, 256, 1024)):
        n = mib * MIB // 4
        sets = [(jax.random.normal(jax.random.fold_in(key, 100 + i), (n,)),) for i in range(max(1, 256 // mib))]
        fr = jax.jit(lambda a: jnp.sum(a))
        add("read_sum", mib, "MiB", *timed(fr, sets, 50), work=n * 4, work_unit="B", dtype="fp32",
            kernels=kernel_count(fr.lower(*sets[0]).compile().as_text()))
        fc = jax.jit(lambda a: a * 1.5 + 1.0)
        add("copy_scale", mib, "MiB", *timed(fc, sets, 50), work=2 * n * 4, work_unit="B", dtype="fp32")
        del sets

    for dtype, jdt in (("bf16", jnp.bfloat16), ("fp32", jnp.float32)):
        wide = 1024 if smoke else 8192
        w = jax.random.normal(key, (wide, 4 * wide if dtype == "bf16" else 2 * wide)).astype(jdt)
        v = jax.random.normal(key, (1, wide)).astype(jdt)
        fg = jax.jit(lambda v, w: v @ w)
        add("gemv", w.size * w.dtype.itemsize / MIB, "MiB", *timed(fg, [(v, w)], 50), work=w.size * w.dtype.itemsize,
            work_unit="B", dtype=dtype)
        del w

    for dtype, jdt, precision in (("bf16", jnp.bfloat16, None), ("fp32", jnp.float32, None),
                                  ("fp32_highest", jnp.float32, jax.lax.Precision.HIGHEST)):
        n = 512 if smoke else 8192
        b = jax.random.normal(jax.random.fold_in(key, 7), (n, n)).astype(jdt)
        for m in ((n,) if precision else (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)[:3 if smoke else 10]):
            a = jax.random.normal(jax.random.fold_in(key, m), (m, n)).astype(jdt)
            fm = jax.jit(lambda a, b, p=precision: jnp.matmul(a, b, precision=p))
            add(f"gemm_k{n}_n{n}", m, "rows", *timed(fm, [(a, b)], 20), work=2.0 * m * n * n,
                work_unit="FLOP", dtype=dtype)
    return rows


def _measure_points(out: Path, points: list, deadline: float, rows: list[dict], hlo: dict[str, str]) -> None:
    import jax

    from workbench.kernels.accelerator import _block_call, measure_layer_latency
    from workbench.model.models import MODELS

    for name, phase, seq_len, kv_len in points:
        for dtype in DTYPES:
            if time.time() > deadline:
                log(f"deadline reached: {name} {phase} {kv_len} {dtype} and later points not measured")
                return
            cfg = MODELS[name]
            try:
                r = measure_layer_latency(cfg, phase, seq_len, kv_len, reps=REPS, dtype=dtype, pipelined=True,
                                          rotate_bytes=ROTATE_BYTES, layers=STACK_LAYERS)
            except Exception as exc:  # noqa: BLE001 - one failed point is logged, the others still run
                log(f"FAILED {name} {phase} {kv_len} {dtype}: {type(exc).__name__}: {exc}"[:400])
                continue
            rows.append(r)
            log(f"{name} {phase} s={seq_len} t={kv_len} {dtype}: sync {r['measured_s'] * 1e6:.1f} us, "
                f"pipelined {r['pipelined_s'] * 1e6:.1f} us, {r['kernels']:g} kernels, {r['weight_sets']} sets")
            write_csv(out / "layers.csv", rows)
            if (name, phase, kv_len, dtype) in HLO_SAMPLES:
                fn, sets = _block_call(cfg, phase, seq_len, kv_len, 0, dtype)
                hlo[f"{name}_{phase}_{kv_len}_{dtype}.hlo".replace(" ", "_")] = fn.lower(*sets[0]).compile().as_text()
            jax.clear_caches()


def dispatch(out: Path) -> list[dict]:
    """A jit call's fixed cost by its argument count: an empty program of 1, 4, 16 and 64 arguments."""
    import jax
    import jax.numpy as jnp

    rows = []
    for n_args in (1, 4, 16, 64):
        args = tuple(jnp.full((1,), float(i)) for i in range(n_args))
        fn = jax.jit(lambda *a: a[0] + a[-1])
        sync_s, pipelined_s = timed(fn, [args], 300)
        rows.append({"test": "empty_call_args", "size": n_args, "size_unit": "arguments", "sync_s": sync_s,
                     "pipelined_s": pipelined_s})
        log(f"empty call, {n_args} arguments: sync {sync_s * 1e6:.1f} us, pipelined {pipelined_s * 1e6:.1f} us")
        write_csv(out / "dispatch.csv", rows)
    return rows


def gemv_chain(out: Path, smoke: bool = False) -> list[dict]:
    """In-program time of one decode-shaped GEMV by its size: a jitted chain of K dependent GEMVs over
    distinct square matrices of B bytes (K = 4 and 16; the slope is the time per GEMV without the per-call
    cost), calls rotating over enough matrix sets to stream 256 MiB so the 50 MB L2 does not hold them."""
    import jax
    import jax.numpy as jnp

    from workbench.kernels.accelerator import kernel_count

    rows = []
    sizes_kib = (64, 256) if smoke else (64, 256, 1024, 4096, 16384, 65536)
    for dtype, jdt, width in (("bf16", jnp.bfloat16, 2), ("fp32", jnp.float32, 4)):
        for kib in sizes_kib:
            n = int((kib * 1024 / width) ** 0.5)
            for k in (4, 16):
                n_sets = max(1, int(np.ceil(ROTATE_BYTES / (k * n * n * width))))
                key = jax.random.PRNGKey(kib + k)
                draw = jax.jit(lambda key, n=n, k=k, jdt=jdt: [jax.random.normal(kk, (n, n)).astype(jdt) / n ** 0.5
                                                                for kk in jax.random.split(key, k)])
                sets = [(jax.random.normal(key, (1, n)).astype(jdt), draw(jax.random.fold_in(key, i)))
                        for i in range(n_sets)]

                def chain(x, ws):
                    for w in ws:
                        x = jnp.tanh(x @ w)
                    return x

                fn = jax.jit(chain).lower(*sets[0]).compile()
                sync_s, pipelined_s = timed(fn, sets, 40)
                rows.append({"test": "gemv_chain", "dtype": dtype, "matrix_bytes": n * n * width, "n": n,
                             "gemvs": k, "sets": n_sets, "sync_s": sync_s, "pipelined_s": pipelined_s,
                             "kernels": kernel_count(fn.as_text())})
                log(f"gemv chain {dtype} {n}x{n} x{k}: pipelined {pipelined_s * 1e6:.1f} us, "
                    f"{rows[-1]['kernels']} kernels, {n_sets} sets")
                write_csv(out / "gemv_chain.csv", rows)
                del sets
    return rows


def layers(out: Path, deadline: float, models: list[str] | None = None) -> list[dict]:
    from workbench.model.models import MODELS

    rows: list[dict] = []
    hlo: dict[str, str] = {}
    variants = [("prefill", PREFILL_TOKENS[0]), ("decode", DECODE_CACHED[0]), ("prefill", PREFILL_TOKENS[1]),
                ("decode", DECODE_CACHED[1])]  # the first of each phase for every model before the second
    points = []
    for phase, tokens in variants:
        for name, cfg in MODELS.items():
            if (models and name not in models) or (phase == "decode" and not cfg.is_decoder):
                continue
            points.append((name, phase, tokens if phase == "prefill" else 1, tokens))
    try:
        _measure_points(out, points, deadline, rows, hlo)
    finally:
        with tarfile.open(out / "hlo.tar.gz", "w:gz") as tar:
            for fname, text in sorted(hlo.items()):
                data = text.encode()
                entry = tarfile.TarInfo(fname)
                entry.size = len(data)
                tar.addfile(entry, io.BytesIO(data))
    return rows


def info(out: Path) -> None:
    import jax

    query = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
    try:
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        smi = f"nvidia-smi failed: {exc}"
    payload = {"date": time.strftime("%Y-%m-%d"), "jax": jax.__version__, "backend": jax.default_backend(),
               "device_kind": jax.devices()[0].device_kind, "python": platform.python_version(),
               "xla_flags": os.environ.get("XLA_FLAGS", ""), "nvidia_smi": smi}
    (out / "info.json").write_text(json.dumps(payload, indent=1) + "\n")
    log(json.dumps(payload))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "accelerator_out")))
    parser.add_argument("--only", nargs="+", choices=("micro", "dispatch", "gemv_chain", "layers"),
                        default=["micro", "dispatch", "layers"])
    parser.add_argument("--models", nargs="+", help="only these models' layers (default every model)")
    parser.add_argument("--smoke", action="store_true", help="small sizes: check the script runs (CPU)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop starting layer points after this")
    args = parser.parse_args(argv)
    start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    info(args.out)
    if "micro" in args.only:
        micro(args.out, args.smoke)
    if "gemv_chain" in args.only:
        gemv_chain(args.out, args.smoke)
    if "dispatch" in args.only:
        dispatch(args.out)
    if "layers" in args.only:
        layers(args.out, start + args.budget_s, args.models)
    info(args.out)
    log(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
