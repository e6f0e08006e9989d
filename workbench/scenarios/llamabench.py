"""llama-bench's output as `calibrate` rows: one board's `llama-bench` run is the whole calibration path.

`python -m workbench calibrate CONFIG.toml BENCH --fit NAME` takes, in place of MEASURED.csv, what llama.cpp's
`llama-bench` prints: `-o json` (a list of objects), `-o jsonl` (one object a line) or the default `-o md`
table, pasted with or without the lines around it. The formats are read as llama.cpp's
tools/llama-bench/llama-bench.cpp writes them (ggml-org/llama.cpp, commit
050fc7f32de16858ac667d775b43a51ed8976e6f): `test::get_fields` (the JSON keys: n_prompt, n_gen, n_depth,
avg_ts, model_type, model_size in bytes, model_n_params, n_threads, backends, build_commit, build_number ...),
`markdown_printer` (header names: model, size as "%.2f MiB|GiB" of 1024-powers, params as "%.2f M|B" of
1e6 / 1e9, backend, threads (n_threads), ngl, ..., test, t/s as "%.2f ± %.2f"; the footer
"build: <commit> (<number>)") and `test::get_ts` (t/s = (n_prompt + n_gen) / the run's time, averaged over
the repetitions). The markdown columns vary by version and flags, so they are read by header name: only
`test` and `t/s` are required (tables of 2023 builds name tests "pp 512", "tg 128": read as pp512, tg128).

What a test becomes (`Run`):

* `ppN` (n_prompt = N, n_gen = 0): `test_prompt` decodes N random tokens from an empty context in batches
  of n_batch and returns after the last token's logits: a prefill of N tokens, latency_s = N / t/s, which
  is calibrate's prefill row (time to first token of a `tokens`-token prompt) less tokenizing and sampling
  (llama-bench's README: its measurements include neither).
* `tgN` (n_gen = N, n_prompt = 0): `test_gen` decodes N tokens one at a time after `llama_memory_clear`
  (or after a restored n_depth-token context): one token's latency = 1 / t/s. Token i (0-based) attends
  n_depth + i + 1 positions, so the mean is n_depth + (N + 1) / 2; the row's `tokens` (the positions a
  decode step attends) is n_depth + (N + 1) // 2, the mean rounded down: 64 for tg128, 576 for
  "tg128 @ d512". The model's decode step is affine in the attended length (weights streamed once, the
  KV cache read per position), so the step at the mean length costs the mean of the steps.
* Refused by name, one line each (a silently dropped row would change what is fitted): a combined test
  `ppN+tgM` (`-pg`: its t/s mixes a prefill and M decode steps), a prompt after a filled context
  (`ppN @ dD`: a calibrate prefill row is a prompt from an empty context), a test that is neither, and a
  file whose tests ran more than one model (the rows are all costed as the config's one model).
* JSON's avg_ts (the same mean the table prints), not avg_ns, so a run gives the same rows in every format.

Every row is `SCHEME` (the workbench's one-device scheme: all weights resident on the config's device,
dense or mixture of experts) on `devices` = 1, role calibration unless its test is named in
`validation`. The rows take the config's model (no `model` column); llama-bench's model string, size and
parameter count, its threads, backend and build ride along as `llama_*` columns, which calibrate ignores,
and `mismatch_warnings` says in one line when they disagree with the config's model by more than
`MISMATCH` or when the rows ran with different thread counts.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.schemes.baselines import SINGLE_DEVICE

SCHEME = SINGLE_DEVICE  # workbench.schemes.baselines: one device, all weights resident
# A chosen tolerance: a GGUF file's size differs from parameters x format bits by a few percent (tensors kept
# at other precisions, metadata), which is not a different model; a size or count 10 % off is.
MISMATCH = 0.10
# llama-bench.cpp markdown_printer: size in MiB / GiB (1024-powers), params in M / B (1e6 / 1e9).
SIZE_UNITS = {"KiB": 1024.0, "MiB": 1024.0 ** 2, "GiB": 1024.0 ** 3, "TiB": 1024.0 ** 4}
PARAM_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
# "pp512", "tg128 @ d512", "pp512+tg128"; tables of 2023 builds print "pp 512", "tg 128" (the README's examples)
TEST = re.compile(r"(?:pp ?(\d+)|tg ?(\d+)|pp ?(\d+)\+tg ?(\d+))(?: @ d(\d+))?")
RATE = re.compile(r"([0-9][0-9.eE+-]*)(?:\s*(?:±|\+/-|\+-)\s*([0-9][0-9.eE+-]*))?")
REQUIRED_JSON = ("n_prompt", "n_gen", "avg_ts")


@dataclass(frozen=True)
class Run:
    """One llama-bench test as read from `source` line `line`: a prefill (n_prompt > 0) or a decode run
    (n_gen > 0), never both, at `tokens_per_s`; the model llama-bench loaded and how it ran, where given."""

    source: str
    line: int
    n_prompt: int
    n_gen: int
    tokens_per_s: float
    n_depth: int = 0
    stddev_ts: float | None = None
    model_type: str = ""
    model_size_bytes: float | None = None
    model_params: float | None = None
    threads: int | None = None
    backend: str = ""
    build: str = ""

    def __post_init__(self) -> None:
        where = f"{self.source} line {self.line}"
        if self.line < 1:
            raise WorkbenchError(f"{self.source}: a run's line must be >= 1, got {self.line}")
        if self.n_prompt < 0 or self.n_gen < 0 or self.n_depth < 0:
            raise WorkbenchError(f"{where}: n_prompt, n_gen and n_depth must be >= 0, got {self.n_prompt}, "
                                 f"{self.n_gen}, {self.n_depth}")
        if self.n_prompt and self.n_gen:
            raise WorkbenchError(f"{where}: test {self.test} is a combined prompt + generation test (-pg); calibrate "
                                 "takes ppN and tgN tests only: delete the row or rerun without -pg")
        if not self.n_prompt and not self.n_gen:
            raise WorkbenchError(f"{where}: a test needs n_prompt > 0 or n_gen > 0, got both 0")
        if self.n_prompt and self.n_depth:
            raise WorkbenchError(f"{where}: test {self.test} is a prompt after a {self.n_depth}-token context; a "
                                 "calibrate prefill row is a prompt from an empty context (ppN): delete the row or "
                                 "rerun with -d 0")
        if not math.isfinite(self.tokens_per_s) or self.tokens_per_s <= 0:
            raise WorkbenchError(f"{where}: t/s must be a finite number > 0, got {self.tokens_per_s!r}")
        for name in ("model_size_bytes", "model_params"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise WorkbenchError(f"{where}: {name} must be a finite number > 0, got {value!r}")

    @property
    def test(self) -> str:
        """The test's name as llama-bench's table prints it: pp512, tg128, pp512+tg128, tg128 @ d512."""
        name = (f"pp{self.n_prompt}+tg{self.n_gen}" if self.n_prompt and self.n_gen else
                f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}")
        return name + (f" @ d{self.n_depth}" if self.n_depth else "")

    @property
    def phase(self) -> str:
        """calibrate's phase: a ppN test is a prefill, a tgN test decode steps."""
        return "prefill" if self.n_prompt else "decode"

    @property
    def tokens(self) -> int:
        """calibrate's tokens: the prompt's length, or the positions the mean decode step attends."""
        return self.n_prompt if self.n_prompt else self.n_depth + (self.n_gen + 1) // 2

    @property
    def latency_s(self) -> float:
        """calibrate's latency_s: the whole prompt's time (N / t/s), or one decode step's (1 / t/s)."""
        return (self.n_prompt if self.n_prompt else 1) / self.tokens_per_s


