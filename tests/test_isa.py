"""Instruction-set features: every preset states them with a source and a core, the profile reads them from
captured /proc/cpuinfo and sysctl texts (published captures, cited beside each), and a deployment states or
overrides them."""

from __future__ import annotations

import tomllib

import pandas as pd
import pytest
from deploy_toml import board_deployment
from profile_rows import base_profile_rows, provenance

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import (
    ISA_FEATURES,
    device_from_table,
    device_names,
    load_device,
    preset_table,
)
from workbench.measure.profile import isa as isa_module
from workbench.measure.profile.device_toml import device_toml, table_isa, write_device_toml
from workbench.measure.profile.isa import (
    IsaReading,
    baseline_reading,
    isa_from_cpuinfo,
    isa_from_sysctl,
    read_isa,
)

# Raspberry Pi 5 Model B Rev 1.0 (BCM2712, 4x Cortex-A76), /proc/cpuinfo as posted by ThomasKaiser in
# hrw/arm-socs-table issue #96 "BCM2712 / RPi 5B" (2023-09-28), two of its four processors.
PI5_CPUINFO = """processor\t: 0
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x4
CPU part\t: 0xd0b
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 108.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x4
CPU part\t: 0xd0b
CPU revision\t: 1

Hardware\t: BCM2835
Revision\t: d04170
Model\t\t: Raspberry Pi 5 Model B Rev 1.0
"""
# A Raspberry Pi 4 Model B Rev 1.2 booted with a 32-bit kernel: hrw/arm-socs-table issue #31 (2022-11-14).
PI4_ARMV7_CPUINFO = """processor\t: 0
model name\t: ARMv7 Processor rev 3 (v7l)
BogoMIPS\t: 108.00
Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae evtstrm crc32
CPU implementer\t: 0x41
CPU part\t: 0xd08
"""
# Apple M2 Pro under Linux: hrw/arm-socs-table @ 7adad61 cpuinfo-data/m2p.cpuinfo (first processor).
M2PRO_FEATURES = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc "
                  "dcpop sha3 asimddp sha512 asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp flagm2 frint "
                  "i8mm bf16 bti ecv")
# This session's machine (Intel Xeon, family 6 model 207 = Emerald Rapids, a 2-vCPU Firecracker guest), its
# /proc/cpuinfo read on 2026-11-28, the first processor's lines up to its flags.
XEON_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2100.000
cache size\t: 307200 KB
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht \
syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 \
fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm \
3dnowprefetch cpuid_fault ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid \
avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 \
xsaves avx_vnni avx512_bf16 wbnoinvd arat avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni \
avx512_bitalg avx512_vpopcntdq rdpid bus_lock_detect cldemote movdiri movdir64b fsrm md_clear serialize tsxldtrk ibt \
amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities
"""
XEON_FEATURES = ("sse3", "ssse3", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni",
                 "avx512_bf16", "amx_int8")
# Apple M2 under macOS 12: archspec/archspec-json @ 90b453f tests/targets/darwin-monterey-m2 (an excerpt).
M2_SYSCTL = """hw.optional.arm.FEAT_FHM: 1
hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_SHA3: 1
hw.optional.arm.FEAT_BF16: 1
hw.optional.arm.FEAT_I8MM: 1
hw.optional.arm.FEAT_FP16: 1
hw.optional.floatingpoint: 1
hw.optional.neon: 1
hw.optional.AdvSIMD: 1
hw.optional.AdvSIMD_HPFPCvt: 1
machdep.cpu.brand_string: Apple M2
"""
# Apple M1 under macOS 12: archspec-json tests/targets/darwin-monterey-m1 (the lines read here).
M1_SYSCTL = """hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_I8MM: 0
hw.optional.arm.FEAT_FP16: 1
hw.optional.AdvSIMD: 1
"""
# An Intel Mac (i7-6700K, macOS 10.14): archspec-json tests/targets/darwin-mojave-skylake (first two lines).
SKYLAKE_SYSCTL = """machdep.cpu.features: FPU VME DE PSE TSC MSR PAE MCE CX8 APIC SEP MTRR PGE MCA CMOV PAT PSE36 \
CLFSH DS ACPI MMX FXSR SSE SSE2 SS HTT TM PBE SSE3 PCLMULQDQ DTES64 MON DSCPL VMX EST TM2 SSSE3 FMA CX16 TPR PDCM \
SSE4.1 SSE4.2 x2APIC MOVBE POPCNT AES PCID XSAVE OSXSAVE SEGLIM64 TSCTMR AVX1.0 RDRAND F16C
machdep.cpu.leaf7_features: RDWRFSGS TSC_THREAD_OFFSET SGX BMI1 HLE AVX2 SMEP BMI2 ERMS INVPCID RTM FPU_CSDS MPX \
RDSEED ADX SMAP CLFSOPT IPT MDCLEAR TSXFA IBRS STIBP L1DF SSBD
"""
# What a feature needs beside it (kind: datasheet; sources: LLVM X86TargetParser.cpp ImpliedFeatures*, e.g. AVX512F
# implies AVX2 | F16C | FMA, AVXVNNI implies AVX2; AArch64Features.td Implies: FullFP16, DotProd and I8MM need NEON).
NEEDS = {"fp16": "neon", "dotprod": "neon", "i8mm": "neon", "sve": "fp16", "sve2": "sve", "ssse3": "sse3",
         "avx": "ssse3", "f16c": "avx", "fma": "avx", "avx2": "avx", "avx_vnni": "avx2", "avx512f": "avx2",
         "avx512bw": "avx512f", "avx512_vnni": "avx512f", "avx512_bf16": "avx512bw"}
ARM, X86, GPU = ISA_FEATURES[:6], ISA_FEATURES[6:18], ISA_FEATURES[18:]


def meta(device_id: str) -> dict:
    """A preset's [meta] (with the meta of the preset it is based on)."""
    return preset_table(device_id)["meta"]


