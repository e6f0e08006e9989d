"""Run distributed-llama (v0.4.0 dense, v0.16.4 dense and Qwen3-MoE) over shaped links and store the decode rows in
data/engines/dllama_runs.csv (`workbench.engines.dllama.run_dllama`). Needs root, ip, tc and g++; a few minutes.

    PYTHONPATH=. python scripts/dllama_runs.py [--out data/engines/dllama_runs.csv] [--tokens 32]
"""

from __future__ import annotations

import argparse
import os

from workbench.engines.dllama import SHAPES, run_dllama
from workbench.engines.runs import read_runs, write_runs

# (version, shape, processes, link Mbit, tbf burst bytes; 0 = LinkShape's default bucket)
CONFIGS = [(v, s, n, mbit, 0) for v, s in (("v0.4.0", "dense-512x4"), ("v0.16.4", "dense-512x4"),
                                           ("v0.16.4", "qwen3moe-512x2"))
           for n in (2, 4) for mbit in (10.0, 100.0, 1000.0)]
# 10 Mbit with the smallest bucket tbf takes at HZ 250 (rate / HZ = 5 kB), rounded up to 6 KiB
CONFIGS += [(v, s, 2, 10.0, 6144) for v, s in (("v0.4.0", "dense-512x4"), ("v0.16.4", "dense-512x4"),
                                               ("v0.16.4", "qwen3moe-512x2"))]


def main() -> None:
    """Run every configuration once and write the rows atomically."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/engines/dllama_runs.csv")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--contention", default="")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--processes", type=int, nargs="*", default=[2, 4], help="only these process counts")
    parser.add_argument("--append", action="store_true", help="keep the rows already in --out")
    args = parser.parse_args()
    rows = read_runs(args.out) if args.append else []
    for version, shape, n, mbit, burst in [c for c in CONFIGS if c[2] in args.processes] * args.repeats:
        got = run_dllama(version, SHAPES[shape], n, mbit, args.tokens, "build/engines/dllama-runs",
                         contention=args.contention, burst_bytes=burst)
        rows += got
        row = got[0]
        print(f"{version} {shape} n={n} {mbit:g} Mbit burst={burst}: {row.seconds_per_token * 1e3:.2f} ms measured, "
              f"{row.predicted_seconds_per_token * 1e3:.2f} ms predicted, comm {row.comm_share:.2f}, "
              f"load {row.load_1min:.2f}", flush=True)
    write_runs(args.out, rows)
    print(f"wrote {len(rows)} rows to {args.out} (pid {os.getpid()})")


if __name__ == "__main__":
    main()
