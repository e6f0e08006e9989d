# %% [markdown]
# # Live what-if explorer
# Pick a model, a scheme (or all of them), a device preset (an example deployment from `examples/`, a
# device from `data/devices/`, or a TOML file of your own), then move the sliders: device count, link
# bandwidth, per-hop latency, memory budget per device, sequence length, prefill or decode. Every change
# re-runs the arena (`workbench.explore.compute`, the same cost model as every paper notebook) and redraws
# the latency breakdown, the ranking and the memory per device against its budget. A setting nothing can
# run in (a budget nothing fits in, more devices than heads for the chosen scheme) shows one line in
# orange and keeps the previous charts. In batch runs (`interactive=False`) only the starting point is
# computed and recorded.

# %% tags=["parameters"]
figures_dir = None  # None -> figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: used by the test suite (the explorer is cheap either way)
preset = "sbc_gigabit"  # an example stem, a data/devices id, or a path to a TOML file
phase = "prefill"  # prefill (time to first token) or decode (time per token)

# %%
from workbench.display import setup_notebook
from workbench.explore import Explorer, compute, settings_for_preset, view_result_rows
from workbench.results import Recorder

rec = Recorder("explore", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
settings = settings_for_preset(preset, phase=phase)
view = compute(settings)
rec.add(view_result_rows(view))
_ = rec.write()  # (no echo of the path in the page)

# %%
# The best scheme appears in one place only: the explorer's live bold line, or (batch runs) one printed line.
if interactive:
    explorer = Explorer(settings)
    display(explorer.widget)  # noqa: F821 (IPython builtin)
else:
    print(view.summary)
