"""STI experiments as tidy DataFrames: fidelity rows, storage, shard importance, quality vs target, Table 7.

Timing comes from the STI cost model (`workbench.schemes.sti`) on the paper's two platform presets
(data/devices/sti_*.toml); plans from `workbench.schemes.planners.sti`; pipelines are drawn with
`workbench.core.simulate`. Quality is a **proxy** (the paper's GLUE accuracies need fine-tuned DynaBERT
weights that cannot be downloaded here): the mean cosine similarity between a submodel's mean-pooled
MiniLM sentence embeddings and the full-precision model's, over the sentences shipped in
data/sti_eval_sentences.csv (`ProxyQuality`). 1.0 = identical to the full-precision model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
import pandas as pd

from workbench.core.errors import InfeasibleError, WorkbenchError, require_choice, require_int
from workbench.core.io import DATA_DIR
from workbench.core.simulate import Task, Timeline, pipeline, schedule
from workbench.kernels.sti import (
    check_selection,
    cosine_rows,
    embed_tokens,
    full_selection,
    mean_pool,
    run_blocks,
)
from workbench.machine.hardware import DeviceSpec, load_device
from workbench.model.models import TransformerConfig, get_model
from workbench.papers import base
from workbench.papers.base import result_row, rows_frame
from workbench.schemes.planners.sti import (
    MIB,
    ShardPlan,
    chosen_shards,
    importance_order,
    plan_method,
    plan_sti,
    upgrade_in_order,
)
from workbench.schemes.sti import (
    LatencyProfile,
    accumulated_io_budgets,
    latency_profile,
    layer_exec_time,
    read_bandwidth,
    remaining_io,
)
from workbench.schemes.sti_quantize import FULL_BITS
from workbench.schemes.sti_shards import (
    ShardedModel,
    ShardStore,
    assemble_block,
    shard_record_bytes,
    shard_weight_count,
    store_bytes,
)

PAPER = "sti"
PLATFORMS = {"odroid": ("sti_odroid_n2plus_cpu", "preload_buffer_odroid"),
             "jetson": ("sti_jetson_nano_gpu", "preload_buffer_jetson")}
METHODS = ("STI", "STI-0MB", "Load&Exec", "StdPL-full", "StdPL-2bit", "StdPL-6bit", "PreloadModel-full",
           "PreloadModel-6bit")
EVAL_SENTENCES = DATA_DIR / "sti_eval_sentences.csv"


# ---- constants and the paper's setting ------------------------------------------------------------
def constants() -> Mapping[str, Any]:
    """STI's constant values (data/constants/sti.toml, read once per process; the cost model reads the same)."""
    return base.paper_values(PAPER)


@dataclass(frozen=True)
class Setting(base.PaperSetting):
    """The paper's experiment defaults (data/constants/sti.toml); every experiment overrides any of them."""

    PAPER: ClassVar[str] = PAPER

    target_latencies: list  # s: Table 6's targets
    importance_low_bits: int  # Sec. 5.2's profile: every shard at this precision ...
    importance_high_bits: int  # ... one raised to this one
    table7_submodel_layers: int
    table7_submodel_shards: int
    table7_upgrade_bits: int
    outlier_fraction: float  # of a shard's weights kept in full precision
    profile_seq_len: int  # tokens of the offline profile
    distilbert_layers: int  # Sec. 1 / 2.2's DistilBERT

    def __post_init__(self) -> None:
        bad = [f for f in ("target_latencies", "importance_low_bits", "importance_high_bits", "table7_submodel_layers",
                           "table7_submodel_shards", "table7_upgrade_bits", "profile_seq_len", "distilbert_layers")
               if not all(v > 0 for v in np.ravel(getattr(self, f)))]
        if bad or not 0 <= self.outlier_fraction < 1:
            raise WorkbenchError(f"STI settings {bad or ['outlier_fraction']} are out of range: {self}")


# ---- platforms ----------------------------------------------------------------------------------
def platform_device(platform: str) -> DeviceSpec:
    """The preset of `platform` ('odroid' CPU or 'jetson' GPU)."""
    require_choice("platform", platform, PLATFORMS)
    return load_device(PLATFORMS[platform][0])


