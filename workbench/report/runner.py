"""`python -m workbench reproduce`: execute the notebooks with papermill and build the fidelity report.

Each notebook runs on the registered `workbench` kernel with `figures_dir` and `interactive=False`
injected. A failing notebook is reported by name with its failing cell, the others still run, and the
exit code is non-zero.

A notebook writes into a temporary sibling folder (``figures/.staging-<name>-*/<name>/``); only when it
succeeds does that folder replace ``figures/<name>/`` (two renames, with Ctrl-C held off between them).
On a failure or an interrupt the old folder stays as it was and the temporary one is removed.

The executed notebook travels with the outputs it made: ``<figures_dir>/<name>/<name>.ipynb``, swapped in
with them (or ``<build_dir>/<name>.ipynb`` with `build_dir`, written at the same moment), so a run with other
parameters or another `figures_dir` never overwrites the executed notebook of another run's outputs. A failed
run keeps its executed notebook as ``<name>.failed.ipynb`` beside the untouched folder (removed by the next
success), never in place of the one that matches the outputs.
"""

from __future__ import annotations

import ast
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.io import FIGURES_DIR, NOTEBOOKS_DIR, writable_folder, write_atomic
from workbench.report.results import resolve_figures_dir, write_parameters

KERNEL_NAME = "workbench"
INJECTED = ("figures_dir", "interactive")
STAGING_PREFIX = ".staging-"


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


def notebook_defaults(path: Path) -> dict[str, str]:
    """Each name in the notebook's `parameters` cell with its default as source text."""
    import papermill

    return {name: spec["default"] for name, spec in papermill.inspect_notebook(str(path)).items()}


def notebook_parameters(path: Path) -> set[str]:
    """Names in the notebook's `parameters` cell."""
    return set(notebook_defaults(path))


def is_default(value: object, default_source: str) -> bool:
    """Whether `value` equals the default written as `default_source` (a non-literal default never does)."""
    try:
        default = ast.literal_eval(default_source)
    except (ValueError, SyntaxError):
        return False
    return isinstance(value, bool) == isinstance(default, bool) and value == default


def non_default_parameters(params: dict, defaults: dict[str, str]) -> dict:
    """The entries of `params` that differ from the notebook's defaults, sorted; runner-injected ones left out."""
    return {k: v for k, v in sorted(params.items()) if k not in INJECTED and not is_default(v, defaults.get(k, ""))}


def figures_target(value: object) -> Path:
    """The folder a `figures_dir` value names (None: figures/; relative: from the repository root), created."""
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise WorkbenchError(f"figures_dir must be a folder path (a string), got {value!r}")
    return writable_folder(resolve_figures_dir(value), f"figures_dir={str(value)!r}")


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold SIGINT (Ctrl-C) back until the block ends, then act on it (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, None)
        elif caught and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)
        elif caught and previous is None:
            raise KeyboardInterrupt


def swap_in(new: Path, target: Path, attic: Path) -> None:
    """Replace folder `target` by `new` with two renames, the old one moved into `attic`; undone if the second fails."""
    old = attic / f"old-{target.name}"
    had_old = target.exists()
    if had_old:
        os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        if had_old:
            os.replace(old, target)
        raise


def remove_tree(path: Path) -> None:
    """Delete a temporary folder, with Ctrl-C held back so it is never left half-deleted."""
    with sigint_held():
        shutil.rmtree(path, ignore_errors=True)


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


