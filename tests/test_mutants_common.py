"""Tests that kill mutmut survivors in workbench/schemes/common.py (see docs/mutation.md).

Tiny models and toy devices whose numbers can be worked by hand: LLAMA has d_model 8, 4 query heads of
width 2, 2 KV heads (kv_per_q = 0.5), d_ff 16, vocab 10, 3 layers; COMPUTE runs 1 op/s at gemm efficiency
1 and gemv 0.5 and has no memory (time = FLOPs); STREAM computes at 1e30 op/s and streams at 1 B/s
(time = bytes).
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Workload

LLAMA = TransformerConfig("llama-toy", "llama", n_layers=3, d_model=8, n_heads=4, d_ff=16, vocab_size=10,
                          n_kv_heads=2)
GPT = TransformerConfig("gpt-toy", "gpt", n_layers=3, d_model=8, n_heads=4, d_ff=16, vocab_size=10)
BERT = TransformerConfig("bert-toy", "bert", n_layers=3, d_model=8, n_heads=4, d_ff=16, vocab_size=10)
COMPUTE = DeviceSpec("compute", {"fp16": 1.0, "fp32": 1.0}, efficiency_gemm=1.0, efficiency_gemv=0.5)
STREAM = DeviceSpec("stream", {"fp16": 1e30, "fp32": 1e30}, memory=(MemoryLevel("M", 1e12, 1.0),))
PREFILL = Workload("prefill", seq_len=3, weight_bits=16, activation_bits=16)
DECODE = Workload("decode", seq_len=3, kv_len=5, weight_bits=16, activation_bits=16)


# ---- precision --------------------------------------------------------------------------------------
def test_require_bits_accepts_any_positive_width() -> None:
    """One bit and half a bit are valid widths; 0 is not, and the error names the argument."""
    assert common.require_bits("w", 1) == 1.0
    assert common.require_bits("w", 0.5) == 0.5
    with pytest.raises(WorkbenchError, match="weight_bits must be a finite number of bits > 0"):
        common.weight_bytes(10, 0)


def test_weight_bytes() -> None:
    """8 weights at 4 bits = 4 bytes; at 4.5 bits (q4_0) = 4.5 bytes."""
    assert common.weight_bytes(8, 4) == 4.0
    assert common.weight_bytes(8, 4.5) == 4.5


def test_code_bits() -> None:
    """A block format's fractional scale share is dropped (4.5 -> 4, 1.5 -> 1); whole widths and widths
    below one bit are kept as they are."""
    assert common.code_bits(4.5) == 4.0
    assert common.code_bits(1.5) == 1.0
    assert common.code_bits(8) == 8.0
    assert common.code_bits(0.5) == 0.5


def test_operand_dtype_errors_name_the_operand() -> None:
    """Bad widths name the operand; operands wider than fp32 are refused with their width."""
    with pytest.raises(WorkbenchError, match="weight_bits must be"):
        common.operand_dtype(0, 8)
    with pytest.raises(WorkbenchError, match="activation_bits must be"):
        common.operand_dtype(8, 0)
    with pytest.raises(WorkbenchError, match="operands of 64 bits are wider than fp32"):
        common.operand_dtype(64, 8)


# ---- kernels ------------------------------------------------------------------------------------------
def test_matmul_time() -> None:
    """COMPUTE: 10 FLOPs gemm (the default) 10 s, gemv 20 s (rate 0.5 op/s, below 1: still divided by it);
    half a FLOP takes half a second; 0 FLOPs take 0 s."""
    assert float(common.matmul_time(COMPUTE, 10.0, "fp16")) == 10.0
    assert float(common.matmul_time(COMPUTE, 10.0, "fp16", "gemv")) == 20.0
    assert float(common.matmul_time(COMPUTE, 0.5, "fp16")) == 0.5
    assert float(common.matmul_time(COMPUTE, 0.0, "fp16")) == 0.0


def test_matmul_and_roofline_use_the_kernel_size() -> None:
    """Half efficiency at 10 FLOPs: 10 FLOPs as one kernel run at 1/2 (20 s); in kernels of 30 FLOPs at 3/4
    (40/3 s), through matmul_time and roofline_time alike."""
    small = COMPUTE.with_changes(small_kernel_flops=10.0)
    assert float(common.matmul_time(small, 10.0, "fp16")) == pytest.approx(20.0)
    assert float(common.matmul_time(small, 10.0, "fp16", kernel_flops=30.0)) == pytest.approx(40 / 3)
    assert float(common.roofline_time(small, 10.0, 0.0, "fp16", kernel_flops=30.0)) == pytest.approx(40 / 3)


def test_launched_and_roofline_launch() -> None:
    """A kernel with any work (half a FLOP, or bytes only) pays its launch; one with none does not."""
    dev = STREAM.with_changes(kernel_launch_s=0.5)
    assert float(common.launched(dev, 0.5)) == 0.5
    assert float(common.launched(dev, 0.0)) == 0.0
    assert float(common.roofline_time(dev, 100.0, 100.0, "fp16")) == pytest.approx(100.5)
    assert float(common.roofline_time(dev, 0.0, 0.0, "fp16")) == 0.0
    assert float(common.roofline_time(COMPUTE, 10.0, 0.0, "fp16")) == 10.0  # default kind: gemm


# ---- FLOPs ----------------------------------------------------------------------------------------------
def test_layer_flops_by_hand() -> None:
    """LLAMA, 4 heads, 3 tokens: Q/K/V width 4 x 2 x (1 + 2 x 0.5) = 16 -> 2 x 3 x 8 x 16 = 768; scores over
    5 keys 4 x 3 x 5 x 4 x 2 = 480; output projection 2 x 3 x 4 x 2 x 8 = 384; FFN up (gate and up) over
    16 columns 2 x 3 x 8 x 16 x 2 = 1536 (GPT, ungated: 768); FFN down 768."""
    assert float(common.qkv_flops(LLAMA, 4, 3)) == 768.0
    assert float(common.qkv_flops(GPT, 4, 3)) == 2 * 3 * 8 * (4 * 2 * 3)
    assert float(common.score_flops(LLAMA, 4, 3, 5)) == 480.0
    assert float(common.out_proj_flops(LLAMA, 4, 3)) == 384.0
    assert float(common.ffn_up_flops(LLAMA, 16, 3)) == 1536.0
    assert float(common.ffn_up_flops(GPT, 16, 3)) == 768.0
    assert float(common.ffn_down_flops(LLAMA, 16, 3)) == 768.0
    assert float(common.lm_head_flops(LLAMA)) == 160.0
    assert common.lm_head_flops(BERT) == 0.0


# ---- one layer ------------------------------------------------------------------------------------------
def test_kernel_times_stream_each_weight_slice() -> None:
    """STREAM (time = bytes), 16-bit weights: a head slice is 4 x 2 x 8 x 2 = 128 B; Q/K/V read it x 2
    (1 + 2 kv_per_q) = 256 B, the output projection 128 B; 16 FFN columns are 16 x 8 x 2 = 256 B, x 2 for the
    gated up projection (GPT: x 1); no tokens, nothing read."""
    t = common.kernel_times(LLAMA, STREAM, PREFILL, 4, 16, 3)
    assert {k: float(v) for k, v in t.items()} == pytest.approx({"qkv": 256, "out": 128, "ffn1": 512, "ffn2": 256})
    assert float(common.kernel_times(GPT, STREAM, PREFILL, 4, 16, 3)["ffn1"]) == pytest.approx(256)
    empty = common.kernel_times(LLAMA, STREAM, PREFILL, 4, 16, 0)
    assert all(float(v) == 0.0 for v in empty.values())
    q8 = common.kernel_times(LLAMA, STREAM, Workload("prefill", seq_len=3, weight_bits=8), 4, 16, 3)
    assert float(q8["out"]) == pytest.approx(64)


def test_kernel_times_decode_runs_gemv() -> None:
    """COMPUTE in decode (one token, gemv at 0.5): qkv 2 x 8 x 16 = 256 FLOPs -> 512 s; out 128 -> 256 s;
    ffn1 512 -> 1024 s; ffn2 256 -> 512 s."""
    t = common.kernel_times(LLAMA, COMPUTE, DECODE, 4, 16, 1)
    assert {k: float(v) for k, v in t.items()} == {"qkv": 512.0, "out": 256.0, "ffn1": 1024.0, "ffn2": 512.0}


def test_kv_read_bytes() -> None:
    """Decode over 5 keys, 4 query heads (2 KV heads of width 2), 16-bit cache: K and V = 2 x 5 x 2 x 2 x 2
    = 80 B; an 8-bit cache 40 B; prefill reads none (zeros shaped like the heads, in float)."""
    assert float(common.kv_read_bytes(LLAMA, DECODE, 4)) == 80.0
    eight = Workload("decode", kv_len=5, activation_bits=16, kv_bits=8)
    assert float(common.kv_read_bytes(LLAMA, eight, 4)) == 40.0
    zeros = common.kv_read_bytes(LLAMA, PREFILL, np.array([1, 2]))
    assert zeros.dtype == np.float64 and zeros.tolist() == [0.0, 0.0]
    single = common.kv_read_bytes(LLAMA, DECODE, np.array([4], dtype=np.float32))  # float32 heads: float64 bytes
    assert single.dtype == np.float64 and single.tolist() == [80.0]


def test_attention_time() -> None:
    """STREAM in decode: one query reads the 80 B of KV -> 80 s; no query reads nothing. COMPUTE in decode:
    scores 4 x 1 x 5 x 4 x 2 = 160 FLOPs as gemv -> 320 s; in prefill 4 x 3 x 3 x 4 x 2 = 288 as gemm."""
    assert float(common.attention_time(LLAMA, STREAM, DECODE, 4)) == pytest.approx(80.0)
    assert float(common.attention_time(LLAMA, STREAM, DECODE, 4, queries=0)) == 0.0
    assert float(common.attention_time(LLAMA, COMPUTE, DECODE, 4)) == 320.0
    assert float(common.attention_time(LLAMA, COMPUTE, PREFILL, 4)) == 288.0


def test_connective_time() -> None:
    """6 passes x 3 tokens x 8 x 2 B = 288 B at 1 B/s, plus one launch of 0.5 s."""
    dev = STREAM.with_changes(kernel_launch_s=0.5)
    assert float(common.connective_time(LLAMA, dev, PREFILL, 3)) == pytest.approx(288.5)
    assert float(common.connective_time(LLAMA, dev, PREFILL, 0)) == 0.0


def test_distinct_devices_groups_by_identity() -> None:
    """The same object twice is one class (indices 0 and 2); an equal but separate object is another."""
    twin = DeviceSpec("compute", {"fp16": 1.0, "fp32": 1.0}, efficiency_gemm=1.0, efficiency_gemv=0.5)
    groups = common.distinct_devices([COMPUTE, twin, COMPUTE])
    assert [d is COMPUTE for d, _ in groups] == [True, False]
    assert [idx.tolist() for _, idx in groups] == [[0, 2], [1]]


def test_layer_parts_is_memoised(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second request for the same model, device and workload is served from the memo (one computation);
    another model or device is computed afresh; a full memo is cleared before it grows past its bound."""
    calls = []
    real = common._layer_parts

    def counting(model, device, workload, bound=None):
        calls.append((model.name, device.name))
        return real(model, device, workload, bound)

    monkeypatch.setattr(common, "_layer_parts", counting)
    monkeypatch.setattr(common, "_LAYER_PARTS", {})
    first = common.layer_parts(LLAMA, COMPUTE, PREFILL)
    first["qkv"] = -1.0  # the caller's copy: the memo is not changed through it
    again = common.layer_parts(LLAMA, COMPUTE, PREFILL)
    assert again["qkv"] == 768.0 and len(calls) == 1
    common.layer_parts(GPT, COMPUTE, PREFILL)
    common.layer_parts(LLAMA, STREAM, PREFILL)
    assert calls == [("llama-toy", "compute"), ("gpt-toy", "compute"), ("llama-toy", "stream")]
    assert common._LAYER_PARTS[(id(LLAMA), id(COMPUTE), PREFILL, None)][2]["qkv"] == 768.0
    monkeypatch.setattr(common, "_LAYER_PARTS_MAX", 3)
    common.layer_parts(BERT, COMPUTE, PREFILL)  # a fourth entry: the memo of three is cleared first
    assert len(common._LAYER_PARTS) == 1


