"""Write data/kernels/llamacpp_kernels.csv and the llama.cpp rows of activation_quant.csv from the source.

The source is llama.cpp at commit LLAMA_COMMIT (vendored by llama-cpp-python 0.3.36); pass its root:
    python data/kernels/build_llamacpp.py /path/to/llama.cpp
Every row names the lines it counted; `simdcount.py` does the counting (rules in data/kernels/README.md).
Rows whose numbers are not a count of those lines say so in `kind` and `notes`.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from simdcount import count_segments  # noqa: E402

LLAMA_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
VERSION = "llama-cpp-python 0.3.36 (vendor/llama.cpp)"
CPU = "ggml/src/ggml-cpu/"
XQ = CPU + "arch/x86/quants.c"
AQ = CPU + "arch/arm/quants.c"
XR = CPU + "arch/x86/repack.cpp"
AR = CPU + "arch/arm/repack.cpp"
COLUMNS = ["engine", "version", "commit", "format", "isa_class", "path", "vec_dot_type", "block_weights", "simd_mul",
           "simd_alu", "simd_load", "scalar_ops", "notes", "source", "kind"]
X86 = ("avx2", "avx_vnni", "avx512_vnni")
ARM = ("neon", "neon_dotprod", "neon_i8mm")


def x86_helpers(root: Path, isa: str) -> dict:
    """The x86 quants.c helper functions, counted from their own lines for `isa`."""
    f = root / XQ
    h = {}

    def c(segs, extra=None):
        return dict(count_segments(f, segs, "x86", isa, extra or h))
    h["get_scale_shuffle_q3k"] = {"load": 1}  # quants.c:518-526, one table load
    h["get_scale_shuffle_k4"] = {"load": 1}   # quants.c:527-539
    h["get_scale_shuffle"] = {"load": 1}      # quants.c:540-552
    h["bytes_from_nibbles_32"] = c([(90, 96, 1)])
    h["bytes_from_bits_32"] = c([(76, 86, 1)])
    h["mul_add_epi8"] = c([(69, 73, 1)])
    h["sum_i16_pairs_float"] = c([(99, 103, 1)])
    us8 = {"avx2": [(114, 117, 1)], "avx_vnni": [(111, 113, 1)], "avx512_vnni": [(107, 109, 1)]}[isa]
    h["mul_sum_us8_pairs_float"] = c(us8)
    h["mul_sum_i8_pairs_float"] = c([(127, 132, 1)])
    return h


def x86_repack_helpers(root: Path, isa: str) -> dict:
    """arch/x86/repack.cpp helpers (lines 145-175), per isa."""
    f = root / XR
    h = {}

    def c(segs):
        return dict(count_segments(f, segs, "x86", isa, h))
    h["sum_i16_pairs_acc_int32x8"] = c([(146, 149, 1)])
    us8 = {"avx2": [(157, 159, 1)], "avx_vnni": [(155, 155, 1)], "avx512_vnni": [(153, 153, 1)]}[isa]
    h["mul_sum_us8_pairs_acc_int32x8"] = c(us8)
    h["mul_sum_i8_pairs_acc_int32x8"] = c([(169, 173, 1)])
    # GGML_F32Cx8_REARRANGE_LOAD (repack.cpp:36, F16C): vpshufb + vcvtph2ps + a 128-bit load
    h["GGML_F32Cx8_REARRANGE_LOAD"] = {"load": 1, "alu": 2}
    h["GGML_F32Cx8_REPEAT_LOAD"] = {"load": 1, "alu": 2}  # repack.cpp:35 maskload + pshufd + cvtph2ps
    h["GGML_F32Cx8_LOAD"] = {"load": 1, "alu": 1}  # repack.cpp:34
    return h


def arm_helpers(root: Path, isa: str) -> dict:
    """The two q2_K macros of arch/arm/quants.c (1979-1987), counted per isa."""
    f = root / AQ
    h = {}
    h["MULTIPLY_ACCUM_WITH_SCALE"] = dict(count_segments(f, [(1980, 1981, 1)], "arm", isa, {}))
    h["SHIFT_MULTIPLY_ACCUM_WITH_SCALE"] = dict(count_segments(f, [(1984, 1987, 1)], "arm", isa, h))
    return h


# ---- vec_dot kernels: (format, vec_dot_type, block_weights, function line, [segments], blocks per pass,
#      scalar ops per block, note) ------------------------------------------------------------------------
X86_VEC = [
    ("q4_0", "q8_0", 32, 701, [(724, 739, 1)], 1, 3,
     "bytes_from_nibbles_32 + sub 8 + mul_sum_i8_pairs_float (sign/sign + maddubs + madd, or dpbusd) + fmadd; "
     "scalar: 2 fp16->fp32 (table lookup on x86) + 1 fmul"),
    ("q4_1", "q8_1", 32, 859, [(882, 902, 1)], 1, 6,
     "bytes_from_nibbles_32 + mul_sum_us8_pairs_float (maddubs + madd, or dpbusd) + fmadd; "
     "scalar: 4 fp16->fp32, 1 fmul + 1 fadd for the min term (m x s)"),
    ("q5_0", "q8_0", 32, 1142, [(1164, 1178, 1)], 1, 3,
     "bytes_from_nibbles_32 + bytes_from_bits_32 (5th bit) + mul_sum_i8_pairs_float + fmadd; scalar: 2 fp16->fp32 + 1 fmul"),
    ("q5_1", "q8_1", 32, 1222, [(1246, 1261, 1)], 1, 6,
     "bytes_from_nibbles_32 + bytes_from_bits_32 + mul_sum_us8_pairs_float + fmadd; scalar: 4 fp16->fp32, 1 fmul + 1 fadd (min)"),
    ("q8_0", "q8_0", 32, 1308, [(1330, 1339, 1)], 1, 3,
     "2 x 256-bit loads + mul_sum_i8_pairs_float + fmadd; scalar: 2 fp16->fp32 + 1 fmul"),
    ("mxfp4", "q8_0", 32, 918, [(943, 962, 1)], 2, 3,
     "2 blocks per pass; E2M1 nibbles -> int8 by pshufb table + mul_add_epi8 + madd(ones) (no VNNI variant) + fmadd; "
     "scalar: fp16->fp32 + E8M0 table + fmul"),
    ("q2_k", "q8_k", 256, 1574, [(1594, 1613, 1), (1614, 1641, 2), (1642, 1644, 1)], 1, 5,
     "inner loop j < QK_K/128 (x2); maddubs/madd directly (no VNNI variant); scalar: 2 fp16->fp32 + 2 fmul + neg"),
    ("q3_k", "q8_k", 256, 1766, [(1794, 1820, 1), (1821, 1877, 2), (1880, 1880, 1)], 1, 23,
     "inner loop x2; maddubs/madd directly (no VNNI variant); scalar: fp16->fp32 + fmul + 21 integer ops to unpack the "
     "6-bit scales (quants.c:1802-1805); _mm_set_epi32 of 4 run-time words counted as 4 inserts"),
    ("q4_k", "q8_k", 256, 2038, [(2066, 2089, 1), (2091, 2110, 4), (2112, 2113, 1)], 1, 18,
     "inner loop j < QK_K/64 (x4); maddubs/madd directly (no VNNI variant); scalar: 2 fp16->fp32, 2 fmul, neg, 13 "
     "integer ops for the 6-bit scales/mins (quants.c:2070-2074)"),
    ("q5_k", "q8_k", 256, 2216, [(2246, 2276, 1), (2277, 2305, 4), (2307, 2308, 1)], 1, 20,
     "inner loop x4; maddubs/madd directly; scalar: as q4_k + fmul/fadd of the mins sum"),
    ("q6_k", "q8_k", 256, 2426, [(2448, 2462, 1), (2463, 2502, 2), (2504, 2505, 1)], 1, 2,
     "inner loop j < QK_K/128 (x2); 4 x 16-byte scale-shuffle table loads per pass; maddubs/madd directly; "
     "scalar: fp16->fp32 + fmul"),
    ("iq4_nl", "q8_0", 32, 3920, [(3946, 3961, 1)], 2, 3,
     "2 blocks per pass; pshufb non-linear table + mul_add_epi8 + madd(ones) (no VNNI variant) + fmadd; "
     "scalar: 2 fp16->fp32 + fmul"),
    ("iq4_xs", "q8_k", 256, 4004, [(4024, 4028, 1), (4029, 4047, 4), (4048, 4049, 1)], 1, 46,
     "inner loop ib < QK_K/32 step 2 (x4); scalar: 11 integer ops per pass for the 6-bit scales (x4) + fp16->fp32 + fmul"),
]

ARM_VEC = [
    ("q4_0", "q8_0", 32, 297, [(531, 567, 1)], 2, 3,
     "2 blocks per pass (quants.c:531); and/shr/sub-8 + 4 dot products + fmla by scalar; scalar: 2 fp16->fp32 (fcvt) + fmul"),
    ("q4_1", "q8_1", 32, 590, [(694, 725, 1)], 2, 7,
     "2 blocks per pass; scalar: 4 fp16->fp32 + fmul for d, fmul + fadd for the min term (m x s)"),
    ("q5_0", "q8_0", 32, 920, [(948, 1002, 1)], 2, 17,
     "2 blocks per pass; the 5th bit by 4 x 8-byte table lookups (table_b2b_1) stored and reloaded as 2 vectors; "
     "scalar: 4 table loads + 6 shift/and + 4 stores + qh load + 2 fp16->fp32 + fmul"),
    ("q5_1", "q8_1", 32, 1032, [(1063, 1120, 1)], 2, 21,
     "2 blocks per pass; 5th bit by table_b2b_0 lookups; scalar: as q5_0 + 2 fp16->fp32, fmul, fadd (min term)"),
    ("q8_0", "q8_0", 32, 1150, [(1356, 1380, 1)], 2, 3,
     "2 blocks per pass; 4 dot products + vaddq + fmla; scalar: 2 fp16->fp32 + fmul"),
    ("mxfp4", "q8_0", 32, 749, [(775, 794, 1)], 2, 5,
     "2 blocks per pass; tbl (E2M1 -> int8) + dot products; the sum leaves the vector unit per block (vaddvq) and is "
     "scaled in scalar: E8M0 + fp16 conversions, 2 fmul, fadd"),
    ("q2_k", "q8_k", 256, 1685, [(1954, 1976, 1), (1990, 2002, 2), (2005, 2005, 1)], 1, 57,
     "inner loop j < QK_K/128 (x2) with the MULTIPLY_ACCUM / SHIFT_MULTIPLY_ACCUM macros (quants.c:1979-1987) expanded: "
     "16 dot products, each reduced by vaddvq and scaled in scalar; scalar: 16 x (scale load, mul, add) + d/dmin"),
    ("q3_k", "q8_k", 256, 2018, [(2229, 2250, 1), (2253, 2290, 2), (2292, 2293, 1)], 1, 89,
     "inner loop x2 (the qhbits shift runs once); 16 dot products each reduced by vaddvq and scaled in scalar; "
     "scalar: 21 ops scale unpack + 16 subs + 16 x (load, mul, add) + d"),
    ("q4_k", "q8_k", 256, 2334, [(2802, 2827, 1), (2829, 2846, 4), (2848, 2848, 1)], 1, 46,
     "inner loop j < QK_K/64 (x4); 16 dot products, 8 vaddvq reductions scaled in scalar; "
     "scalar: 13 ops scale/min unpack, 8 x (load, mul, add), d/dmin"),
    ("q5_k", "q8_k", 256, 2866, [(2898, 2926, 1), (2928, 2947, 4), (2949, 2949, 1)], 1, 45,
     "inner loop x4; 16 dot products, 8 vaddvq reductions scaled in scalar"),
    ("q6_k", "q8_k", 256, 2966, [(3506, 3524, 1), (3526, 3580, 2), (3582, 3582, 1)], 1, 54,
     "inner loop j < QK_K/128 (x2); 16 dot products each reduced by vaddvq and scaled in scalar (16 x load, mul, add)"),
    ("iq4_nl", "q8_0", 32, 4196, [(4221, 4241, 1)], 2, 5,
     "2 blocks per pass; tbl (non-linear 4-bit -> int8) + dot products; vaddvq per block scaled in scalar"),
    ("iq4_xs", "q8_k", 256, 4256, [(4281, 4285, 1), (4286, 4305, 4), (4307, 4307, 1)], 1, 65,
     "inner loop ib < QK_K/64 (x4); scalar: 6-bit scale unpack (11 ops) + 2 x (mul, add) per pass, final fp16->fp32 + fmuls"),
]

# vec_dot with nrc == 2 (__ARM_FEATURE_MATMUL_INT8, ggml-cpu.c type_traits_cpu .nrows = 2): 2 weight rows x 2 tokens
# per call; counted per (block x token) = loop counts / 4.
ARM_MMLA = [
    ("q4_0", "q8_0", 32, 297, [(323, 376, 1)], 4, 2, "i8mm smmla: 2 rows x 2 tokens per call, 4 smmla per block pair"),
    ("q4_1", "q8_1", 32, 590, [(619, 671, 1)], 4, 4, "i8mm smmla: 2 rows x 2 tokens; min term as a 4-lane vector add"),
    ("q8_0", "q8_0", 32, 1150, [(1178, 1217, 1)], 4, 2, "i8mm smmla: 2 rows x 2 tokens"),
    ("q4_k", "q8_k", 256, 2334, [(2581, 2614, 1), (2618, 2635, 4), (2639, 2647, 8), (2649, 2659, 16), (2663, 2663, 8),
                                 (2669, 2697, 1)], 4, 27,
     "i8mm smmla: 2 rows x 2 tokens; loops j (x4), k (x8), l (x16); per-32 block scale applied with an integer mla"),
    ("q6_k", "q8_k", 256, 2966, [(3187, 3197, 1), (3205, 3252, 2), (3259, 3280, 16), (3286, 3330, 1)], 4, 1.5,
     "i8mm smmla: 2 rows x 2 tokens; loops j (x2), k (x16); per-16 block scale by integer mla"),
]


def fmt_num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def row(fmt, isa, path, vdt, bw, counts: Counter, scalar, notes, source, kind="quoted"):
    return {"engine": "llama.cpp", "version": VERSION, "commit": LLAMA_COMMIT, "format": fmt, "isa_class": isa,
            "path": path, "vec_dot_type": vdt, "block_weights": bw, "simd_mul": fmt_num(counts.get("mul", 0)),
            "simd_alu": fmt_num(counts.get("alu", 0)), "simd_load": fmt_num(counts.get("load", 0)),
            "scalar_ops": fmt_num(scalar), "notes": notes, "source": source, "kind": kind}


def seg_text(file: str, segs) -> str:
    parts = [f"{a}-{b}" + (f" x{t:g}" if t != 1 else "") for a, b, t in segs]
    return f"{file}:{','.join(parts)}@{LLAMA_COMMIT[:12]}"


def scaled(c: Counter, div: float) -> Counter:
    return Counter({k: v / div for k, v in c.items()})


def vec_dot_rows(root: Path) -> list[dict]:
    rows = []
    for isa in X86:
        h = x86_helpers(root, isa)
        for fmt, vdt, bw, fn, segs, div, scalar, note in X86_VEC:
            c = scaled(count_segments(root / XQ, segs, "x86", isa, h), div)
            vnni = ""
            if isa != "avx2":
                vnni = ("; VNNI: the maddubs+madd pair of mul_sum_us8_pairs_float becomes one vpdpbusd "
                        "(quants.c:105-118)" if fmt in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0") else
                        "; no __AVXVNNI__/__AVX512VNNI__ branch in this kernel: same as avx2")
            if isa == "avx512_vnni":
                vnni += "; no __AVX512F__ (512-bit) branch in this vec_dot"
            rows.append(row(fmt, isa, "vec_dot", vdt, bw, c, scalar,
                            f"ggml_vec_dot_{fmt.replace('_k', '_K')}_{vdt.replace('_k', '_K')} (fn at line {fn}): "
                            + note + vnni, seg_text(XQ, segs)))
    for isa in ARM:
        h = arm_helpers(root, isa)
        for fmt, vdt, bw, fn, segs, div, scalar, note in ARM_VEC:
            c = scaled(count_segments(root / AQ, segs, "arm", isa, h), div)
            extra = {"neon": "; no dot product: ggml_vdotq_s32 = 2 smull + 2 saddlp + 2 add (ggml-cpu-impl.h:310-316)",
                     "neon_dotprod": "; ggml_vdotq_s32 = sdot (ggml-cpu-impl.h:319)",
                     "neon_i8mm": "; decode (1 token, odd ne11) takes the nrc=1 path: the same code as neon_dotprod "
                                  "(ggml-cpu.c:1459-1463 fall back to 1 row per vec_dot)"}[isa]
            kind = "derived" if isa == "neon_i8mm" else "quoted"
            rows.append(row(fmt, isa, "vec_dot", vdt, bw, c, scalar,
                            f"ggml_vec_dot_{fmt.replace('_k', '_K')}_{vdt.replace('_k', '_K')} (fn at line {fn}): "
                            + note + extra, seg_text(AQ, segs), kind))
    for fmt, vdt, bw, fn, segs, div, scalar, note in ARM_MMLA:
        c = scaled(count_segments(root / AQ, segs, "arm", "neon_i8mm", {}), div)
        rows.append(row(fmt, "neon_i8mm", "vec_dot_mmla", vdt, bw, c, scalar,
                        f"ggml_vec_dot_{fmt.replace('_k', '_K')}_{vdt.replace('_k', '_K')} nrc == 2 branch (fn at line "
                        f"{fn}); per block x token = loop count / 4; runs only in mul_mat with even rows/tokens "
                        f"(ggml-cpu.c:1456-1463) and when the weight is not repacked; " + note,
                        seg_text(AQ, segs)))
    rows += float_rows()
    return rows


def float_rows() -> list[dict]:
    """f32 / f16 / bf16 vec_dot: the GGML_F32/F16 macro loops, counted per 32 weights from the macro definitions."""
    V = CPU + "vec.cpp"
    M = CPU + "simd-mappings.h"
    out = []

    def r(fmt, isa, mul, alu, load, scalar, notes, source, path="vec_dot", kind="quoted"):
        vdt = {"f32": "f32", "f16": "f16", "bf16": "bf16"}[fmt]
        out.append(row(fmt, isa, path, vdt, 32, Counter(mul=mul, alu=alu, load=load), scalar,
                       "no blocks: counts per 32 weights; " + notes, source + f"@{LLAMA_COMMIT[:12]}", kind))
    for isa in ("avx2", "avx_vnni"):
        r("f32", isa, 4, 0, 8, 0, "ggml_vec_dot_f32, GGML_F32_STEP 32 / EPR 8: per 8 weights 2 x vmovups + 1 vfmadd",
          f"{V}:104-118; {M}:587-596")
        r("f16", isa, 4, 8, 8, 0, "ggml_vec_dot_f16 (F16C): per 8 weights 2 x 128-bit loads + 2 vcvtph2ps + 1 vfmadd "
          "(fp32 accumulation)", f"{V}:345-359; {M}:635-680")
        r("bf16", isa, 4, 20, 8, 0, "ggml_vec_dot_bf16 AVX2: per 8 weights 2 x (128-bit load + vpmovzxwd + vpslld 16) "
          "+ vmulps + vaddps", f"{V}:172-187")
    r("f32", "avx512_vnni", 2, 0, 4, 0, "__AVX512F__ macros: GGML_F32_STEP 64 / EPR 16, 512-bit vfmadd",
      f"{V}:104-118; {M}:446-461")
    r("f16", "avx512_vnni", 2, 4, 4, 0, "__AVX512F__: per 16 weights 2 x 256-bit loads + 2 x 512-bit vcvtph2ps + 1 "
      "vfmadd (with __AVX512FP16__ the dot still accumulates in fp32, simd-mappings.h:1320-1329)",
      f"{V}:345-359; {M}:535-575")
    r("bf16", "avx512_vnni", 2, 10, 4, 0, "__AVX512F__ without __AVX512BF16__: per 16 weights 2 x (256-bit load + "
      "vpmovzxwd + vpslld) + vmulps + vaddps; with __AVX512BF16__ (Sapphire Rapids, Zen 4): per 32 weights 2 x "
      "512-bit loads + 1 vdpbf16ps (vec.cpp:148-156) = mul 1, load 2", f"{V}:160-167")
    for isa in ARM:
        r("f32", isa, 8, 0, 16, 0, "NEON GGML_F32_STEP 16 / EPR 4: per 4 weights 2 x ld1 + 1 fmla",
          f"{V}:104-118; {M}:331-371", kind="quoted")
    r("f16", "neon", 8, 16, 16, 0, "no __ARM_FEATURE_FP16_VECTOR_ARITHMETIC (Armv8.0): per 4 weights 2 x 64-bit ld1 + "
      "2 fcvtl + 1 fmla (fp32 accumulation)", f"{V}:345-359; {M}:418-440")
    for isa in ("neon_dotprod", "neon_i8mm"):
        r("f16", isa, 4, 0, 8, 0, "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC (Armv8.2-A +fp16, e.g. A55/A76/A78, Apple): per 8 "
          "weights 2 x ld1 + 1 fmla .8h, accumulating in fp16 (GGML_F16x8_FMA = vfmaq_f16); assumes the build "
          "enables +fp16 (GGML_NATIVE -mcpu=native on these cores does)", f"{V}:345-359; {M}:378-414")
    for isa in ARM:
        out.append(row("bf16", isa, "scalar", "bf16", 32, Counter(), 224,
                       "no blocks: counts per 32 weights; ggml_vec_dot_bf16 has no NEON branch (vec.cpp:148-255 lists "
                       "AVX512BF16/AVX512F/AVX2/RVV/POWER/VXE only): the scalar loop vec.cpp:257-260 runs, per weight "
                       "2 x 16-bit loads, 2 x shift-by-16 (GGML_BF16_TO_FP32, ggml-impl.h:606-612), fmul, "
                       "fcvt to double, fadd (ggml_float = double, vec.h:15) = 7 ops; llamafile has no BF16 NEON path "
                       "either (sgemm.cpp:3889-3956)", f"{V}:257-260@{LLAMA_COMMIT[:12]}"))
    return out


# ---- activation quantization (from_float of the vec_dot_type) ------------------------------------------------
def activation_rows(root: Path) -> list[dict]:
    rows = []

    def r(isa, vdt, fn, elems, c: Counter, scalar, notes, source, kind="quoted"):
        rows.append({"engine": "llama.cpp", "version": VERSION, "commit": LLAMA_COMMIT, "vec_dot_type": vdt,
                     "isa_class": isa, "function": fn, "block_elements": elems,
                     "simd_mul": fmt_num(c.get("mul", 0)), "simd_alu": fmt_num(c.get("alu", 0)),
                     "simd_load": fmt_num(c.get("load", 0)), "scalar_ops": fmt_num(scalar),
                     "simd_per_element": fmt_num(sum(c.values()) / elems),
                     "scalar_per_element": fmt_num(scalar / elems), "notes": notes, "source": source, "kind": kind})
    for isa in X86:
        c = count_segments(root / XQ, [(310, 366, 1)], "x86", isa, {})
        r(isa, "q8_0", "quantize_row_q8_0", 32, c, 4,
          "AVX2 path (also taken with AVX-512: no 512-bit branch); load column includes the one 256-bit store; "
          "scalar: 2 fdiv + compare + fp32->fp16 (F16C vcvtps2ph counted here)", seg_text(XQ, [(310, 366, 1)]))
        c = count_segments(root / XQ, [(406, 466, 1)], "x86", isa, {"hsum_i32_8": {"alu": 6}})
        r(isa, "q8_1", "quantize_row_q8_1", 32, c, 6,
          "as q8_0 plus the sum of the quants (3 vpaddd + hsum_i32_8) for y.s; scalar: 2 fdiv, compare, 2 fp32->fp16, fmul",
          seg_text(XQ, [(406, 466, 1)]))
    for isa in ARM:
        segs = [(54, 55, 8), (57, 57, 4), (58, 58, 2), (59, 59, 1), (61, 61, 1), (67, 75, 8)]
        c = count_segments(root / AQ, segs, "arm", isa, {})
        r(isa, "q8_0", "quantize_row_q8_0", 32, c, 36,
          "one-line loops counted with their trip counts; the 32 vgetq_lane_s32 + byte stores are counted as 32 alu "
          "(lane moves) and the stores in scalar_ops; scalar: fdiv x2, compare, fp32->fp16, 32 byte stores",
          seg_text(AQ, segs))
        segs = [(96, 97, 8), (99, 99, 4), (100, 100, 2), (101, 101, 1), (103, 103, 1), (110, 110, 1), (112, 122, 8),
                (124, 124, 1)]
        c = count_segments(root / AQ, segs, "arm", isa, {})
        r(isa, "q8_1", "quantize_row_q8_1", 32, c, 38,
          "as q8_0 plus an integer vector sum for y.s; scalar: as q8_0 + fmul + fp32->fp16", seg_text(AQ, segs))
    for isa in X86 + ARM:
        r(isa, "q8_k", "quantize_row_q8_K -> quantize_row_q8_K_ref", 256, Counter(), 256 * 13 + 16,
          "x86 and ARM both call the scalar reference (arch/x86/quants.c:505-507, arch/arm/quants.c:134-136 'placeholder "
          "implementation for Apple targets'); as written per element: max-abs scan (load, fabs, compare, select = 4), "
          "quantize (load, fmul, fadd magic, and, sub, min, store = 7), block sums (load, add = 2) = 13, + 16 bsum "
          "stores and 1 fdiv per block; -O3 may auto-vectorize the 2nd and 3rd loops (not counted)",
          f"ggml/src/ggml-quants.c:2768-2805@{LLAMA_COMMIT[:12]}")
    for isa in ("avx2", "avx_vnni"):
        r(isa, "f16", "ggml_cpu_fp32_to_fp16", 8, Counter(load=2, alu=1), 0,
          "F16C: 256-bit load + vcvtps2ph + 128-bit store per 8 (load column includes the store)",
          f"{CPU}ggml-cpu.c:3490-3494@{LLAMA_COMMIT[:12]}")
    r("avx512_vnni", "f16", "ggml_cpu_fp32_to_fp16", 16, Counter(load=2, alu=1), 0,
      "AVX-512: 512-bit load + vcvtps2ph + 256-bit store per 16", f"{CPU}ggml-cpu.c:3484-3488@{LLAMA_COMMIT[:12]}")
    for isa in ARM:
        r(isa, "f16", "ggml_cpu_fp32_to_fp16", 1, Counter(), 3,
          "no NEON branch: scalar loop, per element load + fcvt (neon_compute_fp32_to_fp16) + 16-bit store",
          f"{CPU}ggml-cpu.c:3508-3510@{LLAMA_COMMIT[:12]}")
    for isa in X86 + ARM:
        r(isa, "bf16", "ggml_cpu_fp32_to_bf16", 1, Counter(), 8,
          "scalar loop: GGML_FP32_TO_BF16 rounds to nearest even with a NaN check (about 6 integer ops) + load + store",
          f"{CPU}ggml-cpu.c:3567-3572@{LLAMA_COMMIT[:12]}")
    return rows


ACT_COLUMNS = ["engine", "version", "commit", "vec_dot_type", "isa_class", "function", "block_elements", "simd_mul",
               "simd_alu", "simd_load", "scalar_ops", "simd_per_element", "scalar_per_element", "notes", "source", "kind"]


def write(rows, columns, path: Path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def merge_activation(rows, engine: str, path: Path):
    """Rewrite activation_quant.csv with `rows` for `engine`, keeping the other engine's rows (llama.cpp first)."""
    keep = []
    if path.exists():
        with open(path, newline="") as f:
            keep = [r for r in csv.DictReader(f) if r["engine"] != engine]
    allrows = rows + keep if engine == "llama.cpp" else keep + rows
    write(allrows, ACT_COLUMNS, path)


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path("/work/src/llama.cpp-0.3.36")
    here = Path(__file__).resolve().parent
    rows = vec_dot_rows(root) + other_rows(root)
    write(rows, COLUMNS, here / "llamacpp_kernels.csv")
    act = activation_rows(root)
    merge_activation(act, "llama.cpp", here / "activation_quant.csv")
    print(len(rows), "kernel rows,", len(act), "activation rows")




