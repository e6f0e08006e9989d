"""The MoE notebook's tables: mixtures of experts beside dense models of equal quality on the same edge clusters,
the registered MoE partitions side by side, the expert cache's hit rate against the memory it takes, and the
tidy result rows (every modelled number). Everything runs through the arena (`arena_for_config`, what whatif
runs); the registry decides which schemes appear, so a MoE scheme registered later shows up with no change here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.model import routing as routing_module
from workbench.model.models import MODELS, TransformerConfig, get_model
from workbench.report.results import RESULT_COLUMNS
from workbench.scenarios.arena import GIB, Arena, Registry, arena_for_config, cluster_label
from workbench.scenarios.moe_advice import PARTITION_WORDS, REASONS
from workbench.scenarios.regimes import moe_capable, with_device_count
from workbench.scenarios.userconfig import UserConfig, load_config
from workbench.scenarios.whatif import best_schemes
from workbench.schemes.base import spec_of
from workbench.schemes.common import ROUTER_BITS
from workbench.schemes.moe import DLLAMA_SCHEME, PIPELINE_SCHEME

MIB = 2**20


@dataclass(frozen=True)
class Pair:
    """A mixture of experts and a dense model compared on the same clusters, and what the pairing rests on."""

    moe: str
    dense: str
    basis: str
    source: str

    def __post_init__(self) -> None:
        if not get_model(self.moe).is_moe or get_model(self.dense).is_moe:
            raise WorkbenchError(f"a pair is a MoE model and a dense one, got {self.moe!r} and {self.dense!r}")


PAIRS = (
    Pair("Mixtral-8x7B", "Llama 2-70B", "equal quality (quoted)",
         "Jiang et al. 2024, arXiv 2401.04088, abstract: Mixtral 8x7B 'outperforms or matches Llama 2 70B ... across "
         "all evaluated benchmarks'"),
    Pair("OLMoE-1B-7B", "Llama 2-13B", "equal quality or better (quoted, instruct models)",
         "Muennighoff et al. 2024, arXiv 2409.02060, abstract: OLMoE-1B-7B-Instruct surpasses 'larger ones like "
         "Llama2-13B-Chat'"),
    Pair("Qwen3-30B-A3B", "Yi-34B", "same stored size (no quality claim)",
         "the workbench's stand-in: a dense model of about the MoE's stored parameters, with all of them read per token"),
    Pair("Qwen3-30B-A3B", "Llama 2-3B", "same active size (no quality claim)",
         "the workbench's stand-in: a dense model of about the MoE's active parameters, which fits where the MoE "
         "does not"),
)


def moe_models() -> list[TransformerConfig]:
    """Every registered mixture of experts, in registry order."""
    return [m for m in MODELS.values() if m.is_moe]


def model_table(weight_bits: float) -> pd.DataFrame:
    """Per registered MoE model: experts, stored and active parameters, bytes at `weight_bits` (stored, read per
    token) and the f32 routers every tensor-parallel device streams."""
    rows = []
    for m in moe_models():
        rows.append({"model": m.name, "experts": m.n_experts, "active_experts": m.n_active_experts,
                     "shared_experts": m.n_shared_experts, "stored_params": float(m.total_params()),
                     "active_params": float(m.active_params()),
                     "stored_gib": m.weight_bytes(weight_bits) / GIB,
                     "active_gib": m.active_params() * weight_bits / 8 / GIB,
                     "router_mib": m.moe_layers * m.router_params() * ROUTER_BITS / 8 / MIB})
    return pd.DataFrame(rows)


# ---- dense vs MoE on the same clusters ---------------------------------------------------------------------
def clusters(quick: bool = False) -> dict[str, UserConfig]:
    """The edge clusters compared: the Pi 5 example at 4 (and 8) boards, and TPI-LLM's four laptops on Wi-Fi."""
    pi = load_config(REPO_ROOT / "examples" / "qwen3_moe_pi5.toml")
    out = {"4x Pi 5, 1 GbE": pi}
    if not quick:
        out["8x Pi 5, 1 GbE"] = replace(pi, cluster=with_device_count(pi.cluster, 8))
    out["4 laptops, Wi-Fi"] = load_config(REPO_ROOT / "examples" / "laptops_wifi.toml").with_workload(
        activation_bits=pi.activation_bits)
    return out


