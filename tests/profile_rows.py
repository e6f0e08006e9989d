"""Shared test data: the smallest micro-benchmark table `workbench.measure.profile.device_toml.device_constants` accepts."""

from __future__ import annotations

from workbench.measure.profile.device_toml import Provenance, profile_provenance


def provenance(machine: str = "2 cores, test machine", date: str = "2020-01-01") -> Provenance:
    """A profile's provenance: measured on `machine` on `date` (3 calls per rate, 5 batches per fixed cost)."""
    return profile_provenance(machine, date, 3, 5)


def base_profile_rows() -> list[dict]:
    """GEMM, read, storage, dispatch, numpy, kernel-chain, tiny-layer and GEMV-chain rows (no sweeps)."""
    rows = [{"benchmark": "gemm_fp32", "size": 1024, "seconds": 1.0, "rate": 2e11},
            {"benchmark": "stream_read_fp32", "size": 1, "seconds": 1.0, "rate": 32e9},
            {"benchmark": "storage_read", "size": 2**25, "seconds": 1.0, "rate": 1e9, "note": "O_DIRECT"},
            {"benchmark": "jit_dispatch", "size": 1, "seconds": 5e-6, "rate": 2e5},
            {"benchmark": "numpy_op", "size": 8, "seconds": 4e-7, "rate": 2.5e6}]
    rows += [{"benchmark": "kernel_chain", "size": k, "seconds": 2e-5 + k * 1e-6, "rate": 0} for k in (1, 16)]
    rows += [{"benchmark": "tiny_layers", "size": n, "seconds": 4e-5 + n * 1e-5, "rate": 0} for n in (1, 2)]
    rows += [{"benchmark": "gemv_chain_fp32", "size": k, "seconds": t, "rate": k * 2**24 / t}
             for k in (4, 8, 16) for t in [1e-4 + k * 2**24 / 24e9]]
    return rows