# ---- repacked weights (repack.cpp extra buffer) ---------------------------------------------------------------
# (format, isa classes, path, function, file, fn line, segments, weight blocks x tokens per pass, extra counts,
#  scalar ops per pass, note)
DECODE = "decode and the last ne11 % 4 rows of a batch (repack.cpp:4643-4647); MUL_MAT_ID: one gemv per routed row (4895-4912)"
PREFILL = "the rows of a batch of > 3 tokens in groups of 4 (repack.cpp:4637-4642)"
ARM_REPACK = [
    ("q4_0", ("neon_dotprod",), "repack_gemv", "ggml_gemv_q4_0_4x4_q8_0", 230, [(256, 281, 1)], 4,
     {"alu": 8}, 4, "q4_0 -> 4x4 interleave when dotprod and not i8mm (repack.cpp:4975-4979); vector-extension "
     "operators b<<4 / b&0xf0 add 8 alu (not intrinsics)"),
    ("q4_0", ("neon_i8mm",), "repack_gemv", "ggml_gemv_q4_0_4x8_q8_0", 291, [(317, 347, 1)], 4,
     {"alu": 8}, 4, "q4_0 -> 4x8 interleave when i8mm (repack.cpp:4970-4974); the gemv itself uses sdot (its "
     "guard is DOTPROD); b<<4 / b&0xf0 operators add 8 alu"),
    ("q8_0", ("neon_dotprod",), "repack_gemv", "ggml_gemv_q8_0_4x4_q8_0", 1717, [(1743, 1764, 1)], 4, {}, 4,
     "q8_0 -> 4x4 when dotprod (repack.cpp:5086-5090)"),
    ("q8_0", ("neon_i8mm",), "repack_gemv", "ggml_gemv_q8_0_4x8_q8_0", 1775, [(1802, 1833, 1)], 4, {}, 4,
     "q8_0 -> 4x8 when i8mm (repack.cpp:5081-5085); sdot gemv"),
    ("iq4_nl", ("neon_dotprod", "neon_i8mm"), "repack_gemv", "ggml_gemv_iq4_nl_4x4_q8_0", 449, [(478, 509, 1)], 4,
     {"alu": 8, "mul": 1}, 4, "iq4_nl -> 4x4 when dotprod (repack.cpp:5048-5052); 8 vector >>/& operators and one "
     "vector * (a_d * b_d) added by hand"),
    ("mxfp4", ("neon_dotprod", "neon_i8mm"), "repack_gemv", "ggml_gemv_mxfp4_4x4_q8_0", 519, [(548, 584, 1)], 4,
     {"alu": 12, "mul": 1}, 8, "mxfp4 -> 4x4 when dotprod (repack.cpp:5069-5073); + 8 >>/& operators, 4 lane inserts of "
     "the E8M0 scales, one vector *; scalar: 4 E8M0 conversions"),
    ("q4_k", ("neon_dotprod",), "repack_gemv", "ggml_gemv_q4_K_8x4_q8_K", 594,
     [(625, 643, 1), (646, 647, 8), (656, 657, 8), (662, 662, 16), (668, 668, 64), (671, 687, 8), (692, 711, 4),
      (714, 715, 1)], 8, {"alu": 16}, 104,
     "q4_K -> 8x4 when dotprod, not i8mm (repack.cpp:5009-5013); loops sb x4, c x2, i; decode_q_Kx8_6bit_scales "
     "(repack.cpp:29-48) x8 per pass: 1 vmovl + 2 lane inserts each (+16 alu) and 12 scalar ops each"),
    ("q4_k", ("neon_i8mm",), "repack_gemv", "ggml_gemv_q4_K_8x8_q8_K", 727,
     [(764, 783, 1), (786, 787, 16), (796, 797, 8), (807, 807, 32), (812, 833, 16), (839, 850, 8), (856, 865, 4),
      (868, 869, 1)], 8, {"alu": 16}, 104,
     "q4_K -> 8x8 when i8mm (repack.cpp:5004-5008); the gemv uses sdot (guard DOTPROD); decode helper as 8x4"),
    ("q5_k", ("neon_dotprod",), "repack_gemv", "ggml_gemv_q5_K_8x4_q8_K", 881,
     [(920, 938, 1), (943, 943, 16), (949, 950, 8), (959, 960, 8), (965, 965, 16), (976, 981, 64), (984, 1000, 8),
      (1005, 1024, 4), (1027, 1028, 1)], 8, {"alu": 16}, 104, "q5_K -> 8x4 when dotprod (repack.cpp:5032-5036)"),
    ("q5_k", ("neon_i8mm",), "repack_gemv", "ggml_gemv_q5_K_8x8_q8_K", 1040,
     [(1079, 1096, 1), (1102, 1105, 4), (1110, 1111, 16), (1120, 1121, 8), (1130, 1130, 32), (1136, 1281, 4),
      (1286, 1287, 4), (1292, 1313, 8)], 8, {"alu": 16}, 104, "q5_K -> 8x8 when i8mm (repack.cpp:5027-5031); sdot gemv"),
    ("q6_k", ("neon_dotprod",), "repack_gemv", "ggml_gemv_q6_K_8x4_q8_K", 1327,
     [(1366, 1370, 1), (1374, 1374, 2), (1381, 1382, 16), (1386, 1387, 1), (1391, 1408, 4), (1410, 1411, 1),
      (1429, 1430, 32), (1437, 1440, 8), (1444, 1451, 4), (1461, 1462, 16), (1471, 1479, 64), (1485, 1489, 16),
      (1495, 1504, 1)], 8, {}, 0, "q6_K -> 8x4 when dotprod (repack.cpp:5043-5047); scales widened through a "
     "stack array (vst1q/vld1 counted as loads)"),
    ("q6_k", ("neon_i8mm",), "repack_gemv", "ggml_gemv_q6_K_8x8_q8_K", 1516,
     [(1554, 1558, 1), (1562, 1562, 4), (1569, 1570, 16), (1574, 1575, 1), (1579, 1596, 4), (1598, 1599, 1),
      (1617, 1618, 16), (1625, 1628, 8), (1632, 1639, 4), (1650, 1686, 32), (1692, 1705, 1)], 8, {"alu": 128}, 128,
     "q6_K -> 8x8 when i8mm (repack.cpp:5038-5042); sdot gemv; the two int32x2 scale literals per cp pass "
     "(4 lane inserts, +128 alu) built from 4 scalar loads"),
    # gemm (prefill)
    ("q4_0", ("neon_dotprod",), "repack_gemm", "ggml_gemm_q4_0_4x4_q8_0", 1970, "asm:2028-2284", 64, {}, 0,
     "inline assembly block loop (label 3, repack.cpp:2028-2284): 16 rows x 4 columns per pass; counted by mnemonic"),
    ("q4_0", ("neon_i8mm",), "repack_gemm", "ggml_gemm_q4_0_4x8_q8_0", 2451, "asm:2509-2717", 64, {}, 0,
     "inline assembly block loop (label 3, repack.cpp:2509-2717): 16 rows x 4 columns per pass, smmla"),
    ("q8_0", ("neon_dotprod",), "repack_gemm", "ggml_gemm_q8_0_4x4_q8_0", 5082,
     [(5114, 5120, 1), (5123, 5124, 2), (5127, 5130, 8), (5134, 5137, 1)], 16, {}, 0, "4 rows x 4 columns per pass"),
    ("iq4_nl", ("neon_dotprod", "neon_i8mm"), "repack_gemm", "ggml_gemm_iq4_nl_4x4_q8_0", 3310,
     [(3344, 3350, 1), (3353, 3367, 4), (3370, 3373, 1)], 16, {"alu": 8}, 0,
     "4 rows x 4 columns per pass; + 8 vector >>/& operators"),
    ("mxfp4", ("neon_dotprod", "neon_i8mm"), "repack_gemm", "ggml_gemm_mxfp4_4x4_q8_0", 3386,
     [(3420, 3431, 1), (3434, 3448, 4), (3451, 3454, 1)], 16, {"alu": 12}, 4,
     "4 rows x 4 columns per pass; + 8 >>/& operators + 4 lane inserts of the E8M0 scales (4 scalar conversions)"),
    ("q4_k", ("neon_dotprod",), "repack_gemm", "ggml_gemm_q4_K_8x4_q8_K", 3467,
     [(3502, 3541, 1), (3545, 3545, 4), (3551, 3551, 8), (3559, 3560, 32), (3569, 3570, 8), (3575, 3606, 32),
      (3618, 3641, 16), (3646, 3648, 4)], 32, {"alu": 16}, 96, "4 rows x 8 columns per pass; decode helper x8"),
    ("q5_k", ("neon_dotprod",), "repack_gemm", "ggml_gemm_q5_K_8x4_q8_K", 3667,
     [(3711, 3751, 1), (3754, 3754, 4), (3760, 3760, 8), (3766, 3766, 16), (3775, 3776, 32), (3785, 3786, 8),
      (3791, 3835, 32), (3847, 3870, 16), (3875, 3877, 4)], 32, {"alu": 16}, 96, "4 rows x 8 columns per pass"),
    ("q6_k", ("neon_dotprod",), "repack_gemm", "ggml_gemm_q6_K_8x4_q8_K", 4663,
     [(4706, 4720, 1), (4724, 4724, 8), (4729, 4730, 16), (4741, 4742, 64), (4754, 4755, 32), (4767, 4770, 32),
      (4775, 4776, 16), (4782, 4815, 32), (4823, 4826, 16), (4831, 4832, 64), (4845, 4846, 4)], 32, {}, 0,
     "4 rows x 8 columns per pass"),
]
ARM_NOT_COUNTED = [
    ("q4_k", "neon_i8mm", "repack_gemm", "ggml_gemm_q4_K_8x8_q8_K", 3896, "4227-4412"),
    ("q5_k", "neon_i8mm", "repack_gemm", "ggml_gemm_q5_K_8x8_q8_K", 4416, "4437-4659"),
    ("q6_k", "neon_i8mm", "repack_gemm", "ggml_gemm_q6_K_8x8_q8_K", 4865, "4886-5078"),
    ("q8_0", "neon_i8mm", "repack_gemm", "ggml_gemm_q8_0_4x8_q8_0", 5150, "5235-5298"),
]
X86_REPACK = [
    ("q4_0", X86, "repack_gemv", "ggml_gemv_q4_0_8x8_q8_0 -> gemv_q4_b32_8x8_q8_0_lut_avx", 522,
     [(561, 575, 1), (582, 583, 1), (599, 629, 1)], 8, {}, 1,
     "q4_0 -> 8x8 when AVX2 (repack.cpp:4966-4969); 8 columns x 1 token per pass; nibbles -> int8 by a pshufb LUT"),
    ("iq4_nl", X86, "repack_gemv", "ggml_gemv_iq4_nl_8x8_q8_0 -> gemv_q4_b32_8x8_q8_0_lut_avx", 522,
     [(561, 575, 1), (582, 583, 1), (599, 629, 1)], 8, {}, 1,
     "iq4_nl -> 8x8 when AVX2 (repack.cpp:5043-5047); same template as q4_0 with the non-linear LUT"),
    ("mxfp4", X86, "repack_gemv", "ggml_gemv_mxfp4_8x8_q8_0 -> gemv_q4_b32_8x8_q8_0_lut_avx", 522,
     [(561, 575, 1), (587, 595, 1), (599, 629, 1)], 8, {}, 9,
     "mxfp4 -> 8x8 when AVX2 (repack.cpp:5063-5067); scales by _mm256_set_ps of 8 E8M0 table lookups (8 inserts)"),
    ("q4_k", X86, "repack_gemv", "ggml_gemv_q4_K_8x8_q8_K", 1464, [(1523, 1535, 1), (1541, 1664, 4), (1668, 1669, 1)], 8, {}, 104,
     "q4_K -> 8x8 when AVX2 (repack.cpp:4999-5003); sb x4; maddubs + add_epi16 per 32-byte slice (no VNNI branch); "
     "scalar: 2 x 13 scale-unpack ops per sb"),
    ("q2_k", ("avx512_vnni",), "repack_gemv", "ggml_gemv_q2_K_8x8_q8_K", 1713,
     [(1772, 1780, 1), (1786, 2007, 2), (2011, 2012, 1)], 8, {}, 0,
     "q2_K -> 8x8 only when the CPU has AVX-512 (ggml_cpu_has_avx512, repack.cpp:5025-5029); the gemv code is the "
     "__AVX2__ branch; sb x2"),
    ("q4_0", ("avx2", "avx_vnni"), "repack_gemm", "ggml_gemm_q4_0_8x8_q8_0 -> gemm_q4_b32_8x8_q8_0_lut_avx (AVX2 branch)",
     641, [(1121, 1170, 1), (1177, 1177, 1), (1194, 1264, 4)], 128, {}, 0,
     "16 rows x 8 columns per pass (repack.cpp:1100-1266)"),
    ("iq4_nl", ("avx2", "avx_vnni"), "repack_gemm", "ggml_gemm_iq4_nl_8x8_q8_0 -> gemm_q4_b32_8x8_q8_0_lut_avx (AVX2)",
     641, [(1121, 1170, 1), (1177, 1177, 1), (1194, 1264, 4)], 128, {}, 0, "16 rows x 8 columns per pass"),
    ("mxfp4", ("avx2", "avx_vnni"), "repack_gemm", "ggml_gemm_mxfp4_8x8_q8_0 -> gemm_q4_b32_8x8_q8_0_lut_avx (AVX2)",
     641, [(1121, 1170, 1), (1179, 1187, 1), (1194, 1264, 4)], 128, {}, 8, "16 rows x 8 columns per pass"),
    ("q4_0", ("avx512_vnni",), "repack_gemm", "gemm_q4_b32_8x8_q8_0_lut_avx (__AVX512BW__ && __AVX512DQ__ branch)",
     641, [(693, 761, 1), (765, 765, 1), (789, 875, 4)], 256, {}, 0,
     "16 rows x 16 columns per pass with 512-bit vectors (repack.cpp:671-879)"),
    ("iq4_nl", ("avx512_vnni",), "repack_gemm", "gemm_q4_b32_8x8_q8_0_lut_avx (AVX-512 branch)",
     641, [(693, 761, 1), (765, 765, 1), (789, 875, 4)], 256, {}, 0, "16 rows x 16 columns per pass"),
    ("q4_k", ("avx2", "avx_vnni"), "repack_gemm", "ggml_gemm_q4_K_8x8_q8_K (AVX2 branch)", 2042,
     [(2847, 2850, 1), (2854, 2988, 4), (2990, 3148, 16)], 128, {}, 104, "16 rows x 8 columns per pass; sb x4, rp x4"),
]
X86_NOT_COUNTED = [
    ("mxfp4", "avx512_vnni", "repack_gemm", "gemm_q4_b32_8x8_q8_0_lut_avx (AVX-512 branch)", 641, "693-875"),
    ("q4_k", "avx512_vnni", "repack_gemm", "ggml_gemm_q4_K_8x8_q8_K (__AVX512BW__ && __AVX512DQ__ branch)", 2042,
     "2077-2815"),
    ("q2_k", "avx512_vnni", "repack_gemm", "ggml_gemm_q2_K_8x8_q8_K", 3526, "3546-6401"),
]


