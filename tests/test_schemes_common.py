"""The shared cost conventions (workbench.schemes.common): one device, model and workload cost the same in
every scheme; Galaxy's overlap is never slower than plain HMP; fractional weight bits work everywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import DeviceSpec, MemoryLevel, load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import MODELS, get_model
from workbench.scenarios.arena import arena_for_config
from workbench.scenarios.userconfig import load_config
from workbench.schemes import baselines as B
from workbench.schemes import common
from workbench.schemes import galaxy as G
from workbench.schemes import hepti as H
from workbench.schemes import mcu_siracusa as MCU
from workbench.schemes.base import Cluster, Workload
from workbench.schemes.planners import galaxy as PL

EXAMPLES = REPO_ROOT / "examples"


def _pi5() -> DeviceSpec:
    """The Raspberry Pi 5 of examples/sbc_gigabit.toml (fp32/fp16/int8 peaks, 17.1 GB/s DRAM)."""
    return load_config(EXAMPLES / "sbc_gigabit.toml").cluster.devices[0]


def _cluster(devices, mbps: float = 1000.0, latency_ms: float = 0.05) -> Cluster:
    devices = tuple(devices)
    return Cluster(devices, Topology("switch", len(devices), Link.from_mbps(mbps, latency_ms)))


# ---- precision, bytes, kernel shape ---------------------------------------------------------------------
def test_compute_dtype_is_the_operands_class_at_the_devices_nearest_listed_rate():
    pi, nano = _pi5(), load_device("jetson_nano_cpu_m")
    assert common.compute_dtype(pi, 16, 16) == "fp16"
    assert common.compute_dtype(pi, 8, 16) == "fp16"  # W8A16: weights dequantised, fp16 arithmetic
    assert common.compute_dtype(pi, 4.5, 16) == "fp16"  # q4_0
    assert common.compute_dtype(pi, 8, 8) == "int8"
    assert common.compute_dtype(pi, 16, 32) == "fp32"  # Galaxy's CPU runs exchange fp32 activations
    assert common.compute_dtype(pi, 32, 16) == "fp32"
    assert common.compute_dtype(nano, 16, 16) == "fp32"  # a Cortex-A57 has no fp16 arithmetic
    for device in (pi, nano, load_device("siracusa"), load_device("a100"), load_device("h100_sxm")):
        for w, a in ((4, 4), (4.5, 8), (8, 8), (8, 16), (16, 16), (16, 32), (32, 32)):
            dtype = common.compute_dtype(device, w, a)
            assert dtype in device.peak_flops
            assert device.peak(dtype) == device.peak(common.operand_dtype(w, a)), (device.name, w, a)


@pytest.mark.parametrize("bits", [0, -4, math.nan, math.inf, "8", True])
def test_bad_bits_are_clear_errors(bits):
    with pytest.raises(WorkbenchError, match="bits"):
        common.weight_bytes(1000, bits)
    with pytest.raises(WorkbenchError, match="bits"):
        common.operand_dtype(bits, 16)


def test_weight_bytes_take_fractional_bits():
    assert common.weight_bytes(1024, 4.5) == 576.0
    assert common.weight_bytes(np.array([32, 64]), 16).tolist() == [64.0, 128.0]
    assert common.kernel_kind(1) == "gemv" and common.kernel_kind(2) == "gemm"


def test_gemms_and_gemvs_both_lose_to_small_kernels():
    """The fixed-costs issue: the small-kernel curve applies to decode GEMVs too (it used to spare them)."""
    dev = DeviceSpec("toy", {"fp16": 1e12}, efficiency_gemm=0.5, efficiency_gemv=0.25, small_kernel_flops=1e6,
                     memory=(MemoryLevel("DRAM", 1e9, 1e15),))
    flops = 1e6
    assert common.matmul_time(dev, flops, "fp16", "gemm") == pytest.approx(flops / (1e12 * 0.5 * 0.5))
    assert common.matmul_time(dev, flops, "fp16", "gemv") == pytest.approx(flops / (1e12 * 0.25 * 0.5))
    # decode kernels run at the GEMV efficiency, prefill kernels at the GEMM one, each at its own size
    model = get_model("BERT-L")
    decode = common.kernel_times(model, dev, Workload("decode", 8, 8, 16, 16), 16, 4096, 1)["ffn2"]
    prefill = common.kernel_times(model, dev, Workload("prefill", 8, 8, 16, 16), 16, 4096, 8)["ffn2"]
    w = 2.0 * model.d_model * 4096
    assert float(decode) == pytest.approx(w / (1e12 * 0.25 * w / (w + 1e6)))
    assert float(prefill) == pytest.approx(8 * w / (1e12 * 0.5 * (8 * w) / (8 * w + 1e6)))


def test_every_kernel_pays_its_launch_and_a_split_does_not_split_it():
    dev = DeviceSpec("toy", {"fp16": 1e12}, memory=(MemoryLevel("DRAM", 1e9, 1e12),), kernel_launch_s=1e-5,
                     layer_overhead_s=2e-4)
    no_launch = dev.with_changes(kernel_launch_s=0.0, layer_overhead_s=0.0)
    model, wl = get_model("BERT-L"), Workload("prefill", 8, 8, 16, 16)
    whole = common.kernel_times(model, dev, wl, model.n_heads, model.d_ff, 8)
    half = common.kernel_times(model, dev, wl, model.n_heads // 2, model.d_ff // 2, 8)
    bare = common.kernel_times(model, no_launch, wl, model.n_heads // 2, model.d_ff // 2, 8)
    for op in whole:
        assert float(half[op]) - float(bare[op]) == pytest.approx(1e-5)  # the launch is not halved
    # an empty slice launches nothing
    assert float(common.kernel_times(model, dev, wl, 0, 0, 8)["qkv"]) == 0.0
    # a whole layer: KERNELS_PER_LAYER launches + the layer overhead
    extra = common.layer_time(model, dev, wl) - common.layer_time(model, no_launch, wl)
    assert extra == pytest.approx(common.KERNELS_PER_LAYER * 1e-5 + 2e-4)
    assert common.fixed_layer_time(dev) == pytest.approx(extra)


def test_memory_efficiency_scales_every_stream():
    dev = DeviceSpec("toy", {"fp16": 1e12}, memory=(MemoryLevel("DRAM", 1e9, 1e10),), memory_efficiency=0.5)
    assert float(common.stream_time(dev, 1e10)) == pytest.approx(2.0)
    with pytest.raises(WorkbenchError, match="memory_efficiency"):
        dev.with_changes(memory_efficiency=0.0)
    with pytest.raises(WorkbenchError, match="kernel_launch_s"):
        dev.with_changes(kernel_launch_s=-1.0)


# ---- one single-device compute time everywhere ------------------------------------------------------------
@pytest.mark.parametrize("activation_bits", [16, 32])
def test_local_equals_single_device_resident_on_an_encoder(activation_bits):
    """The arena engineer's case: BERT-L prefill of 284 tokens on a Nano-M (was 23.9 s vs 26.3 s)."""
    model, nano = get_model("BERT-L"), load_device("jetson_nano_cpu_m")
    one = _cluster([nano])
    wl = Workload("prefill", 284, 284, 16, activation_bits)
    local = G.evaluate_local(model, one, wl)
    expected = common.step_time(model, nano, wl, lm_head=False)
    assert local.latency_s == expected
    for result in (B.evaluate_single_device(model, one, wl), B.evaluate_layerwise_mp(model, one, wl),
                   G.evaluate_megatron_tp(model, one, wl), G.evaluate_sp(model, one, wl),
                   PL.evaluate_galaxy_hmp(model, one, wl), PL.evaluate_galaxy_hmp_overlap(model, one, wl)):
        assert result.latency_s == pytest.approx(expected, rel=1e-12), result.scheme
    # the offload baseline needs a storage rate (none is assumed); its compute (launches included) is the same
    offload = B.evaluate_disk_offload(model, _cluster([nano.with_changes(storage_read_bytes_per_s=1e9)]), wl)
    assert offload.compute_s + offload.memory_s + offload.fixed_s == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("weight_bits", [8, 4.5])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_single_device_schemes_cost_the_same_generation_step(weight_bits, phase):
    """Llama 2-7B on a Pi 5 (Local was 13.6 s vs Standalone 27.7 s in prefill at 8 bits before the shared
    conventions): Galaxy's Local, M-LM and SP on one device and TPI's Standalone and MP all cost every layer
    plus the next-token logits; the backbone only (Galaxy's own scope, output_head=False) drops the head."""
    from dataclasses import replace

    model, pi = get_model("Llama 2-7B"), _pi5()
    one = _cluster([pi])
    wl = Workload(phase, 128, 128, weight_bits, 16)
    local = G.evaluate_local(model, one, wl)
    head = common.lm_head_time(model, pi, wl)
    assert head > 0
    assert local.latency_s == pytest.approx(common.step_time(model, pi, wl, lm_head=False) + head, rel=1e-12)
    for result in (B.evaluate_single_device(model, one, wl), B.evaluate_layerwise_mp(model, one, wl),
                   G.evaluate_megatron_tp(model, one, wl), G.evaluate_sp(model, one, wl)):
        assert result.latency_s == pytest.approx(local.latency_s, rel=1e-12), result.scheme
    backbone = replace(wl, output_head=False)
    assert G.evaluate_local(model, one, backbone).latency_s == common.step_time(model, pi, wl, lm_head=False)
    # the head is a GEMV streaming the vocab x d_model output matrix at the weight precision
    assert head == pytest.approx(common.weight_bytes(model.vocab_size * model.d_model, weight_bits)
                                 / (pi.memory[-1].bandwidth_bytes_per_s * pi.memory_efficiency))


