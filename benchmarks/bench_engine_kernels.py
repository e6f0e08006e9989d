"""llama.cpp on this machine against the workbench: every row of the stored campaign (data/engines/
llamacpp_campaign.csv: formats x sizes x threads, decode and prefill, one MoE shape) predicted three ways and printed
as predicted / measured:

* `before`: the format's bits at the dense rates of `this_machine_cpu` (the JAX micro-benchmark profile), no engine
  kernels: what the workbench gave before `workbench.machine.kernel_cost`;
* `datasheet`: `this_machine_xeon` (clock, cores, ISA, the core's issue rates; AVX2 as the engines extra builds it),
  llama.cpp's counted kernels;
* `profile`: `this_machine_llamacpp_t1` / `_t2` (`python -m workbench profile --engine llama.cpp`: the engine's own
  kernel rates on a cache-resident shape, its fixed costs, the stream rate at the thread count).

Run: .venv/bin/pytest benchmarks/bench_engine_kernels.py --benchmark-enable -s"""

from __future__ import annotations

import pandas as pd

from workbench.machine.hardware import load_device
from workbench.measure.engines import campaign
from workbench.measure.engines.cli import compare, summary


def devices() -> dict[str, dict]:
    """The three descriptions of this machine, per thread count."""
    return {"before": {None: load_device("this_machine_cpu")},
            "datasheet": {None: campaign.as_built(load_device("this_machine_xeon"))},
            "profile": {t: load_device(f"this_machine_llamacpp_t{t}") for t in campaign.THREADS}}


def test_engine_kernels_against_llamacpp_here(benchmark):
    rows = pd.read_csv(campaign.CAMPAIGN_CSV)
    table = benchmark.pedantic(compare, args=(rows, devices(), {"before": False}), rounds=1, iterations=1)
    cols = ["shape", "format", "threads", "phase", "seconds", "error_before", "error_datasheet", "error_profile"]
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:+.3f}" if abs(v) < 10 else f"{v:.3g}"))
        print(summary(table, ["before", "datasheet", "profile"]).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    assert table["error_profile"].notna().all()