# ---- which reader ----------------------------------------------------------------------------------------
def detect(path: Path, text: str) -> str | None:
    """'json' (a .json/.jsonl file or text starting with [ or {), 'markdown' (a .md/.txt file or a first
    non-blank line starting with |), or None: a CSV of calibrate rows."""
    start = text.lstrip()
    if path.suffix.lower() in (".json", ".jsonl") or start[:1] in ("[", "{"):
        return "json"
    if path.suffix.lower() in (".md", ".txt") or start[:1] == "|":
        return "markdown"
    return None


def read_runs(path: Path, text: str) -> list[Run]:
    """Every test of a llama-bench output file (JSON, JSONL or markdown, by `detect`); one line when none."""
    kind = detect(path, text)
    if kind is None:
        raise WorkbenchError(f"{path.name}: not llama-bench output (-o json, -o jsonl or the -o md table)")
    runs = parse_json(path.name, text) if kind == "json" else parse_markdown(path.name, text)
    if not runs:
        raise WorkbenchError(f"{path.name}: no llama-bench tests in it")
    return runs


# ---- JSON and JSONL --------------------------------------------------------------------------------------
def parse_json(name: str, text: str) -> list[Run]:
    """The runs of `llama-bench -o json` (one list) or `-o jsonl` (one object a line)."""
    return [run_from_object(name, line, value) for line, value in json_values(name, text)]