def test_tp_schemes_split_the_head_by_vocabulary_and_gather_the_winners():
    """M-LM and HMP on 4 Pis: each device computes 1/4 of the logits, then one all-gather of the 4 (max,
    index) pairs; HMP first all-gathers the last token's hidden state, held by one sequence shard."""
    from dataclasses import replace

    model, cluster = get_model("Llama 2-7B"), _cluster([_pi5()] * 4, 100)
    wl = Workload("decode", 128, 128, 8, 16)
    head = common.lm_head_time(model, _pi5(), wl)
    link = cluster.topology.link
    for scheme, fn, gathers in (("megatron_tp", G.evaluate_megatron_tp, 1), ("galaxy_hmp", PL.evaluate_galaxy_hmp, 2)):
        compute, link_s, data_s = G.head_cost(scheme, model, cluster, wl)
        assert compute == pytest.approx(head / 4, rel=1e-12)
        assert link_s == pytest.approx(gathers * 3 * link.latency_s * cluster.topology.path_hops, rel=1e-12)
        full, backbone = fn(model, cluster, wl), fn(model, cluster, replace(wl, output_head=False))
        assert full.latency_s == pytest.approx(backbone.latency_s + compute + link_s + data_s, rel=1e-12)
    assert G.head_cost("galaxy_hmp", get_model("BERT-L"), cluster, wl) == (0.0, 0.0, 0.0)  # encoders have none


