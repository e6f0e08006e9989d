"""A step's host work outside the kernels (input preparation, sampling): measured, and charged once per step."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from workbench.machine.hardware import load_device
from workbench.measure.cluster.collectives import LinkModel
from workbench.measure.cluster.predict import evaluate, shared_device, this_machine_cluster
from workbench.measure.profile.microbench import fixed_costs
from workbench.model.models import get_model
from workbench.schemes import common
from workbench.schemes.base import Workload

DECODE = Workload("decode", seq_len=36, kv_len=36, weight_bits=32, activation_bits=32)
STEP = 1e-3


def test_the_step_fixed_time_carries_the_host_work_once_with_the_head():
    model, dev = get_model("TinyLlama-42M"), load_device("this_machine_cpu")
    off, on = dev.with_changes(step_overhead_s=0.0), dev.with_changes(step_overhead_s=STEP)
    assert common.step_fixed_time(model, on, DECODE) - common.step_fixed_time(model, off, DECODE) == pytest.approx(STEP)
    assert common.step_fixed_time(model, on, DECODE, lm_head=False) == common.step_fixed_time(model, off, DECODE,
                                                                                               lm_head=False)


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_tpi_llm_charges_it_once_per_step_on_the_master(processes):
    model, dev = get_model("TinyLlama-42M"), load_device("this_machine_cpu")
    link = LinkModel("loopback", 1e-4, 0.0, 1e-9)
    times = []
    on_machine = []
    for step in (0.0, STEP):
        cluster = this_machine_cluster(dev.with_changes(step_overhead_s=step), processes, link)
        on_machine.append(evaluate(model, cluster, "decode", 32, 8).latency_s)
        # the master's work on its own share of the machine (no shared machine to run it on)
        times.append(evaluate(model, replace(cluster, shared_machine=None), "decode", 32, 8).latency_s)
    stretch = max(1.0, processes / dev.cores)  # a process with less than a core does its host work slower
    assert times[1] - times[0] == pytest.approx(STEP * stretch, rel=1e-6)
    # co-located processes: the others wait for the master's host work, which runs on the whole machine
    assert on_machine[1] - on_machine[0] == pytest.approx(STEP, rel=1e-6)


def test_co_located_processes_stretch_it_like_the_other_fixed_costs():
    dev = load_device("this_machine_cpu").with_changes(step_overhead_s=STEP, cores=2)
    assert shared_device(dev, 2).step_overhead_s == pytest.approx(STEP)
    assert shared_device(dev, 4).step_overhead_s == pytest.approx(2 * STEP)


def test_the_micro_benchmark_reports_the_host_step_and_the_preset_stores_it():
    rows = pd.DataFrame([{"benchmark": "jit_dispatch", "size": 1, "seconds": 6e-6},
                         {"benchmark": "host_step", "size": 1, "seconds": 8e-4},
                         {"benchmark": "numpy_op", "size": 8, "seconds": 4e-7}]
                        + [{"benchmark": "kernel_chain", "size": k, "seconds": 1e-5 + k * 1e-6} for k in (1, 17)]
                        + [{"benchmark": "tiny_layers", "size": n, "seconds": 1e-5 + n * 2e-5} for n in (1, 3)])
    assert fixed_costs(rows)["host_step"] == pytest.approx(8e-4)
    assert fixed_costs(rows[rows.benchmark != "host_step"])["host_step"] == 0.0
    stored = load_device("this_machine_cpu").provenance["step_overhead"]
    assert stored.kind == "measured" and "host_step_call" in stored.source and float(stored.value) > 0
