# ruff: noqa: E402, B018  (a notebook: imports after the parameters cell, cells end with what they show)
# %% [markdown]
# # Toy paper: one model split evenly over n devices (the template of README "Adding a paper")
# **Claim.** Splitting the model over n devices speeds one inference up almost n-fold (Fig. 1).
#
# **How it is modelled** (`workbench.papers.<paper>`, `wb` below): the FLOPs of every layer split evenly, one fixed
# synchronisation latency per extra device. Every paper number is read from `data/reported/<paper>.csv` and
# every constant from `data/constants/<paper>.toml`; nothing is typed into this notebook.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: tiny sweeps (the test suite)
seq_len = 128  # tokens per inference (the paper's)

# %%
from workbench.papers import toy as wb
from workbench.report.display import setup_notebook
from workbench.report.fidelity import scoreboard
from workbench.report.results import Recorder

rec = Recorder(wb.PAPER, figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
setting = wb.Setting.from_constants(seq_len=seq_len)

# %% [markdown]
# ## Fig. 1: speedup over one device

# %%
fig1 = wb.scaling(setting.devices[:2] if quick else None, seq_len=setting.seq_len)
rec.add(wb.scaling_rows(fig1))
fig1

# %% [markdown]
# ## The text's claims as pattern checks

# %%
patterns = wb.pattern_checks()
rec.add(wb.pattern_rows(patterns))
patterns

# %% [markdown]
# ## Fidelity

# %%
board = scoreboard(wb.reported(), rec.table())
rec.write()
board[["artifact", "model", "setting", "quantity", "reported", "modelled", "relative_error", "within_tolerance"]]
