"""Every scheme on one device: splitting nothing, a partition scheme runs what `local` runs.

On one device every scheme that applies gives `local`'s latency (relative 1e-9: the schemes that compute it
themselves sum the same kernel times in another order; the others take local's time,
`workbench.schemes.galaxy.one_device_is_local`). Before, a one-device sweep named a TP scheme the winner:
Hepti's merged step kernels made an encoder's decode 0.61x of `local`, the MCU's tile pipeline 0.72x,
distributed-llama's one-token prefill 0.94x, TPI-LLM's block sums 0.9999x.

Exempt, each by a design that is not `local`'s even on one device (named in `NOT_LOCAL` with the reason):
schemes that stream weights from storage (never faster than `local`), and STI's planned pipeline, which runs
a smaller, lower-bitwidth submodel (trading accuracy for time: it may be faster).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import DATA_DIR, REPO_ROOT
from workbench.machine.hardware import DeviceSpec, load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import MODELS, get_model
from workbench.scenarios.userconfig import load_config
from workbench.schemes import SCHEMES, Cluster, Workload, load_all
from workbench.schemes.base import spec_of

NOT_LOCAL = {
    "tpi_star_tp": "streams every block from storage through its sliding window, also on one device",
    "single_device_streamed": "STI's pipeline without a plan: streams every shard from storage",
    "disk_offload_blocking": "reads every block from storage before computing it",
    "sti_pipeline": "runs STI's planned submodel at elastic bitwidths (less work than the full model)",
}
STREAMS_FROM_STORAGE = ("tpi_star_tp", "single_device_streamed", "disk_offload_blocking")
PRESETS = sorted(p.stem for p in (DATA_DIR / "devices").glob("*.toml"))
EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.toml"))
REL = 1e-9


@cache
def example_devices() -> dict[str, DeviceSpec]:
    """Every distinct device of the example deployments, by name."""
    return {d.name: d for path in EXAMPLES for d in load_config(path).cluster.devices}


def device(name: str) -> DeviceSpec:
    """A preset (data/devices) or an example's device."""
    return example_devices()[name] if name in example_devices() else load_device(name)


def one_device(spec: DeviceSpec) -> Cluster:
    """`spec` alone, with room for any of the models (1 TiB in its outermost memory), so no scheme swaps."""
    roomy = spec.with_memory(spec.memory[-1].name, capacity_bytes=2**40)
    return Cluster((roomy,), Topology("switch", 1, Link.from_mbps(1000, 0.1)))


def latencies(model, cluster: Cluster, workload: Workload) -> dict[str, tuple[float, str]]:
    """Every registered scheme that applies (n/a ones left out) -> (latency, the engine whose kernels it runs)."""
    out = {}
    for name, (_, evaluate) in sorted(load_all().items()):
        try:
            out[name] = (evaluate(model, cluster, workload).latency_s, spec_of(name).engine)
        except WorkbenchError:  # does not apply (e.g. an encoder in a decoder-only engine)
            continue
    return out


def unsplit(model, cluster: Cluster, workload: Workload, engine: str) -> float:
    """The one-device run with `engine`'s kernels (Galaxy's `local`, or layer-wise MP for a mixture of experts)."""
    name = "layerwise_mp" if model.is_moe else "local"
    fmt = {16: "f16", 32: "f32"}[int(workload.weight_bits)]
    return load_all()[name][1](model, cluster, replace(workload, engine=engine, weight_format=fmt)).latency_s


DEVICES = PRESETS + sorted(example_devices())


@pytest.mark.parametrize("name", DEVICES)
def test_every_scheme_is_local_on_one_device(name):
    cluster = one_device(device(name))
    applied, differ = set(), {}
    for model_name in sorted(MODELS):
        model = get_model(model_name)
        for phase in ("prefill", "decode"):
            workload = Workload(phase, 16, 16, weight_bits=16, activation_bits=16)
            ran = latencies(model, cluster, workload)
            # a mixture of experts is held to layer-wise model parallelism on one device (what the MoE partitions
            # take there: `moe.one_device_is_whole`); an engine's scheme is held to that run on the engine's kernels
            applied |= set(ran)
            for scheme, (latency, engine) in ran.items():
                local = unsplit(model, cluster, workload, engine) if engine else \
                    ran["local" if not model.is_moe else "layerwise_mp"][0]
                if scheme in NOT_LOCAL:
                    if scheme in STREAMS_FROM_STORAGE:
                        assert latency >= local * (1 - REL), f"{scheme} beats local on one {name} ({model_name})"
                    continue
                if abs(latency / local - 1) > REL:
                    differ[f"{scheme} {model_name} {phase}"] = round(latency / local, 6)
    assert not differ, f"one {name}: schemes that are not local's latency: {differ}"
    # distributed-llama's schemes are n/a at these 16-bit weights: it has no f16 weight kernel (v0.16.4
    # src/nn/nn-cpu-ops.cpp: F32 and Q40 x Q80 only; data/kernels/dllama_kernels.csv)
    partition = {"megatron_tp", "sp", "galaxy_hmp", "galaxy_hmp_overlap", "hepti_ws", "hepti_1d", "hepti_2d",
                 "mcu_headwise_tp", "tpi_star_tp_resident", "tp_ring_allreduce", "layerwise_mp", "pipeline_offload",
                 "single_device_resident"}
    assert partition <= applied, f"schemes that never applied on one {name}: {partition - applied}"


def test_the_exemptions_are_registered_schemes_and_all_others_are_checked():
    registry = load_all()
    assert set(NOT_LOCAL) <= set(registry) and set(STREAMS_FROM_STORAGE) <= set(NOT_LOCAL)
    assert len(DEVICES) >= len(PRESETS) + 3  # the examples add their own devices


def test_a_one_device_sweep_names_local_the_winner(tmp_path, capsys):
    """The symptom: `whatif --devices 1,...` named a TP scheme (hepti_1d) the best at one device."""
    import argparse

    from workbench.scenarios import whatif

    parser = argparse.ArgumentParser()
    whatif.add_arguments(parser)
    args = parser.parse_args([str(REPO_ROOT / "examples" / "sbc_gigabit.toml"), "--devices", "1,2", "--no-charts"])
    assert whatif.main(args) == 0
    best = capsys.readouterr().out.split("best per device count:")[1].splitlines()
    one = next(line for line in best if line.split()[:1] == ["1"])
    assert one.split()[1] == "local" and one.split()[5] == "local", one


def test_one_device_keeps_the_schemes_own_memory():
    """Only the time is local's: a scheme's memory model (what it holds, OOM) stays its own."""
    from workbench.schemes.galaxy import ONE_DEVICE_NOTE

    load_all()
    model, cluster = get_model("Llama 2-7B"), one_device(load_device("hepti_rpi4"))
    workload = Workload("decode", 16, 16, weight_bits=16, activation_bits=16)
    local = SCHEMES["local"][1](model, cluster, workload)
    tpi = SCHEMES["tpi_star_tp_resident"][1](model, cluster, workload)
    assert tpi.latency_s == local.latency_s and tpi.compute_s == local.compute_s
    assert tpi.peak_memory_bytes != local.peak_memory_bytes and ONE_DEVICE_NOTE in tpi.notes