def x86_repack_helpers_all(root: Path, isa: str) -> dict:
    h = x86_repack_helpers(root, isa)
    f = root / XR
    vnni512 = isa == "avx512_vnni"
    # 512-bit helpers (repack.cpp:118-142); __AVX512VNNI__ -> vpdpbusd
    h["sum_i16_pairs_acc_int32x16"] = dict(count_segments(f, [(119, 120, 1)], "x86", isa, {}))
    h["mul_sum_us8_pairs_acc_int32x16"] = (dict(count_segments(f, [(125, 125, 1)], "x86", isa, {})) if vnni512 else
                                           {"mul": 2, "alu": 1})
    h["mul_sum_i8_pairs_acc_int32x16"] = dict(count_segments(f, [(135, 141, 1)], "x86", isa, h))
    h["GGML_F32Cx8x2_LOAD"] = {"load": 2, "alu": 2}   # repack.cpp:30
    h["GGML_F32Cx16_REPEAT_LOAD"] = {"alu": 2}       # repack.cpp:31
    return h


def not_counted_row(fmt, isa, path, fn, file, fn_line, lines, vdt, bw, note=""):
    return {"engine": "llama.cpp", "version": VERSION, "commit": LLAMA_COMMIT, "format": fmt, "isa_class": isa,
            "path": path, "vec_dot_type": vdt, "block_weights": bw, "simd_mul": "", "simd_alu": "", "simd_load": "",
            "scalar_ops": "", "notes": f"{fn} (fn at line {fn_line}): this path runs here; its loop was not counted "
            "for this file" + (f"; {note}" if note else ""), "source": f"{file}:{lines}@{LLAMA_COMMIT[:12]}",
            "kind": "not_counted"}


