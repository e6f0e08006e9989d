# %% [markdown]
# # Speculative decoding across edge devices: when a draft pays, and when it cannot
# A draft model proposes `gamma` tokens; the target verifies them in one forward of `gamma + 1` tokens under a
# registered scheme and keeps, on average, (1 - alpha^(gamma+1)) / (1 - alpha) of them (`workbench.scenarios.speculative`).
# On a cluster of small devices a decode step is bound by streaming weights and by per-token syncs: a verify
# step streams the weights once for several tokens, but every scheme whose syncs grow with the rows it carries
# pays them for every drafted token, accepted or not.
#
# The setting: a dense 70B target (Llama 3.1-70B, q4_0) on TPI-LLM's four laptops on a home Wi-Fi router
# (`examples/laptops_wifi.toml`), drafted by Llama 3.1-8B (same tokenizer) on the first laptop. The acceptance
# rate is an input: the quoted rates are in `data/speculative/acceptance.csv` (kind and source per row); the
# charts sweep alpha over its whole range, and no rate is fitted to a token rate.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs
quick = False  # True: small sweeps (the test suite)
target = "Llama 3.1-70B"
weight_format = "q4_0"
draft = "Llama 3.1-8B"
placement = "root"  # root | own | ring (prima.cpp's, for pipeline_offload)
schemes = ["pipeline_offload", "layerwise_mp", "local", "megatron_tp", "dllama_allgather_tp"]
moe_target = "Qwen3-30B-A3B"  # the MoE target of section 7 (runs where the registry has it)
dense_peer_name = "Llama 2-3B"  # a dense target of about the MoE target's active size, for the regime map
moe_board = "edge_rpi5_8gb"  # its four boards (a data/devices preset), on a Gigabit switch

# %%
from dataclasses import replace

import altair as alt
import numpy as np
import pandas as pd

from workbench.scenarios import speculative as sp
from workbench.report.display import setup_notebook
from workbench.core.io import REPO_ROOT
from workbench.report.prose import listing, say, trend
from workbench.report.results import Recorder, result_rows
from workbench.schemes.base import load_all
from workbench.studies import speculative as charts
from workbench.scenarios.userconfig import config_from_text

