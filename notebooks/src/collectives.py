# %% [markdown]
# # Collectives: star, tree, ring and hierarchical all-reduce
# Cost = (sequential path traversals) x (hops per path) x per-hop latency + bottleneck bytes / bandwidth
# (`workbench.machine.network`). For the small messages of edge tensor parallelism (a hidden vector per token:
# tens of KB) the link-latency term dominates, so the algorithm with the fewest sequential traversals
# wins (TPI-LLM's Fig. 3 argument); for large messages ring's bandwidth optimality wins.

# %% tags=["parameters"]
figures_dir = None  # None -> figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: tiny sweeps (tests)
bandwidth_mbps = 300.0  # TPI-LLM's emulated edge network
latency_ms = 1.0  # per-hop link latency (TPI-LLM: 1 ms)
topology = "switch"  # switch (2 hops) | gateway_tree (TPI-LLM's home gateways, 4 hops) | direct | ring
devices = 8
message_bytes = 32768  # e.g. one Llama 2-7B hidden vector in fp32 is 16 KiB

# %%
import altair as alt

from workbench.report.display import setup_notebook
from workbench.studies import collectives as C
from workbench.report.results import Recorder, result_rows

rec = Recorder("collectives", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
device_grid = (2, 4, 8) if quick else (2, 4, 8, 16, 32, 64)
size_grid = C.DEFAULT_SIZES[::4] if quick else C.DEFAULT_SIZES
sweep = C.allreduce_sweep(devices=device_grid, message_bytes=size_grid, bandwidth_mbps=bandwidth_mbps,
                          latency_ms=latency_ms, topology=topology)
sweep.head()

# %%
size_chart = alt.Chart(sweep[sweep.devices == devices]).mark_line(point=True).encode(
    x=alt.X("message_bytes:Q", scale=alt.Scale(type="log"), title="message bytes per device"),
    y=alt.Y("latency_s:Q", scale=alt.Scale(type="log"), title="all-reduce latency (s)"),
    color="algorithm:N",
).properties(title=f"All-reduce vs message size ({devices} devices, {bandwidth_mbps} Mbps, {latency_ms} ms/hop, {topology})",
             width=460)
rec.chart(size_chart, "allreduce_vs_size", data=sweep)

# %%
lat = C.latency_sweep(devices=devices, message_bytes=message_bytes, bandwidth_mbps=bandwidth_mbps, topology=topology)
lat_chart = alt.Chart(lat).mark_line(point=True).encode(
    x=alt.X("link_latency_ms:Q", scale=alt.Scale(type="log"), title="per-hop link latency (ms)"),
    y=alt.Y("latency_s:Q", scale=alt.Scale(type="log"), title="all-reduce latency (s)"), color="algorithm:N",
).properties(title=f"All-reduce vs per-link latency ({devices} devices, {message_bytes} B)", width=460)
rec.chart(lat_chart, "allreduce_vs_link_latency", data=lat)

# %%
winners = C.fastest(sweep)
win_chart = alt.Chart(winners).mark_rect().encode(
    x=alt.X("message_bytes:O", title="message bytes"), y=alt.Y("devices:O"), color="fastest:N",
    tooltip=["fastest", "speedup_vs_next"],
).properties(title="Fastest all-reduce algorithm")
rec.chart(win_chart, "fastest_algorithm", data=winners)

# %%
setting = sweep.apply(lambda r: f"{r.algorithm},n={r.devices},bytes={int(r.message_bytes)},{bandwidth_mbps}Mbps,{latency_ms}ms,{topology}", axis=1)
rec.add(result_rows("workbench", "collectives", sweep, {"latency_s": "s", "link_latency_s": "s", "data_s": "s"},
                    setting=setting))
rec.write()
winners.head(10)

# %% [markdown]
# ## What if: move the sliders

# %%
if interactive:
    import ipywidgets as W

    bw = W.FloatLogSlider(value=bandwidth_mbps, base=10, min=0, max=5, description="Mbps")
    tau = W.FloatLogSlider(value=latency_ms, base=10, min=-3, max=1.5, description="ms/hop")
    n = W.IntSlider(value=devices, min=2, max=64, description="devices")
    view = alt.JupyterChart(size_chart)

    def update(*_):
        s = C.allreduce_sweep(devices=(n.value,), bandwidth_mbps=bw.value, latency_ms=tau.value, topology=topology)
        view.chart = size_chart.properties(data=s, title=f"{n.value} devices, {bw.value:.0f} Mbps, {tau.value:.3g} ms/hop")

    for w in (bw, tau, n):
        w.observe(update, names="value")
    display(W.VBox([W.HBox([bw, tau, n]), view]))