def platform_preload(platform: str) -> float:
    """The paper's preload buffer on `platform` (1 MB Odroid, 5 MB Jetson), bytes."""
    require_choice("platform", platform, PLATFORMS)
    return float(constants()[PLATFORMS[platform][1]])


def platform_profile(platform: str, model: TransformerConfig | str, seq_len: int | None = None,
                     bitwidths: Sequence[int] | None = None) -> LatencyProfile:
    """STI's latency profile of `model` on `platform`."""
    model = get_model(model)
    return latency_profile(model, platform_device(platform), seq_len, bitwidths, name=f"{model.name} on {platform}")


# ---- fitted constants and the skew / load-time rows ----------------------------------------------

def reported() -> pd.DataFrame:
    """The paper's numbers (data/reported/sti.csv), read now."""
    return base.reported(PAPER)


def reported_value(artifact: str, model: str, setting: str, quantity: str) -> float:
    """One STI number as reported (data/reported/sti.csv); the fits read their targets from there."""
    return base.reported_value(PAPER, artifact, model, setting, quantity)


def distilbert_layer_bytes() -> float:
    """fp32 bytes of one DistilBERT layer (weights, biases, norms)."""
    return get_model("DistilBERT").block_params() * 4.0


def fit_odroid() -> dict[str, float]:
    """The Odroid's two fitted constants: flash read rate (2.1 s for 6 layers) and GEMM efficiency (95 ms/layer)."""
    device = load_device(PLATFORMS["odroid"][0])
    s = Setting.from_constants()
    load_s = reported_value("Sec. 1", "DistilBERT", "odroid fp32 6 layers", "load_time")
    compute_ms = reported_value("Sec. 2.2", "DistilBERT", "odroid fp32 S=128 per layer", "layer_compute_time")
    bandwidth = int(s.distilbert_layers) * distilbert_layer_bytes() / load_s
    flops = get_model("DistilBERT").block_flops(int(s.profile_seq_len))
    efficiency = flops / (compute_ms * 1e-3 * device.peak("fp32"))
    return {"storage_read_bandwidth": bandwidth, "efficiency_gemm": efficiency}


def distilbert_pipeline(device: DeviceSpec | None = None) -> Timeline:
    """Layerwise load/compute pipeline of fp32 DistilBERT (the Sec. 1 / 2.2 'pipelined load/execution')."""
    device = device or platform_device("odroid")
    model = get_model("DistilBERT")
    load = distilbert_layer_bytes() / read_bandwidth(device)
    s = Setting.from_constants()
    compute = layer_exec_time(model, device, model.n_heads, int(s.profile_seq_len))
    layers = int(s.distilbert_layers)
    return pipeline([load] * layers, [compute] * layers)


def skew_rows(device: DeviceSpec | None = None, gpu: DeviceSpec | None = None) -> pd.DataFrame:
    """Modelled DistilBERT load / compute / skew numbers (Sec. 1, 2.2) and the GPU width ratio (Sec. 7.3)."""
    device = device or platform_device("odroid")
    gpu = gpu or platform_device("jetson")
    consts, s = constants(), Setting.from_constants()
    model, seq = get_model("DistilBERT"), int(s.profile_seq_len)
    layers = int(s.distilbert_layers)
    bw = read_bandwidth(device)
    layer_load = distilbert_layer_bytes() / bw
    compute = layer_exec_time(model, device, model.n_heads, seq)
    file_load = float(consts["distilbert_model_file_bytes"]) / bw
    tl = distilbert_pipeline(device)
    stall_fraction = tl.stall("compute") / tl.makespan
    big = get_model("DynaBERT-12x12")
    ratio = layer_exec_time(big, gpu, 12, seq) / layer_exec_time(big, gpu, 3, seq)
    rows = [  # (artifact, model, setting, quantity, value, unit)
        ("Sec. 1", "DistilBERT", "odroid fp32 6 layers", "parameter_bytes", layers * distilbert_layer_bytes() / 1e6, "MB"),
        ("Sec. 1", "DistilBERT", "odroid fp32 6 layers", "load_time", layers * layer_load, "s"),
        ("Sec. 2.2", "DistilBERT", "odroid fp32 per layer", "layer_load_time", layer_load * 1e3, "ms"),
        ("Sec. 2.2", "DistilBERT", "odroid fp32 S=128 per layer", "layer_compute_time", compute * 1e3, "ms"),
        ("Sec. 2.2", "DistilBERT", "odroid fp32 load before execute", "model_file_load_time", file_load, "s"),
        ("Sec. 2.2", "DistilBERT", "odroid fp32 load before execute", "load_and_execute_time",
         file_load + layers * compute, "s"),
        ("Sec. 1", "DistilBERT", "odroid fp32 layerwise pipeline", "compute_stall_fraction", stall_fraction, "fraction"),
        ("Sec. 7.3", "DynaBERT-12x12", "jetson gpu S=128", "layer_time_ratio_12_vs_3_shards", ratio, "ratio"),
    ]
    return rows_frame([result_row(PAPER, *r) for r in rows])