def test_single_device_time_follows_the_workloads_precision():
    """fp16 arithmetic for W8A16 on a Pi 5: prefill is compute-bound, so it runs at the fp16 peak (not fp32)."""
    model, pi = get_model("Llama 2-7B"), _pi5()
    wl = Workload("prefill", 128, 128, 8, 16)
    parts = common.layer_parts(model, pi, wl)
    flops = common.qkv_flops(model, model.n_heads, 128)
    assert parts["qkv"] == pytest.approx(flops / (pi.peak("fp16") * pi.efficiency_gemm))
    slow = Workload("prefill", 128, 128, 8, 32)
    assert common.layer_parts(model, pi, slow)["qkv"] == pytest.approx(2 * parts["qkv"])


# ---- Galaxy: overlap never slower than plain HMP on the same partition ------------------------------------
def _overlap_clusters():
    pi = _pi5()
    home = load_config(EXAMPLES / "smart_home.toml").cluster.devices
    nano = load_device("jetson_nano_cpu_m")
    return {"2 Pi 5, 100 Mbps": (_cluster([pi] * 2, 100), "Llama 2-7B"),
            "4 Pi 5, 1 Gbps": (_cluster([pi] * 4, 1000), "Llama 2-7B"),
            "phone+tablet+TV": (_cluster(home, 200, 2.0), "Llama 2-3B"),
            "3 Nano-M, 125 Mbps": (_cluster([nano] * 3, 125, 0.1), "GPT2-L")}


