"""Generic baselines no one paper owns: one device with every weight resident (swapping past DRAM), one device
reading every block from storage (Accelerate's disk offload), and layer-sequential model parallelism.

TPI-LLM's Sec. 4.3-4.4 compares against them (Standalone / Transformers, Accelerate, MP), so they reuse its
memory model (`workbench.schemes.tpi_llm`: Table-4 blocks, runtime overhead, KV cache, DRAM + swap); their
compute is the shared single-device step (`common.step_time`: every layer's kernels on the device plus the
decoder's next-token logits), the same number Galaxy's `local` gives for the layers.

Registered evaluators (paper "baseline"): ``single_device_resident``, ``disk_offload_blocking``,
``layerwise_mp``.
"""

from __future__ import annotations

import numpy as np

from workbench.core.apportion import even_split
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, register
from workbench.schemes.tpi_llm import (
    Block,
    access_links,
    default_options,
    device_blocks,
    kv_bytes,
    memory_limit,
    p2p_time,
    scheme_result,
    storage_rate,
    table4_block_params,
)

# the schemes this module registers
SINGLE_DEVICE, DISK_OFFLOAD, LAYERWISE_MP = "single_device_resident", "disk_offload_blocking", "layerwise_mp"


@register("single_device_resident", "baseline", no_operators=common.WHOLE_STEP_ROWS,
          origin="TPI-LLM Sec. 4.3's Standalone / Transformers baseline",
          partition="one", moe=True)
def evaluate_single_device(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Standalone / Transformers on device 0: all weights resident, swapped when they exceed DRAM.

    Each pass touches every weight in the same order, so once they exceed DRAM the OS's LRU evicts
    every page before its reuse: every pass pages all weights in from swap (a mixture of experts' pass touches
    only its tokens' experts: `untouched_expert_bytes` are never paged in). The first pass also
    writes them out (they are dirty anonymous pages until swapped once), so it moves twice the bytes.
    """
    opts = default_options()
    dev, bits = cluster.devices[0], workload.weight_bits
    blocks = device_blocks(model, 1.0, True)
    weights = sum(b.params for b in blocks) * bits / 8
    peak = weights + opts.runtime_overhead_bytes + kv_bytes(model, 1.0, opts.context_tokens, bits)
    compute = common.step_time(model, dev, workload)
    swapping = peak > dev.memory_bytes
    passes = 2.0 if workload.phase == "prefill" else 1.0
    touched = weights - untouched_expert_bytes(model, workload)
    swap = passes * touched / storage_rate(dev, "swap", "swapping its weights") if swapping else 0.0
    return scheme_result("single_device_resident", "baseline", workload, compute + swap,
                   {"compute_s": compute, "wait_s": swap, "fixed_s": common.step_fixed_time(model, dev, workload)}, (peak,), (memory_limit(dev),),
                   "swaps every weight each pass" if swapping else "fits in DRAM")


def untouched_expert_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of the experts a step's tokens do not route to (their pages are never touched, so never swapped
    in): every MoE layer's experts less those the routing union touches (`common.experts_touched`); 0 if dense."""
    if not model.is_moe:
        return 0.0
    touched = float(common.experts_touched(model, workload, workload.new_tokens)) - model.n_shared_experts
    return model.moe_layers * (model.n_experts - touched) * common.weight_bytes(model.expert_params(),
                                                                                 workload.weight_bits)


@register("disk_offload_blocking", "baseline", no_operators=common.WHOLE_STEP_ROWS,
          origin="TPI-LLM Sec. 4.3's Accelerate disk-offload baseline",
          partition="one", moe=True)
def evaluate_disk_offload(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Accelerate-style disk offload on device 0: every block is read (blocking) before it is computed.

    Accelerate first loads the full weights to split them, so it is OOM when they exceed DRAM + swap.
    """
    opts = default_options()
    dev, bits = cluster.devices[0], workload.weight_bits
    blocks = device_blocks(model, 1.0, True)
    weights = sum(b.params for b in blocks) * bits / 8
    load_peak = weights + opts.runtime_overhead_bytes
    compute = common.step_time(model, dev, workload)
    io = weights / storage_rate(dev, "offload", "reading every block from storage")
    running = max(b.params for b in blocks) * bits / 8 + opts.runtime_overhead_bytes
    return scheme_result("disk_offload_blocking", "baseline", workload, compute + io,
                   {"compute_s": compute, "wait_s": io, "fixed_s": common.step_fixed_time(model, dev, workload)},
                   (max(load_peak, running),), (memory_limit(dev),),
                   "blocking reads of every block")


def mp_layer_ranges(n_layers: int, n_devices: int) -> list[tuple[int, int]]:
    """Contiguous layer ranges per device for model parallelism (as even as possible, earlier get more)."""
    edges = np.cumsum((0, *even_split(n_layers, n_devices)))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


@register("layerwise_mp", "baseline", no_operators=common.PIPELINE_ROWS,
          origin="TPI-LLM Sec. 4.3's layer-sequential model parallelism (MP)",
          partition="pipeline", moe=True)
def evaluate_layerwise_mp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Model parallelism (pipeline degraded to one request): devices run their layers one after another."""
    opts = default_options()
    bits, act = workload.weight_bits, workload.activation_bits / 8
    tokens = workload.new_tokens
    size = table4_block_params(model, 1.0)
    compute, comm, fixed, peaks, limits = 0.0, 0.0, 0.0, [], []
    busy = dict.fromkeys(common.BOUNDS, 0.0)  # each device's own layers' table rows, by the side that binds
    ranges = mp_layer_ranges(model.n_layers, cluster.n)
    # one link class for every hop (no per-device access links): one hand-off costs the same everywhere
    hop = p2p_time(cluster, 0, 1 % cluster.n, tokens * model.d_model * act) if access_links(cluster) is None \
        and cluster.n > 1 else None
    for i, (dev, (a, b)) in enumerate(zip(cluster.devices, ranges)):
        blocks = [Block(f"{k}{layer}", k, layer, size[k]) for layer in range(a + 1, b + 1) for k in ("attn", "ffn")]
        if i == 0:
            blocks = [Block("pre", "pre", 0, size["pre"])] + blocks + [Block("post", "post", model.n_layers + 1, size["post"])]
        compute += common.step_time(model, dev, workload, n_layers=b - a, lm_head=i == 0)
        fixed += common.step_fixed_time(model, dev, workload, n_layers=b - a, lm_head=i == 0)
        for side in common.BOUNDS:
            busy[side] += common.step_time(model, dev, workload, n_layers=b - a, lm_head=i == 0, bound=side)
        comm += hop if hop is not None else p2p_time(cluster, i, (i + 1) % cluster.n, tokens * model.d_model * act)
        weights = sum(blk.params for blk in blocks) * bits / 8
        kv = (b - a) / model.n_layers * model.kv_cache_bytes(opts.context_tokens, bits)
        peaks.append(weights + opts.runtime_overhead_bytes + kv)
        limits.append(memory_limit(dev))
    return scheme_result("layerwise_mp", "baseline", workload, compute + comm,
                   {"compute_s": compute, "comm_link_latency_s": comm, "fixed_s": fixed}, peaks, limits,
                   "layer-sequential").split_streaming(common.streaming_share(busy["memory"], busy["compute"]))
