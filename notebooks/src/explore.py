# %% [markdown]
# # Live what-if explorer
# Pick a preset (an example deployment from `examples/`, a device from `data/devices/`, or a TOML file of
# your own): the controls then show that deployment as `python -m workbench whatif` reads it (the same
# `load_config`), a model given by its dimensions included. Move them: model, scheme (or all of them),
# device count, link bandwidth, per-hop latency, memory budget per device, prompt length, tokens attended
# per decode step, weight / activation / KV-cache format, a mixture of experts' routing and expert cache,
# speculative decoding (a draft: none, n-gram prompt lookup or a registered decoder smaller than the model;
# where it runs; the tokens it drafts per step, gamma, and the chance each is accepted, alpha: the file's
# `[speculative]` table), prefill or decode. Every change re-runs the arena
# (`workbench.scenarios.explore.compute` calls `arena_for_config`, what whatif runs) and redraws the latency
# breakdown, the ranking and the memory per device against its budget. With a draft, a table gives each
# scheme's time per token without and with it, the speed-up and the best gamma (`workbench.scenarios.speculative`, the
# numbers whatif prints). The "will more boards help?" button adds, for every change while it is down, the
# device count where each scheme stops getting faster and what grows past it (`workbench.scenarios.scaling`, a sweep of
# up to five counts). A setting nothing can run in (a budget nothing fits in, more devices than heads for
# the chosen scheme, a draft larger than the model) shows one line in orange and keeps the previous charts.
# In batch runs (`interactive=False`, what `python -m workbench reproduce` and the tests run) there are no
# widgets: the starting point is computed, recorded and drawn as the same charts, saved as PNGs and shown
# below as images, so the executed notebook shows them offline.

# %% tags=["parameters"]
figures_dir = None  # None -> figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: used by the test suite (the explorer is cheap either way)
preset = "sbc_gigabit"  # an example stem, a data/devices id, or a path to a TOML file
phase = "prefill"  # prefill (time to first token) or decode (time per token)

# %%
from workbench.report.display import setup_notebook
from workbench.scenarios.explore import Explorer, chart_frames, compute, state_for_preset, static_charts, view_result_rows
from workbench.report.results import Recorder

rec = Recorder("explore", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
state = state_for_preset(preset, phase=phase)
view = compute(state)
rec.add(view_result_rows(view))
_ = rec.write()  # (no echo of the path in the page)

# %%
# The best scheme appears in one place only: the explorer's live bold line, or (batch runs) one printed line
# above the starting point's charts as static images (a widget shows nothing once the kernel is gone).
if interactive:
    explorer = Explorer(state)
    display(explorer.widget)  # noqa: F821 (IPython builtin)
else:
    print(view.summary)
    frames = chart_frames(view)
    for name, chart in static_charts(view).items():
        rec.chart(chart, name, data=frames.get(name))
