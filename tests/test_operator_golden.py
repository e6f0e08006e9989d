"""The operator table's rows and their costs, pinned exactly (tests/golden/operators.json; the maxtext practice).

Each case is a small model (Llama with grouped-query heads, BERT) in prefill and decode, fused (the schemes'
7-kernel table, whole and a slice) and unfused (the accelerator study's reference block), costed on two devices
that switch on every efficiency term: small-kernel loss, skinny-GEMM rows, small-kernel streaming at one core's
rate. Their values were checked equal to the code before the table existed (the arena's 558 cases and the
accelerator study's 1,008 frames, byte for byte). After an intended change to the table or the roofline,
regenerate with ``python tests/test_operator_golden.py`` and review the diff.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.model.models import tiny_config
from workbench.schemes.base import Workload
from workbench.schemes.common import cost, layer_operators

GOLDEN = REPO_ROOT / "tests" / "golden" / "operators.json"
MODELS = {"llama-gqa": dict(family="llama", n_layers=2, d_model=256, n_heads=8, n_kv_heads=2, d_ff=688,
                            vocab_size=512, max_positions=512),
          "bert": dict(family="bert", n_layers=2, d_model=192, n_heads=6, d_ff=768, vocab_size=512,
                       max_positions=512)}
DEVICES = {
    "board": DeviceSpec("board", {"fp32": 150e9, "fp16": 300e9, "int8": 600e9}, 0.45, 0.35,
                        small_kernel_flops=2e6, gemm_half_rows=23.0,
                        memory=(MemoryLevel("LLC", 2 * 2**20, 60e9), MemoryLevel("DRAM", 8 * 2**30, 17e9)),
                        memory_efficiency=0.67, kernel_launch_s=3e-6, small_kernel_bytes=2**20,
                        core_stream_bytes_per_s=6e9),
    "gpu": DeviceSpec("gpu", {"fp32": 20e12, "fp16": 80e12}, 0.8, 0.6, memory=(MemoryLevel("HBM", 16 * 2**30, 900e9),),
                      memory_efficiency=0.85, kernel_launch_s=5e-6),
}
WORKLOADS = {"prefill": Workload("prefill", 64, 64, weight_bits=4.5, activation_bits=16),
             "decode": Workload("decode", 64, 200, weight_bits=8.5, activation_bits=8.5, kv_bits=16)}
FIELDS = ("compute_s", "memory_s", "launch_s", "busy_s", "time_s")


def _number(x):
    """A float or a list of floats, as JSON keeps them (repr round-trips exactly)."""
    a = np.asarray(x, dtype=float)
    return float(a) if a.ndim == 0 else [float(v) for v in a]


def cases() -> dict:
    """Every (model, phase, table, device) case: its rows and their costs."""
    out = {}
    for mname, dims in MODELS.items():
        model = tiny_config(**dims)
        for phase, workload in WORKLOADS.items():
            tables = {"fused": layer_operators(model, workload),
                      "slice": layer_operators(model, workload, heads=np.array([2, 6]), cols=np.array([100, 588]),
                                               tokens=workload.new_tokens),
                      "unfused": layer_operators(model, workload, fused=False)}
            for tname, rows in tables.items():
                for dname, device in DEVICES.items():
                    out[f"{mname}|{phase}|{tname}|{dname}"] = [
                        {"name": c.operator.name, "kernels": _number(c.operator.kernels), "dtype": c.operator.dtype,
                         "kind": c.operator.kind, "flops": _number(c.operator.flops), "bytes": _number(c.operator.bytes),
                         **({"bound": c.bound} if np.ndim(c.memory_s) == 0 else {}),
                         **{f: _number(getattr(c, f)) for f in FIELDS}}
                        for c in cost(device, rows)]
    return out


def test_the_operator_table_and_its_costs_are_the_pinned_ones():
    golden = json.loads(GOLDEN.read_text())
    now = cases()
    assert sorted(now) == sorted(golden)
    for key, rows in golden.items():
        assert [r["name"] for r in now[key]] == [r["name"] for r in rows], key
        for got, want in zip(now[key], rows):
            assert got == want, (key, got["name"], {k: (got[k], want[k]) for k in want if got[k] != want[k]})
    decode = now["llama-gqa|decode|fused|board"]
    assert any(math.isfinite(r["memory_s"]) and r["memory_s"] > 0 for r in decode)
    assert {r["bound"] for r in decode} >= {"memory"} and len(now) == 2 * 2 * 3 * 2


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(cases(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