VDT = {"q4_0": "q8_0", "q8_0": "q8_0", "iq4_nl": "q8_0", "mxfp4": "q8_0", "q5_0": "q8_0", "q4_1": "q8_1",
       "q2_k": "q8_k", "q4_k": "q8_k", "q5_k": "q8_k", "q6_k": "q8_k", "q3_k": "q8_k", "iq4_xs": "q8_k"}
BW = {"q2_k": 256, "q3_k": 256, "q4_k": 256, "q5_k": 256, "q6_k": 256, "iq4_xs": 256}


def repack_rows(root: Path) -> list[dict]:
    from simdcount import count_asm
    rows = []
    for fmt, isas, path, fn, fn_line, segs, per, extra, scalar, note in ARM_REPACK:
        for isa in isas:
            if isinstance(segs, str):
                a, b = (int(x) for x in segs.split(":")[1].split("-"))
                c = count_asm(root / AR, a, b)
                c.pop("scalar", None)
                src = f"{AR}:{a}-{b}@{LLAMA_COMMIT[:12]}"
            else:
                c = count_segments(root / AR, segs, "arm", isa, {"decode_q_Kx8_6bit_scales": {}})
                src = seg_text(AR, segs)
            c.update(extra)
            kind = "quoted" if not extra else "quoted"
            when = DECODE if path == "repack_gemv" else PREFILL
            rows.append(row(fmt, isa, path, VDT[fmt], BW.get(fmt, 32), scaled(c, per), scalar / per,
                            f"{fn} (fn at line {fn_line}): {note}; per weight block x token = pass / {per}; runs for {when}",
                            src, kind))
    for fmt, isa, path, fn, fn_line, lines in ARM_NOT_COUNTED:
        rows.append(not_counted_row(fmt, isa, path, fn, AR, fn_line, lines, VDT[fmt], BW.get(fmt, 32)))
    for fmt, isas, path, fn, fn_line, segs, per, extra, scalar, note in X86_REPACK:
        for isa in isas:
            h = x86_repack_helpers_all(root, isa)
            c = count_segments(root / XR, segs, "x86", isa, h)
            c.update(extra)
            when = DECODE if path == "repack_gemv" else PREFILL
            rows.append(row(fmt, isa, path, VDT[fmt], BW.get(fmt, 32), scaled(c, per), scalar / per,
                            f"{fn} (fn at line {fn_line}): {note}; per weight block x token = pass / {per}; runs for {when}",
                            seg_text(XR, segs)))
    for fmt, isa, path, fn, fn_line, lines in X86_NOT_COUNTED:
        rows.append(not_counted_row(fmt, isa, path, fn, XR, fn_line, lines, VDT[fmt], BW.get(fmt, 32)))
    return rows


