"""Count the SIMD intrinsics of a kernel's inner loop, per block, from its source lines.

Used to make data/kernels/*.csv (see data/kernels/README.md): a kernel is given as a list of line segments
(first, last, times) of one source file; every intrinsic call on those lines is classified as `mul`
(multiply / dot-product / fused multiply-add), `alu` (every other vector instruction: integer and fp add,
logic, shifts, shuffles, converts, broadcasts of a run-time scalar, horizontal reductions) or `load` (vector
loads and stores); compile-time constants (`_mm256_set1_epi8(8)`, `vdupq_n_u8(0x0F)`) count 0 (the compiler
hoists them), register casts and reinterprets count 0. Helper functions the kernels call are expanded by
counting their own lines the same way. Each segment's count is multiplied by `times` (an inner loop's trip
count), the whole divided by the blocks the loop body handles.

Run from a shell: python data/kernels/simdcount.py FILE ISA FIRST-LAST[xTIMES] ...  (prints every call it counted;
helpers are not expanded there).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

X86_CALL = re.compile(r"\b(_mm\d*_[a-z0-9_]+|_cvtsh_ss|_cvtss_sh|MM256_SET_M128I)\s*\(")
ARM_CALL = re.compile(r"\b(ggml_v[a-z0-9_]+|v[a-z0-9]+_[a-z0-9_]+)\s*\(")
NUMBER = re.compile(r"^\s*(\(\s*(u?int\d+_t|char|float|short|int)\s*\))?\s*[-+]?\s*(0[xX][0-9a-fA-F]+|\d+(\.\d*)?([eE][-+]?\d+)?)[uUlLfF]*\s*$")

X86_FREE = re.compile(r"_cast|setzero|undefined|_mm_cvtss_f32|_mm256_zextsi128")
X86_LOAD = re.compile(r"_(load|loadu|lddqu|loadl|loadh|maskload|broadcast_s[sd]|broadcastsi128|i32gather|i64gather|"
                      r"stream_load|store|storeu|storel|storeh|stream|maskstore)(_|$)")
X86_MUL = re.compile(r"maddubs|madd_epi16|dpbusd|dpbssd|dpwssd|dpbf16|fmadd|fmsub|fnmadd|fnmsub|_mul_p[sd]|_mul_s[sd]|"
                     r"mullo|mulhi|mulhrs|_mul_epi32|_mul_epu32")
X86_SET = re.compile(r"_set1_|_set_epi|_setr_epi|_set_ps|_setr_ps|_set1$")

ARM_FREE = re.compile(r"^(vreinterpret|vget_low|vget_high|vcreate)")
ARM_LOAD = re.compile(r"^(ggml_)?v(ld|st)[1-4]")
ARM_MUL = re.compile(r"^v(dot|usdot|sudot|mmla|usmmla|mull|mlal|mlsl|mla|mls|fma|fms|mul|qdmulh|qrdmulh|qdmull)")
ARM_DUP = re.compile(r"^v(dup|mov)q?_n_")


def _args(line: str, start: int) -> str:
    """The text between the parenthesis that opens at `start` and its match."""
    depth, i = 0, start
    while i < len(line):
        if line[i] == "(":
            depth += 1
        elif line[i] == ")":
            depth -= 1
            if depth == 0:
                return line[start + 1:i]
        i += 1
    return line[start + 1:]


def _split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [a for a in out if a.strip()]


def _strip_comment(line: str) -> str:
    return re.sub(r"//.*$", "", line)


def classify(name: str, args: str, arch: str, isa: str) -> Counter:
    """Counts (mul/alu/load) one call adds; an empty Counter for free calls and hoisted constants."""
    c = Counter()
    parts = _split_args(args)
    literal = all(NUMBER.match(a) for a in parts)
    if arch == "x86":
        if X86_FREE.search(name):
            return c
        if re.search(r"_extract[if]128_s[i]256|_extractf128_ps", name) and re.search(r",\s*0\s*$", args):
            return c  # the low half: a register rename, no instruction
        if X86_LOAD.search(name):
            c["load"] += 1
        elif X86_MUL.search(name):
            c["mul"] += 1
        elif X86_SET.search(name):
            if not literal:
                if "_set1" in name:
                    c["alu"] += 1  # broadcast of a run-time value
                else:
                    c["alu"] += len(_split_args(args))  # one insert per run-time element
        elif name == "MM256_SET_M128I":
            c["alu"] += 1  # vinserti128
        else:
            c["alu"] += 1
        return c
    # arm
    if name.startswith("vec_"):
        return c
    if ARM_FREE.search(name):
        return c
    if name in ("ggml_vdotq_s32",):
        if isa in ("neon",):  # ggml-cpu-impl.h: 2 x vmull_s8 + 2 x vpaddlq_s16 + 2 x vaddq_s32
            c["mul"] += 2
            c["alu"] += 4
        else:
            c["mul"] += 1
        return c
    m = ARM_LOAD.search(name)
    if m:
        regs = re.search(r"_x([234])$", name)
        c["load"] += int(regs.group(1)) if regs else 1
        return c
    if ARM_MUL.search(name):
        c["mul"] += 1
        return c
    if ARM_DUP.search(name):
        if literal:
            if re.fullmatch(r"\s*0(\.0f?)?\s*", args):
                c["alu"] += 1  # a zeroed accumulator (movi) each pass
            return c
        c["alu"] += 1
        return c
    if name.startswith("vcombine"):
        c["alu"] += 1  # ins of the high half
        return c
    c["alu"] += 1
    return c


def count_lines(lines: list[str], first: int, last: int, arch: str, isa: str, helpers: dict | None = None,
                trace: list | None = None) -> Counter:
    """Counts of lines first..last (1-based, inclusive)."""
    helpers = helpers or {}
    total = Counter()
    pattern = X86_CALL if arch == "x86" else ARM_CALL
    for n in range(first, last + 1):
        line = _strip_comment(lines[n - 1])
        if line.lstrip().startswith("#"):
            continue
        for name, h in helpers.items():
            for _ in re.finditer(rf"\b{re.escape(name)}\s*\(", line):
                total.update(h)
                if trace is not None:
                    trace.append((n, name, dict(h)))
        for m in pattern.finditer(line):
            name = m.group(1)
            if name in helpers:
                continue
            c = classify(name, _args(line, m.end() - 1), arch, isa)
            total.update(c)
            if trace is not None:
                trace.append((n, name, dict(c)))
    return total


def count_segments(path: Path, segments, arch: str, isa: str, helpers=None, trace=None) -> Counter:
    """Sum over (first, last, times) segments of `path`."""
    lines = Path(path).read_text().splitlines()
    total = Counter()
    for first, last, times in segments:
        c = count_lines(lines, first, last, arch, isa, helpers, trace)
        for k, v in c.items():
            total[k] += v * times
    return total


# ---- inline assembly (AArch64 strings in __asm__ blocks) ---------------------------------------------------------
ASM_LINE = re.compile(r'^\s*"([^"]*)"')
ASM_MUL = {"sdot", "udot", "usdot", "sudot", "smmla", "ummla", "usmmla", "fmla", "fmls", "fmul", "mla", "mls", "mul",
           "smull", "smull2", "umull", "umull2", "smlal", "smlal2", "umlal", "umlal2", "bfmmla", "bfdot"}


def count_asm(path: Path, first: int, last: int, trace: list | None = None) -> Counter:
    """Counts of the AArch64 instructions in the asm string lines first..last: vector multiplies/dots (`mul`),
    vector loads/stores (`load`), other instructions with a vector register operand (`alu`); instructions on
    general registers only (loop counters, pointer arithmetic, branches) are counted as `scalar`."""
    lines = Path(path).read_text().splitlines()
    total = Counter()
    for n in range(first, last + 1):
        m = ASM_LINE.match(lines[n - 1])
        if not m:
            continue
        text = m.group(1).replace("\\n", "").strip()
        if not text or text.endswith(":"):
            continue
        if text.startswith(".inst"):
            cm = re.search(r"//\s*(.*)$", lines[n - 1])
            text = cm.group(1).strip() if cm else text
        mnem = text.split()[0].lower()
        ops = text[len(mnem):]
        if mnem.startswith(("ld1", "ld2", "ld4", "st1")):
            k = "load"
            regs = re.search(r"\{([^}]*)\}", ops)
            c = len(regs.group(1).split(",")) if regs and "-" not in regs.group(1) else 1
            total[k] += c
        elif mnem in ("ldr", "str", "ldp", "stp", "ldur", "stur", "ldnp"):
            if re.match(r"\s*[qdsbh]\d+", ops):
                total["load"] += 2 if mnem in ("ldp", "stp", "ldnp") else 1
                k = "load"
            else:
                total["scalar"] += 1
                k = "scalar"
        elif mnem in ASM_MUL and re.search(r"\bv\d+\.", ops):
            total["mul"] += 1
            k = "mul"
        elif re.search(r"\bv\d+\.|\b[qd]\d+\b", ops):
            total["alu"] += 1
            k = "alu"
        else:
            total["scalar"] += 1
            k = "scalar"
        if trace is not None:
            trace.append((n, mnem, k))
    return total


if __name__ == "__main__":
    # python simdcount.py FILE ISA FIRST-LAST[xTIMES] ...   (ISA: avx2 | avx_vnni | avx512_vnni | neon | neon_dotprod)
    path, isa, *specs = sys.argv[1:]
    arch = "x86" if isa.startswith("avx") else "arm"
    segs = []
    for spec in specs:
        rng, _, times = spec.partition("x")
        first, last = (int(v) for v in rng.split("-"))
        segs.append((first, last, float(times) if times else 1))
    tr = []
    print(dict(count_segments(Path(path), segs, arch, isa, None, tr)))
    for t in tr:
        print(*t)
