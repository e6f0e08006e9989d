"""Write data/kernels/dllama_kernels.csv and the distributed-llama rows of activation_quant.csv.

distributed-llama (github.com/b4rtaz/distributed-llama) at the tags below; export each tag's tree first:
    for t in v0.1.0 v0.4.0 v0.16.4; do mkdir -p /tmp/dl/$t; git -C <mirror> archive $t src Makefile | tar x -C /tmp/dl/$t; done
    python data/kernels/build_dllama.py /tmp/dl
Counting rules as for llama.cpp (data/kernels/README.md, simdcount.py).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_llamacpp import COLUMNS, fmt_num, merge_activation, scaled, write  # noqa: E402
from simdcount import count_segments  # noqa: E402

TAGS = {"v0.1.0": "7eb77ca93ec0d502e28d36b6fb20039b449cbea4",
        "v0.4.0": "e93d1e6356a5d192f0b81f14dc18f7772affdaf4",
        "v0.16.4": "e819dc6c1427e1699ce7fbecdf6e1a7d9bcd63fc"}
FLAGS = {"v0.1.0": "Makefile:2 CXXFLAGS = -std=c++11 -Werror -O3 (no -march: GCC's default -march=armv8-a / x86-64 "
                   "leaves __ARM_FEATURE_DOTPROD and __AVX2__ undefined)",
         "v0.4.0": "Makefile:2 CXXFLAGS ... -O3 -march=native -mtune=native",
         "v0.16.4": "Makefile:1-12 -march=native -mtune=native (except Termux) -O3"}


def src(tag: str, file: str, segs) -> str:
    parts = [f"{a}-{b}" + (f" x{t:g}" if t != 1 else "") for a, b, t in segs]
    return f"{file}:{','.join(parts)}@{TAGS[tag][:12]}"


def row(tag, fmt, isa, path, vdt, bw, c: Counter, scalar, notes, source, kind="quoted"):
    return {"engine": "distributed-llama", "version": tag, "commit": TAGS[tag], "format": fmt, "isa_class": isa,
            "path": path, "vec_dot_type": vdt, "block_weights": bw, "simd_mul": fmt_num(c.get("mul", 0)),
            "simd_alu": fmt_num(c.get("alu", 0)), "simd_load": fmt_num(c.get("load", 0)),
            "scalar_ops": fmt_num(scalar), "notes": notes, "source": source, "kind": kind}


def kernel_rows(root: Path) -> list[dict]:
    rows = []
    # ---- v0.1.0 and v0.4.0: src/funcs.cpp matmulQ40vQ80 ----------------------------------------------------------
    for tag, q_fn, neon_dot, neon_nodot, avx2 in (
            ("v0.1.0", 185, [(197, 233, 1)], [(197, 227, 1), (235, 251, 1)], None),
            ("v0.4.0", 254, [(266, 302, 1)], [(266, 296, 1), (304, 320, 1)], [(331, 344, 1)])):
        f = root / tag / "src/funcs.cpp"
        nodot = scaled(count_segments(f, neon_nodot, "arm", "neon", {}), 2)
        dot = scaled(count_segments(f, neon_dot, "arm", "neon_dotprod", {}), 2)
        rows.append(row(tag, "q4_0", "neon", "vec_dot", "q8_0", 32, nodot, 3,
                        f"matmulQ40vQ80 (funcs.cpp:{q_fn}) NEON without __ARM_FEATURE_DOTPROD: 2 blocks per pass, 8 smull "
                        "+ 8 saddlp + adds per pass; scalar: 2 convertF16ToF32 (65536-entry table, quants.cpp:90) + "
                        f"fmul per block; {FLAGS[tag]}", src(tag, "src/funcs.cpp", neon_nodot)))
        if tag == "v0.1.0":
            rows.append(row(tag, "q4_0", "neon_dotprod", "vec_dot", "q8_0", 32, nodot, 3,
                            "same code as neon: the v0.1.0 Makefile sets no -march, so the __ARM_FEATURE_DOTPROD branch "
                            "(funcs.cpp:228-233) is not compiled by a default GCC even on A55/A76 (it is with "
                            "CXXFLAGS+=-march=armv8.2-a+dotprod: then mul 3, alu 6, load 3 as v0.4.0)",
                            src(tag, "src/funcs.cpp", neon_nodot), "derived"))
        else:
            rows.append(row(tag, "q4_0", "neon_dotprod", "vec_dot", "q8_0", 32, dot, 3,
                            f"matmulQ40vQ80 (funcs.cpp:{q_fn}) __ARM_FEATURE_DOTPROD: 2 blocks per pass, 4 sdot + 2 fmla "
                            f"per pass, same as llama.cpp's q4_0 of that time; {FLAGS[tag]}",
                            src(tag, "src/funcs.cpp", neon_dot)))
            rows.append(row(tag, "q4_0", "neon_i8mm", "vec_dot", "q8_0", 32, dot, 3,
                            "no i8mm code: the dotprod branch", src(tag, "src/funcs.cpp", neon_dot), "derived"))
        if avx2 is None:
            for isa in ("avx2", "avx_vnni", "avx512_vnni"):
                rows.append(row(tag, "q4_0", isa, "unsupported", "q8_0", 32, Counter(), 0,
                                "matmulQ40vQ80 has no x86 branch: prints 'matmulQ40vQ80 - not implemented' and exits "
                                "(funcs.cpp:256-258); Q40 weights run only with F32 activations (matmulQ40: dequantize "
                                "+ scalar dot) on x86", f"src/funcs.cpp:256-258@{TAGS[tag][:12]}"))
        else:
            h = {"bytes_from_nibbles_32": dict(count_segments(f, [(19, 24, 1)], "x86", "avx2", {})),
                 "sum_i16_pairs_float": dict(count_segments(f, [(37, 41, 1)], "x86", "avx2", {}))}
            h["mul_sum_i8_pairs_float"] = dict(count_segments(f, [(46, 59, 1)], "x86", "avx2", h))
            c = count_segments(f, avx2, "x86", "avx2", h)
            for isa in ("avx2", "avx_vnni", "avx512_vnni"):
                rows.append(row(tag, "q4_0", isa, "vec_dot", "q8_0", 32, c, 3,
                                "matmulQ40vQ80 __AVX2__ (funcs.cpp:325-348): 128-bit halves: 4 sign + 2 maddubs + 2 madd "
                                "per block, no VNNI or AVX-512 branch; scalar: 2 table fp16->fp32 + fmul",
                                src(tag, "src/funcs.cpp", avx2), "quoted" if isa == "avx2" else "derived"))
        # F32
        fl = {"v0.1.0": (102, [(114, 116, 1)]), "v0.4.0": (152, [(164, 166, 1)])}[tag]
        c = scaled(count_segments(f, fl[1], "arm", "neon", {}), 4 / 32)
        for isa in ("neon", "neon_dotprod", "neon_i8mm"):
            rows.append(row(tag, "f32", isa, "vec_dot", "f32", 32, c, 0,
                            f"matmulF32 (funcs.cpp:{fl[0]}) NEON: per 4 weights 2 ld1 + 1 fmla, one accumulator; counts "
                            "per 32 weights", src(tag, "src/funcs.cpp", fl[1])))
        for isa in ("avx2", "avx_vnni", "avx512_vnni"):
            rows.append(row(tag, "f32", isa, "scalar", "f32", 32, Counter(), 32 * 4,
                            "matmulF32 has no x86 SIMD branch: scalar loop (2 loads, fmul, fadd per weight); a serial "
                            "float reduction, which -O3 without -ffast-math does not vectorize; counts per 32 weights",
                            f"src/funcs.cpp:{fl[0] + 18}-{fl[0] + 26}@{TAGS[tag][:12]}"))
    # ---- v0.16.4: src/nn/nn-cpu-ops.cpp ---------------------------------------------------------------------------
    tag = "v0.16.4"
    f = root / tag / "src/nn/nn-cpu-ops.cpp"
    F = "src/nn/nn-cpu-ops.cpp"
    dot = [(250, 289, 1)]
    nodot = [(293, 327, 1)]
    c = scaled(count_segments(f, dot, "arm", "neon_dotprod", {}), 4)
    for isa in ("neon_dotprod", "neon_i8mm"):
        rows.append(row(tag, "q4_0", isa, "vec_dot", "q8_0", 32, c, 3,
                        "matmul_Q80_Q40_F32 (nn-cpu-ops.cpp:231) __ARM_FEATURE_DOTPROD: 4 blocks per pass (plus prefetch), "
                        "8 sdot + 4 fmla per pass; scalar: 2 __fp16 conversions + fmul per block; decode (batch 1) and "
                        "every batch when llamafile declines (nn-cpu-ops.cpp:1120-1123)", src(tag, F, dot),
                        "quoted" if isa == "neon_dotprod" else "derived"))
    c = scaled(count_segments(f, nodot, "arm", "neon", {}), 2)
    rows.append(row(tag, "q4_0", "neon", "vec_dot", "q8_0", 32, c, 3,
                    "matmul_Q80_Q40_F32 without dotprod: 2 blocks per pass, 8 smull + 8 saddlp per pass",
                    src(tag, F, nodot)))
    avx2 = [(391, 427, 1)]
    c = count_segments(f, avx2, "x86", "avx2", {})
    for isa in ("avx2", "avx_vnni"):
        rows.append(row(tag, "q4_0", isa, "vec_dot", "q8_0", 32, c, 4,
                        "matmul_Q80_Q40_F32 __AVX2__: nibbles widened to int16 (vpmovsxbw) and multiplied with "
                        "vpmullw + vpmaddwd(ones), a full horizontal sum per block (2 phaddd + extract); no "
                        "maddubs/VNNI; scalar: 2 fp16 table lookups, fmul, fadd", src(tag, F, avx2),
                        "quoted" if isa == "avx2" else "derived"))
    a512 = [(364, 383, 1)]
    c = count_segments(f, a512, "x86", "avx512_vnni", {"_mm512_reduce_add_epi32": {"alu": 5}})
    rows.append(row(tag, "q4_0", "avx512_vnni", "vec_dot", "q8_0", 32, c, 4,
                    "matmul_Q80_Q40_F32 __AVX512F__ branch (taken before __AVX2__): int8 -> int16 (vpmovsxbw zmm) + one "
                    "512-bit vpmaddwd per block + _mm512_reduce_add_epi32 (counted as 5 shuffles/adds); no VNNI",
                    src(tag, F, a512)))
    # sgemm (batch > 1)
    for isa, rn, up in (("avx2", 2, 2), ("avx_vnni", 2, 1), ("avx512_vnni", 4, 1)):
        pairs = 4 * rn
        mul = pairs * (up + 1)
        alu = pairs * 4 + 4 * 4
        rows.append(row(tag, "q4_0", isa, "sgemm", "q8_0", 32, Counter(mul=mul / pairs, alu=alu / pairs,
                                                                         load=(4 + rn) / pairs),
                        (4 + rn + pairs) / pairs,
                        f"llamafile tinyBLAS_Q0_AVX2<Q40,Q80> (src/nn/llamafile/sgemm.cpp:592-784) for batch > 1 "
                        f"(nn-cpu-ops.cpp:1120-1136); {4}x{rn} tile ({'32' if rn == 4 else '16'} vector registers, "
                        f"sgemm.cpp:613-659); per pair set1(scale), 2 sign, updot "
                        f"({'maddubs+madd' if up == 2 else 'vpdpbusd (__AVXVNNI__ or AVX512VNNI+VL)'}) + cvt, fmadd; A "
                        "unpack 4 alu/row; assumes the compiler keeps one copy of the per-row/column loads",
                        f"src/nn/llamafile/sgemm.cpp:719-772@{TAGS[tag][:12]}", "derived"))
    for isa in ("neon_dotprod", "neon_i8mm"):
        rows.append(row(tag, "q4_0", isa, "sgemm", "q8_0", 32, Counter(mul=3, alu=(18 + 12) / 9, load=1), 15 / 9,
                        "llamafile tinyBLAS_Q0_ARM<Q40,Q80> (sgemm.cpp:454-590) for batch > 1: 3x3 tile, per pair 2 sdot "
                        "+ scvtf + fmla + zeroed accumulator; q4_0 unpack 4 alu/row",
                        f"src/nn/llamafile/sgemm.cpp:529-578@{TAGS[tag][:12]}", "derived"))
    # F32
    fn = [(202, 204, 1)]
    c = scaled(count_segments(f, fn, "arm", "neon", {}), 4 / 32)
    for isa in ("neon", "neon_dotprod", "neon_i8mm"):
        rows.append(row(tag, "f32", isa, "vec_dot", "f32", 32, c, 0, "matmul_F32_F32_F32 NEON: per 4 weights 2 ld1 + "
                        "fmla; counts per 32 weights", src(tag, F, fn)))
    fa = [(214, 216, 1)]
    c = scaled(count_segments(f, fa, "x86", "avx2", {}), 8 / 32)
    for isa in ("avx2", "avx_vnni", "avx512_vnni"):
        rows.append(row(tag, "f32", isa, "vec_dot", "f32", 32, c, 0, "matmul_F32_F32_F32 __AVX2__ (also on AVX-512 "
                        "builds): per 8 weights 2 vmovups + vfmadd; counts per 32 weights", src(tag, F, fa)))
    for isa, mul, load, note in (("avx2", 4, 7 * 4 / 12, "tinyBLAS<8,__m256> 4x3 tile"),
                                 ("avx_vnni", 4, 7 * 4 / 12, "tinyBLAS<8,__m256> 4x3 tile"),
                                 ("avx512_vnni", 2, 10 * 2 / 25, "tinyBLAS<16,__m512> 5x5 tile (32 registers)"),
                                 ("neon", 8, 10 * 8 / 25, "tinyBLAS<4,float32x4_t> 5x5 tile"),
                                 ("neon_dotprod", 8, 10 * 8 / 25, "tinyBLAS<4,float32x4_t> 5x5 tile"),
                                 ("neon_i8mm", 8, 10 * 8 / 25, "tinyBLAS<4,float32x4_t> 5x5 tile")):
        rows.append(row(tag, "f32", isa, "sgemm", "f32", 32, Counter(mul=mul, load=load), 0,
                        f"llamafile F_32 x F_32 for batch > 1: {note} (sgemm.cpp:255-360, 836-870); per pair per 32 "
                        "weights", f"src/nn/llamafile/sgemm.cpp:836-870@{TAGS[tag][:12]}", "derived"))
    return rows


def activation_rows(root: Path) -> list[dict]:
    rows = []

    def r(tag, isa, fn, c: Counter, scalar, notes, source, kind="quoted"):
        rows.append({"engine": "distributed-llama", "version": tag, "commit": TAGS[tag], "vec_dot_type": "q8_0",
                     "isa_class": isa, "function": fn, "block_elements": 32, "simd_mul": fmt_num(c.get("mul", 0)),
                     "simd_alu": fmt_num(c.get("alu", 0)), "simd_load": fmt_num(c.get("load", 0)),
                     "scalar_ops": fmt_num(scalar), "simd_per_element": fmt_num(sum(c.values()) / 32),
                     "scalar_per_element": fmt_num(scalar / 32), "notes": notes, "source": source, "kind": kind})
    for tag in ("v0.1.0", "v0.4.0"):
        f = root / tag / "src/quants.cpp"
        segs = [(201, 202, 8), (204, 204, 4), (205, 205, 2), (206, 206, 1), (208, 208, 1), (216, 217, 0.25),
                (226, 232, 8)]
        c = count_segments(f, segs, "arm", "neon", {})
        for isa in ("neon", "neon_dotprod", "neon_i8mm"):
            r(tag, isa, "quantizeQ80Row", c, 37,
              "NEON: the scale's fp32->fp16 is batched 4 blocks at a time (vcvt_f16_f32, 1/4 per block); 32 lane "
              "moves (vgetq_lane) counted as alu, their 32 byte stores in scalar_ops (+ 2 fdiv, compare, 4 "
              "scalar d stores per 4 blocks)", src(tag, "src/quants.cpp", segs))
        for isa in ("avx2", "avx_vnni", "avx512_vnni"):
            r(tag, isa, "quantizeQ80Row", Counter(), 32 * 8 + 20,
              "no x86 SIMD branch: scalar loop quants.cpp:245-262, per element load + fabsf + max (3) and load + "
              "fmul + roundf + store (about 5); per block 2 fdiv + compare + software convertF32ToF16 (about 15 "
              "integer ops, quants.cpp:95-131)", f"src/quants.cpp:245-262@{TAGS[tag][:12]}", "derived")
    tag = "v0.16.4"
    f = root / tag / "src/nn/nn-quants.cpp"
    segs = [(77, 77, 1), (79, 81, 8), (84, 84, 1), (91, 91, 1), (94, 105, 8)]
    c = count_segments(f, segs, "arm", "neon", {})
    c["alu"] -= 8  # vdupq_n_f32(0.0f) inside vcgeq_f32 (line 97) is a hoisted constant, not a zeroed accumulator
    for isa in ("neon", "neon_dotprod", "neon_i8mm"):
        r(tag, isa, "quantizeF32toQ80", c, 4,
          "NEON: round half away from zero by vcgeq/vbsl/+0.5 then vcvtq, vqmovn x2, one 4-byte lane store per 4 "
          "(load column); scalar: fdiv x2, compare, __fp16 store", src(tag, "src/nn/nn-quants.cpp", segs))
    segs = [(115, 117, 4), (119, 124, 1), (130, 130, 1), (137, 151, 4)]
    c = count_segments(f, segs, "x86", "avx2", {})
    for isa in ("avx2", "avx_vnni", "avx512_vnni"):
        r(tag, isa, "quantizeF32toQ80", c, 4 + 4 * 4,
          "__AVX2__ branch (also on AVX-512 builds): per 8 values vmovups, vmulps, vroundps, vcvtps2dq, 1 extract, "
          "2 pshufb, 2 pextrd; scalar: fdiv x2, compare, F16C fp32->fp16, per 8 values shift/or/store",
          src(tag, "src/nn/nn-quants.cpp", segs))
    return rows


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path("/tmp/dl")
    here = Path(__file__).resolve().parent
    rows = kernel_rows(root)
    write(rows, COLUMNS, here / "dllama_kernels.csv")
    act = activation_rows(root)
    merge_activation(act, "distributed-llama", here / "activation_quant.csv")
    print(len(rows), "kernel rows,", len(act), "activation rows")


if __name__ == "__main__":
    main(sys.argv)