# ---- the head and a whole step --------------------------------------------------------------------------
def test_lm_head_and_output_head_time() -> None:
    """COMPUTE: the head's 160 FLOPs as a gemv take 320 s; split over two devices 160 s; STREAM streams its
    80 weights x 2 B = 160 s. Encoders, backbone-only workloads and no devices cost nothing."""
    assert common.lm_head_time(LLAMA, COMPUTE, DECODE) == 320.0
    assert common.lm_head_time(LLAMA, STREAM, DECODE) == pytest.approx(160.0)
    assert common.lm_head_time(BERT, COMPUTE, DECODE) == 0.0
    assert common.output_head_time(LLAMA, [COMPUTE, COMPUTE], DECODE) == 160.0
    assert common.output_head_time(BERT, [COMPUTE], DECODE) == 0.0
    backbone = Workload("decode", kv_len=5, output_head=False)
    assert common.output_head_time(LLAMA, [COMPUTE], backbone) == 0.0
    assert common.output_head_time(LLAMA, [], DECODE) == 0.0


def test_step_fixed_time() -> None:
    """Launch 0.5 s, layer overhead 0.25 s: a layer's fixed time is 7 x 0.5 + 0.25 = 3.75 s; three layers
    plus the head's launch = 11.75 s; one layer 4.25 s; without the head (asked, backbone-only workload,
    encoder) 11.25 s."""
    dev = COMPUTE.with_changes(kernel_launch_s=0.5, layer_overhead_s=0.25)
    assert common.step_fixed_time(LLAMA, dev, DECODE) == 11.75
    assert common.step_fixed_time(LLAMA, dev, DECODE, n_layers=1) == 4.25
    assert common.step_fixed_time(LLAMA, dev, DECODE, lm_head=False) == 11.25
    assert common.step_fixed_time(LLAMA, dev, Workload("decode", output_head=False)) == 11.25
    assert common.step_fixed_time(BERT, dev, DECODE) == 11.25