def execute(name: str, params: dict, figures_dir: Path, notebooks_dir: Path, out: Path,
            progress: bool) -> NotebookRun:
    """Execute one notebook with papermill into `out`, its outputs under `figures_dir`; never raises for a
    failing notebook (the error names `out`'s file name, which the caller places)."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    injected = {"interactive": False, **params, "figures_dir": str(figures_dir)}
    start = time.perf_counter()
    try:
        papermill.execute_notebook(str(notebooks_dir / f"{name}.ipynb"), str(out), parameters=injected,
                                   kernel_name=KERNEL_NAME, progress_bar=progress, cwd=str(notebooks_dir),
                                   log_output=False)
    except PapermillExecutionError as exc:
        line = (exc.evalue or "").strip().splitlines()[-1:] or [""]
        return NotebookRun(name, time.perf_counter() - start, f"cell {exc.exec_count}: {exc.ename}: {line[0]}")
    except Exception as exc:  # kernel died, bad notebook file, ...
        return NotebookRun(name, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
    return NotebookRun(name, time.perf_counter() - start)


def executed_paths(name: str, target: Path, build_dir: Path | None) -> tuple[Path, Path]:
    """Where a run's executed notebook goes: (after a success, after a failure)."""
    if build_dir is None:
        return target / name / f"{name}.ipynb", target / f"{name}.failed.ipynb"
    return build_dir / f"{name}.ipynb", build_dir / f"{name}.failed.ipynb"


def copy_atomic(source: Path, target: Path) -> None:
    """Copy a file so that `target` is either its old self or the whole copy (`workbench.core.io.write_atomic`)."""
    write_atomic(target, lambda p: shutil.copyfile(source, p))


def run_notebook(name: str, params: dict, figures_dir: Path | str | None, notebooks_dir: Path = NOTEBOOKS_DIR,
                 build_dir: Path | None = None, progress: bool = True) -> NotebookRun:
    """Run one notebook into a temporary folder that replaces figures_dir/<name>/ (its executed notebook
    inside, or in `build_dir`) only if it succeeds; a failure keeps the executed notebook as <name>.failed.ipynb."""
    params = dict(params)
    target = figures_target(params.pop("figures_dir", figures_dir))
    if build_dir is not None:
        build_dir = writable_folder(Path(build_dir), f"--build-dir {str(build_dir)!r}")
    ok_path, failed_path = executed_paths(name, target, build_dir)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{name}-", dir=target))
    executed = staging / f"{name}.ipynb"
    try:
        run = execute(name, params, staging, notebooks_dir, executed, progress)
        if run.error is not None:
            if not executed.exists():
                return run
            copy_atomic(executed, failed_path)
            return NotebookRun(run.name, run.seconds, f"{run.error} (see {failed_path})")
        defaults = notebook_defaults(notebooks_dir / f"{name}.ipynb")
        write_parameters(staging / name, non_default_parameters(params, defaults))
        if build_dir is None:
            os.replace(executed, staging / name / executed.name)
        with sigint_held():
            swap_in(staging / name, target / name, staging)
            if build_dir is not None:
                copy_atomic(executed, ok_path)
            failed_path.unlink(missing_ok=True)
        return run
    finally:
        remove_tree(staging)


def reproduce(only: list[str] | None = None, params: dict | None = None, figures_dir: Path = FIGURES_DIR,
              notebooks_dir: Path = NOTEBOOKS_DIR, build_dir: Path | None = None,
              progress: bool = True) -> list[NotebookRun]:
    """Run the selected notebooks into figures_dir (or `params`' figures_dir), then write its fidelity.csv and
    REPORT.md about the notebooks that ran (executed notebooks beside their outputs, or in `build_dir`)."""
    from workbench.report.fidelity import write_report

    params = dict(params or {})
    names = select_notebooks(only, notebooks_dir)
    chosen = params.pop("figures_dir", figures_dir)
    routed = route_parameters(names, params, notebooks_dir)
    target = figures_target(chosen)
    ensure_kernel()
    runs = []
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", flush=True)
        try:
            run = run_notebook(name, routed[name], target, notebooks_dir, build_dir, progress)
        except KeyboardInterrupt:
            print(f"interrupted during {name}: {target / name} is left as it was", file=sys.stderr, flush=True)
            raise
        status = "ok" if run.error is None else f"FAILED {run.error}"
        print(f"    {name}: {status} ({run.seconds:.1f} s)", flush=True)
        runs.append(run)
    failures = {r.name: r.error for r in runs if r.error}
    write_report(target, failures=failures, notebooks=names if only else None)  # a partial run: its own
    print(f"wrote {target / 'fidelity.csv'} and {target / 'REPORT.md'}")
    if failures:
        print("failed notebooks: " + ", ".join(failures), file=sys.stderr)
    return runs