@pytest.mark.parametrize("name", sorted(_overlap_clusters()))
@pytest.mark.parametrize("phase,seq_len", [("prefill", 128), ("prefill", 4), ("decode", 128)])
def test_overlap_is_never_slower_than_plain_hmp(name, phase, seq_len):
    cluster, model_name = _overlap_clusters()[name]
    model = get_model(model_name)
    wl = Workload(phase, seq_len, seq_len, 4.5 if "Pi" in name else 16, 16)
    hmp = PL.evaluate_galaxy_hmp(model, cluster, wl)
    overlap = PL.evaluate_galaxy_hmp_overlap(model, cluster, wl)
    assert overlap.extra["partition"] == hmp.extra["partition"]
    assert overlap.latency_s <= hmp.latency_s * (1 + 1e-12)


@pytest.mark.parametrize("n,mbps", [(2, 100), (4, 100), (4, 1000)])
def test_decode_fused_schedule_needs_no_fallback(n, mbps):
    """The token sits on one device (seq = (1, 0, ...)): every ring step carries the whole token, in the
    fused timeline and in plain HMP alike, so the fused schedule itself is the faster one."""
    # the Pi streaming at its datasheet rate, the numbers this case was derived on (at the example's stated 0.67
    # the fused and plain schedules tie to the last bit at 2 devices and 100 Mbps)
    model, cluster = get_model("Llama 2-7B"), _cluster([_pi5().with_changes(memory_efficiency=1.0)] * n, mbps)
    wl = Workload("decode", 128, 128, 8, 16, output_head=False)  # the layers' rings only
    hmp = PL.evaluate_galaxy_hmp(model, cluster, wl)
    overlap = PL.evaluate_galaxy_hmp_overlap(model, cluster, wl)
    assert hmp.extra["partition"].seq == (1,) + (0,) * (n - 1)
    assert overlap.extra["fused_latency_s"] <= hmp.latency_s and "unfused" not in overlap.notes
    # 2 reduce-scatters + 2 all-gathers per layer, n - 1 ring steps each, each step one whole token
    token_bytes = model.d_model * wl.activation_bits / 8
    bw = cluster.topology.link.bandwidth_bytes_per_s
    assert hmp.comm_bytes_s == pytest.approx(model.n_layers * 4 * (n - 1) * token_bytes / bw, rel=1e-12)


def test_even_partitions_keep_the_ring_cost():
    model, cluster = get_model("BERT-L"), _cluster([load_device("jetson_nano_cpu_m")] * 4, 125, 0.1)
    wl = Workload("prefill", 284, 284, 16, 32)
    part = G.uniform_partition(model, 4, 284)
    assert G._comm("galaxy_hmp", model, cluster, wl, part) == G._comm("galaxy_hmp", model, cluster, wl)


def test_sp_all_gathers_padded_kv_shards_like_its_kernel():
    """SP's K/V all-gather on 95/95/94 tokens runs at the largest shard, K/V width (GQA: kv_dim)."""
    model, cluster = get_model("Llama 3.1-8B"), _cluster([load_device("jetson_nano_cpu_m")] * 3, 125, 0.1)
    wl = Workload("prefill", 284, 284, 16, 32)
    part = G.uniform_partition(model, 3, 284)
    assert part.seq == (95, 95, 94)
    link = cluster.topology.link
    shard = 95 * model.kv_dim * 4  # fp32 activations
    link_s, data_s = G._comm("sp", model, cluster, wl, part)
    assert data_s == pytest.approx(2 * 2 * shard / link.bandwidth_bytes_per_s, rel=1e-12)  # 2 tensors x 2 steps
    assert G.evaluate_sp(model, cluster, wl).comm_bytes_s == pytest.approx(model.n_layers * data_s, rel=1e-12)