def test_step_time_counts_layers_and_the_head() -> None:
    """step_time = layers x layer_time + the head (when asked and the workload includes it)."""
    layer = common.layer_time(LLAMA, COMPUTE, DECODE)
    head = common.lm_head_time(LLAMA, COMPUTE, DECODE)
    assert common.step_time(LLAMA, COMPUTE, DECODE) == pytest.approx(3 * layer + head)
    assert common.step_time(LLAMA, COMPUTE, DECODE, n_layers=1) == pytest.approx(layer + head)
    assert common.step_time(LLAMA, COMPUTE, DECODE, lm_head=False) == pytest.approx(3 * layer)


def test_float32_sizes_are_counted_in_float64() -> None:
    """Sizes handed as float32 (a JAX sweep) are widened before multiplying: with 4097 heads of width 4097,
    4097 tokens, keys and FFN columns, every product below is past float32's 2^24 exact range, yet matches
    the integer formula to float64 precision."""
    big = TransformerConfig("big", "gpt", n_layers=1, d_model=4097 * 4097, n_heads=4097, d_ff=4097, vocab_size=10)
    x = np.float32(4097)
    e, h, d = 4097 * 4097, 4097, 4097  # d_model, heads, d_head
    exact = {
        "qkv": 2 * 4097 * e * (h * d * 3),
        "score": 4 * 4097 * 4097 * h * d,
        "out": 2 * 4097 * h * d * e,
        "ffn_up": 2 * 4097 * e * 4097,
        "ffn_down": 2 * 4097 * e * 4097,
        "connective": 6 * 4097 * e * 2,
    }
    got = {
        "qkv": common.qkv_flops(big, x, x),
        "score": common.score_flops(big, x, x, x),
        "out": common.out_proj_flops(big, x, x),
        "ffn_up": common.ffn_up_flops(big, x, x),
        "ffn_down": common.ffn_down_flops(big, x, x),
        "connective": common.connective_time(big, STREAM, PREFILL, x),
    }
    for name, value in got.items():
        assert float(value) == pytest.approx(exact[name], rel=1e-12, abs=0), name