@pytest.mark.parametrize("device_id", device_names())
def test_every_preset_states_its_features_their_source_and_its_core(device_id):
    m = meta(device_id)
    assert isinstance(m.get("isa"), list), f"{device_id}: [meta] isa = [...] (possibly empty, with the reason)"
    assert isinstance(m.get("isa_source"), str) and len(m["isa_source"].strip()) > 20, device_id
    assert isinstance(m.get("core"), str), device_id
    assert m["core"].strip() or m.get("core_note", "").strip(), f"{device_id}: a core id, or a core_note (why none)"
    assert load_device(device_id).isa == tuple(m["isa"]) and load_device(device_id).core == m["core"]


@pytest.mark.parametrize("device_id", device_names())
def test_each_preset_lists_features_in_order_with_what_they_need(device_id):
    isa = load_device(device_id).isa
    assert list(isa) == sorted(isa, key=ISA_FEATURES.index) and len(set(isa)) == len(isa)
    assert {f: NEEDS[f] for f in isa if f in NEEDS and NEEDS[f] not in isa} == {}
    families = {name for name, group in (("arm", ARM), ("x86", X86), ("gpu", GPU)) if set(isa) & set(group)}
    assert len(families) <= 1, (device_id, isa)  # a device's cores are of one kind
    kind = load_device(device_id).device_class
    assert (families == {"gpu"}) == (kind == "gpu"), (device_id, kind, isa)


def test_an_empty_feature_list_says_why_and_a_core_id_is_a_short_id():
    empty = [d for d in device_names() if not meta(d)["isa"]]
    assert empty == ["siracusa"]  # the RISC-V MCU: none of the listed features applies
    assert "RISC-V" in meta("siracusa")["isa_source"]
    cores = {meta(d)["core"] for d in device_names()} - {""}
    assert all(c.replace("_", "").isalnum() and c == c.lower() for c in cores), cores


