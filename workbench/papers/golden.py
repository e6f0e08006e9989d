"""Golden planner outputs: every planner's decision on the papers' own settings, filed in
tests/golden/planners.json and compared by tests/test_golden.py (the maxtext practice).

A planner change that moves a decision shows up as a reviewed diff of that file, not as a silent shift
in some notebook's numbers. Regenerate after an intended change with
`python scripts/regenerate_golden.py` and read the diff. What is compared:
* Galaxy Algorithm 1 (heads / FFN columns / tokens per device, or its "infeasible" message),
  STI's two-stage planner (per-layer shards and bitwidths, preload, predicted latency) and TPI-LLM's
  split (heads / FFN columns per device): exactly — they are deterministic algorithms;
* Hepti's MILP (scipy HiGHS): the mode, devices and modelled latency (relative 1e-6). Its partition
  is filed for review but not compared, since another HiGHS release may pick another optimum of the
  same latency.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.io import REPO_ROOT, write_text_atomic

GOLDEN_PATH = REPO_ROOT / "tests" / "golden" / "planners.json"
REL_TOL = 1e-9  # deterministic arithmetic: only float formatting may differ
MILP_REL_TOL = 1e-6  # HiGHS's objective tolerance
UNCOMPARED_KEYS = ("partition_for_review",)


def _jsonable(value):
    """Tuples, numpy scalars and arrays as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _infeasible(fn: Callable[[], dict]) -> dict:
    """The planner's decision, or its infeasible message (also a decision worth pinning)."""
    try:
        return fn()
    except InfeasibleError as exc:
        return {"infeasible": str(exc)}


# ---- the cases ---------------------------------------------------------------------------------------
def galaxy_cases() -> dict[str, Callable[[], dict]]:
    """Algorithm 1 on Table IV's cells (125 Mbps, 284 tokens) and on Fig. 9's heterogeneous D, E, F."""
    from workbench.model.models import get_model
    from workbench.papers import galaxy
    from workbench.schemes.planners.galaxy import plan

    def case(model: str, env: str) -> Callable[[], dict]:
        def run() -> dict:
            setting = galaxy.Setting.from_constants()
            part = plan(get_model(model), galaxy.environment(env, setting.bandwidth_mbps),
                        galaxy.workload(int(setting.seq_len)))
            return {"heads": part.heads, "mlp_cols": part.mlp_cols, "seq": part.seq}
        return lambda: _infeasible(run)

    envs = ("A", "B", "C", "D", "E", "F")
    return {f"galaxy/{model}/{env}": case(model, env) for model in galaxy.MODELS for env in envs}


def sti_cases() -> dict[str, Callable[[], dict]]:
    """STI's planner (importance = the default order) for DynaBERT on both platforms at the paper's targets."""
    from workbench.papers import sti
    from workbench.schemes.planners.sti import plan_sti

    def case(platform: str, target_s: float) -> Callable[[], dict]:
        def run() -> dict:
            plan = plan_sti(sti.platform_profile(platform, "DynaBERT-12x12"), target_s, sti.platform_preload(platform))
            return {"layers": plan.layers, "preload_bytes": plan.preload_bytes, "valid": plan.valid,
                    "latency_s": plan.latency_s, "mean_bits": plan.mean_bits}
        return lambda: _infeasible(run)

    targets = [float(t) for t in sti.Setting.from_constants().target_latencies]
    return {f"sti/{platform}/{t * 1e3:g}ms": case(platform, t) for platform in sti.PLATFORMS for t in targets}


def hepti_cases() -> dict[str, Callable[[], dict]]:
    """Hepti's P2 (MILP) with the paper's settings on 2..8 devices, with and without the deadline."""
    from workbench.papers.hepti import Setting
    from workbench.schemes.planners.hepti import plan

    def case(n: int, deadline: bool) -> Callable[[], dict]:
        def run() -> dict:
            s = Setting.from_constants(n_devices=n)
            p = plan(s.cfg, s.workload, s.profiles(), s.deadline_s if deadline else None, comm_model=s.comm_model,
                     threshold=s.threshold)
            part = p.partition
            return {"mode": p.mode, "devices": p.devices, "latency_s": p.latency_s,
                    "partition_for_review": {"heads": part.heads, "rows": part.rows, "ffn": part.ffn,
                                             "cols": part.cols, "grid": part.grid}}
        return lambda: _infeasible(run)

    return {f"hepti/{n}dev/{'deadline' if d else 'fastest'}": case(n, d) for n in (2, 3, 5, 8) for d in (True, False)}


def tpi_cases() -> dict[str, Callable[[], dict]]:
    """TPI-LLM's split by computing power on the emulated testbed (8 devices) and the 4 laptops."""
    from workbench.model.models import get_model
    from workbench.papers import tpi_llm
    from workbench.schemes.planners.tpi_llm import plan_split

    def case(model: str, testbed: str) -> Callable[[], dict]:
        def run() -> dict:
            cluster = tpi_llm.emulated_cluster() if testbed == "emulated" else tpi_llm.laptop_cluster()
            split = plan_split(get_model(model), cluster.devices)
            return {"heads": split.heads, "ffn": split.ffn}
        return lambda: _infeasible(run)

    return {f"tpi_llm/{model}/{testbed}": case(model, testbed) for model in tpi_llm.MODELS
            for testbed in ("emulated", "laptops")}


def cases() -> dict[str, Callable[[], dict]]:
    """Every golden case by name (paper/setting)."""
    return {**galaxy_cases(), **sti_cases(), **hepti_cases(), **tpi_cases()}


# ---- files and comparison ----------------------------------------------------------------------------
def compute(names: list[str] | None = None) -> dict[str, dict]:
    """The current decisions of the named cases (all by default), as JSON values."""
    table = cases()
    unknown = sorted(set(names or ()) - set(table))
    if unknown:
        raise WorkbenchError(f"unknown golden case(s) {unknown}; known: {len(table)} cases, e.g. {next(iter(table))}")
    return {name: _jsonable(table[name]()) for name in (names or sorted(table))}


def write(path: Path = GOLDEN_PATH) -> Path:
    """Recompute every case and write the golden file atomically (sorted, one case per block)."""
    return write_text_atomic(path, json.dumps(compute(), indent=1, sort_keys=True) + "\n")


def load(path: Path = GOLDEN_PATH) -> dict[str, dict]:
    """The filed decisions."""
    if not Path(path).exists():
        raise WorkbenchError(f"no golden file at {path}: run `python scripts/regenerate_golden.py`")
    return json.loads(Path(path).read_text())


def differences(expected, actual, where: str = "", rel_tol: float = REL_TOL) -> list[str]:
    """Human-readable differences between a filed and a current decision ('' paths when equal)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(expected) | set(actual)):
            if key in UNCOMPARED_KEYS:
                continue
            if key not in expected or key not in actual:
                out.append(f"{where}/{key}: {'missing now' if key not in actual else 'new'}")
                continue
            out += differences(expected[key], actual[key], f"{where}/{key}", rel_tol)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: length {len(expected)} -> {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]", rel_tol)]
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(expected, bool):
        return [] if math.isclose(expected, actual, rel_tol=rel_tol, abs_tol=0.0) else [f"{where}: {expected} -> {actual}"]
    return [] if expected == actual else [f"{where}: {expected!r} -> {actual!r}"]


def tolerance(name: str) -> float:
    """Relative tolerance of a case's numbers (MILP objectives vs deterministic arithmetic)."""
    return MILP_REL_TOL if name.startswith("hepti/") else REL_TOL
