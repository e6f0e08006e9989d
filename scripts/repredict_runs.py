"""Re-predict every stored engine run from the current model (data/engines/dllama_runs.csv and
llamacpp_rpc_runs.csv): what was measured is kept, the prediction, the model's communication share and the method's
prediction line are recomputed (`dllama.repredicted`, `rpc.repredicted`). Run it after a change to the cost model;
the same model gives the same bytes.

    PYTHONPATH=. python scripts/repredict_runs.py
"""

from __future__ import annotations

from workbench.measure.engines import dllama, rpc
from workbench.measure.engines.runs import read_runs, write_runs

RUNS = {dllama.project_root() / "data" / "engines" / "dllama_runs.csv": dllama.repredicted,
        rpc.RUNS_CSV: rpc.repredicted}


def main() -> None:
    """Rewrite each runs CSV atomically with today's predictions."""
    for path, again in RUNS.items():
        rows = [again(r) for r in read_runs(path)]
        write_runs(path, rows)
        print(f"{len(rows)} rows re-predicted -> {path}")


if __name__ == "__main__":
    main()