rec = Recorder("speculative", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
registry = load_all()
text = (REPO_ROOT / "examples" / "laptops_wifi.toml").read_text()
text = text.replace('name = "Llama 2-13B"\nweight_format = "fp16"', f'name = "{target}"\nweight_format = "{weight_format}"')
config = config_from_text(text, "laptops_wifi.toml")
workload = config.workload("decode")
spec = sp.Speculation(draft, placement, 4, 0.5)
alphas = np.round(np.linspace(0.0, 0.95, 6 if quick else 20), 4)
gammas = range(1, 5 if quick else sp.MAX_GAMMA + 1)
print(f"{config.model.name} at {config.weight_bits:g} bit on {config.cluster.n} laptops; draft {draft} ({placement})")

# %% [markdown]
# ## 1. The quoted acceptance rates
# Each row as its source states it; `implied_alpha` is the i.i.d. alpha that gives the quoted share at the
# quoted gamma, and `alpha_at_least` the least alpha that yields a quoted mean accepted length at any gamma
# (both derived). The Llama 2-70B / 7B row is the closest pair to this setting.

# %%
quoted = sp.acceptance_table()
pair = quoted[quoted.target.str.startswith("Llama 2-70B")].iloc[0]
alpha_quoted = float(pair.implied_alpha)
line_alphas = np.union1d(alphas, [alpha_quoted])  # the lines pass through the quoted alpha itself
quoted[["draft", "target", "gamma", "metric", "value", "implied_alpha", "alpha_at_least", "source"]]

# %%
say("The Llama 2-70B target with a Llama 2-7B draft accepted {share:.1%} of the drafted tokens at gamma "
    "{gamma:.0f}, an i.i.d. alpha of {alpha:.3g}: the quoted alpha of every table and chart below.",
    share=pair.value, gamma=pair.gamma, alpha=alpha_quoted)

# %% [markdown]
# ## 2. Every scheme, with and without the draft
# Plain decode's time per token beside speculation's at the quoted alpha and each scheme's best gamma (1-16).
# A scheme whose decode carries one token only says n/a with the reason; OOM marks a scheme whose plan does not
# fit the laptops' memory (only the pipeline streams what does not fit, as prima.cpp does).

# %%
BEST_AS = {"best_gamma_s": "per_token_s", "best_gamma_speedup": "speedup", "best_gamma": "gamma",
           "best_gamma_tokens_per_step": "tokens_per_step", "best_gamma_costliest": "losing_part"}
moe_only = registry.filter(dense=False)  # the MoE-only ones: section 7
plains = [(name, registry[name][1](config.model, config.cluster, workload)) for name in registry
          if name not in moe_only]
table = sp.scheme_table(sp.Speculation(draft, placement, 1, alpha_quoted), plains, registry, config.model,
                        config.cluster, workload, gammas=gammas)  # whatif's and the explorer's table
table = table[["scheme", "plain_s", *BEST_AS, "oom", "notes"]].rename(columns=BEST_AS)  # at each best gamma
table[["scheme", "plain_s", "per_token_s", "speedup", "gamma", "tokens_per_step", "losing_part", "oom", "notes"]]

# %%
ran = table.dropna(subset=["speedup"])
fits = ran[~ran.oom.astype(bool)]
winners, losers = ran[ran.speedup > 1], ran[ran.speedup <= 1]
say("At the quoted alpha, {alpha:.3g}, {n_win} of {n} schemes that can verify several tokens gain and {n_lose} lose; "
    "the fastest that fits memory, {best}, goes from {plain:.2f} s to {spec:.2f} s per token ({x:.2f}x at "
    "gamma {g:.0f}).", alpha=alpha_quoted, n_win=len(winners), n=len(ran), n_lose=len(losers),
    best=fits.sort_values("per_token_s").iloc[0].scheme, plain=fits.sort_values("per_token_s").iloc[0].plain_s,
    spec=fits.sort_values("per_token_s").iloc[0].per_token_s, x=fits.sort_values("per_token_s").iloc[0].speedup,
    g=fits.sort_values("per_token_s").iloc[0].gamma)

# %% [markdown]
# ## 3. Speed-up over alpha and gamma (the scheme that fits)

# %%
fit_scheme = fits.sort_values("per_token_s").iloc[0].scheme
grid = sp.alpha_sweep(spec, fit_scheme, registry, config.model, config.cluster, workload, alphas, gammas)
rec.chart(charts.speedup_heatmap(grid, "gamma", "gamma (drafted tokens per step)",
                                 f"{fit_scheme}: speed-up of speculation over plain decode"),
          "speedup_alpha_gamma", data=grid)

# %% [markdown]
# ## 4. Sensitivity to alpha, each scheme at its best gamma
# The dashed rule is plain decode (speed-up 1); the vertical rule the quoted alpha; "(OOM)" marks a scheme
# whose plan does not fit the laptops' memory (its line is its speed-up if it did).

# %%
oom = set(table[table.oom.astype(bool)].scheme)  # plans that do not fit the laptops' memory (marked "(OOM)")
sweeps = pd.concat([sp.best_over_gamma(sp.alpha_sweep(spec, name, registry, config.model, config.cluster,
                                                      workload, line_alphas, gammas)) for name in schemes],
                   ignore_index=True)
lines = alt.Chart(sweeps.assign(label=charts.oom_labels(sweeps.scheme, oom))).mark_line(point=True).encode(
    x=alt.X("alpha:Q", title="alpha (per-token acceptance)"), y=alt.Y("speedup:Q", title="speed-up at best gamma"),
    color=alt.Color("label:N", title="scheme"), tooltip=["scheme", "alpha", "gamma", "speedup", "losing_part"])
one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4]).encode(y="y:Q")
marker = alt.Chart(pd.DataFrame({"alpha": [alpha_quoted]})).mark_rule(color="gray").encode(x="alpha:Q")
rec.chart((lines + one + marker).properties(title="Speed-up against alpha", width=420), "sensitivity_alpha",
          data=sweeps)

# %%
at_quoted = sweeps[np.isclose(sweeps.alpha, alpha_quoted)].assign(oom=lambda f: f.scheme.isin(oom))
breakeven = sweeps[sweeps.speedup > 1].groupby("scheme").alpha.min().reindex(schemes)
say("Speculation pays from alpha {lo} ({lo_scheme}) up; no gain anywhere in the sweep: {never}.",
    lo=f"{breakeven.min():.2f}" if breakeven.notna().any() else "-",
    lo_scheme=breakeven.idxmin() if breakeven.notna().any() else "none",
    never=", ".join(breakeven[breakeven.isna()].index) or "none")