def test_the_big_little_and_named_boards_state_their_big_cores():
    assert load_device("edge_rpi5_8gb").isa == ("neon", "fp16", "dotprod")  # Armv8.2-A, no i8mm
    assert load_device("edge_rpi4b_8gb").isa == ("neon",)  # Cortex-A72, Armv8.0-A
    assert load_device("edge_orangepi5_rk3588s").core == "cortex_a76"
    assert "i8mm" in load_device("edge_apple_m2pro_mini_cpu").isa and "i8mm" not in load_device("tpi_mac_pro_m1").isa
    assert load_device("edge_intel_n100").isa == load_device("edge_intel_i7_1360p").isa  # Alder Lake ISA, no AVX-512
    assert "avx512f" not in load_device("edge_intel_n100").isa and "avx_vnni" in load_device("edge_intel_n100").isa
    assert load_device("h100_sxm_measured").isa == ("cuda",)  # from the preset it is based on


def test_the_published_captures_read_as_the_presets_state():
    assert isa_from_cpuinfo(PI5_CPUINFO) == (load_device("edge_rpi5_8gb").isa, "Features")
    assert isa_from_cpuinfo(XEON_CPUINFO) == (load_device("this_machine_xeon").isa, "flags")
    assert isa_from_cpuinfo(f"Features\t: {M2PRO_FEATURES}\n")[0] == load_device("edge_apple_m2pro_mini_cpu").isa


def test_cpuinfo_parser_maps_flags_and_hwcaps():
    assert isa_from_cpuinfo(XEON_CPUINFO) == (XEON_FEATURES, "flags")
    assert isa_from_cpuinfo(XEON_CPUINFO.replace(" pni ", " ")) == (XEON_FEATURES[1:], "flags")  # pni is SSE3
    assert isa_from_cpuinfo(PI4_ARMV7_CPUINFO) == (("neon",), "Features")
    assert isa_from_cpuinfo("model name : x\n") == ((), "")


def test_cpuinfo_parser_keeps_what_every_processor_lists():
    mixed = PI5_CPUINFO.replace("lrcpc dcpop asimddp\nCPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: "
                                "0x4\nCPU part\t: 0xd0b\nCPU revision\t: 1\n\nHardware", "lrcpc dcpop\nHardware")
    assert mixed != PI5_CPUINFO
    assert isa_from_cpuinfo(mixed) == (("neon", "fp16"), "Features")


def test_sysctl_parser_reads_apple_silicon_and_intel_macs():
    assert isa_from_sysctl(M2_SYSCTL) == ("neon", "fp16", "dotprod", "i8mm")
    assert isa_from_sysctl(M1_SYSCTL) == ("neon", "fp16", "dotprod")  # FEAT_I8MM: 0
    assert isa_from_sysctl(SKYLAKE_SYSCTL) == ("sse3", "ssse3", "avx", "f16c", "fma", "avx2")
    assert isa_from_sysctl("") == ()


def test_read_isa_says_which_text_on_which_host_and_when(tmp_path, monkeypatch):
    (tmp_path / "cpuinfo").write_text(XEON_CPUINFO)
    monkeypatch.setattr(isa_module, "CPUINFO", tmp_path / "cpuinfo")
    assert read_isa("box", "2026-01-02") == IsaReading(XEON_FEATURES, "/proc/cpuinfo flags on box, 2026-01-02")
    monkeypatch.setattr(isa_module, "CPUINFO", tmp_path / "missing")
    monkeypatch.setattr(isa_module.platform, "system", lambda: "Linux")
    reading = read_isa("box", "2026-01-02")
    assert reading.features == () and reading.source.startswith("not read") and "box, 2026-01-02" in reading.source


def _bench() -> pd.DataFrame:
    """The smallest micro-benchmark table the device builder takes."""
    return pd.DataFrame(base_profile_rows())


def test_the_profile_writes_the_recorded_features_into_meta(tmp_path):
    bench = _bench().assign(isa="neon fp16 dotprod", isa_source="/proc/cpuinfo Features on pi, 2026-01-02")
    write_device_toml(tmp_path / "pi.toml", bench, provenance(), "pi", "a board")
    table = tomllib.loads((tmp_path / "pi.toml").read_text())
    assert table["meta"]["isa"] == ["neon", "fp16", "dotprod"] and table["meta"]["core"] == ""
    assert table["meta"]["isa_source"] == "/proc/cpuinfo Features on pi, 2026-01-02" and table["meta"]["core_note"]
    assert device_from_table(table, "pi.toml").isa == ("neon", "fp16", "dotprod")