# ---- storage ------------------------------------------------------------------------------------
def storage_table(model: TransformerConfig | str = "DynaBERT-12x12", bitwidths: Sequence[int] = (2, 3, 4, 5, 6),
                  outlier_fraction: float | None = None) -> pd.DataFrame:
    """Modelled on-disk MiB of every shard at each bitwidth, the sum of the quantized versions, the fp32 model."""
    model = get_model(model)
    f = Setting.from_constants(outlier_fraction=outlier_fraction).outlier_fraction
    rows = [{"version": f"{b}-bit shards", "bits": b, "MiB": store_bytes(model, (b,), f) / MIB} for b in bitwidths]
    rows.append({"version": "{" + ",".join(map(str, bitwidths)) + "}-bit total", "bits": np.nan,
                 "MiB": store_bytes(model, bitwidths, f) / MIB})
    rows.append({"version": "full model fp32 (incl. embeddings)", "bits": FULL_BITS, "MiB": model.weight_bytes(32) / MIB})
    return pd.DataFrame(rows)


def storage_rows() -> pd.DataFrame:
    """The Sec. 7.2 fidelity row: MiB of the {2..6}-bit versions of the 12x12 model."""
    model = get_model("DynaBERT-12x12")
    value = store_bytes(model, (2, 3, 4, 5, 6), float(Setting.from_constants().outlier_fraction)) / MIB
    return rows_frame([result_row(PAPER, "Sec. 7.2", model.name, "{2,3,4,5,6}-bit shards", "quantized_versions_storage",
                                  value, "MiB")])


def store_measurements(store: ShardStore, sharded: ShardedModel) -> pd.DataFrame:
    """Per bitwidth: bytes measured on disk vs the size formula at the measured outlier count."""
    records = store.record_sizes()
    s = shard_weight_count(sharded.cfg)
    records["modelled"] = [shard_record_bytes(s, int(b), n) for b, n in zip(records["bits"], records["n_outliers"])]
    out = records.groupby("bits").agg(measured_bytes=("bytes", "sum"), modelled_bytes=("modelled", "sum"),
                                      outliers=("n_outliers", "sum")).reset_index()
    out["measured_MiB"] = out["measured_bytes"] / MIB
    return out


def load_timings(store: ShardStore, bits: Sequence[int], repeats: int = 3) -> pd.DataFrame:
    """Measured (on this host) read and decompress seconds of one whole layer per bitwidth (median of repeats)."""
    require_int("repeats", repeats, low=1)
    rows = []
    m = store.index["n_shards"]
    for b in bits:
        stats = [store.load_layer(0, [(i, b) for i in range(m)])[1] for _ in range(repeats)]
        rows.append({"bits": b, "bytes": stats[0].bytes_read, "read_ms": 1e3 * np.median([x.read_s for x in stats]),
                     "decompress_ms": 1e3 * np.median([x.decompress_s for x in stats])})
    return pd.DataFrame(rows)