# %% [markdown]
# ## 5. Where it loses, and which part makes it lose
# Each scheme's time per token at the quoted alpha (best gamma) split into the draft, the verify step's device
# time, its expert misses (none for a dense target) and communication, beside plain decode. A scheme whose plan
# does not fit the laptops' memory is kept and marked "(OOM)": its bars are its time if it did fit.

# %%
PART_NAMES = {"draft_s": "draft", "verify_compute_s": "verify compute", "verify_experts_s": "verify expert misses",
              "communication_s": "communication"}
parts = at_quoted.melt(id_vars=["scheme", "gamma", "speedup"], value_vars=list(PART_NAMES), var_name="part",
                       value_name="seconds").replace({"part": PART_NAMES})
rec.chart(charts.parts_chart(parts, at_quoted, schemes, oom), "parts_at_quoted_alpha", data=parts)
at_quoted[["scheme", "alpha", "gamma", "plain_s", "per_token_s", "speedup", "losing_part", "oom"]]

# %%
lose = at_quoted[at_quoted.speedup <= 1]
say("Losing at the quoted alpha, with the costliest part of each: {losing}.",
    losing=", ".join(f"{s} ({p})" for s, p in zip(lose.scheme, lose.losing_part)) or "none")

# %% [markdown]
# ## 6. The regime map: alpha against link latency
# The best gamma's speed-up of the pipeline (prima.cpp's scheme, which fits) and of Megatron TP (two syncs per
# layer) as the Wi-Fi link's per-hop latency varies; blue: speculation pays.

# %%
latencies = np.array([0.5, 5.0, 20.0] if quick else [0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0]) * 1e-3
regime = pd.concat([sp.regime_map(spec, name, registry, config.model, config.cluster, workload, alphas, latencies,
                                  gammas).assign(scheme=name) for name in ("pipeline_offload", "megatron_tp")],
                   ignore_index=True).assign(latency_ms=lambda f: f.latency_s * 1e3)
rec.chart(charts.speedup_heatmap(regime, "latency_ms", "link latency per hop (ms)", "Where speculation pays",
                                 column="scheme", width=260, height=260), "regime_alpha_latency", data=regime)

# %%
pays = regime[regime.speedup > 1].groupby(["scheme", "latency_ms"]).alpha.min().unstack(0) \
    .reindex(sorted(regime.latency_ms.unique()))


def least_alpha(scheme: str) -> str:
    """How the least paying alpha of `scheme` moves as the latency grows, and where it never pays."""
    column = pays[scheme] if scheme in pays else pd.Series(np.nan, index=pays.index)
    never = column[column.isna()].index
    moves = trend(column.dropna(), ".2f") if column.notna().any() else "is never reached"
    return moves + (f" (no alpha swept pays at {listing(f'{x:g}' for x in never)} ms)" if len(never) else "")


say("As the link latency per hop grows from {lo:g} to {hi:g} ms, the least alpha at which speculation pays "
    "{pipeline} for the pipeline and {megatron} for Megatron TP.", lo=pays.index.min(), hi=pays.index.max(),
    pipeline=least_alpha("pipeline_offload"), megatron=least_alpha("megatron_tp"))
pays

# %% [markdown]
# ## 7. A mixture-of-experts target on four boards
# A MoE target streams only its active experts for one token, but a verify step of `gamma + 1` tokens streams
# the union of their experts (the operator table's routing model): the weights a verify step saves on dense
# layers it spends again on experts. The draft is prompt lookup (no model), so the draft costs nothing and
# any loss is the verify step's. The section runs where the registry holds the MoE target.

# %%
from workbench.machine.hardware import load_device
from workbench.model.models import find_model
from workbench.machine.network import Link, Topology
from workbench.schemes.base import Cluster

