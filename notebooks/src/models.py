# %% [markdown]
# # Model registry: sizes, bytes and FLOPs
# Every model the five papers use, with parameters, weight bytes and FLOPs per token, and the sizes the
# papers report (Galaxy Table I, TPI-LLM Tables 4-5, STI's 418 MB) beside the modelled ones.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs: no widgets
quick = False  # True: tiny sweeps (the test suite)
seq_len = 128  # prompt length for prompt-mode FLOPs
kv_len = 128  # attended tokens for decode FLOPs

# %%
import altair as alt

from workbench.report.display import setup_notebook
from workbench.papers.charts import log_base
from workbench.studies.models import model_table, registry_result_rows, size_fidelity_rows
from workbench.report.results import Recorder

rec = Recorder("models", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
table = model_table(seq_len=seq_len, kv_len=kv_len)
table.drop(columns=["source"])

# %%
chart = alt.Chart(table).mark_bar().encode(
    x=alt.X("params:Q", scale=alt.Scale(type="log"), title="parameters"), x2=alt.datum(log_base(table["params"])),
    y=alt.Y("model:N", sort="-x"), color="family:N",
    tooltip=["model", "params", "weights_fp16_bytes", "decode_flops_per_token"],
).properties(title="Registered models", width=420)
rec.chart(chart, "params", data=table)

# %%
flops = alt.Chart(table).mark_point(filled=True, size=80).encode(
    x=alt.X("weights_fp16_bytes:Q", scale=alt.Scale(type="log"), title="fp16 weight bytes"),
    y=alt.Y("decode_flops_per_token:Q", scale=alt.Scale(type="log"), title=f"FLOPs per token (kv={kv_len})"),
    color="family:N", tooltip=["model"],
).properties(title="Decode FLOPs per token vs weight bytes", width=420)
rec.chart(flops, "flops_vs_bytes", data=table)

# %%
sizes = rec.add(size_fidelity_rows())
rec.add(registry_result_rows(table))
rec.write()
sizes