# ---- issue 31: each kernel's roofline time goes to the side that binds it ------------------------------------
# launches and a layer overhead that are neither side's; a rate and a bandwidth close enough that the toy
# layer has kernels on both sides
MIX = DeviceSpec("mix", {"fp16": 2e3, "fp32": 2e3}, memory=(MemoryLevel("M", 1e12, 64.0),), kernel_launch_s=0.5,
                 layer_overhead_s=0.25)


def test_each_kernel_of_a_layer_is_on_exactly_one_side_and_the_sides_add_up_to_its_busy_time():
    for w in (PREFILL, DECODE):
        total, memory, compute = (common.layer_parts(LLAMA, MIX, w, b) for b in (None, "memory", "compute"))
        for k in ("qkv", "attn", "out", "ffn1", "ffn2", "con"):
            assert min(memory[k], compute[k]) == 0.0, k
            assert memory[k] + compute[k] == pytest.approx(total[k] - MIX.kernel_launch_s, rel=1e-12), k
        assert total["overhead"] == 0.25 and memory["overhead"] == compute["overhead"] == 0.0
    sides = [common.step_time(LLAMA, MIX, PREFILL, bound=b) for b in ("memory", "compute")]
    assert min(sides) > 0  # the toy prefill has kernels on both sides
    with pytest.raises(WorkbenchError, match="bound must be"):
        common.layer_parts(LLAMA, MIX, PREFILL, "io")