moe = find_model(moe_target)
moe_sweeps = pd.DataFrame()
if moe is not None and moe.is_moe:
    boards = Cluster((load_device(moe_board),) * 4, Topology("switch", 4, Link.from_mbps(1000, 0.1)))
    moe_workload = replace(workload, weight_bits=config.weight_bits)
    ngram = sp.Speculation(sp.NGRAM, "root", 4, 0.5)
    moe_schemes = [n for n in ("dllama_allgather_tp", "moe_layer_pipeline", "moe_expert_parallel") if n in registry]
    moe_sweeps = pd.concat([sp.alpha_sweep(ngram, name, registry, moe, boards, moe_workload, line_alphas, gammas)
                            .assign(scheme=name) for name in moe_schemes], ignore_index=True)
    moe_best = sp.best_over_gamma(moe_sweeps, by=("scheme", "alpha"))
    moe_lines = alt.Chart(moe_best).mark_line(point=True).encode(
        x=alt.X("alpha:Q"), y=alt.Y("speedup:Q", title="speed-up at best gamma"), color="scheme:N",
        tooltip=["scheme", "alpha", "gamma", "speedup", "losing_part"])
    rec.chart((moe_lines + one + marker).properties(title=f"{moe.name} on four boards (prompt lookup)", width=420),
              "moe_sensitivity_alpha", data=moe_best)
    at = moe_best[np.isclose(moe_best.alpha, alpha_quoted)]
    say("At the quoted alpha, {alpha:.3g}, the {name} target's best speed-up is {xs}; each verify step of gamma tokens reads "
        "the union of gamma + 1 tokens' experts, so the verify compute grows with gamma and bounds the gain.",
        alpha=alpha_quoted, name=moe.name, xs=", ".join(f"{s} {x:.2f}x (gamma {g:.0f})" for s, x, g in
                                                        zip(at.scheme, at.speedup, at.gamma)))
    # the regime map of a dense and a MoE target on the same boards, same draft (prompt lookup), same scheme family
    dense_peer = find_model(dense_peer_name)
    moe_regime = pd.concat([
        sp.regime_map(ngram, "dllama_allgather_tp", registry, moe, boards, moe_workload, alphas, latencies, gammas)
        .assign(target=f"MoE: {moe.name}"),
        sp.regime_map(ngram, "dllama_allgather_tp", registry, dense_peer, boards, moe_workload, alphas, latencies,
                      gammas).assign(target=f"dense: {dense_peer.name}")], ignore_index=True) \
        .assign(latency_ms=lambda f: f.latency_s * 1e3)
    rec.chart(charts.speedup_heatmap(
        moe_regime, "latency_ms", "link latency per hop (ms)", column="target", width=260, height=260,
        title="Where speculation pays: dense vs MoE target, distributed-llama TP on four boards"),
        "regime_dense_vs_moe", data=moe_regime)
    least = moe_regime[moe_regime.speedup > 1].groupby("target").alpha.min().reindex(moe_regime.target.unique())
    say("On the same boards, over the link latencies swept, the least alpha at which speculation pays is "
        "{pairs}{legend}. distributed-llama sends each sync once per batch row (workbench/schemes/engines.py, from its "
        "source), so a verify step of gamma + 1 tokens pays gamma + 1 messages per sync: the slower the link, the "
        "more speculation loses on this engine, for the dense and the MoE target alike; the MoE target also streams "
        "the union of its verify tokens' experts, so it pays only at higher alpha.",
        pairs=listing(f"{t} {a:.2f}" if pd.notna(a) else f"{t} n/a" for t, a in least.items()),
        legend=" (n/a: no alpha swept pays)" if least.isna().any() else "")
else:
    say("The registry holds no mixture-of-experts model named {name}: this section waits for it.", name=moe_target)

# %%
setting = lambda f: f.apply(lambda r: f"alpha={r.alpha:g},gamma={int(r.gamma)},scheme={r.scheme}", axis=1)  # noqa: E731
rec.add(result_rows("speculative", "sensitivity_alpha", sweeps, {"speedup": "x", "per_token_s": "s"},
                    config.model.name, setting(sweeps)))
rec.add(result_rows("speculative", "regime_alpha_latency", regime, {"speedup": "x"}, config.model.name,
                    regime.apply(lambda r: f"alpha={r.alpha:g},latency_ms={r.latency_ms:g},scheme={r.scheme}", axis=1)))
if not moe_sweeps.empty:
    rec.add(result_rows("speculative", "moe_sensitivity_alpha", moe_sweeps, {"speedup": "x"}, moe_target,
                        setting(moe_sweeps)))
    rec.add(result_rows("speculative", "regime_dense_vs_moe", moe_regime, {"speedup": "x"}, moe_target,
                        moe_regime.apply(lambda r: f"alpha={r.alpha:g},latency_ms={r.latency_ms:g},"
                                         f"target={r.target}", axis=1)))
_ = rec.write()  # figures/speculative/results.csv (no path in the page: a batch run writes to a staging folder)