# ---- llamafile sgemm (tinyBLAS), prefill only (n >= 2 tokens, sgemm.cpp:3819-3822) ------------------------------
SG = CPU + "llamafile/sgemm.cpp"


def sgemm_rows() -> list[dict]:
    """tinyBLAS tiles counted by hand from the source (sgemm.cpp lines cited), assuming the compiler keeps one copy of a
    load that the fully unrolled RM x RN tile repeats (the C source reloads per pair): kind = derived."""
    rows = []
    a_alu = {"q8_0": 0, "q4_0": 4, "q5_0": 9, "iq4_nl": 6}
    a_src = {"q8_0": "1684-1686", "q4_0": "1696-1698 + denibble 1766-1771", "q5_0": "1710-1712 + denibble/bittobyte "
             "1766-1782", "iq4_nl": "1740-1752"}
    for fmt in ("q8_0", "q4_0", "q5_0", "iq4_nl"):
        for isa in X86:
            rn = 4 if isa == "avx512_vnni" else 2
            up = 2 if isa == "avx2" else 1
            pairs = 4 * rn
            mul = rn + pairs * (up + 1)
            alu = 2 + 2 * rn + pairs * 4 + 4 * a_alu[fmt]
            load = 4 + rn
            scalar = 10 + rn
            regs = "32 registers (__AVX512F__): 4x4 tile, gemm4xN<4>" if rn == 4 else "16 registers: 4x2 tile, gemm4xN<2>"
            runs = {"q4_0": "only when the weight is not repacked (AVX2 repacks q4_0 to 8x8 when ne[1] % 8 == 0)",
                    "iq4_nl": "only when not repacked (AVX2 repacks iq4_nl to 8x8)",
                    "q8_0": "the prefill path for q8_0 on x86 (no x86 repack for q8_0)",
                    "q5_0": "the prefill path for q5_0 on x86"}[fmt]
            rows.append(row(fmt, isa, "sgemm", "q8_0", 32,
                            Counter(mul=mul / pairs, alu=alu / pairs, load=load / pairs), scalar / pairs,
                            f"tinyBLAS_Q0_AVX<{'block_' + fmt}> ({regs}, sgemm.cpp:1379-1453, 1521-1568); per weight "
                            f"block x token: per pass 4 A loads + {rn} B loads, {pairs} x (shuffle, 2 sign, updot, fmadd), "
                            f"updot = {'maddubs+madd+cvt' if up == 2 else 'vpdpbusd+cvt'} (sgemm.cpp:1754-1764), "
                            f"A unpack {a_alu[fmt]} alu/row ({a_src[fmt]}); scalar: 4 fp16 deltas packed (10 ops) + "
                            f"{rn} B deltas; {runs}",
                            f"{SG}:1521-1568,1754-1764@{LLAMA_COMMIT[:12]}", "derived"))
    for fmt in ("q8_0", "q4_0"):
        for isa in ("neon_dotprod", "neon_i8mm"):
            alu_a = 4 if fmt == "q4_0" else 0
            loads_a = 1 if fmt == "q4_0" else 2
            rows.append(row(fmt, isa, "sgemm", "q8_0", 32,
                            Counter(mul=3, alu=(9 * 2 + 3 * alu_a) / 9, load=(3 * loads_a + 3 * 2) / 9), 15 / 9,
                            f"tinyBLAS_Q0_ARM<block_{fmt}> (__ARM_FEATURE_DOTPROD, sgemm.cpp:1288-1337): 3x3 tile; per "
                            "pair 2 sdot + scvtf + fmla-by-scalar + a zeroed accumulator; A unpack "
                            f"{alu_a} alu/row; scalar: 3+3 fp16 conversions + 9 fmul per pass; runs only when the weight "
                            "is not repacked (dotprod repacks q4_0 and q8_0 to 4x4/4x8 when ne[1] % 4 == 0)",
                            f"{SG}:1288-1337@{LLAMA_COMMIT[:12]}", "derived"))

    def fl(fmt, isa, mul, alu, load, note, lines):
        rows.append(row(fmt, isa, "sgemm", fmt, 32, Counter(mul=mul, alu=alu, load=load), 0,
                        "no blocks: counts per 32 weights x token; " + note, f"{SG}:{lines}@{LLAMA_COMMIT[:12]}",
                        "derived"))
    for isa in ("avx2", "avx_vnni"):
        fl("f32", isa, 4, 0, 7 * 4 / 12, "tinyBLAS<8,__m256> 4x3 tile (16 registers, sgemm.cpp:514-529): per k-step of "
           "8 weights 4+3 loads, 12 vfmadd", "485-580,3829-3833")
        fl("f16", isa, 4, 7 * 4 / 12, 7 * 4 / 12, "tinyBLAS<8,__m256,fp16> (F16C): as f32 + one vcvtph2ps per load "
           "(sgemm.cpp:354-356); src1 converted to f16 first (vec_dot_type f16)", "485-580,3940-3948")
        fl("bf16", isa, 4, 2 * 7 * 4 / 12, 7 * 4 / 12, "tinyBLAS<8,__m256,bf16> (AVX2): load = 128-bit load + "
           "vpmovzxwd + vpslld (sgemm.cpp:347-350)", "485-580,3904-3911")
    fl("f32", "avx512_vnni", 2, 0, 10 * 2 / 24, "tinyBLAS<16,__m512> 4x6 tile (32 registers): per k-step of 16 "
       "weights 4+6 loads, 24 vfmadd", "485-513,3823-3828")
    fl("f16", "avx512_vnni", 2, 10 * 2 / 24, 10 * 2 / 24, "tinyBLAS<16,__m512,fp16>: + vcvtph2ps per load", "485-513,3933-3939")
    fl("bf16", "avx512_vnni", 2, 2 * 10 * 2 / 24, 10 * 2 / 24, "tinyBLAS<16,__m512,bf16> without __AVX512BF16__; with "
       "__AVX512BF16__ tinyBLAS<32,__m512,__m512bh> does one vdpbf16ps per 32 weights x pair: mul 1, load 0.417 "
       "(sgemm.cpp:3888-3895, 153-156, 373-378)", "485-513,3896-3903")
    for isa in ARM:
        fl("f32", isa, 8, 0, 10 * 8 / 24, "tinyBLAS<4,float32x4_t> 4x6 tile: per k-step of 4 weights 4+6 loads, 24 fmla",
           "485-513,3835-3843")
    fl("f16", "neon", 8, 4 * 8 / 24, 10 * 8 / 24, "no FP16 vector arithmetic: tinyBLAS<4,float32x4_t,fp16,float> on "
       "the f32 activations directly (first llamafile call, ggml-cpu.c:1301-1325): A = 64-bit load + fcvtl",
       "313-315,3956-3963")
    for isa in ("neon_dotprod", "neon_i8mm"):
        fl("f16", isa, 4, 0, 10 * 4 / 24, "__ARM_FEATURE_FP16_VECTOR_ARITHMETIC: tinyBLAS<8,float16x8_t> 4x6 tile, fp16 "
           "fmla accumulating in fp16; needs n >= 8 tokens (sgemm.cpp:3949-3955)", "310-312,3949-3955")
    return rows


