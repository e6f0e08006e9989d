"""The instruction-set features of the machine a profile runs on (`hardware.ISA_FEATURES`), read, never guessed.

Pure parsers of captured texts, each tested on a published capture (tests/test_isa.py):
- `isa_from_cpuinfo`: Linux /proc/cpuinfo, the x86 `flags` line or the AArch64 `Features` line;
- `isa_from_sysctl`: macOS `sysctl hw.optional machdep.cpu` (Apple silicon's hw.optional.* entries, an Intel
  Mac's machdep.cpu.features tokens).
`read_isa` reads this machine's text (the file, or the sysctl command on macOS) and returns the features with
the sentence a device TOML's `isa_source` carries. A feature the text does not name is absent: a false
negative (a slower kernel in the cost model), never a kernel the machine cannot run.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from workbench.machine.hardware import ISA_FEATURES

CPUINFO = Path("/proc/cpuinfo")
# x86: feature -> the flag /proc/cpuinfo prints for it (kind: datasheet; source: Linux
# arch/x86/include/asm/cpufeatures.h, where SSE3 prints as "pni", the others under their own names).
X86_CPUINFO_FLAGS = {"sse3": "pni", "ssse3": "ssse3", "avx": "avx", "f16c": "f16c", "fma": "fma", "avx2": "avx2",
                     "avx_vnni": "avx_vnni", "avx512f": "avx512f", "avx512bw": "avx512bw",
                     "avx512_vnni": "avx512_vnni", "avx512_bf16": "avx512_bf16", "amx_int8": "amx_int8"}
# AArch64: feature -> the hwcap /proc/cpuinfo `Features` prints (kind: datasheet; source: Linux
# Documentation/arch/arm64/elf_hwcaps.rst: asimd = Advanced SIMD, asimdhp = its half-precision arithmetic
# (FEAT_FP16; fphp is the scalar twin), asimddp = FEAT_DotProd, i8mm = FEAT_I8MM, sve, sve2). A 32-bit Arm
# kernel prints "neon" for the same unit (hrw/arm-socs-table issue #31, a Pi 4 booted 32-bit).
ARM_CPUINFO_HWCAPS = {"neon": ("asimd", "neon"), "fp16": ("asimdhp",), "dotprod": ("asimddp",), "i8mm": ("i8mm",),
                      "sve": ("sve",), "sve2": ("sve2",)}
# macOS on Apple silicon: feature -> sysctl name (kind: datasheet; source: Apple, sysctlbyname "Determining
# instruction set characteristics"; as captured on an M2 in archspec-json tests/targets/darwin-monterey-m2).
DARWIN_ARM_SYSCTLS = {"neon": "hw.optional.AdvSIMD", "fp16": "hw.optional.arm.FEAT_FP16",
                      "dotprod": "hw.optional.arm.FEAT_DotProd", "i8mm": "hw.optional.arm.FEAT_I8MM"}
# macOS on Intel: feature -> token of machdep.cpu.features / machdep.cpu.leaf7_features (kind: datasheet; source:
# archspec-json tests/targets/darwin-mojave-skylake, an i7-6700K's sysctl). No AVX-512 Mac capture was found, so
# AVX-512 tokens are not mapped: such a Mac reads without them (a false negative, never a false feature).
DARWIN_X86_TOKENS = {"sse3": "SSE3", "ssse3": "SSSE3", "avx": "AVX1.0", "fma": "FMA", "f16c": "F16C", "avx2": "AVX2"}

# Features every processor sold under a brand has, for a stored table measured before the profile read the
# machine's own (its machine label names the brand, not the model). kind: datasheet.
BRAND_BASELINES = {
    "AMD EPYC": (("sse3", "ssse3", "avx", "f16c", "fma", "avx2"),
                 "every AMD EPYC is Zen 1 or later: LLVM llvm/lib/TargetParser/X86TargetParser.cpp (llvm/llvm-project "
                 "@ d1f8a071) FeaturesZNVER1 lists FeatureSSE3, FeatureSSSE3, FeatureAVX, FeatureF16C, FeatureFMA, "
                 "FeatureAVX2 and ZNVER2..ZNVER4 extend it; AVX-512 (Zen 4) and the rest depend on the generation, "
                 "which the label does not name, so they are left out"),
}


@dataclass(frozen=True)
class IsaReading:
    """Instruction-set features (in `ISA_FEATURES` order) and where they were read (a device TOML's isa_source)."""

    features: tuple[str, ...]
    source: str


def _ordered(found: set[str]) -> tuple[str, ...]:
    """`found` in `ISA_FEATURES` order."""
    return tuple(f for f in ISA_FEATURES if f in found)


def _cpuinfo_lines(text: str, key: str) -> list[set[str]]:
    """The whitespace-separated words of every `key : words` line of a /proc/cpuinfo text."""
    out = []
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() == key:
            out.append(set(value.split()))
    return out


def isa_from_cpuinfo(text: str) -> tuple[tuple[str, ...], str]:
    """(features, the line read: "flags" or "Features") of a /proc/cpuinfo text; features every processor lists
    (a line that differs between cores counts only what all share); ((), "") when it has neither line."""
    for key, table in (("flags", X86_CPUINFO_FLAGS), ("Features", ARM_CPUINFO_HWCAPS)):
        lines = _cpuinfo_lines(text, key)
        if lines:
            words = set.intersection(*lines)
            names = {f: (v,) if isinstance(v, str) else v for f, v in table.items()}
            return _ordered({f for f, flags in names.items() if words & set(flags)}), key
    return (), ""


def _sysctl_values(text: str) -> dict[str, str]:
    """`name: value` lines of a sysctl text (the value stripped; later lines win)."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip():
            out[name.strip()] = value.strip()
    return out


def isa_from_sysctl(text: str) -> tuple[str, ...]:
    """Features of a macOS `sysctl hw.optional machdep.cpu` text: Apple silicon's hw.optional entries set to 1,
    an Intel Mac's machdep.cpu.features and leaf7_features tokens."""
    values = _sysctl_values(text)
    found = {f for f, name in DARWIN_ARM_SYSCTLS.items() if values.get(name) == "1"}
    tokens = set(values.get("machdep.cpu.features", "").split()) | set(values.get("machdep.cpu.leaf7_features",
                                                                              "").split())
    found |= {f for f, token in DARWIN_X86_TOKENS.items() if token in tokens}
    return _ordered(found)


def read_isa(host: str, date: str) -> IsaReading:
    """This machine's features: /proc/cpuinfo on Linux, `sysctl hw.optional machdep.cpu` on macOS; the source
    says which text, on `host`, on `date` (no text: no features, and the source says so)."""
    if CPUINFO.is_file():
        features, line = isa_from_cpuinfo(CPUINFO.read_text(errors="replace"))
        if line:
            return IsaReading(features, f"/proc/cpuinfo {line} on {host}, {date}")
    if platform.system() == "Darwin":
        try:
            text = subprocess.run(["sysctl", "hw.optional", "machdep.cpu"], capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            text = ""
        if text:
            return IsaReading(isa_from_sysctl(text), f"sysctl hw.optional machdep.cpu on {host}, {date}")
    return IsaReading((), f"not read: no /proc/cpuinfo flags or Features line and no macOS sysctl output on "
                          f"{host}, {date}")


def baseline_reading(label: str, where: str) -> IsaReading:
    """The brand baseline of a machine `label` whose table recorded no features (`where`: which table), or no
    features with a source saying none were recorded."""
    for brand, (features, why) in BRAND_BASELINES.items():
        if brand in label:
            return IsaReading(_ordered(set(features)), f"not read on the machine: {where} stores no instruction-set "
                                                       f"features; stated: the baseline of the brand its machine "
                                                       f"label names ({brand}): {why}")
    return IsaReading((), f"not stated: {where} stores no instruction-set features and its machine label ({label}) "
                          "names no brand with a known baseline")
