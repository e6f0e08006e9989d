"""One process of a local cluster: `python -m workbench.measure.cluster.worker ...` (started by the launcher).

Initialises `jax.distributed` (gloo CPU collectives), runs one experiment from
`workbench.measure.cluster.experiments`, gathers every process's rows on process 0 through the distributed
runtime's key-value store, and process 0 writes them as JSON for the launcher. A watchdog thread
exits the process if its launcher disappears (so a killed launcher leaves no orphans).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass

KV_TIMEOUT_MS = 600_000


@dataclass(frozen=True)
class WorkerContext:
    """What an experiment knows about the cluster it runs in."""

    process_id: int
    num_processes: int
    devices_per_process: int
    link_class: str

    @property
    def is_root(self) -> bool:
        """Process 0 (gathers results)."""
        return self.process_id == 0

    @property
    def n_devices(self) -> int:
        """Devices in the global mesh."""
        return self.num_processes * self.devices_per_process


def _watch_parent(parent_pid: int) -> None:
    """Exit hard when the launcher is gone (re-parented), so no worker outlives it."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m workbench.measure.cluster.worker")
    p.add_argument("--process-id", type=int, required=True)
    p.add_argument("--num-processes", type=int, required=True)
    p.add_argument("--coordinator", required=True, help="host:port of process 0's coordinator service")
    p.add_argument("--coordinator-bind", default=None,
                   help="host:port process 0's coordinator listens on (default: --coordinator, so it binds only "
                        "the address the processes use, never every interface)")
    p.add_argument("--devices-per-process", type=int, default=1)
    p.add_argument("--experiment", required=True)
    p.add_argument("--params", default="{}", help="JSON object of experiment parameters")
    p.add_argument("--result", required=True, help="where process 0 writes the gathered rows (JSON)")
    p.add_argument("--link-class", default="loopback")
    p.add_argument("--parent-pid", type=int, default=0)
    p.add_argument("--init-timeout", type=int, default=120)
    p.add_argument("--cpu", type=int, default=None, help="run on this core only (set before JAX starts its threads)")
    return p.parse_args(argv)


def configure_jax(devices_per_process: int):
    """CPU platform, K local devices, gloo cross-process collectives; returns the jax module."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices_per_process)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    return jax


def gather_rows(client, ctx: WorkerContext, rows: list[dict]) -> list[dict]:
    """Every process's rows on process 0 (tagged with `process`), via the coordinator's key-value store."""
    client.key_value_set(f"workbench/rows/{ctx.process_id}", json.dumps(rows))
    if not ctx.is_root:
        return []
    out = []
    for i in range(ctx.num_processes):
        for row in json.loads(client.blocking_key_value_get(f"workbench/rows/{i}", KV_TIMEOUT_MS)):
            out.append({"process": i, **row} if "process" not in row else row)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    ctx = WorkerContext(args.process_id, args.num_processes, args.devices_per_process, args.link_class)
    jax = configure_jax(args.devices_per_process)
    from jax._src import distributed

    from workbench.measure.cluster.experiments import get_experiment

    experiment = get_experiment(args.experiment)
    params = json.loads(args.params)
    # jax's default bind address is [::]:PORT (every interface, no authentication): bind only the
    # address the processes connect to (loopback, or the namespace bridge's address of process 0).
    jax.distributed.initialize(coordinator_address=args.coordinator, num_processes=args.num_processes,
                               process_id=args.process_id, initialization_timeout=args.init_timeout,
                               coordinator_bind_address=args.coordinator_bind or args.coordinator)
    # On an exception the process exits without the shutdown barrier (which would wait for the
    # others); the launcher sees the exit code and ends the rest.
    started = time.perf_counter()
    rows = experiment(ctx, **params) or []
    rows = gather_rows(distributed.global_state.client, ctx, rows)
    if ctx.is_root:
        from workbench.core.io import write_text_atomic

        meta = {"experiment": args.experiment, "params": params, "processes": args.num_processes,
                "devices_per_process": args.devices_per_process, "link_class": args.link_class,
                "seconds": time.perf_counter() - started, "jax_version": jax.__version__}
        write_text_atomic(args.result, json.dumps({"meta": meta, "rows": rows}))
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except BaseException:  # the launcher shows this log tail when the process dies
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