def tiled_amx_rows() -> list[dict]:
    rows = []
    T = CPU + "tiled/"
    for fmt in ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"):
        for isa in X86:
            rows.append(not_counted_row(
                fmt, isa, "tiled", "ggml_compute_forward_mul_mat_tiled", T + "tiled.cpp", 1209, "597-642,1164-1245",
                VDT[fmt], 256,
                "runs before llamafile for batches of >= 8 rows (tiled.cpp:1202-1205) on AVX/AVX2/AVX512VNNI builds "
                "when the weight is not in a repack buffer (tiled.cpp:607-610; so not for q4_k on AVX2 or q2_k on "
                "AVX-512, which are repacked): unpacks each 256-row x 256-K slab of src0 to uint8 once "
                "(tiled.cpp:20-200) and runs a 16x16 microtile (tiled-kernel.cpp:226-407 AVX2 maddubs/madd; "
                "83-207 AVX512-VNNI vpdpbusd); also per expert in MUL_MAT_ID (ggml-cpu.c:1679-1682)"))
    A = CPU + "amx/"
    for fmt in ("q4_0", "q4_1", "q8_0", "q4_k", "q5_k", "q6_k", "iq4_xs"):
        vdt = "q8_1" if fmt == "q4_1" else VDT[fmt]
        bw = BW.get(fmt, 32)
        rows.append(not_counted_row(
            fmt, "avx512_vnni", "amx", "ggml_backend_amx_mul_mat -> tinygemm_kernel_amx", A + "mmq.cpp", 2342,
            "2471-2508,1994-2240", vdt, bw,
            "only in builds with __AMX_INT8__ && __AVX512VNNI__ (ggml-cpu.cpp:46-50; GGML_NATIVE -march=native on an "
            "AMX CPU defines both, or GGML_AMX_INT8=ON): batches M > 1 use AMX tiles (_tile_dpbssd, 16x16 int32 "
            "from 16x64 int8 x 64x16 int8 per instruction), MUL_MAT only (amx.cpp:145-148)"))
        rows.append(not_counted_row(
            fmt, "avx512_vnni", "amx_vnni", "ggml_backend_amx_mul_mat -> tinygemm_kernel_vnni", A + "mmq.cpp", 2342,
            "2435-2469", vdt, bw,
            "AMX buffer, decode (M == 1): AVX-512 VNNI tinygemm kernels, not tiles (mmq.cpp:2435-2469)"))
    rows.append(not_counted_row(
        "f16", "avx512_vnni", "amx", "ggml_backend_amx_mul_mat (floating type)", A + "mmq.cpp", 2342, "2350-2400",
        "f32", 1, "f16 weights in the AMX buffer run AVX-512 tinygemm kernels ('f16 only has avx512 kernels for now', "
        "mmq.cpp:2348-2349), for every M"))
    return rows


def other_rows(root: Path) -> list[dict]:
    return repack_rows(root) + sgemm_rows() + tiled_amx_rows()


if __name__ == "__main__":
    main(sys.argv)
