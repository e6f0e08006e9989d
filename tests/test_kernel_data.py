"""data/kernels: the per-block instruction counts of llama.cpp's and distributed-llama's CPU kernels, and
data/constants/cores.toml (the issue rates they are divided by). Shape and provenance only: the counts come from
reading the pinned sources (data/kernels/build_*.py regenerate them where those sources are present)."""

from __future__ import annotations

import csv
import re

import pytest

from workbench.core.constants import load_constants
from workbench.core.io import DATA_DIR
from workbench.model.formats import BLOCK_FORMATS

KERNELS = DATA_DIR / "kernels"
COLUMNS = ["engine", "version", "commit", "format", "isa_class", "path", "vec_dot_type", "block_weights", "simd_mul",
           "simd_alu", "simd_load", "scalar_ops", "notes", "source", "kind"]
ISA = {"neon", "neon_dotprod", "neon_i8mm", "avx2", "avx_vnni", "avx512_vnni"}
PATHS = {"vec_dot", "vec_dot_mmla", "repack_gemv", "repack_gemm", "sgemm", "tiled", "amx", "amx_vnni", "scalar",
         "unsupported"}
KINDS = {"quoted", "derived", "not_counted"}
LLAMA_FORMATS = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                 "iq4_nl", "iq4_xs", "mxfp4")


def rows(name: str) -> list[dict]:
    with open(KERNELS / name, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


@pytest.mark.parametrize("name", ["llamacpp_kernels.csv", "dllama_kernels.csv"])
def test_kernel_rows_are_complete_and_cited(name):
    for r in rows(name):
        where = f"{name}: {r['format']} {r['isa_class']} {r['path']}"
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]), where
        assert r["format"] in BLOCK_FORMATS, where
        assert r["isa_class"] in ISA and r["path"] in PATHS and r["kind"] in KINDS, where
        assert re.search(r":\d+.*@[0-9a-f]{12}$", r["source"]) and r["commit"].startswith(r["source"][-12:]), where
        assert int(r["block_weights"]) >= 1 and r["notes"].strip(), where
        counts = [r[k] for k in ("simd_mul", "simd_alu", "simd_load", "scalar_ops")]
        if r["kind"] == "not_counted":
            assert all(c == "" for c in counts), where
        else:
            assert all(float(c) >= 0 for c in counts), where
            assert r["path"] in ("scalar", "unsupported") or float(r["simd_mul"]) > 0, where


def test_every_llamacpp_format_has_a_decode_kernel_on_every_isa():
    have = {(r["format"], r["isa_class"]) for r in rows("llamacpp_kernels.csv") if r["path"] in ("vec_dot", "scalar")}
    missing = [(f, i) for f in LLAMA_FORMATS for i in sorted(ISA) if (f, i) not in have]
    assert not missing


def test_activation_quant_rows():
    with open(KERNELS / "activation_quant.csv", newline="") as f:
        act = list(csv.DictReader(f))
    assert {r["engine"] for r in act} == {"llama.cpp", "distributed-llama"}
    for r in act:
        assert r["isa_class"] in ISA and r["kind"] in KINDS - {"not_counted"} and "@" in r["source"]
        n = int(r["block_elements"])
        total = sum(float(r[k]) for k in ("simd_mul", "simd_alu", "simd_load"))
        assert float(r["simd_per_element"]) == pytest.approx(total / n, abs=1e-3)


def test_cores_constants_load_with_provenance():
    cores = load_constants("constants/cores.toml")
    quantities = ("vec_width_bits", "vec_int_dot_per_cycle", "vec_fma_per_cycle", "vec_pipes", "out_of_order")
    for name, c in cores.items():
        assert any(name.endswith("_" + q) for q in quantities), name
        # assumed: the out-of-order flags kernel_cost added for cores whose guides the corpus did not hold, each saying so
        assert c.kind in ("quoted", "datasheet", "derived") or (c.kind == "assumed" and name.endswith("_out_of_order")
                                                                and "not quoted" in c.source)
    assert cores["cortex_a53_out_of_order"].value == 0 and cores["cortex_a76_out_of_order"].value == 1
