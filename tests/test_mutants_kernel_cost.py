"""Tests that kill mutmut survivors in the engines' kernel cost model (workbench/machine/kernel_cost.py; see docs/mutation.md,
"Engine kernels (kernel_cost.py)").

The expected numbers are worked by hand from the data files, not read back from the code:

* Raspberry Pi 5 (`edge_rpi5_8gb`): 4 Cortex-A76 cores at 2.4 GHz, isa neon + fp16 + dotprod (class neon_dotprod);
  the A76 issues 2 vector instructions and 2 SDOT per cycle (data/constants/cores.toml).
* llama.cpp's q4_0 decode on neon_dotprod is the repacked GEMV (data/kernels/llamacpp_kernels.csv): 32 weights a
  block, 2.5 SDOT + 3 other vector + 2 loads + 1 scalar op, so the A76 is bound by its vector pipes,
  (2.5 + 3) / 2 = 2.75 cycles a block, and the board runs 2.4e9 x 4 x 32 / 2.75 = 1.117090909...e11 MAC/s.

Where a branch needs data the CSVs do not hold (an `unsupported` row of the newest version, a core whose ordering is
unstated, no cores at all), the test substitutes `kernel_rows` / `cores` with a few hand-made rows. Both are
memoised, but mutmut does not mutate decorated functions, so no mutant hides behind their caches. JAX-free, about a
second in all.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine import kernel_cost as kc
from workbench.machine.hardware import load_device
from workbench.model.formats import RECIPE_DEFAULTS, weight_formats
from workbench.model.models import get_model

PI5 = load_device("edge_rpi5_8gb")
PI5_Q4_0_GEMV = 2.4e9 * 4 * 32 / 2.75  # MAC/s, worked in the module docstring
LLAMA = get_model("Llama-3.1-8B")


def _row(path: str = "vec_dot", fmt: str = "q4_0", isa: str = "neon_dotprod", version: str = "v1",
         counts: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0), block: int = 32,
         counted: bool = True, engine: str = "distributed-llama") -> kc.KernelRow:
    return kc.KernelRow(engine, version, fmt, isa, path, block, *counts, counted, f"src/{path}.cpp:1")


# ---- KernelRow and Core checks ---------------------------------------------------------------------------------
def test_a_kernel_row_accepts_zero_counts_and_one_weight_blocks():
    row = _row(counts=(0.0, 0.0, 0.0, 0.0), block=1)  # `< 1`, `<= 0` or `< 2` would refuse it
    assert row.block_weights == 1
    assert _row(counts=(0.5, 0.5, 0.5, 0.5)).simd_mul == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("index", range(4))
def test_a_counted_row_refuses_each_negative_count(index):
    counts = [1.0, 1.0, 1.0, 1.0]
    counts[index] = -1.0
    with pytest.raises(WorkbenchError, match=r"kernel row distributed-llama q4_0 neon_dotprod vec_dot: "
                                             r"block_weights >= 1 and counts >= 0 needed"):
        _row(counts=tuple(counts))


def test_a_row_needs_a_block_whatever_its_counts_and_an_uncounted_row_is_not_checked():
    with pytest.raises(WorkbenchError, match="block_weights >= 1"):
        _row(block=0)  # counts fine: the block alone refuses it
    with pytest.raises(WorkbenchError, match="block_weights >= 1"):
        _row(block=0, counted=False)
    uncounted = _row(counts=(-1.0, -1.0, -1.0, -1.0), counted=False)  # not counted: its counts are not read
    assert not uncounted.counted
    assert math.isnan(_row(counts=(math.nan,) * 4, counted=False).simd_mul)


def test_a_core_needs_positive_pipes_and_dot_rate_but_half_a_pipe_is_fine():
    half = kc.Core("a53-like", 0.5, 0.5, False, "test")  # a Cortex-A53 issues a Q-form op every other cycle
    assert half.simd_pipes == pytest.approx(0.5, rel=1e-12)
    for pipes, dot in ((0.0, 1.0), (1.0, 0.0)):
        with pytest.raises(WorkbenchError, match=r"core 'bad': simd_pipes and dot_per_cycle must be > 0"):
            kc.Core("bad", pipes, dot, True, "test")


def test_cycles_per_block_takes_whichever_resource_binds():
    core = kc.Core("t", 4.0, 1.0, True, "test")
    # vector pipes: (1 + 7) / 4 = 2; dot: 1 / 1 = 1; loads 1 / 2; scalar 1 / 3
    assert core.cycles_per_block(_row(counts=(1.0, 7.0, 1.0, 1.0))) == pytest.approx(2.0, rel=1e-12)
    # dot products: 3 / 1 = 3 beside (3 + 0) / 4 = 0.75
    assert core.cycles_per_block(_row(counts=(3.0, 0.0, 0.0, 0.0))) == pytest.approx(3.0, rel=1e-12)
    # loads: 10 / LOAD_PORTS (2) = 5
    assert core.cycles_per_block(_row(counts=(0.0, 0.0, 10.0, 0.0))) == pytest.approx(5.0, rel=1e-12)
    # scalar ops: 9 / SCALAR_PORTS (3) = 3
    assert core.cycles_per_block(_row(counts=(0.0, 0.0, 0.0, 9.0))) == pytest.approx(3.0, rel=1e-12)


# ---- ISA, engine, shape, counts ------------------------------------------------------------------------------
def test_isa_class_errors_name_the_fix_and_every_class():
    with pytest.raises(WorkbenchError) as none:
        kc.isa_class(replace(PI5, isa=()))
    assert str(none.value).endswith('(state [meta] isa, e.g. ["neon", "dotprod"] or ["avx2", "fma", "f16c"])')
    with pytest.raises(WorkbenchError) as unfit:
        kc.isa_class(replace(PI5, isa=("sse3",)))
    assert str(unfit.value).endswith("(needs one of neon+dotprod+i8mm, neon+dotprod, neon, avx512f+avx512_vnni, "
                                     "avx2+avx_vnni, avx2+fma+f16c)")


def test_engine_id_takes_id_or_name_and_lists_the_names():
    assert kc.engine_id("llama.cpp") == kc.engine_id("llamacpp") == "llamacpp"
    assert kc.engine_id("distributed-llama") == "dllama"
    with pytest.raises(WorkbenchError) as caught:
        kc.engine_id("vllm")
    assert str(caught.value) == "engine must be one of llama.cpp, distributed-llama, got 'vllm'"


def test_rate_key_names_the_shape_it_refuses():
    assert kc.rate_key("llama.cpp", "q4_k", "gemm") == "llamacpp_q4_k_gemm"
    with pytest.raises(WorkbenchError) as caught:
        kc.rate_key("llama.cpp", "q4_k", "gemvv")
    assert str(caught.value) == "unknown kernel shape 'gemvv'; allowed: gemv, gemm"


def test_a_count_cell_is_a_number_or_nan_when_blank():
    assert kc._count("2.5") == pytest.approx(2.5, rel=1e-12)
    assert kc._count(" 3 ") == pytest.approx(3.0, rel=1e-12)
    assert math.isnan(kc._count(""))
    assert math.isnan(kc._count("   "))


# ---- cores -------------------------------------------------------------------------------------------------------
def test_an_unknown_core_lists_the_known_ones(monkeypatch):
    stranger = replace(PI5, core="cortex_x9", name="x9 board")
    with pytest.raises(WorkbenchError) as caught:
        kc.core_of(stranger)
    known = ", ".join(sorted(kc.cores()))
    assert known.startswith("apple_avalanche, apple_firestorm, cortex_a53")
    assert str(caught.value) == (f"device 'x9 board': core 'cortex_x9' is not in cores.toml (known: {known}); "
                                 "state [meta] core")
    monkeypatch.setattr(kc, "cores", lambda: {})
    with pytest.raises(WorkbenchError) as empty:
        kc.core_of(stranger)
    assert "(known: none); state [meta] core" in str(empty.value)


def test_overlaps_follows_the_core_and_defaults_to_the_roofline(monkeypatch):
    assert kc.overlaps(PI5) is True  # Cortex-A76: out of order
    assert kc.overlaps(replace(PI5, core="cortex_a55")) is False  # in order
    assert kc.overlaps(replace(PI5, core="cortex_x9")) is True  # a core the library does not state
    monkeypatch.setattr(kc, "cores", lambda: {"vague": kc.Core("vague", 1.0, 1.0, None, "test")})
    assert kc.overlaps(replace(PI5, core="vague")) is True  # stated core, ordering unstated


# ---- versions ----------------------------------------------------------------------------------------------------
def test_version_key_reads_the_numbers_before_any_parenthesis():
    assert kc._version_key("v0.16.4") == (0, 16, 4)
    assert kc._version_key("llama-cpp-python 0.3.36 (vendor/llama.cpp)") == (0, 3, 36)
    assert kc._version_key("b5000 (build 7 of 2025)") == (5000,)


def test_newest_version_compares_numbers_not_text(monkeypatch):
    # distributed-llama has v0.1.0, v0.4.0 and v0.16.4: as text "v0.4.0" would be the largest
    assert kc.newest_version("distributed-llama") == "v0.16.4"
    assert kc.newest_version("llama.cpp") == "llama-cpp-python 0.3.36 (vendor/llama.cpp)"
    monkeypatch.setattr(kc, "kernel_rows", lambda engine: ())
    assert kc.newest_version("llama.cpp") == ""


# ---- the counted row and the rate ------------------------------------------------------------------------------
def test_an_unsupported_row_of_the_newest_version_is_one_line(monkeypatch):
    rows = (_row("unsupported", isa="neon_dotprod", version="v2", counts=(0.0,) * 4),
            _row("vec_dot", version="v1"))  # an older version's row does not count
    monkeypatch.setattr(kc, "kernel_rows", lambda engine: rows)
    with pytest.raises(WorkbenchError) as caught:
        kc.counted_row(PI5, "distributed-llama", "q4_0", "gemv")
    assert str(caught.value) == ("no kernel: distributed-llama v2 has no q4_0 kernel on neon_dotprod "
                                 "(src/unsupported.cpp:1)")


def test_the_counted_rate_on_the_pi5_is_worked_by_hand():
    assert kc.kernel_rate(PI5, "llama.cpp", "q4_0", "gemv") == pytest.approx(PI5_Q4_0_GEMV, rel=1e-12)
    slow = replace(PI5, clock_hz=1.0)  # a 1 Hz clock is a clock (a `<= 1` guard would refuse it)
    assert kc.kernel_rate(slow, "llama.cpp", "q4_0", "gemv") == pytest.approx(4 * 32 / 2.75, rel=1e-12)


def test_a_device_without_a_clock_cannot_count_its_rate():
    with pytest.raises(WorkbenchError) as caught:
        kc.kernel_rate(replace(PI5, clock_hz=0.0, name="no clock"), "llama.cpp", "q4_0", "gemv")
    assert str(caught.value) == "device 'no clock' states no clock_hz: its q4_0 kernel rate cannot be counted"


def test_require_kernel_passes_a_kernel_and_refuses_a_missing_one():
    assert kc.require_kernel(PI5, "llama.cpp", "q4_0", "gemv") is None
    assert kc.require_kernel(PI5, "distributed-llama", "q4_0", "gemm") is None
    with pytest.raises(WorkbenchError, match="no kernel: distributed-llama has no q4_k gemv kernel on neon_dotprod"):
        kc.require_kernel(PI5, "distributed-llama", "q4_k", "gemv")


def test_kernel_time_computes_in_float64_whatever_the_macs_type():
    macs = np.float32(3.0)  # float32 / a Python float stays float32 (6e-8 relative) unless widened first
    t = kc.kernel_time(PI5, "llama.cpp", "q4_0", "gemv", macs)
    assert t.dtype == np.float64
    assert float(t) == pytest.approx(3.0 / PI5_Q4_0_GEMV, rel=1e-12)
    ts = kc.kernel_time(PI5, "llama.cpp", "q4_0", "gemv", np.array([1e9, 3e9], dtype=np.float32))
    assert ts.dtype == np.float64
    assert ts == pytest.approx(np.array([1e9, 3e9]) / PI5_Q4_0_GEMV, rel=1e-12)


def test_mixed_kernel_time_needs_a_format():
    with pytest.raises(WorkbenchError) as caught:
        kc.mixed_kernel_time(PI5, "llama.cpp", (), "gemv", 1e9)
    assert str(caught.value) == "a kernel row needs at least one (format, share)"


# ---- formats of a row ------------------------------------------------------------------------------------------
def test_row_formats_maps_plain_names_to_ggml_names_with_the_whole_share():
    for plain, ggml in (("fp16", "f16"), ("fp32", "f32")):
        ((fmt, share),) = kc.row_formats(LLAMA, plain, "qkv")
        assert fmt == ggml
        assert share == pytest.approx(1.0, rel=1e-12)
    ((fmt, share),) = kc.row_formats(LLAMA, "q4_k", "ffn1")
    assert fmt == "q4_k"
    assert share == pytest.approx(1.0, rel=1e-12)


def test_row_formats_refuses_an_unknown_format_listing_both_kinds():
    with pytest.raises(WorkbenchError) as caught:
        kc.row_formats(LLAMA, "q3_x", "qkv")
    assert str(caught.value) == (f"an engine's kernels need a weight_format (a block format "
                                 f"{', '.join(weight_formats())} or a file type {', '.join(RECIPE_DEFAULTS)}), "
                                 "got 'q3_x'")
    assert "q4_0, q4_1" in str(caught.value) and "Q4_K_M, Q4_K_S" in str(caught.value)


# ---- a width given as bits alone -----------------------------------------------------------------------------------
def test_plain_widths_mean_the_float_formats():
    assert kc.format_for_bits("llama.cpp", 16) == "f16"  # bf16 is 16 bits too: the plain rule decides
    assert kc.format_for_bits("llama.cpp", 32.0) == "f32"
    assert kc.format_for_bits("distributed-llama", 32) == "f32"


def test_plain_32_bits_mean_f32_beside_another_32_bit_format(monkeypatch):
    rows = (_row(fmt="f32"), _row(fmt="fp32"), _row(fmt="f16"), _row(fmt="bf16"))
    monkeypatch.setattr(kc, "kernel_rows", lambda engine: rows)
    assert kc.format_for_bits("distributed-llama", 32) == "f32"
    assert kc.format_for_bits("distributed-llama", 16) == "f16"


def test_one_format_of_the_width_is_that_format():
    assert kc.format_for_bits("distributed-llama", 4.5) == "q4_0"  # its Q40
    assert kc.format_for_bits("llama.cpp", 6.5625) == "q6_k"  # q5_1's 6 bits are 0.56 away
    assert kc.format_for_bits("llama.cpp", 2.625) == "q2_k"


def test_a_format_only_unsupported_is_not_a_candidate(monkeypatch):
    rows = (_row(fmt="q4_0"), _row("unsupported", fmt="q4_k", counts=(0.0,) * 4))
    monkeypatch.setattr(kc, "kernel_rows", lambda engine: rows)
    assert kc.format_for_bits("distributed-llama", 4.5) == "q4_0"
    with pytest.raises(WorkbenchError, match=r"none of its formats \(q4_0\)"):
        kc.format_for_bits("distributed-llama", 16)  # f16 is not among its rows


def test_several_or_no_formats_of_the_width_are_one_line():
    with pytest.raises(WorkbenchError) as several:
        kc.format_for_bits("llama.cpp", 4.5)
    assert str(several.value) == ("llama.cpp runs its kernels by weight format and 4.5 bits are any of iq4_nl, q4_0, "
                                  "q4_k: give weight_format")
    with pytest.raises(WorkbenchError) as none:
        kc.format_for_bits("distributed-llama", 4.0)
    assert str(none.value) == ("distributed-llama runs its kernels by weight format and 4 bits are none of its formats "
                               "(f32, q4_0): give weight_format")
    with pytest.raises(WorkbenchError, match="33 bits are none of its formats"):
        kc.format_for_bits("llama.cpp", 33)