# ---- Table 6: submodel sizes --------------------------------------------------------------------
def submodel_table(model: TransformerConfig | str = "DynaBERT-12x12", targets_s: Sequence[float] | None = None,
                   methods: Sequence[str] = METHODS) -> pd.DataFrame:
    """n x m of every method on both platforms at each target (importance does not change sizes)."""
    targets_s = Setting.from_constants(target_latencies=targets_s).target_latencies
    rows = []
    for platform in PLATFORMS:
        profile = platform_profile(platform, model)
        for target in targets_s:
            for method in methods:
                try:
                    plan = plan_method(method, profile, target, platform_preload(platform))
                except InfeasibleError:
                    rows.append({"platform": platform, "target_ms": target * 1e3, "method": method, "n": 0, "m": 0,
                                 "shards": 0})
                    continue
                rows.append({"platform": platform, "target_ms": target * 1e3, "method": method, "n": plan.n,
                             "m": plan.m, "shards": plan.n * plan.m})
    return pd.DataFrame(rows)


def flops_ratio_rows(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean ratio of STI's submodel size (FLOPs ~ n*m) to the baselines' (Sec. 7.3, Table 6)."""
    table = submodel_table() if table is None else table
    wide = table.pivot_table(index=["platform", "target_ms"], columns="method", values="shards")
    groups = {"flops_ratio_vs_load_exec_and_stdpl_full": ("Load&Exec", "StdPL-full"),
              "flops_ratio_vs_stdpl_2bit_and_6bit": ("StdPL-2bit", "StdPL-6bit")}
    rows = []
    for quantity, baselines in groups.items():
        ratios = np.concatenate([(wide["STI"] / wide[b]).to_numpy() for b in baselines])
        rows.append(result_row(PAPER, "Sec. 7.3 (Table 6)", "DynaBERT-12x12", "odroid+jetson, T=150/200/400 ms", quantity,
                         float(np.mean(ratios)), "ratio"))
    return rows_frame(rows)


# ---- the proxy quality metric -------------------------------------------------------------------
def eval_sentences(n_pairs: int | None = None) -> pd.DataFrame:
    """The shipped evaluation set: paraphrase pairs (sentence_a, sentence_b) written for this project."""
    df = pd.read_csv(EVAL_SENTENCES)
    if n_pairs is not None:
        require_int("n_pairs", n_pairs, low=1, high=len(df))
        df = df.head(n_pairs)
    return df


def sentence_list(pairs: pd.DataFrame) -> list[str]:
    """All sentences: every sentence_a, then every sentence_b (pair i -> rows i and i + P)."""
    return list(pairs["sentence_a"]) + list(pairs["sentence_b"])


class ProxyQuality:
    """Proxy quality of a submodel: mean cosine similarity of its sentence embeddings with the full model's.

    Call it with a plan's `layers` (((shard, bits), ...) per layer). Results are cached per submodel;
    hidden states of evaluated layer prefixes are cached (LRU), so the importance profile (all shards
    at 2 bits, one raised) recomputes only the layers from the raised shard on. Narrow layers are
    zero-padded to M shards (`assemble_block(pad_to=M)`, the same output) so one compiled layer
    serves every submodel.
    """

    def __init__(self, sharded: ShardedModel, tokens_bs, valid_bs, prefix_cache: int = 48, block_cache: int = 16):
        self.sharded, self.cfg, self.params = sharded, sharded.cfg, sharded.params
        self.tokens, self.valid = np.asarray(tokens_bs), np.asarray(valid_bs, dtype=bool)
        self._valid_j = jnp.asarray(self.valid)
        self._x0 = embed_tokens(self.cfg, self.params, self.tokens, self.valid)
        self._prefix: OrderedDict = OrderedDict()
        self._blocks: OrderedDict = OrderedDict()
        self._limits = (prefix_cache, block_cache)
        self._scores: dict = {}
        self.evaluations = 0
        self.reference = self.embeddings(tuple(full_selection(self.cfg, FULL_BITS)))

    def _block(self, layer: int, chosen: tuple) -> dict:
        """Assembled (jnp) block of `layer` with the `chosen` ((shard, bits), ...), LRU-cached."""
        key = (layer, chosen)
        if key not in self._blocks:
            shards = {int(i): self.sharded.shard_weights(layer, int(i), int(b)) for i, b in chosen}
            block = assemble_block(self.cfg, self.params["blocks"][layer], shards, pad_to=self.cfg.n_heads)
            self._blocks[key] = {k: jnp.asarray(v) for k, v in block.items()}
            if len(self._blocks) > self._limits[1]:
                self._blocks.popitem(last=False)
        self._blocks.move_to_end(key)
        return self._blocks[key]

    def hidden(self, layers: tuple):
        """Hidden states (B, S, E) after the submodel's layers."""
        layers = tuple(tuple((int(i), int(b)) for i, b in layer) for layer in layers)
        start, x = 0, self._x0
        for k in range(len(layers), 0, -1):
            if layers[:k] in self._prefix:
                start, x = k, self._prefix[layers[:k]]
                self._prefix.move_to_end(layers[:k])
                break
        for k in range(start, len(layers)):
            x = run_blocks(self.cfg, [self._block(k, layers[k])], x, self._valid_j)
            self._prefix[layers[:k + 1]] = x
            if len(self._prefix) > self._limits[0]:
                self._prefix.popitem(last=False)
        return x

    def embeddings(self, layers: tuple) -> np.ndarray:
        """Mean-pooled sentence embeddings (B, E) of the submodel."""
        return np.asarray(mean_pool(self.hidden(layers), self._valid_j))

    def __call__(self, layers) -> float:
        """Proxy quality in [-1, 1] (1 = the full-precision model's embeddings)."""
        key = tuple(tuple((int(i), int(b)) for i, b in layer) for layer in layers)
        if key not in self._scores:
            check_selection(self.cfg, key)
            self.evaluations += 1
            self._scores[key] = float(cosine_rows(self.embeddings(key), self.reference).mean())
        return self._scores[key]


@lru_cache(maxsize=4)
def minilm_setup(n_pairs: int | None = None, bitwidths: tuple[int, ...] | None = None) -> tuple[ShardedModel, pd.DataFrame]:
    """MiniLM quantized at the paper's bitwidths and the evaluation pairs (cached per process)."""
    from workbench.papers import sti_minilm as minilm
    from workbench.schemes.sti import default_bitwidths
    from workbench.schemes.sti_shards import shard_model

    bits = default_bitwidths() if bitwidths is None else bitwidths
    sharded = shard_model(minilm.minilm_config(), minilm.load_params(), bits,
                          float(constants()["log_likelihood_threshold"]))
    return sharded, eval_sentences(n_pairs)


def proxy_quality(sharded: ShardedModel, pairs: pd.DataFrame) -> ProxyQuality:
    """The proxy metric on the sentences of `pairs` (MiniLM's tokenizer)."""
    from workbench.papers import sti_minilm as minilm

    tokens, valid = minilm.tokenize(sentence_list(pairs))
    return ProxyQuality(sharded, tokens, valid)


def encoder_sanity(quality: ProxyQuality, n_pairs: int) -> pd.DataFrame:
    """Per pair: cosine of the paraphrases vs the highest cosine to any unrelated sentence (full model)."""
    e = quality.reference / np.linalg.norm(quality.reference, axis=1, keepdims=True)
    sims = e @ e.T
    rows = []
    for i in range(n_pairs):
        others = [j for j in range(2 * n_pairs) if j not in (i, i + n_pairs)]
        rows.append({"pair": i, "paraphrase_cosine": float(sims[i, i + n_pairs]),
                     "max_unrelated_cosine": float(max(sims[i, others].max(), sims[i + n_pairs, others].max()))})
    return pd.DataFrame(rows)


# ---- shard importance (Sec. 5.2) --------------------------------------------------------------------
def profile_importance(quality: Callable[[tuple], float], n_layers: int, n_shards: int, low: int | None = None,
                       high: int | None = None) -> np.ndarray:
    """The paper's protocol: the full model at `low` bits, raise one shard to `high`; score (N, M) = quality."""
    s = Setting.from_constants(importance_low_bits=low, importance_high_bits=high)
    low, high = s.importance_low_bits, s.importance_high_bits
    base = [tuple((i, low) for i in range(n_shards)) for _ in range(n_layers)]
    scores = np.empty((n_layers, n_shards))
    for layer in range(n_layers):
        for shard in range(n_shards):
            layers = list(base)
            layers[layer] = tuple((i, high if i == shard else low) for i in range(n_shards))
            scores[layer, shard] = quality(tuple(layers))
    return scores


def importance_frame(scores: np.ndarray) -> pd.DataFrame:
    """Long form of the importance table with each shard's rank (1 = most important)."""
    order = importance_order(scores)
    rank = {pair: r + 1 for r, pair in enumerate(order)}
    return pd.DataFrame([{"layer": l, "shard": s, "quality": float(scores[l, s]), "rank": rank[(l, s)]}
                         for l in range(scores.shape[0]) for s in range(scores.shape[1])])


# ---- quality vs target latency (Table 5 / Fig. 7 analogue) -------------------------------------------
def plan_row(plan: ShardPlan) -> dict:
    """A plan's shape, bits, timing and memory as one flat dict."""
    return {"method": plan.method, "n": plan.n, "m": plan.m, "shards": plan.n * plan.m, "mean_bits": plan.mean_bits,
            "latency_ms": plan.latency_s * 1e3, "compute_ms": plan.compute_s * 1e3, "stall_ms": plan.stall_s * 1e3,
            "meets_target": plan.meets_target, "valid": plan.valid, "io_MiB": plan.io_bytes / MIB,
            "memory_MiB": plan.resident_bytes / MIB, "notes": "; ".join(plan.notes)}


def quality_vs_target(quality: Callable[[tuple], float] | None, profiles: dict[str, LatencyProfile],
                      targets_s: Sequence[float], preloads: dict[str, float], importance=None,
                      methods: Sequence[str] = METHODS, bitwidths: Sequence[int] | None = None) -> pd.DataFrame:
    """Every method on every platform profile at every target: plan, timing, memory, proxy quality."""
    rows = []
    for platform, profile in profiles.items():
        for target in targets_s:
            for method in methods:
                base = {"platform": platform, "target_ms": target * 1e3}
                try:
                    plan = plan_method(method, profile, target, preloads[platform], importance, bitwidths)
                except InfeasibleError as exc:
                    rows.append({**base, "method": method, "feasible": False, "quality": np.nan, "notes": str(exc)})
                    continue
                q = quality(plan.layers) if quality is not None else np.nan
                rows.append({**base, **plan_row(plan), "feasible": True, "quality": q})
    return pd.DataFrame(rows)


def sti_advantage(table: pd.DataFrame, baselines: Sequence[str] = ("Load&Exec", "StdPL-full", "StdPL-2bit", "StdPL-6bit"),
                  targets_ms: Sequence[float] = (150, 200)) -> pd.DataFrame:
    """STI's proxy quality minus each baseline's (an infeasible baseline counts as quality 0)."""
    t = table[table["target_ms"].round(6).isin([round(x, 6) for x in targets_ms])]
    wide = t.pivot_table(index=["platform", "target_ms"], columns="method", values="quality", aggfunc="first")
    rows = []
    for b in baselines:
        for (platform, target), row in wide.iterrows():
            base = row.get(b, np.nan)
            rows.append({"platform": platform, "target_ms": target, "baseline": b,
                         "sti_minus_baseline": row["STI"] - (0.0 if pd.isna(base) else base)})
    return pd.DataFrame(rows)


def memory_table(profiles: dict[str, LatencyProfile], preloads: dict[str, float], target_s: float) -> pd.DataFrame:
    """Parameter memory held between engagements: STI's preload buffer vs PreloadModel-full / -6bit."""
    rows = []
    for platform, profile in profiles.items():
        sti = plan_sti(profile, target_s, preloads[platform])
        for method in ("STI", "PreloadModel-full", "PreloadModel-6bit"):
            plan = sti if method == "STI" else plan_method(method, profile, target_s)
            rows.append({"platform": platform, "model": profile.name.split(" on ")[0], "method": method,
                         "memory_MiB": plan.resident_bytes / MIB,
                         "ratio_to_sti": plan.resident_bytes / sti.resident_bytes if sti.resident_bytes else np.nan})
    return pd.DataFrame(rows)


# ---- Table 7: importance-ordered vs random upgrades ----------------------------------------------------
def importance_vs_random(quality: Callable[[tuple], float], scores: np.ndarray, n: int | None = None, m: int | None = None,
                         n_upgrades: Sequence[int] = (1, 2, 4, 8), seeds: Sequence[int] = range(8),
                         low: int | None = None, bits: int | None = None) -> pd.DataFrame:
    """A n x m submodel at `low` bits; raise k shards to `bits` in importance order vs in random orders."""
    s = Setting.from_constants(table7_submodel_layers=n, table7_submodel_shards=m, importance_low_bits=low,
                               table7_upgrade_bits=bits)
    n, m = s.table7_submodel_layers, s.table7_submodel_shards
    low, bits = s.importance_low_bits, s.table7_upgrade_bits
    require_int("n (layers)", n, low=1, high=scores.shape[0])
    require_int("m (shards per layer)", m, low=1, high=scores.shape[1])
    shards = chosen_shards(np.asarray(scores, dtype=float), n, m)
    base = tuple(tuple((s, low) for s in layer) for layer in shards)
    members = [(k, s) for k, layer in enumerate(shards) for s in layer]
    ordered = importance_order(scores)
    rows = [{"strategy": "none", "upgrades": 0, "seed": -1, "quality": quality(base)}]
    for k in n_upgrades:
        require_int("n_upgrades", k, low=1, high=len(members))
        rows.append({"strategy": "importance", "upgrades": k, "seed": -1,
                     "quality": quality(upgrade_in_order(base, ordered, k, bits))})
        for seed in seeds:
            perm = np.random.default_rng(seed).permutation(len(members))
            order = [members[i] for i in perm]
            rows.append({"strategy": "random", "upgrades": k, "seed": int(seed),
                         "quality": quality(upgrade_in_order(base, order, k, bits))})
    return pd.DataFrame(rows)


def importance_gain(table: pd.DataFrame) -> pd.DataFrame:
    """Per upgrade count: importance-ordered quality, mean random quality, and the gain."""
    imp = table[table.strategy == "importance"].set_index("upgrades")["quality"]
    rnd = table[table.strategy == "random"].groupby("upgrades")["quality"]
    out = pd.DataFrame({"importance": imp, "random_mean": rnd.mean(), "random_std": rnd.std(ddof=0)})
    out["gain"] = out["importance"] - out["random_mean"]
    return out.reset_index()


# ---- preload buffer sweep (Sec. 7.4) ---------------------------------------------------------------
def preload_sweep(quality: Callable[[tuple], float] | None, profile: LatencyProfile, target_s: float,
                  sizes_bytes: Sequence[float], importance=None) -> pd.DataFrame:
    """STI at one target with preload buffers of `sizes_bytes`."""
    rows = []
    for size in sizes_bytes:
        plan = plan_sti(profile, target_s, float(size), importance)
        rows.append({"preload_MiB": size / MIB, **plan_row(plan),
                     "quality": quality(plan.layers) if quality is not None else np.nan})
    return pd.DataFrame(rows)


# ---- the pipeline as a timeline ----------------------------------------------------------------------
def plan_layer_io(profile: LatencyProfile, plan: ShardPlan) -> np.ndarray:
    """Per-layer IO seconds of the plan's shards (before removing the preloaded prefix)."""
    return np.array([sum(profile.io_s(b) for _, b in layer) for layer in plan.layers])


def plan_timeline(profile: LatencyProfile, plan: ShardPlan) -> Timeline:
    """The planned execution on the core timeline (`workbench.core.simulate`): one IO job and one compute job per layer."""
    io = remaining_io(plan_layer_io(profile, plan), plan.preload_bytes / profile.read_bytes_per_s)
    compute = [profile.t_comp(plan.m)] * plan.n
    if plan.method != "Load&Exec":
        return pipeline(list(io), compute, io_resource="flash", compute_resource="compute")
    tasks = [Task(f"load{k}", "flash", float(io[k]), (f"load{k - 1}",) if k else (), kind="io") for k in range(plan.n)]
    for k in range(plan.n):
        deps = (f"load{plan.n - 1}",) + ((f"compute{k - 1}",) if k else ())
        tasks.append(Task(f"compute{k}", "compute", compute[k], deps))
    return schedule(tasks)


def timeline_stall(timeline: Timeline) -> float:
    """Seconds the compute resource waits between 0 and the end of the run."""
    return timeline.stall("compute")


def plan_aibs(profile: LatencyProfile, plan: ShardPlan) -> pd.DataFrame:
    """Per layer: compute, IO and the accumulated IO budget (Definition 0) of the plan."""
    io = plan_layer_io(profile, plan)
    comp = np.full(plan.n, profile.t_comp(plan.m))
    aib = accumulated_io_budgets(comp, io, plan.preload_bytes / profile.read_bytes_per_s)
    return pd.DataFrame({"layer": range(plan.n), "compute_ms": comp * 1e3, "io_ms": io * 1e3, "aib_ms": aib * 1e3})


# ---- Fig. 6 worked example ---------------------------------------------------------------------------
def fig6_profile() -> LatencyProfile:
    """An illustrative instance of Fig. 6 (the text lost its numbers): 2 layers x 3 shards, 1 s per layer,
    shard IO 0.2 s at 2 bits, 0.6 s at 6 bits, 3.2 s at 32 bits."""
    return LatencyProfile("Fig. 6 example", 2, 3, (1 / 3, 2 / 3, 1.0), ((2, 2.0), (6, 6.0), (32, 32.0)), 10.0)


def fig6_example() -> tuple[pd.DataFrame, ShardPlan]:
    """AIBs of candidates A, B, C for layer 1 (layer 0 = the three preloaded 2-bit shards) and the planner's pick."""
    profile = fig6_profile()
    preload = 3 * profile.bytes_of(2)  # three 2-bit shards of layer 0 in the preload buffer
    bonus = preload / profile.read_bytes_per_s
    comp = [profile.t_comp(3)] * 2
    candidates = {"A": (2, 2, 2), "B": (6, 2, 2), "C": (6, 6, 2)}
    rows = []
    for name, layer1 in candidates.items():
        io = [3 * profile.io_s(2), sum(profile.io_s(b) for b in layer1)]
        aib = accumulated_io_budgets(comp, io, bonus)
        rows.append({"candidate": name, "layer0_bits": "2,2,2", "layer1_bits": ",".join(map(str, layer1)),
                     "AIB0_s": aib[0], "AIB1_s": aib[1], "valid": bool(aib.min() >= -1e-12)})
    importance = np.array([[0.0, 0.0, 0.0], [3.0, 2.0, 1.0]])  # shard 0 of layer 1 matters most
    plan = plan_sti(profile, 2.0, preload, importance)
    return pd.DataFrame(rows), plan


# ---- clear answers at the edges -----------------------------------------------------------------------
def edge_cases(profile: LatencyProfile) -> pd.DataFrame:
    """What the planner answers for an impossible target and for a preload buffer larger than the model."""
    rows = []
    try:
        plan_sti(profile, profile.t_comp(1) / 2, 0.0)
        rows.append({"case": "target below one shard's compute", "answer": "planned (unexpected)"})
    except InfeasibleError as exc:
        rows.append({"case": "target below one shard's compute", "answer": str(exc)})
    huge = 10 * profile.model_bytes(max(profile.bitwidths))
    plan = plan_sti(profile, profile.n_layers * profile.t_comp(profile.n_shards), huge)
    rows.append({"case": f"preload buffer {huge / MIB:.0f} MiB (10x the fp32 model)",
                 "answer": f"{plan.n}x{plan.m} at mean {plan.mean_bits:.0f} bits, {plan.preload_bytes / MIB:.1f} MiB "
                           f"preloaded; " + "; ".join(plan.notes)})
    return pd.DataFrame(rows)