def test_roofline_bound_gives_each_kernel_to_the_side_that_binds_without_its_launch():
    dev = DeviceSpec("toy", {"fp16": 1e12}, memory=(MemoryLevel("DRAM", 1e9, 1e10),), kernel_launch_s=1e-6)
    flops = np.array([1e9, 1e9, 1e9, 0.0])  # 1 ms of arithmetic each (the last none)
    n_bytes = np.array([2e7, 1e7, 5e6, 1e6])  # 2 ms, 1 ms (a tie), 0.5 ms, 0.1 ms of streaming
    total = common.roofline_time(dev, flops, n_bytes, "fp16")
    memory = common.roofline_time(dev, flops, n_bytes, "fp16", bound="memory")
    compute = common.roofline_time(dev, flops, n_bytes, "fp16", bound="compute")
    assert memory == pytest.approx([2e-3, 0.0, 0.0, 1e-4], rel=1e-12)
    assert compute == pytest.approx([0.0, 1e-3, 1e-3, 0.0], rel=1e-12)  # a tie goes to compute
    assert total == pytest.approx(memory + compute + 1e-6, rel=1e-12)  # the launch is neither side's
    with pytest.raises(WorkbenchError, match="bound must be"):
        common.roofline_time(dev, flops, n_bytes, "fp16", bound="io")
    bare = DeviceSpec("no memory", {"fp16": 1e12})  # streams nothing: all arithmetic
    assert common.roofline_time(bare, 1e9, 1e9, "fp16", bound="memory") == 0.0
    assert common.roofline_time(bare, 1e9, 1e9, "fp16", bound="compute") == pytest.approx(1e-3)


def test_connective_blocks_are_all_streaming_and_a_step_splits_into_its_kernels_sides():
    model, dev = LLAMA, MIX
    for phase in ("prefill", "decode"):
        w = Workload(phase, 3, 5)
        con = common.connective_time(model, dev, w, w.new_tokens)
        assert common.connective_time(model, dev, w, w.new_tokens, "memory") == pytest.approx(con - dev.kernel_launch_s)
        assert common.connective_time(model, dev, w, w.new_tokens, "compute") == 0.0
        busy = common.step_time(model, dev, w) - common.step_fixed_time(model, dev, w) + dev.step_overhead_s
        sides = common.step_time(model, dev, w, bound="memory") + common.step_time(model, dev, w, bound="compute")
        assert sides == pytest.approx(busy, rel=1e-12)
        parts = common.layer_parts(model, dev, w, "memory")
        assert parts["overhead"] == 0.0 and common.layer_parts(model, dev, w)["overhead"] == dev.layer_overhead_s


def test_memory_share_weights_each_device_by_its_busy_time():
    model, w = LLAMA, DECODE
    a, b = MIX, MIX.with_memory("M", bandwidth_bytes_per_s=16.0).with_changes(name="slow")

    def sides(d):
        return common.step_time(model, d, w, bound="memory"), common.step_time(model, d, w, bound="compute")

    (ma, ca), (mb, cb) = sides(a), sides(b)
    assert common.memory_share(model, [a], w) == pytest.approx(ma / (ma + ca), rel=1e-12)
    assert common.memory_share(model, [a, a, b], w) == pytest.approx((2 * ma + mb) / (2 * ma + 2 * ca + mb + cb),
                                                                     rel=1e-12)
    assert common.memory_share(model, [DeviceSpec("no memory", {"fp16": 1e12})], w) == 0.0