def best_row(arena: Arena) -> dict:
    """The fastest scheme that fits per phase (whatif's rule), its latency, and the number that fit."""
    table = arena.table()
    best = best_schemes(table)
    latency = table.set_index(["phase", "scheme"])["latency_s"]
    decode, prefill = best.get("decode"), best.get("prefill")
    per_token = float(latency[("decode", decode)]) if decode else math.nan
    return {"best_decode": decode or "none fits", "time_per_token_s": per_token,
            "tokens_per_s": 1 / per_token if per_token > 0 else math.nan,
            "best_prefill": prefill or "none fits",
            "ttft_s": float(latency[("prefill", prefill)]) if prefill else math.nan,
            "schemes_fit": int((table[table.phase == "decode"].status == "ok").sum())}


def pair_table(configs: dict[str, UserConfig], weight_bits: float, registry: Registry,
               pairs: tuple[Pair, ...] = PAIRS) -> pd.DataFrame:
    """Every pair's two models on every cluster at `weight_bits`: the best scheme per phase and its latency."""
    rows = []
    for label, config in configs.items():
        for pair in pairs:
            for role, name in (("MoE", pair.moe), ("dense", pair.dense)):
                model = get_model(name)
                changed = replace(config, model=model).with_workload(weight_bits=weight_bits)
                arena = arena_for_config(changed, registry=registry)
                rows.append({"cluster": label, "devices": cluster_label(config.cluster), "pair": f"{pair.moe} vs "
                             f"{pair.dense}", "basis": pair.basis, "role": role, "model": name,
                             "stored_gib": model.weight_bytes(weight_bits) / GIB, **best_row(arena)})
    return pd.DataFrame(rows)


# ---- the partitions side by side ----------------------------------------------------------------------------
def partition_table(config: UserConfig, registry: Registry) -> pd.DataFrame:
    """Every MoE-capable registered scheme on `config` (both phases): latency, status and its components."""
    schemes = moe_capable(registry)
    table = arena_for_config(config, schemes=schemes, registry=registry).table()
    return table[["scheme", "paper", "phase", "status", "latency_s", "memory_s", "compute_s", "fixed_s", "serial_s",
                  "comm_link_latency_s", "comm_bytes_s", "io_stall_s", "other_s", "peak_memory_bytes", "notes"]]


def missing_partitions(registry: Registry) -> list[str]:
    """The MoE partitions with reasons (`moe_advice.REASONS`: tp, pipeline, expert) no MoE-capable scheme of
    `registry` runs (`SchemeSpec.partition`; the notebook notes each)."""
    covered = {spec_of(name).partition for name in moe_capable(registry)}
    return [f"{kind} ({PARTITION_WORDS[kind]})" for kind in REASONS if kind not in covered]


def device_count_table(config: UserConfig, registry: Registry, counts: Sequence[int],
                       schemes: Sequence[str] = (DLLAMA_SCHEME, PIPELINE_SCHEME)) -> pd.DataFrame:
    """Each registered one of `schemes` decoding on `config`'s boards at each device count: status, time per token,
    the experts per MoE layer the fullest board caches (NaN for a scheme without an expert cache), why n/a."""
    names = [name for name in schemes if name in registry]
    rows = []
    for n in counts:
        arena = arena_for_config(replace(config, cluster=with_device_count(config.cluster, n)), phases=("decode",),
                                 schemes=names, registry=registry)
        for entry in arena.entries:
            detail = entry.result.detail if entry.result is not None else None
            stages = detail.stages if detail is not None else ()
            rows.append({"scheme": entry.scheme, "devices": n, "status": entry.status,
                         "time_per_token_s": entry.result.latency_s if entry.status == "ok" else math.nan,
                         "cached_experts": float(min(s["cache"] for s in stages)) if stages else math.nan,
                         "experts": config.model.n_experts, "note": entry.error})
    return pd.DataFrame(rows)


