# %% [markdown]
# # Arena: every scheme on one model, one set of devices, one cost model
# Each paper compares itself with its own baselines on its own hardware. Here every partition scheme the
# workbench implements (everything registered in `workbench.schemes`) runs on the *same* model, devices
# and network through the shared cost-model core, for prefill (time to first token) and decode (time per
# token), with peak memory per device and out-of-memory marked. The deployment comes from a TOML file
# (`examples/*.toml`, or your own: `python -m workbench whatif FILE.toml`). Every scheme costs the same
# work: each step ends in the next token's logits (a decoder's LM head: on the master for TPI-LLM, Hepti and
# the single-device schemes, split by vocabulary rows for Galaxy's TP schemes and the MCU chips), even
# where the scheme's own paper times only the backbone.
#
# Nothing here is fitted: the arena only re-runs each paper's evaluator (with that paper's fitted
# constants where its own devices are used) on common ground, so these numbers are predictions, not
# validations. Where a scheme does not apply (e.g. device count not dividing the heads, a weight format
# a scheme does not support) its row says "n/a" with the reason.

# %% tags=["parameters"]
figures_dir = None  # None -> figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: tiny sweeps, used by the test suite
config = "examples/sbc_gigabit.toml"  # the deployment (devices, network, prompt)
model = "Llama 2-7B"  # overrides the file's model for the arena and the regime map ("" keeps it)
weight_bits = 8.0  # overrides the file's weight format (0 keeps it); 8 bit runs on every scheme

# %%
import pandas as pd

from workbench.scenarios.arena import arena_for_config, arena_result_rows, breakdown_frame
from workbench.scenarios.arena_charts import breakdown_chart, memory_chart, ranking_chart
from workbench.report.display import setup_notebook
from workbench.scenarios.explore import configure
from workbench.core.io import REPO_ROOT
from workbench.scenarios.regimes import (
    SLICES,
    Base,
    claim_chart,
    claims_summary,
    regime_chart,
    regime_result_rows,
    study,
)
from workbench.report.results import Recorder
from workbench.scenarios.userconfig import load_config
from workbench.scenarios.whatif import format_table

rec = Recorder("arena", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
# the file as whatif and the explorer read it (load_config), the overrides as the explorer's controls apply them
overrides = {"model": model, "weight_format": f"{weight_bits:g} bit" if weight_bits else ""}
deployment = configure(load_config(REPO_ROOT / config), **{k: v for k, v in overrides.items() if v})
base = Base.from_config(deployment)
arena = arena_for_config(deployment).check_feasible()  # what whatif runs
table = arena.table()
rec.add(arena_result_rows(arena))
print(format_table(arena))

# %% [markdown]
# ## The table and the latency breakdown
# Bars stack the busy time of each component: memory streaming (kernels whose bytes take longer than their
# arithmetic, on the roofline) apart from arithmetic (kernels their FLOPs bind), fixed launches and per-layer
# time, communication split into per-hop link latency and bytes over bandwidth, IO stall waiting for weights.
# The black tick is the end-to-end latency, shorter than the stack where a scheme overlaps communication or IO
# with compute; the table's "bound by" column names each scheme's largest component in decode.

# %%
rec.chart(ranking_chart(arena), "table", data=table)
rec.chart(breakdown_chart(arena), "breakdown", data=breakdown_frame(arena))

# %%
rec.chart(memory_chart(arena, "decode"), "memory", data=arena.memory())

# %% [markdown]
# ## Will more boards help?
# The same deployment with its first device repeated over a range of counts (what `whatif --devices` sweeps).
# Per scheme: the count where decode latency stops falling, and the component that grows past it: the
# per-message time at the busiest endpoint, the bytes on its busiest link, serial work on one device, a memory
# level falling out (an IO stall, or the next count out of memory). A count where a scheme cannot split the
# model (heads not divisible, too few layers) is listed with the arena's reason. Dots mark each scheme's
# fastest count.

# %%
import altair as alt  # noqa: E402

from workbench.scenarios.scaling import device_sweep, stop_helping_all, stop_helping_frame  # noqa: E402

counts = [1, 2, 4] if quick else [1, 2, 4, 8, 16]
sweep = device_sweep(deployment, counts)
answers = stop_helping_frame(stop_helping_all(sweep[sweep.phase == "decode"]))
ran = sweep[(sweep.phase == "decode") & (sweep.status != "n/a")].copy()
fastest = dict(zip(answers.scheme, answers.best_devices))
ran["fastest"] = [fastest.get(s) == n for s, n in zip(ran.scheme, ran.devices)]
x = alt.X("devices:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=counts, format="d"), title="devices")
y = alt.Y("latency_s:Q", scale=alt.Scale(type="log"), title="s/token")
base_chart = alt.Chart().encode(x=x, y=y, tooltip=["scheme", "devices", "latency_s", "status"])
panel = alt.layer(base_chart.mark_line(color="#4c78a8"), base_chart.mark_point(filled=True, size=60, color="#e45756")
                  .transform_filter("datum.fastest"), data=ran).properties(width=130, height=90)
rec.chart(panel.facet(facet=alt.Facet("scheme:N", title=None), columns=6).properties(
    title="decode time per token vs device count (red: the fastest count; each panel its own scale)").resolve_scale(
    y="independent"), "more_boards", data=ran)
answers[["scheme", "best_devices", "next_devices", "cause", "cannot_split_at"]]

# %% [markdown]
# ## Regime map
# Around the same deployment, three slices: network (link bandwidth x per-hop latency), scale (device
# count x memory per device) and prompt (bandwidth x sequence length). Each tile is coloured by the
# fastest scheme that fits there and labelled with its margin over the runner-up; black lines are the
# boundaries between regimes.

# %%
results = study(base, quick=quick)
charts = []
for name, (x, y, phases) in SLICES.items():
    for phase in phases:
        charts.append(regime_chart(results[name], x, y, phase, title=f"{name}: winner ({phase})", width=260))

regime_map = alt.vconcat(*[alt.hconcat(*charts[i:i + 2]) for i in range(0, len(charts), 2)]).resolve_scale(
    color="shared")
winners_all = pd.concat([results[n].assign(slice=n) for n in SLICES], ignore_index=True)
rec.chart(regime_map, "regime_map", data=winners_all)
rec.add(regime_result_rows(results, base.model.name))

# %% [markdown]
# ## Where each paper's headline claim holds, and where it stops
# Each claim is a ratio (baseline latency / the paper's scheme latency) over the axis the claim is about;
# it holds where the ratio exceeds the threshold (green) and stops where it does not (red). The
# super-linear MCU claim is speedup over one chip divided by the chip count. "fits" claims hold where the
# paper's scheme runs and the baseline is out of memory. TPI-LLM's star-vs-ring and TP-vs-model-parallel
# claims use TPI-LLM's own evaluator with all weights resident (no sliding window) so that only the
# all-reduce (or the parallelism) differs.

# %%
claims = results["claims"]
rec.chart(claim_chart(claims), "claims", data=claims)
summary = claims_summary(claims)
rec.chart(alt.Chart(summary).mark_text(align="left").encode(
    y=alt.Y("claim:N", title=None), text="holds_at:N").properties(title="claims: where they hold", width=500),
    "claims_summary", data=summary)
rec.write()
summary

# %%
if interactive:
    from IPython.display import display

    from workbench.scenarios.explore import Explorer, state_for_preset

    display(Explorer(state_for_preset(config)).widget)