def test_a_table_without_features_takes_its_brands_baseline_or_states_none():
    epyc = table_isa(_bench().assign(machine="2 cores, AMD EPYC, Linux"), provenance(), "2 cores, AMD EPYC, Linux")
    assert epyc.features == ("sse3", "ssse3", "avx", "f16c", "fma", "avx2") and "ZNVER1" in epyc.source
    assert baseline_reading("2 cores, Some CPU", "t.csv") == IsaReading(
        (), "not stated: t.csv stores no instruction-set features and its machine label (2 cores, Some CPU) names no "
            "brand with a known baseline")
    assert "isa = []" in device_toml({}, "x", "", baseline_reading("Some CPU", "t.csv"))
    assert "isa =" not in device_toml({}, "x", "")  # no reading: no isa lines (older callers)
    with pytest.raises(WorkbenchError, match="unknown features \\['avx9'\\]"):
        table_isa(_bench().assign(isa="avx2 avx9", isa_source="s"), provenance(), "x")


def test_this_machine_preset_states_the_baseline_of_its_unrecorded_epyc():
    m = meta("this_machine_cpu")
    assert m["isa"] == ["sse3", "ssse3", "avx", "f16c", "fma", "avx2"] and "not read on the machine" in m["isa_source"]
    assert m["core"] == "" and "not detected" in m["core_note"]


def _deployment_device(keys: str):
    """The first device of a two-board deployment whose [[devices]] table has `keys`."""
    from workbench.scenarios.userconfig import config_from_text

    return config_from_text(board_deployment(keys), "t.toml").cluster.devices[0]


def test_a_deployment_states_isa_for_its_own_device_and_over_a_preset():
    from workbench.scenarios.userconfig import config_from_text

    assert _deployment_device('isa = ["neon", "dotprod"]').isa == ("neon", "dotprod")
    assert _deployment_device("").isa == ()
    text = ('[model]\nname = "TinyLlama-42M"\n[network]\ntopology = "switch"\nbandwidth_mbps = 1000\n'
            '[[devices]]\npreset = "edge_rpi5_8gb"\ncount = 2\nisa = ["neon"]\n')
    device = config_from_text(text, "t.toml").cluster.devices[0]
    assert device.isa == ("neon",) and load_device("edge_rpi5_8gb").isa == ("neon", "fp16", "dotprod")
    assert config_from_text(text.replace('isa = ["neon"]\n', ""), "t.toml").cluster.devices[0].isa == \
        ("neon", "fp16", "dotprod")


@pytest.mark.parametrize("value, match", [
    ('["neon", "avx9"]', "t.toml: devices\\[0\\].isa: unknown feature 'avx9'; allowed: neon, fp16, dotprod"),
    ('"neon"', "t.toml: devices\\[0\\].isa must be a list of features \\(neon, fp16"),
    ("[1]", "must be a list of features"),
])
def test_an_unknown_or_malformed_isa_is_one_line_listing_the_allowed_features(value, match):
    with pytest.raises(WorkbenchError, match=match) as info:
        _deployment_device(f"isa = {value}")
    assert "\n" not in str(info.value) and "amx_int8" in str(info.value)


def test_a_presets_unknown_feature_is_one_line_naming_the_file():
    with pytest.raises(WorkbenchError, match="box.toml: meta.isa: unknown feature 'avx9'; allowed: neon") as info:
        peak = {"value": 1e9, "unit": "FLOP/s", "kind": "assumed", "source": "s"}
        device_from_table({"meta": {"isa": ["avx9"]}, "peak_flops_fp32": peak}, "box.toml")
    assert "\n" not in str(info.value)


def test_the_key_table_lists_isa_as_a_list_that_may_override_a_preset():
    from workbench.scenarios.userconfig import config_keys_table

    [row] = [r for r in config_keys_table().splitlines() if r.startswith("| `[[devices]]` | `isa` |")]
    assert "| list of text | yes |" in row and "amx_int8" in row