def json_values(name: str, text: str) -> list[tuple[int, object]]:
    """(line it starts on, value) of every element of a top-level JSON list, or of every value of a JSONL
    stream; invalid JSON is one line naming where it fails."""
    decoder = json.JSONDecoder()
    array = text.lstrip().startswith("[")
    pos = _blank(text, text.index("[") + 1) if array else _blank(text, 0)
    out: list[tuple[int, object]] = []
    while pos < len(text) and not (array and text[pos] == "]"):
        line = text.count("\n", 0, pos) + 1
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise WorkbenchError(f"{name} line {line}: not valid JSON: {exc.msg} (at line {exc.lineno} column "
                                 f"{exc.colno})") from None
        out.append((line, value))
        pos = _blank(text, end)
        if array and text[pos:pos + 1] == ",":
            pos = _blank(text, pos + 1)
        elif array and pos < len(text) and text[pos] != "]":
            raise WorkbenchError(f"{name} line {text.count(chr(10), 0, pos) + 1}: not valid JSON: expected , or ] "
                                 "after a list element")
    if array and (pos >= len(text) or text[pos + 1:].strip()):
        raise WorkbenchError(f"{name} line {text.count(chr(10), 0, pos) + 1}: not valid JSON: the list "
                             + ("is not closed with ]" if pos >= len(text) else "is followed by more text"))
    return out


def _blank(text: str, pos: int) -> int:
    """The first position at or after `pos` that is not white space."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def run_from_object(name: str, line: int, value: object) -> Run:
    """One llama-bench JSON object (test::get_fields) as a Run; n_prompt, n_gen and avg_ts are required."""
    where = f"{name} line {line}"
    if not isinstance(value, dict):
        raise WorkbenchError(f"{where}: a llama-bench test is a JSON object, got {type(value).__name__}")
    missing = [k for k in REQUIRED_JSON if k not in value]
    if missing:
        raise WorkbenchError(f"{where}: the llama-bench object lacks {', '.join(missing)}; needed: "
                             f"{', '.join(REQUIRED_JSON)} (llama-bench -o json or -o jsonl)")
    build = f"{value.get('build_commit', '')} ({value['build_number']})" if "build_number" in value else \
        str(value.get("build_commit", ""))
    return Run(name, line, _count(where, "n_prompt", value["n_prompt"]), _count(where, "n_gen", value["n_gen"]),
               _real(where, "avg_ts", value["avg_ts"]), n_depth=_count(where, "n_depth", value.get("n_depth", 0)),
               stddev_ts=_optional(where, "stddev_ts", value.get("stddev_ts")),
               model_type=str(value.get("model_type", "")),
               model_size_bytes=_optional(where, "model_size", value.get("model_size")),
               model_params=_optional(where, "model_n_params", value.get("model_n_params")),
               threads=None if value.get("n_threads") is None else _count(where, "n_threads", value["n_threads"]),
               backend=str(value.get("backends", "")), build=build.strip())


def _count(where: str, key: str, value: object) -> int:
    """A JSON integer >= 0, else one line naming `key`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WorkbenchError(f"{where}: {key} must be an integer >= 0, got {value!r}")
    return value


