"""Run distributed-llama (v0.4.0 dense, v0.16.4 dense and Qwen3-MoE) over shaped links and store the decode rows in
data/engines/dllama_runs.csv (`workbench.measure.engines.dllama.run_dllama`). Needs root, ip, tc and g++; a few minutes.

    PYTHONPATH=. python scripts/dllama_runs.py [--out data/engines/dllama_runs.csv] [--tokens 32]
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import replace

from workbench.measure.cluster.netns import tight_burst_bytes
from workbench.measure.engines.dllama import SHAPES, repredicted, run_dllama
from workbench.measure.engines.pingpong import message_overhead_s
from workbench.measure.engines.runs import read_runs, write_runs

SHARED = ("{n} processes x 1 thread on {cpus} vCPUs ({how}; the workers spin on their sockets, and v0.16.4's root "
          "too); other helpers' niced jobs ran beside them (not paused); ")

# (version, shape, processes, link Mbit, tbf burst bytes; 0 = LinkShape's default bucket)
CONFIGS = [(v, s, n, mbit, 0) for v, s in (("v0.4.0", "dense-512x4"), ("v0.16.4", "dense-512x4"),
                                           ("v0.16.4", "qwen3moe-512x2"))
           for n in (2, 4) for mbit in (10.0, 100.0, 1000.0)]
# 10 Mbit with the smallest bucket tbf takes at HZ 250 (rate / HZ = 5 kB), rounded up to 6 KiB
CONFIGS += [(v, s, 2, 10.0, 6144) for v, s in (("v0.4.0", "dense-512x4"), ("v0.16.4", "dense-512x4"),
                                               ("v0.16.4", "qwen3moe-512x2"))]
# one frame (`netns.tight_burst_bytes`, what `engines run` uses): every message is shaped, as on llama.cpp's runs
CONFIGS += [(v, s, 2, mbit, tight_burst_bytes(mbit)) for v, s in (("v0.4.0", "dense-512x4"),
                                                                  ("v0.16.4", "dense-512x4"),
                                                                  ("v0.16.4", "qwen3moe-512x2"))
            for mbit in (10.0, 100.0)]


def _kept(row):
    """A stored row kept as it ran, its prediction from the current model and its contention spelled out."""
    cpus = os.cpu_count() or 1
    how = "oversubscribed: processes share vCPUs" if row.processes > cpus else "one vCPU each"
    mark = SHARED.format(n=row.processes, cpus=cpus, how=how)
    contention = row.contention if "1-min load" in row.contention else mark + f"1-min load {row.load_1min:.2f}"
    per_message = f"{message_overhead_s(row.engine_version) * 1e6:.1f} us per message"
    method = row.method.replace("no latency or per-message time", f"{per_message} (measured ping-pong, "
                                "data/constants/netns_links.toml), no wire latency (prediction recomputed after the run)")
    method = re.sub(r"[0-9.]+ us per message \(measured", f"{per_message} (measured", method)
    if "us per message" not in method:
        method += (f"; predicted (recomputed after the run): {row.scheme} on this_machine_xeon x {row.processes} (1 "
                   f"thread each), a switch at the shaped rate, {per_message} (measured ping-pong, "
                   "data/constants/netns_links.toml), no wire latency")
    return replace(repredicted(row), contention=contention, method=method)


def main() -> None:
    """Run every configuration once and write the rows atomically."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/engines/dllama_runs.csv")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--contention", default="")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--processes", type=int, nargs="*", default=[2, 4], help="only these process counts")
    parser.add_argument("--append", action="store_true", help="keep the rows already in --out")
    parser.add_argument("--keep", type=int, nargs="*", default=[],
                        help="keep the stored rows of these process counts (re-predicted, contention marked)")
    parser.add_argument("--bursts", type=int, nargs="*", default=None, help="only these tbf bursts (0 = default)")
    args = parser.parse_args()
    rows = read_runs(args.out) if args.append else []
    if args.keep:
        rows += [_kept(r) for r in read_runs(args.out) if r.processes in args.keep]
    todo = [c for c in CONFIGS if c[2] in args.processes and (args.bursts is None or c[4] in args.bursts)]
    for version, shape, n, mbit, burst in todo * args.repeats:
        got = run_dllama(version, SHAPES[shape], n, mbit, args.tokens, "build/engines/dllama-runs",
                         contention=args.contention, burst_bytes=burst)
        rows += got
        for row in got:
            print(f"{version} {shape} n={n} {mbit:g} Mbit burst={burst} {row.phase}: "
                  f"{row.seconds_per_token * 1e3:.2f} ms measured, {row.predicted_seconds_per_token * 1e3:.2f} ms "
                  f"predicted, comm {row.comm_share:.2f}, load {row.load_1min:.2f}", flush=True)
    write_runs(args.out, rows)
    print(f"wrote {len(rows)} rows to {args.out} (pid {os.getpid()})")


if __name__ == "__main__":
    main()
