"""Shared test data: the arena cases whose latency and roofline time (compute_s) were captured before issue 31
split memory streaming out of compute_s (tests/golden/streaming_split_before.json)."""

from __future__ import annotations

from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.scenarios.arena import run_arena
from workbench.schemes.base import Cluster

CLUSTERS = {  # preset ids, one per device: one board, four, a mixed cluster, laptops, a datacenter GPU, chips
    "nano-m x1": ("jetson_nano_cpu_m",),
    "nano-m x4": ("jetson_nano_cpu_m",) * 4,
    "mixed x4": ("hepti_rpi4", "hepti_rpi4", "jetson_nano_cpu_l", "jetson_nano_gpu_460"),
    "m1 x2": ("tpi_mac_pro_m1",) * 2,
    "h100 x1": ("h100_sxm",),
    "siracusa x8": ("siracusa",) * 8,
}
MODELS = (("Llama 2-7B", 4.5), ("TinyLlama-42M", 16.0), ("BERT-L", 16.0))


def cluster(name: str) -> Cluster:
    """The named cluster on a 1 Gbit switch (50 us per hop), one preset object per id (count = N shares it)."""
    presets = {i: load_device(i) for i in set(CLUSTERS[name])}
    devices = tuple(presets[i] for i in CLUSTERS[name])
    return Cluster(devices, Topology("switch", len(devices), Link.from_mbps(1000.0, 0.05)))


def case_tables():
    """(case key prefix, arena table) for every cluster x model at 128 tokens, both phases."""
    for cname in CLUSTERS:
        for model, bits in MODELS:
            table = run_arena(get_model(model), cluster(cname), seq_len=128, weight_bits=bits).table()
            yield f"{cname}|{model}|{bits:g}", table