def _real(where: str, key: str, value: object) -> float:
    """A finite JSON number > 0, else one line naming `key`."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise WorkbenchError(f"{where}: {key} must be a finite number > 0, got {value!r}")
    return float(value)


def _optional(where: str, key: str, value: object) -> float | None:
    """An optional JSON number (None when absent); a stddev of 0 is kept as 0."""
    if value is None:
        return None
    if key == "stddev_ts" and value == 0 and not isinstance(value, bool):
        return 0.0
    return _real(where, key, value)


# ---- the markdown table ----------------------------------------------------------------------------------
def parse_markdown(name: str, text: str) -> list[Run]:
    """The runs of every llama-bench table in `text` (header, separator, rows; lines around them such as the
    backend's log are skipped), each with the build of the "build: <commit> (<number>)" line after it."""
    lines = text.splitlines()
    runs: list[Run] = []
    number = 0
    while number < len(lines):
        if not lines[number].strip().startswith("|"):
            number += 1
            continue
        end = number
        while end < len(lines) and lines[end].strip().startswith("|"):
            end += 1
        after = lines[end:next((i for i in range(end, len(lines)) if lines[i].strip().startswith("|")), len(lines))]
        build = next((_build(line) for line in after if _build(line)), "")  # before the next table, if any
        runs += table_runs(name, number + 1, lines[number:end], build)
        number = end
    return runs


def _build(line: str) -> str:
    """The build of llama-bench's footer line ("build: 8e672efe (4440)" -> "8e672efe (4440)"), else ''."""
    found = re.fullmatch(r"\s*build:\s*(\S+\s*\(\d+\))\s*", line)
    return found.group(1) if found else ""


def cells(name: str, line: int, text: str) -> list[str]:
    """The stripped cells of one table line "| a | b |"."""
    body = text.strip()
    if not body.endswith("|") or len(body) < 2:
        raise WorkbenchError(f"{name} line {line}: a table row starts and ends with |, got {text.strip()!r}")
    return [c.strip() for c in body[1:-1].split("|")]


def table_runs(name: str, first: int, block: list[str], build: str) -> list[Run]:
    """The runs of one table: `block` is its lines (header, separator, rows), the header on line `first`."""
    header = cells(name, first, block[0])
    missing = [c for c in ("test", "t/s") if c not in header]
    if missing:
        raise WorkbenchError(f"{name} line {first}: the table header lacks column {missing[0]!r}; a llama-bench "
                             f"table has test and t/s columns, got {', '.join(header)}")
    if len(block) < 2 or not all(re.fullmatch(r":?-+:?", c) for c in cells(name, first + 1, block[1])):
        raise WorkbenchError(f"{name} line {first + 1}: the line under a table header is its |---|---:| separator")
    runs = []
    for offset, text in enumerate(block[2:], start=2):
        row = cells(name, first + offset, text)
        if len(row) != len(header):
            raise WorkbenchError(f"{name} line {first + offset}: {len(row)} cells, the header has {len(header)} "
                                 f"({', '.join(header)})")
        runs.append(run_from_cells(name, first + offset, dict(zip(header, row)), build))
    return runs


def run_from_cells(name: str, line: int, row: dict[str, str], build: str) -> Run:
    """One table row (header name -> cell) as a Run."""
    where = f"{name} line {line}"
    found = TEST.fullmatch(row["test"])
    if not found:
        raise WorkbenchError(f"{where}: test must be ppN or tgN (optionally ' @ dN'), got {row['test']!r}")
    pp, tg, pg_p, pg_g, depth = (int(g) if g else 0 for g in found.groups())
    rate = RATE.fullmatch(row["t/s"])
    mean = _float(rate.group(1)) if rate else None
    if mean is None:
        raise WorkbenchError(f"{where}: t/s must be a number of tokens per second, optionally '± stddev' "
                             f"(20.41 ± 0.05), got {row['t/s']!r}")
    threads = row.get("threads", "")
    if threads and not threads.isdigit():
        raise WorkbenchError(f"{where}: threads must be an integer >= 0, got {threads!r}")
    return Run(name, line, pp or pg_p, tg or pg_g, mean, n_depth=depth,
               stddev_ts=_float(rate.group(2)) if rate.group(2) else None, model_type=row.get("model", ""),
               model_size_bytes=_quantity(where, "size", row.get("size", ""), SIZE_UNITS, "4.33 GiB"),
               model_params=_quantity(where, "params", row.get("params", ""), PARAM_UNITS, "8.03 B"),
               threads=int(threads) if threads else None, backend=row.get("backend", ""), build=build)


def _float(text: str) -> float | None:
    """`text` as a float, None when it is not one."""
    try:
        return float(text)
    except ValueError:
        return None


def _quantity(where: str, key: str, text: str, units: dict[str, float], example: str) -> float | None:
    """A "4.33 GiB" / "8.03 B" cell in base units (bytes, parameters); None for an absent or empty cell."""
    if not text:
        return None
    number, _, unit = text.partition(" ")
    value = _float(number)
    if value is None or unit.strip() not in units:
        raise WorkbenchError(f"{where}: {key} must be a number and one of {', '.join(units)} (e.g. {example!r}), "
                             f"got {text!r}")
    return value * units[unit.strip()]


# ---- rows for calibrate ----------------------------------------------------------------------------------
def to_rows(runs: list[Run], validation: Collection[str] = ()) -> pd.DataFrame:
    """calibrate's rows of `runs` (SCHEME on 1 device; role validation for the tests named in `validation`,
    calibration otherwise) with each run's line and its llama-bench facts as llama_* columns."""
    models = list(dict.fromkeys((r.model_type, r.model_size_bytes, r.model_params) for r in runs))
    if len(models) > 1:
        raise WorkbenchError(f"{runs[0].source}: the rows are costed as the config's one model, but the file holds "
                             f"{len(models)} models ({', '.join(repr(m[0]) for m in models)}: type, size or "
                             "parameters differ): keep one model's rows")
    known = {r.test for r in runs}
    held = {canonical(t) for t in validation}
    for test in sorted(held):
        if test not in known:
            raise WorkbenchError(f"--validation {test!r} is not a test of {runs[0].source}; its tests: "
                                 f"{', '.join(sorted(known))}")
    return pd.DataFrame([{
        "scheme": SCHEME, "devices": 1, "phase": r.phase, "tokens": r.tokens, "latency_s": r.latency_s,
        "role": "validation" if r.test in held else "calibration", "line": r.line, "llama_test": r.test,
        "llama_tokens_per_s": r.tokens_per_s, "llama_model": r.model_type,
        "llama_size_bytes": math.nan if r.model_size_bytes is None else r.model_size_bytes,
        "llama_params": math.nan if r.model_params is None else r.model_params,
        "llama_threads": -1 if r.threads is None else r.threads, "llama_backend": r.backend, "llama_build": r.build,
    } for r in runs])


def canonical(test: str) -> str:
    """A test name as `Run.test` spells it: 'tg 128' (2023 tables) -> 'tg128'."""
    return re.sub(r"(pp|tg) (\d)", r"\1\2", test.strip())


def parse_validation(text: str | None) -> tuple[str, ...]:
    """'tg128,tg128 @ d512' -> the llama-bench test names whose rows are validation rows."""
    return tuple(t.strip() for t in (text or "").split(",") if t.strip())


def mismatch_warnings(rows: pd.DataFrame, model_params: float, model_bytes: float, model_name: str) -> list[str]:
    """One line each: llama-bench's models disagree with the config's model (parameters or bytes off by more
    than MISMATCH), or the rows ran with different thread counts; [] for rows that are not llama-bench's."""
    if "llama_model" not in rows.columns:
        return []
    out = []
    for name, group in rows.groupby("llama_model", sort=False):
        off = [f"{what} {theirs:.3g} vs {ours:.3g} ({theirs / ours - 1:+.0%})"
               for what, theirs, ours in (("parameters", group["llama_params"].iloc[0], model_params),
                                          ("bytes", group["llama_size_bytes"].iloc[0], model_bytes))
               if math.isfinite(theirs) and abs(theirs / ours - 1) > MISMATCH]
        if off:
            out.append(f"warning: llama-bench's model {name or '(unnamed)'!r} is not the config's {model_name}: "
                       f"{', '.join(off)}; the rows are costed as {model_name}")
    threads = sorted({int(t) for t in rows["llama_threads"] if t >= 0})
    if len(threads) > 1:
        out.append(f"warning: the llama-bench rows ran with {', '.join(map(str, threads))} threads; the fit treats "
                   "them as one device")
    return out

