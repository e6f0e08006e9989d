"""One measured run of a distributed engine as a row (`EngineRun`), shared by every engine runner (llama.cpp RPC,
distributed-llama), and its CSV form in data/engines/*_runs.csv: written atomically in a fixed order, read back
checked. Unknown figures are None (an empty cell), never zero; `method` says why they are missing."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.io import write_text_atomic

PHASES = ("decode", "prefill")


def _optional_non_negative(name: str, value: float | None) -> None:
    """Raise unless `value` is None or a finite number >= 0."""
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise WorkbenchError(f"{name} must be empty (n/a) or a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class EngineRun:
    """One engine, one deployment, one phase: measured seconds and link bytes per token beside the scheme's
    prediction for the same deployment. Columns and their order are the shared run-row schema (issue 42)."""

    engine: str
    engine_version: str
    commit: str
    build: str
    host: str
    cpu: str
    date: str
    scheme: str
    shape: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_ff: int
    vocab_size: int
    n_experts: int
    n_active_experts: int
    format: str
    processes: int
    threads: int
    link_mbit: float
    link_bucket_bytes: float | None  # tbf's bucket per port (`LinkShape.burst`); the prediction costs it
    phase: str
    tokens: int
    seconds_per_token: float
    root_sent_bytes_per_token: float | None
    root_recv_bytes_per_token: float | None
    link_bytes_per_token: float | None
    predicted_seconds_per_token: float | None
    predicted_bytes_per_token: float | None
    comm_share: float | None
    load_1min: float | None
    contention: str
    method: str

    def __post_init__(self) -> None:
        for name in ("engine", "engine_version", "host", "cpu", "date", "scheme", "shape", "format", "contention",
                     "method"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise WorkbenchError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("commit", "build"):
            if not isinstance(getattr(self, name), str):
                raise WorkbenchError(f"{name} must be a string (empty when unknown), got {getattr(self, name)!r}")
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size", "processes",
                     "threads", "tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise WorkbenchError(f"{name} must be an integer >= 1, got {value!r}")
        for name in ("n_experts", "n_active_experts"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise WorkbenchError(f"{name} must be an integer >= 0 (0: dense), got {value!r}")
        if self.n_active_experts > self.n_experts:
            raise WorkbenchError(f"n_active_experts must be <= n_experts ({self.n_experts}), got {self.n_active_experts}")
        if self.n_heads % self.n_kv_heads:
            raise WorkbenchError(f"n_kv_heads must divide n_heads ({self.n_heads}), got {self.n_kv_heads}")
        if self.phase not in PHASES:
            raise WorkbenchError(f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}")
        for name in ("link_mbit", "seconds_per_token"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
                raise WorkbenchError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("link_bucket_bytes", "root_sent_bytes_per_token", "root_recv_bytes_per_token", "link_bytes_per_token",
                     "predicted_seconds_per_token", "predicted_bytes_per_token", "comm_share", "load_1min"):
            _optional_non_negative(name, getattr(self, name))
        if self.comm_share is not None and self.comm_share > 1:
            raise WorkbenchError(f"comm_share must be in [0, 1] or empty (n/a), got {self.comm_share!r}")
        if self.processes == 1 and self.link_bytes_per_token:
            raise WorkbenchError("link_bytes_per_token must be 0 or empty for processes = 1 (no link)")


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(EngineRun))
_INT = {f.name for f in fields(EngineRun) if f.type == "int"}
_FLOAT = {f.name for f in fields(EngineRun) if f.type == "float"}
_OPTIONAL = {f.name for f in fields(EngineRun) if f.type == "float | None"}


def _sort_key(run: EngineRun) -> tuple:
    """Deterministic row order: engine, model, deployment, phase, then date."""
    return (run.engine, run.shape, run.format, run.processes, run.threads, run.link_mbit, run.phase, run.tokens,
            run.date, run.host, run.link_bucket_bytes or 0.0)


def _cell(value) -> str:
    """One CSV cell: None as empty, floats with 10 significant digits (same run, same bytes)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def runs_csv(rows) -> str:
    """The CSV text of `rows` (header first, rows in `_sort_key` order)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(COLUMNS)
    for run in sorted(rows, key=_sort_key):
        if not isinstance(run, EngineRun):
            raise WorkbenchError(f"rows must be EngineRun, got {type(run).__name__}")
        writer.writerow([_cell(value) for value in asdict(run).values()])
    return buffer.getvalue()


def write_runs(path: str | Path, rows) -> Path:
    """Write `rows` to `path` atomically in a fixed order; the same rows give the same bytes."""
    return write_text_atomic(path, runs_csv(list(rows)))


def _parse(name: str, text: str, where: str):
    """One cell of column `name` back to its Python type; a bad cell is a one-line error naming where."""
    try:
        if name in _INT:
            return int(text)
        if name in _FLOAT:
            return float(text)
        if name in _OPTIONAL:
            return None if text == "" else float(text)
    except ValueError:
        raise WorkbenchError(f"{where}: column {name} must be a number, got {text!r}") from None
    return text


def read_runs(path: str | Path) -> list[EngineRun]:
    """The runs stored at `path`, each checked; a file whose header is not the schema is a one-line error."""
    path = Path(path)
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = tuple(next(reader, ()))
        if header != COLUMNS:
            raise WorkbenchError(f"{path}: header must be the run-row schema ({', '.join(COLUMNS)}), got {header}")
        runs = []
        for number, cells in enumerate(reader, start=2):
            where = f"{path}:{number}"
            if len(cells) != len(COLUMNS):
                raise WorkbenchError(f"{where}: must have {len(COLUMNS)} cells, got {len(cells)}")
            try:
                runs.append(EngineRun(**{n: _parse(n, c, where) for n, c in zip(COLUMNS, cells, strict=True)}))
            except WorkbenchError as exc:
                raise WorkbenchError(f"{where}: {exc}") from None
        return runs
