"""`python -m workbench reproduce`: execute the notebooks with papermill and build the fidelity report.

Each notebook runs on the registered `workbench` kernel with `figures_dir` and `interactive=False`
injected; executed copies go to build/notebooks/ (git-ignored). A failing notebook is reported by
name with its failing cell, the others still run, and the exit code is non-zero.
"""

from __future__ import annotations

import ast
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.io import BUILD_DIR, FIGURES_DIR, NOTEBOOKS_DIR

KERNEL_NAME = "workbench"
INJECTED = ("figures_dir", "interactive")


@dataclass(frozen=True)
class NotebookRun:
    """Outcome of one notebook: name, seconds, and the error line when it failed."""

    name: str
    seconds: float
    error: str | None = None


def parse_parameters(pairs: list[str]) -> dict:
    """Parse ``key=value`` strings; values are Python literals when they parse, else strings."""
    params = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise WorkbenchError(f"parameter must look like key=value with a Python identifier as key, got {pair!r}")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        params[key.strip()] = value
    return params


def list_notebooks(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[str]:
    """Names (stems) of every notebook, sorted."""
    return sorted(p.stem for p in notebooks_dir.glob("*.ipynb"))


def select_notebooks(only: list[str] | None, notebooks_dir: Path = NOTEBOOKS_DIR) -> list[str]:
    """The notebooks to run; unknown names are an error listing the known ones."""
    known = list_notebooks(notebooks_dir)
    if not only:
        return known
    unknown = [n for n in only if n not in known]
    if unknown:
        raise WorkbenchError(f"unknown notebook(s) {unknown} for --only; available: {', '.join(known)}")
    return list(only)


def notebook_parameters(path: Path) -> set[str]:
    """Names in the notebook's `parameters` cell."""
    import papermill

    return set(papermill.inspect_notebook(str(path)))


def route_parameters(names: list[str], params: dict, notebooks_dir: Path = NOTEBOOKS_DIR) -> dict[str, dict]:
    """Give each notebook the parameters it declares; a key no selected notebook declares is an error."""
    declared = {n: notebook_parameters(notebooks_dir / f"{n}.ipynb") for n in names}
    for key in params:
        if not any(key in d for d in declared.values()):
            known = sorted(set().union(*declared.values()) - set(INJECTED)) if declared else []
            raise WorkbenchError(f"unknown parameter {key!r} for notebook(s) {names}; known parameters: {known}")
    return {n: {k: v for k, v in params.items() if k in declared[n]} for n in names}


def ensure_kernel() -> None:
    """Register the `workbench` Jupyter kernel for this Python if it is missing."""
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL_NAME not in KernelSpecManager().find_kernel_specs():
        from ipykernel.kernelspec import install

        install(kernel_name=KERNEL_NAME, display_name="Workbench (Python 3)", prefix=sys.prefix)


def run_notebook(name: str, params: dict, figures_dir: Path, notebooks_dir: Path = NOTEBOOKS_DIR,
                 build_dir: Path = BUILD_DIR, progress: bool = True) -> NotebookRun:
    """Execute one notebook with papermill; never raises for a failing notebook."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    out = build_dir / "notebooks" / f"{name}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    injected = {"figures_dir": str(figures_dir), "interactive": False, **params}
    start = time.perf_counter()
    try:
        papermill.execute_notebook(str(notebooks_dir / f"{name}.ipynb"), str(out), parameters=injected,
                                   kernel_name=KERNEL_NAME, progress_bar=progress, cwd=str(notebooks_dir),
                                   log_output=False)
    except PapermillExecutionError as exc:
        line = (exc.evalue or "").strip().splitlines()[-1:] or [""]
        return NotebookRun(name, time.perf_counter() - start,
                           f"cell {exc.exec_count}: {exc.ename}: {line[0]} (see {out})")
    except Exception as exc:  # kernel died, bad notebook file, ...
        return NotebookRun(name, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
    return NotebookRun(name, time.perf_counter() - start)


def reproduce(only: list[str] | None = None, params: dict | None = None, figures_dir: Path = FIGURES_DIR,
              notebooks_dir: Path = NOTEBOOKS_DIR, build_dir: Path = BUILD_DIR, progress: bool = True) -> list[NotebookRun]:
    """Run the selected notebooks, then write figures/fidelity.csv and figures/REPORT.md."""
    from workbench.fidelity import write_report

    names = select_notebooks(only, notebooks_dir)
    routed = route_parameters(names, params or {}, notebooks_dir)
    ensure_kernel()
    runs = []
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", flush=True)
        run = run_notebook(name, routed[name], Path(figures_dir), notebooks_dir, build_dir, progress)
        status = "ok" if run.error is None else f"FAILED {run.error}"
        print(f"    {name}: {status} ({run.seconds:.1f} s)", flush=True)
        runs.append(run)
    failures = {r.name: r.error for r in runs if r.error}
    write_report(Path(figures_dir), failures=failures)
    print(f"wrote {Path(figures_dir) / 'fidelity.csv'} and {Path(figures_dir) / 'REPORT.md'}")
    if failures:
        print("failed notebooks: " + ", ".join(failures), file=sys.stderr)
    return runs
