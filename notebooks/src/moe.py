# %% [markdown]
# # Mixtures of experts on edge clusters
# A mixture of experts stores every expert but computes only a few per token, so its memory, streaming and
# communication behave unlike a dense model of either size. This notebook puts the registered MoE models beside
# dense models of equal quality on the same edge clusters, the MoE partitions the engines use side by side, the
# expert cache's hit rate against the memory it takes, and the regime map of a MoE deployment. Every scheme
# comes from the arena's registry: a MoE partition registered later appears here with nothing to change, and one
# that is not registered yet is named as missing.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs
quick = False  # True: the test suite (fewer clusters, settings and grid points)
weight_bits = 4.5  # q4_0: 4-bit weights + one fp16 scale per 32 (what the Pi 5 example and distributed-llama run)

# %%
import altair as alt
import pandas as pd

from workbench.scenarios.arena import COMPONENTS
from workbench.report.display import setup_notebook
from workbench.scenarios.moe_advice import MoeNumbers
from workbench.report.prose import listing, say, span
from workbench.scenarios.regimes import Base, moe_capable, regime_chart, sweep, winners
from workbench.report.results import Recorder
from workbench.schemes.base import load_all
from workbench.studies import moe as study

rec = Recorder("moe", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
registry = load_all()
clusters = study.clusters(quick)
pi = clusters["4x Pi 5, 1 GbE"]

# %% [markdown]
# ## 1. What a mixture of experts stores and what a token reads
# Stored parameters (every expert) against the parameters one token computes (its routed and shared experts,
# attention, embeddings and head), at the notebook's weight precision, and the f32 routers: distributed-llama
# and llama.cpp's GGUF files keep the router in f32, and every device of a tensor-parallel split streams all of it.

# %%
models = study.model_table(weight_bits)
models

# %%
sizes = models.melt(id_vars="model", value_vars=["stored_gib", "active_gib"], var_name="what", value_name="gib")
sizes["what"] = sizes["what"].map({"stored_gib": "stored (every expert)", "active_gib": "read per token"})
rec.chart(alt.Chart(sizes).mark_bar().encode(
    x=alt.X("gib:Q", title=f"GiB at {weight_bits:g} bit per weight"), y=alt.Y("model:N", sort="-x", title=None),
    yOffset="what:N", color=alt.Color("what:N", title=None), tooltip=["model", "what", alt.Tooltip("gib:Q", format=".2f")],
).properties(width=420, title="MoE models: stored vs read per token"), "stored_vs_active", data=sizes)

# %%
ratio = models.stored_params / models.active_params
say("A token reads {lo:.1f} to {hi:.1f} times fewer weights than the model stores ({low_model} to {high_model}); "
    "the f32 routers are {router} per model.",
    lo=ratio.min(), hi=ratio.max(), low_model=models.model[ratio.idxmin()], high_model=models.model[ratio.idxmax()],
    router=span(models.router_mib, ".3g", "MiB"))

# %% [markdown]
# ## 2. Dense vs MoE of equal quality, on the same clusters
# Each pair's basis is in the table: two pairs rest on a published quality claim (quoted below), and Qwen3-30B-A3B
# is set beside two dense stand-ins, one of about its stored size and one of about its active size, with no
# quality claim. The clusters are the Pi 5 example (`examples/qwen3_moe_pi5.toml`) and TPI-LLM's four laptops on Wi-Fi
# (`examples/laptops_wifi.toml`), every model at the same weight precision; each model gets the fastest
# registered scheme that fits (a dense model can use every scheme, a MoE model the MoE-capable ones).

# %%
pd.DataFrame([{"pair": f"{p.moe} vs {p.dense}", "basis": p.basis, "source": p.source} for p in study.PAIRS])

# %%
pairs = study.pair_table(clusters, weight_bits, registry)
pairs[["cluster", "pair", "role", "model", "stored_gib", "best_decode", "time_per_token_s", "tokens_per_s",
       "best_prefill", "ttft_s", "schemes_fit"]]

# %%
shown = pairs.dropna(subset=["tokens_per_s"])
rec.chart(alt.Chart(shown).mark_point(filled=True, size=90).encode(
    x=alt.X("tokens_per_s:Q", scale=alt.Scale(type="log"), title="decode tokens/s (best scheme that fits)"),
    y=alt.Y("pair:N", title=None), color=alt.Color("role:N", title=None), shape=alt.Shape("cluster:N"),
    tooltip=["cluster", "model", "best_decode", alt.Tooltip("tokens_per_s:Q", format=".3g")],
).properties(width=420, title="Dense vs MoE on the same clusters"), "dense_vs_moe", data=shown)

# %%
quality = pairs[pairs.basis.str.startswith("equal")].pivot_table(index=["cluster", "pair"], columns="role",
                                                                 values="tokens_per_s", aggfunc="first")
speedup = (quality["MoE"] / quality["dense"]).dropna()
slower = speedup[speedup < 1]
say("Where both run, the MoE of equal quality decodes {span_} times as fast as its dense peer ({each}).{why}",
    span_=span(speedup, ".3g"), each="; ".join(f"{p.split(' vs ')[0]} on {c}: {v:.3g}x" for (c, p), v in speedup.items()),
    why="" if slower.empty else " Where it is slower, the dense model runs a scheme no registered MoE partition "
    "matches on that cluster.")

# %% [markdown]
# ## 3. The engines' partitions side by side
# Every MoE-capable scheme in the registry on the Pi 5 example (Qwen3-30B-A3B): latency per phase and where the
# time goes. The three partitions the engines use (tensor parallelism inside every expert, whole layers with
# sparse expert reads, expert parallelism) each appear once their scheme is registered.

# %%
missing = study.missing_partitions(registry)
print("MoE-capable schemes registered:", ", ".join(moe_capable(registry)))
print("not registered yet (skipped):", "; ".join(missing) if missing else "none")

# %%
partitions = study.partition_table(pi, registry)
partitions

# %%
parts = partitions[partitions.status == "ok"].melt(
    id_vars=["scheme", "phase"], value_vars=list(COMPONENTS), var_name="component", value_name="seconds")
parts = parts[parts.seconds > 0].assign(component=lambda d: d.component.map(COMPONENTS))
rec.chart(alt.Chart(parts).mark_bar().encode(
    x=alt.X("seconds:Q", title="seconds (decode: per token; prefill: to first token)"),
    y=alt.Y("scheme:N", title=None), color=alt.Color("component:N", title=None, legend=alt.Legend(labelLimit=360)),
    row=alt.Row("phase:N", title=None),
    tooltip=["scheme", "phase", "component", alt.Tooltip("seconds:Q", format=".4g")],
).resolve_scale(x="independent").properties(
    width=380, title=f"{pi.model.name} on {pi.name.split(',')[0]}: where the time goes (schemes that fit)"),
    "partitions", data=parts)

# %%
ok = partitions[(partitions.status == "ok") & (partitions.phase == "decode")].sort_values("latency_s")
say("On the four boards the fastest MoE partition registered decodes in {best:.3g} s per token ({scheme}); "
    "{oom} of the {n} MoE-capable schemes run out of memory on one board.", best=ok.latency_s.iloc[0],
    scheme=ok.scheme.iloc[0], oom=int((partitions[partitions.phase == "decode"].status == "OOM").sum()),
    n=len(moe_capable(registry)))

# %% [markdown]
# ### More boards for the same model
# Two partitions on more and more of the example's boards (the same board repeated): whether each fits and its
# time per token; for whole layers per device, how many of a layer's experts the fullest board keeps in memory
# (the rest are read from storage when a token routes to them). Tensor parallelism runs only at the device
# counts its split of the attention heads allows.

# %%
counts = study.device_count_table(pi, registry, (1, 2, 3, 4) if quick else range(1, 9))
counts

# %%
pipe, tp = counts[counts.scheme == "moe_layer_pipeline"], counts[counts.scheme == "dllama_allgather_tp"]
resident = study.resident_from(counts)
partial = pipe[(pipe.status == "ok") & (pipe.cached_experts < pipe.experts)]
after = pipe[(pipe.status == "ok") & (pipe.devices >= (resident or 0))]
say("Whole layers per device (moe_layer_pipeline): {cached}; {resident}",
    cached=f"of a layer's {pipe.experts.iloc[0]} experts the fullest board keeps "
    + listing(f"{c:.0f} at {n} device{'s' * (n > 1)}" for n, c in zip(partial.devices, partial.cached_experts))
    if len(partial) else "every count tried keeps every expert in memory",
    resident=f"every expert is resident from {resident} devices on, where a token takes "
    f"{span(after.time_per_token_s, '.3g', 's')}: more boards add hand-offs and shorten no step." if resident
    else "no device count tried keeps every expert resident.")

# %%
runs, oom, unsplit = tp[tp.status == "ok"], tp[tp.status == "OOM"], tp[tp.status == "n/a"]
largest = int(runs.devices.max()) if len(runs) else pi.cluster.n
numbers = MoeNumbers(pi.model, pi.weight_bits, largest, pi.activation_bits).fields()
say("Tensor parallel inside every expert (dllama_allgather_tp) runs at {ok} device(s){oom}{na}. At {n} devices each "
    "board still streams the whole f32 router ({router}) beside its {share} share of the experts per token, and "
    "its syncs receive {sync} per token.",
    ok=listing(runs.devices) or "no count tried", n=largest, router=numbers["router"],
    oom=f"; it runs out of memory at {listing(oom.devices)}" if len(oom) else "",
    na=f"; it cannot split the model at {listing(unsplit.devices)}: {unsplit.note.iloc[0].split('; got')[0]}"
    if len(unsplit) else "", share=numbers["experts_share"], sync=numbers["sync_bytes"])

# %% [markdown]
# ## 4. Expert-cache hit rate vs memory
# A device keeps C experts per MoE layer in fast memory; a decode token's k expert reads hit the cache with the
# routing model's hit rate (`workbench.model.routing.hit_rate`: uniform, Zipf-skewed, and skewed with temporal locality;
# "pinned" keeps the most popular experts, "lru" the recently used). The memory is C experts x expert bytes x
# MoE layers at the notebook's weight precision.

# %%
cache = study.cache_table(["Qwen3-30B-A3B", "Mixtral-8x7B", "OLMoE-1B-7B"], weight_bits, quick)
print(f"{len(cache)} settings")
cache

# %%
rec.chart(alt.Chart(cache).mark_line().encode(
    x=alt.X("cache_gib:Q", title="cache memory per device (GiB)"),
    y=alt.Y("hit_rate:Q", title="hit rate of a token's expert reads", scale=alt.Scale(domain=[0, 1])),
    color=alt.Color("routing:N"), strokeDash=alt.StrokeDash("policy:N"), column=alt.Column("model:N", title=None),
    tooltip=["model", "routing", "policy", "cache_experts", alt.Tooltip("hit_rate:Q", format=".3f")],
).resolve_scale(x="independent").properties(width=200, height=180, title="Expert cache: hit rate vs memory"),
    "cache_hit_rate", data=cache)
half = cache[(cache.cache_share == 0.5) & (cache.policy == cache.policy.iloc[0])]
say("Holding half of each layer's experts, a {policy} cache serves {hits} of a token's expert reads across the "
    "models and routing settings.", policy=cache.policy.iloc[0], hits=span(half.hit_rate, ".0%"))

# %% [markdown]
# ## 5. The regime map of a MoE deployment
# Qwen3-30B-A3B on the Pi 5 example's boards, with the device count and the memory each device gives the model
# varied: per cell the fastest MoE-capable scheme that fits and its margin over the runner-up (black lines are
# the boundaries between regions).

# %%
grid = {"n_devices": (1, 2, 4, 8) if not quick else (1, 4), "memory_gib": (2, 4, 8, 16, 32) if not quick else (4, 16)}
regime = winners(sweep(Base.from_config(pi), grid, ("decode",), moe_capable(registry), registry))
rec.chart(regime_chart(regime, "n_devices", "memory_gib", "decode",
                       title=f"{pi.model.name}: fastest MoE scheme per decode step"), "regime_decode", data=regime)

# %%
fits = regime[regime.winner != "nothing fits"]
fastest = fits.loc[fits.latency_s.idxmin()]
one = fits[fits.n_devices == fits.n_devices.min()]
say("{fit} of the {cells} cells fit some MoE scheme. The fastest decode step is {best:.3g} s ({scheme}, {n} device(s) "
    "of {mem:g} GiB); on {few} device(s) the winners take {slow}, streaming what memory does not hold.",
    fit=len(fits), cells=len(regime), best=fastest.latency_s, scheme=fastest.winner, n=int(fastest.n_devices),
    mem=fastest.memory_gib, few=int(one.n_devices.iloc[0]), slow=span(one.latency_s, ".3g", "s"))

# %%
rec.add(study.result_rows(models, pairs, partitions, cache, regime))
_ = rec.write()  # figures/moe/results.csv (no path in the page: a batch run writes to a staging folder)