def test_memory_bound_tiles_make_the_runtime_run_unfused():
    """Four one-token row tiles on memory-bound Pis would each stream the weights: HMP runs unfused."""
    model, cluster = get_model("Llama 2-7B"), _cluster([_pi5()] * 4, 1000)
    wl = Workload("prefill", 4, 4, 8, 16)
    hmp = PL.evaluate_galaxy_hmp(model, cluster, wl)
    overlap = PL.evaluate_galaxy_hmp_overlap(model, cluster, wl)
    assert overlap.extra["fused_latency_s"] > hmp.latency_s
    assert overlap.latency_s == pytest.approx(hmp.latency_s, rel=1e-12) and "unfused" in overlap.notes


# ---- fractional weight bits in the MCU scheme and Hepti's profiles ----------------------------------------
def test_mcu_headwise_tp_takes_4_5_bit_weights():
    from workbench.papers import mcu_siracusa as paper

    model, cluster = get_model("TinyLlama-42M"), paper.siracusa_cluster(8)
    q4 = MCU.evaluate_mcu_headwise_tp(model, cluster, Workload("decode", 128, 128, 4.5, 8))
    w8 = MCU.evaluate_mcu_headwise_tp(model, cluster, Workload("decode", 128, 128, 8, 8))
    assert q4.latency_s > 0 and not q4.oom
    p4 = MCU.place(model, cluster.devices[0], 8, Workload("decode", 128, 128, 4.5, 8))
    p8 = MCU.place(model, cluster.devices[0], 8, Workload("decode", 128, 128, 8, 8))
    assert p4.weight_slice_bytes == pytest.approx(p8.weight_slice_bytes * 4.5 / 8)
    assert q4.extra["block"].l2_bytes_per_chip < w8.extra["block"].l2_bytes_per_chip  # smaller weight tiles
    assert MCU.dtype_for_bits(cluster.devices[0], Workload("decode", 128, 128, 4.5, 16)) == "fp16"


def test_q4_0_example_runs_every_scheme_that_fits_its_shape():
    arena = arena_for_config(load_config(EXAMPLES / "sbc_gigabit.toml"), schemes=["mcu_headwise_tp"])
    assert all(e.status != "n/a" for e in arena.entries), [e.error for e in arena.entries]


def test_hepti_profiles_use_the_shared_dtype_and_kernel_shape():
    pi = _pi5()
    w8a16 = H.profile_from_device(pi, 1e8, bits=8, activation_bits=16)
    assert w8a16.flops_per_s == pytest.approx(pi.peak("fp16") * pi.efficiency_gemm)
    assert H.profile_from_device(pi, 1e8, bits=8).flops_per_s == pytest.approx(pi.peak("int8") * pi.efficiency_gemm)
    cluster = _cluster([pi.with_changes(efficiency_gemv=0.1)] * 2)
    decode = H.cluster_profiles(cluster, Workload("decode", 16, 16, 16, 16))[0]
    assert decode.flops_per_s == pytest.approx(pi.peak("fp16") * 0.1)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_slice_flops_at_full_width_are_the_models_block_flops(name):
    """The per-slice FLOP formulas (common) and the whole-model ones (models) are two spellings of one count;
    kept apart only because merging them would change the float rounding of every scheme's output."""
    from workbench.schemes.common import ffn_down_flops, ffn_up_flops, out_proj_flops, qkv_flops, score_flops

    m = MODELS[name]
    for s, t in ((1, 1), (7, 7), (1, 33)):
        table = sum(float(np.sum(op.flops)) for op in common.layer_operators(
            m, Workload("prefill" if s == t else "decode", s, t)))
        assert table == pytest.approx(m.block_flops(s, t), rel=1e-12)  # the table's rows, every model
        if m.is_moe or m.is_mla:
            continue  # the per-slice helpers are a dense, multi-head layer's
        sliced = (qkv_flops(m, m.n_heads, s) + score_flops(m, m.n_heads, s, t) + out_proj_flops(m, m.n_heads, s)
                  + ffn_up_flops(m, m.d_ff, s) + ffn_down_flops(m, m.d_ff, s))
        assert float(sliced) == pytest.approx(m.block_flops(s, t), rel=1e-12)
