"""Measure the per-message time of this machine's namespace / veth / bridge path with a TCP ping-pong in each
distributed-llama version's read pattern (`workbench.measure.engines.pingpong`) and store it, measured, in
data/constants/netns_links.toml. Needs root, ip, tc and gcc; under a minute. Run it with the machine otherwise
quiet (it takes /tmp/engine-timing.lock like every timing run).

    PYTHONPATH=. python scripts/netns_pingpong.py [--rounds 4000] [--out data/constants/netns_links.toml]
"""

from __future__ import annotations

import argparse
import os
import platform
from datetime import UTC, datetime

from workbench.core.constants import Constant, constants_toml
from workbench.core.io import write_text_atomic
from workbench.measure.engines.pingpong import MODES, measure
from workbench.measure.engines.timing import timing_slot

SIZES = (64, 544, 2176)  # a tiny message, d_model Q80 partial and x (F32) of the runs' 512-wide shapes
GAPS_US = (100, 1000)  # the worker busy before it replies: the root's read then blocks that long first


def main() -> None:
    """Measure each version's pattern at each size; store the 64-byte mean as the per-message constant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/constants/netns_links.toml")
    parser.add_argument("--rounds", type=int, default=4000)
    parser.add_argument("--link-mbit", type=float, default=1000.0)
    args = parser.parse_args()
    host = f"{platform.node()} ({os.cpu_count()} vCPUs, Linux {platform.release()})"
    header = ("Per-message time of this machine's namespace path (workbench.measure.cluster.netns: veth -> bridge -> veth, tbf\n"
              "at the link rate), measured apart from every engine run by scripts/netns_pingpong.py\n"
              "(workbench/measure/engines/native/pingpong.c): half the mean TCP round trip of a small message, each side\n"
              "reading the way distributed-llama's process does at that version (workbench/measure/engines/pingpong.py).\n"
              "The prediction of the engine runs charges it per message (Link.message_overhead_s); it is not fitted\n"
              "on those runs.")
    constants = {}
    for version in MODES:
        results = []
        for size in SIZES:
            with timing_slot() as load:
                r = measure(version, size, args.rounds, args.link_mbit)
            results.append((r, load))
            print(f"{version} {size} B: mean {r.mean_s * 1e6:.1f} us, median {r.median_s * 1e6:.1f} us, "
                  f"p90 {r.p90_s * 1e6:.1f} us one way (load {load:.2f})", flush=True)
        gapped = []
        for gap in GAPS_US:
            with timing_slot():
                r = measure(version, SIZES[0], max(args.rounds // 2, 10), args.link_mbit, gap)
            gapped.append((gap, r))
            print(f"{version} {SIZES[0]} B, reply after {gap} us: mean {r.mean_s * 1e6:.1f} us, median "
                  f"{r.median_s * 1e6:.1f} us one way beyond the gap", flush=True)
        small, load = results[0]
        others = "; ".join(f"{r.message_bytes} B: mean {r.mean_s * 1e6:.1f} us, median {r.median_s * 1e6:.1f} us"
                           for r, _ in results[1:])
        others += "; 64 B with the worker busy before each reply (beyond the gap): " + "; ".join(
            f"{gap} us: mean {r.mean_s * 1e6:.1f} us, median {r.median_s * 1e6:.1f} us" for gap, r in gapped)
        root_mode, worker_mode = MODES[version]
        name = f"netns_message_overhead_{version.replace('.', '_')}"
        constants[name] = Constant(
            name, float(f"{small.mean_s:.4g}"), "s", "measured",
            f"scripts/netns_pingpong.py on {host}, {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}, 1-min load "
            f"{load:.2f} before the run: {small.rounds} TCP round trips of {small.message_bytes} B (the first tenth "
            f"dropped) between two namespaces on the bridge at tbf {args.link_mbit:g} Mbit, root side {root_mode}, "
            f"worker side {worker_mode} (distributed-llama {version}'s reads), TCP_NODELAY; half the mean round trip "
            f"(median {small.median_s * 1e6:.1f} us, p90 {small.p90_s * 1e6:.1f} us); larger messages: {others}")
    write_text_atomic(args.out, constants_toml(constants, header))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
