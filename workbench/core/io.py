"""Atomic file output and repository paths: nothing the workbench writes is ever half-written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = REPO_ROOT / "data"
FIGURES_DIR = REPO_ROOT / "figures"
NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = REPO_ROOT / "build"


def is_checkout(folder: Path) -> bool:
    """Whether `folder` is a checkout of this project (a pyproject.toml beside workbench/__init__.py)."""
    return (folder / "pyproject.toml").is_file() and (folder / "workbench" / "__init__.py").is_file()


def project_root(start: str | os.PathLike | None = None) -> Path:
    """The project a notebook or command works in: the nearest checkout at or above `start` (default: the working
    directory), else `start` itself. Not REPO_ROOT: the package may be installed from another checkout, and a
    notebook opened in this one must write its figures here."""
    here = Path.cwd() if start is None else Path(start)
    here = here.resolve()
    return next((folder for folder in (here, *here.parents) if is_checkout(folder)), here)


def _umask() -> int:
    """The process's file-creation mask (read by setting and restoring it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(target: str | os.PathLike):
    """Yield a temporary path beside `target`; on success it replaces `target` in one rename, with the
    mode a plain open() would give (0666 less the umask; mkstemp's private 0600 is not kept)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def writable_folder(path: str | os.PathLike, shown: str) -> Path:
    """`path` as a folder to write into, created if missing; a file, an uncreatable or unwritable place is a
    one-line error that starts with `shown` (the parameter as the user gave it, e.g. "--out 'x'")."""
    from workbench.core.errors import WorkbenchError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise WorkbenchError(f"{shown} is a file; it must be a folder (new or existing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkbenchError(f"{shown} cannot be created: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise WorkbenchError(f"{shown} is not writable; it must be a folder you can write to")
    return path


def writable_file(path: str | os.PathLike, shown: str) -> Path:
    """`path` as a file to (re)write atomically: not a folder, in a folder that exists or can be created and
    that is writable; else a one-line error that starts with `shown`. Call it before the work whose result
    goes there."""
    from workbench.core.errors import WorkbenchError

    path = Path(path)
    if path.is_dir():
        raise WorkbenchError(f"{shown} is a folder; give a file name")
    writable_folder(path.parent, f"{shown}: its folder {str(path.parent)!r}")
    return path


def write_atomic(target: str | os.PathLike, writer: Callable[[Path], None]) -> Path:
    """Call `writer(tmp_path)` and move the result onto `target` atomically."""
    with atomic_path(target) as tmp:
        writer(tmp)
    return Path(target)


def write_text_atomic(target: str | os.PathLike, text: str) -> Path:
    """Write `text` to `target` atomically."""
    return write_atomic(target, lambda p: p.write_text(text))


def write_csv_atomic(target: str | os.PathLike, frame: pd.DataFrame) -> Path:
    """Write `frame` as CSV (no index, stable float format) atomically: same frame -> same bytes."""
    return write_atomic(target, lambda p: frame.to_csv(p, index=False, float_format="%.10g", lineterminator="\n"))