def resident_from(counts: pd.DataFrame, scheme: str = PIPELINE_SCHEME) -> int | None:
    """The fewest devices at which `scheme` fits and every board caches every expert of its layers (None: no
    count of `counts`, a `device_count_table`)."""
    rows = counts[(counts.scheme == scheme) & (counts.status == "ok") & (counts.cached_experts >= counts.experts)]
    return int(rows.devices.min()) if len(rows) else None


# ---- the expert cache --------------------------------------------------------------------------------------
def cache_settings(quick: bool = False) -> dict[str, object]:
    """Routing settings the hit-rate curves compare: uniform, Zipf-skewed, and skewed with temporal locality."""
    settings = {"uniform": routing_module.Routing(),
                "skewed (Zipf 1.0)": routing_module.Routing(kind="skewed", skew=1.0)}
    if not quick:
        settings["skewed + locality 0.3"] = routing_module.Routing(kind="skewed", skew=1.0, locality=0.3)
    return settings


def cache_table(models: list[str], weight_bits: float, quick: bool = False) -> pd.DataFrame:
    """Hit rate of a decode token's expert reads against the memory the cache takes on one device holding every
    MoE layer (cache experts per layer x expert bytes x MoE layers), per routing setting and policy."""
    rows = []
    policies = routing_module.CACHE_POLICIES
    for name in models:
        m = get_model(name)
        per_expert = m.expert_params() * weight_bits / 8 * m.moe_layers
        sizes = sorted({round(m.n_experts * f) for f in ((0, 0.25, 0.5, 1) if quick else
                                                          (0, 0.0625, 0.125, 0.25, 0.375, 0.5, 0.75, 1))})
        for label, routing in cache_settings(quick).items():
            for policy in policies:
                for size in sizes:
                    hit = routing_module.hit_rate(routing, m.n_experts, m.n_active_experts, size, policy)
                    rows.append({"model": name, "routing": label, "policy": policy, "cache_experts": size,
                                 "cache_gib": size * per_expert / GIB, "cache_share": size / m.n_experts,
                                 "hit_rate": float(hit)})
    return pd.DataFrame(rows)


# ---- results.csv ------------------------------------------------------------------------------------------
def result_rows(models: pd.DataFrame, pairs: pd.DataFrame, partitions: pd.DataFrame, cache: pd.DataFrame,
                regime: pd.DataFrame) -> pd.DataFrame:
    """Every modelled number of the notebook as tidy rows (workbench.report.results columns)."""
    rows = []
    for r in models.itertuples():
        for q, unit in (("stored_params", "params"), ("active_params", "params"), ("stored_gib", "GiB"),
                        ("active_gib", "GiB"), ("router_mib", "MiB")):
            rows.append(("workbench", "moe_models", r.model, "", q, getattr(r, q), unit))
    for r in pairs.itertuples():
        setting = f"{r.cluster},{r.pair},{r.role}"
        rows.append(("workbench", "dense_vs_moe", r.model, f"{setting},decode={r.best_decode}", "time_per_token",
                     r.time_per_token_s, "s"))
        rows.append(("workbench", "dense_vs_moe", r.model, f"{setting},prefill={r.best_prefill}", "ttft", r.ttft_s, "s"))
    for r in partitions.itertuples():
        rows.append(("workbench", "moe_partitions", "", f"{r.scheme},{r.phase},{r.status}", "latency", r.latency_s, "s"))
    for r in cache.itertuples():
        rows.append(("workbench", "expert_cache", r.model, f"{r.routing},{r.policy},C={r.cache_experts}", "hit_rate",
                     r.hit_rate, "fraction"))
    for r in regime.itertuples():
        rows.append(("workbench", "moe_regime", "", f"n={r.n_devices},mem={r.memory_gib:g}GiB,{r.phase},"
                     f"winner={r.winner}", "best_latency", r.latency_s, "s"))
    out = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    return out[out["value"].notna()].reset_index(drop=True)
