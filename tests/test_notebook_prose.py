"""Notebook prose describes the present: no date stamp and no typed result in any markdown cell.

A number that describes data is rendered from the frame it describes (`workbench.report.prose.say`, a code
cell), so it cannot go stale when the data changes. The rule, applied to every markdown line of every
`notebooks/src/*.py` outside `code spans` and links' targets:

* a date stamp (YYYY-MM-DD, also inside a campaign name such as 2026-11-25a) or a clock time (03:10 UTC);
* a number followed by a unit of time, throughput, energy or power (27 min, 0.75 ms, 0.7 TB/s, 5 W);
* a number followed by % or by a ratio's x (20.2 %, 2.3-5.7x; not a shape such as 8x8 or M x 1024);
* a decimal number (0.63, 1.12-1.65), unless it names a section, figure, table, equation or version;
* a count of a result, "N of M" (3 of 4 repeats).

Integers that set up what is measured stay: process counts, layer counts, message sizes in bytes, a
link's configured rate and a clock (the paper's 125 Mbps links, a Nano at 825 MHz), section numbers, model
names (Llama 2-7B, TinyLlama-42M), years in citations, parameter values.
"""

import re
from pathlib import Path

import pytest

SOURCES = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "src").glob("*.py"))

NUMBER = r"(?<![\w.])[-+]?\d+(?:\.\d+)?"
RANGE = rf"{NUMBER}(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?"
TIME_RATE_ENERGY = (r"(?:ns|us|µs|ms|s|sec|seconds?|min|minutes?|h|hours?|days?|"
                    r"[kMGT]?B/s|tok(?:ens)?/s|[kMGT]?FLOP/s|[kMGT]?FLOPS|TOPS|GOPS|[mµu]?J|[mµu]?W)")
RULES = {
    "date stamp": re.compile(r"\b\d{4}-\d{2}-\d{2}"),
    "clock time": re.compile(r"\b\d{1,2}:\d{2}\s*(?:UTC|h\b)"),
    "number with a unit": re.compile(rf"{RANGE}\s?{TIME_RATE_ENERGY}(?![\w/])"),
    "percentage": re.compile(rf"{RANGE}\s?%"),
    "ratio": re.compile(rf"{RANGE}\s?[x×](?!\s?\d)(?![\w])"),
    "count of a result": re.compile(r"(?<![\w.])\d+ of (?:the )?\d+\b"),
    "decimal": re.compile(r"(?<![\w.§])(?<!version )\d+\.\d+(?![\w.])"),
}
MODEL_NAME = re.compile(r"\b[A-Z][A-Za-z]*[ -]?\d+(?:\.\d+)?-\d+(?:\.\d+)?[BM]\b")  # Llama 3.1-8B, GPT-2-1.5B
CODE_SPAN = re.compile(r"`[^`]*`|\]\([^)]*\)")
NUMBERED = r"\d+(?:\.\d+)*[a-z]?"
REFERENCE = re.compile(rf"\b(?:Sections?|Secs?\.|§|Figs?\.|Figures?|Tables?|Tab\.|Eqs?\.|Equations?|Algorithms?|"
                       rf"Appendix)\s*{NUMBERED}(?:\s*(?:,|/|-|and|to)\s*{NUMBERED})*")


def markdown_lines(source: str) -> list[tuple[int, str]]:
    """The (line number, text) of every markdown cell line of a percent-format script."""
    lines, in_markdown = [], False
    for lineno, line in enumerate(source.splitlines(), start=1):
        if line.startswith("# %%"):
            in_markdown = "[markdown]" in line
        elif in_markdown:
            lines.append((lineno, line[2:] if line.startswith("# ") else line.lstrip("#")))
    return lines


def typed_numbers(line: str) -> list[str]:
    """The rule each typed number of one markdown line breaks, with the text it matched."""
    prose = MODEL_NAME.sub(" ", REFERENCE.sub(" ", CODE_SPAN.sub(" ", line)))
    return [f"{rule}: {m.group(0).strip()!r}" for rule, pattern in RULES.items() for m in pattern.finditer(prose)]


@pytest.mark.parametrize("line", [
    "The median |error| 20.2 % over the validation points.",
    "the 8 and 64 MiB stars went from 2.3-5.7x the model to 0.77-1.08x.",
    "took that protocol (27 min, each point once the load average was below 1)",
    "The first campaign (2026-11-24a: the stored data)",
    "declared before it ran (2026-11-25, 03:10 UTC)",
    "17 syncs cost about 0.75 ms each",
    "a 16 MiB bf16 GEMV streams at 0.7 TB/s",
    "two co-located processes each get about 0.55 of one alone",
    "within 25 % in 3 of 4 repeats",
    "Galaxy reports a 1.3x speedup on 3 Jetson Nanos at 1 Gbps",
    "the H100 draws 700 W",
    "measured 42 us per kernel",
    "error ran from +8 % to -39 %",
    "STI's throughput is 18 tokens/s",
])
def test_scanner_flags_typed_results(line):
    assert typed_numbers(line), line


@pytest.mark.parametrize("line", [
    "## 4. Measured vs predicted",
    "Fig. 7 and Table 3 of the paper, Section 4.2, Eq. 5",
    "bracketed by Sec. 7.3/7.4 and Sec. 1, 2.2; Figs. 8 and 9",
    "Llama 2-7B, Llama 3.1-8B and TinyLlama-42M on 2 and 4 processes, chains of 1, 8 and 32 steps",
    "TPI-LLM (Li et al., 2024) with 8x8 matmuls and (M x 1024) @ (1024 x 1024) GEMMs",
    "messages up to 2 KiB, a 64 MiB buffer, `--shape 125mbit`, `data/cluster/campaigns/2026-11-25d/`",
    "the ring makes 2(n-1) sends, log2 n rounds",
    "Fig. 9: heterogeneous environments D, E, F (125 Mbps), Nano-M at 825 MHz",
    "[the paper](https://example.org/v1.2/x.pdf) in 3 parts",
])
def test_scanner_allows_setup_numbers(line):
    assert typed_numbers(line) == [], typed_numbers(line)


def test_markdown_lines_skip_code_cells():
    source = "# %% [markdown]\n# took 27 min\n\n# %%\nx = 0.75  # ms\n# %% [markdown]\n# ## 2. Next\n"
    assert markdown_lines(source) == [(2, "took 27 min"), (3, ""), (7, "## 2. Next")]


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_prose_has_no_date_or_typed_number(path):
    hits = [f"{path.name}:{n}: {hit}" for n, line in markdown_lines(path.read_text()) for hit in typed_numbers(line)]
    assert not hits, "render these from the data (workbench.report.prose.say) or reword:\n" + "\n".join(hits)


def test_sentence_and_span_render_numbers_from_values():
    from workbench.core.errors import WorkbenchError
    from workbench.report.prose import sentence, span

    assert sentence("median |error| {e:.1%}", e=0.2021) == "median |error| 20.2%"
    assert span([0.0023, 0.0057], ".2g", "s") == "0.0023-0.0057 s"
    assert span([1.0, 1.0004], ".3g") == "1"
    assert span([-0.39, 0.08], "+.0%") == "-39% to +8%"
    with pytest.raises(WorkbenchError, match="values"):
        span([])


def test_every_notebook_source_is_scanned():
    assert {p.stem for p in SOURCES} >= {"cluster", "own_hardware", "galaxy", "sti", "tpi_llm", "hepti",
                                         "mcu_siracusa", "models", "arena", "explore", "collectives", "devices",
                                         "moe", "speculative"}


# ---- prose describes the present: no issue numbers, no staging paths -------------------------------------------
HISTORY = re.compile(r"\bissue(s|'s)?\b", re.IGNORECASE)  # "issue 33", "the issue asks for"
STALE_OUTPUT = re.compile(r"\.staging-|\bissues? #?\d+", re.IGNORECASE)


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_prose_names_no_issue(path):
    hits = [f"{path.name}:{n}: {line.strip()}" for n, line in markdown_lines(path.read_text())
            if HISTORY.search(CODE_SPAN.sub(" ", line))]
    assert not hits, "say what the notebook shows now, not which issue asked for it:\n" + "\n".join(hits)


def test_listing_and_trend_read_as_sentences():
    from workbench.core.errors import WorkbenchError
    from workbench.report.prose import listing, trend

    assert [listing([]), listing([3]), listing([1, 2]), listing([3, 5, 8])] == ["", "3", "1 and 2", "3, 5 and 8"]
    assert trend([0.3, 0.3, 0.30001], ".2f") == "stays at 0.30"
    assert trend([0.85, 0.4, 0.05, 0.05], ".2f") == "falls from 0.85 to 0.05"
    assert trend([0.1, 0.4], ".1f", "s") == "rises from 0.1 to 0.4 s"
    assert trend([0.2, 0.5, 0.3], ".1f") == "varies between 0.2 and 0.5"
    with pytest.raises(WorkbenchError, match="values"):
        trend([])


# ---- what the executed notebooks say agrees with what they show -------------------------------------------------
EXECUTED = ("moe", "speculative", "devices")
SAME_ENDS = re.compile(r"\bfrom (-?\d+(?:\.\d+)?) to \1(?![\d.])")


@pytest.fixture(scope="module")
def executed_pages(tmp_path_factory):
    """The three notebooks whose prose was reported, run as the test suite runs them: {name: [(kind, text)]}, each
    markdown cell, printed line block, rendered sentence and HTML table of the page."""
    import nbformat

    from workbench.report.runner import ensure_kernel, run_notebook

    ensure_kernel()
    figures, build = tmp_path_factory.mktemp("figures"), tmp_path_factory.mktemp("build")
    pages = {}
    for name in EXECUTED:
        run = run_notebook(name, {"quick": True}, figures, build_dir=build, progress=False)
        assert run.error is None, run.error
        pages[name] = [(kind, text) for cell in nbformat.read(build / f"{name}.ipynb", as_version=4).cells
                       for kind, text in page_texts(cell)]
    return pages


def page_texts(cell) -> list[tuple[str, str]]:
    """(kind, text) of what one executed cell shows: its markdown, or each output as prose, table or text."""
    if cell.cell_type == "markdown":
        return [("markdown", cell.source)]
    shown = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        if "text/markdown" in data:
            shown.append(("prose", data["text/markdown"]))
        elif "<table" in data.get("text/html", ""):
            shown.append(("table", data["text/html"]))
        else:
            shown.append(("text", output.get("text", "") + data.get("text/plain", "")))
    return shown


def prose(page: list[tuple[str, str]]) -> list[str]:
    """The sentences a page renders from its data (`workbench.report.prose.say`)."""
    return [text for kind, text in page if kind == "prose"]


def tables(page: list[tuple[str, str]], *columns: str) -> list[list[dict[str, str]]]:
    """The page's tables (rows as {column: text}) that have every one of `columns`."""
    from table_units import html_table_rows

    found = [html_table_rows(text) for kind, text in page if kind == "table"]
    return [rows for rows in found if rows and set(columns) <= set(rows[0])]


@pytest.mark.slow
@pytest.mark.parametrize("name", EXECUTED)
def test_executed_page_shows_no_staging_path_or_issue(name, executed_pages):
    stale = [f"{kind}: {found.group(0)!r}" for kind, text in executed_pages[name]
             for found in [STALE_OUTPUT.search(text)] if found]
    assert stale == [], stale


@pytest.mark.slow
@pytest.mark.parametrize("name", EXECUTED)
def test_rendered_prose_never_moves_from_a_value_to_itself_nor_explains_an_absent_na(name, executed_pages):
    for sentence in prose(executed_pages[name]):
        assert not SAME_ENDS.search(sentence), sentence
        if "(n/a:" in sentence:  # a legend for n/a needs an n/a it explains
            assert sentence.replace("(n/a:", "", 1).count("n/a") >= 1, sentence


@pytest.mark.slow
def test_moe_device_counts_agree_with_the_rows_shown(executed_pages):
    page = executed_pages["moe"]
    [rows] = tables(page, "scheme", "devices", "status", "cached_experts", "experts")
    pipeline = [r for r in rows if r["scheme"] == "moe_layer_pipeline"]
    resident = [int(r["devices"]) for r in pipeline if r["status"] == "ok" and r["cached_experts"] == r["experts"]]
    [claim] = [s for s in prose(page) if "resident from" in s]
    said = int(re.search(r"every expert is resident from (\d+) devices", claim).group(1))
    assert said == min(resident)
    assert all(r["status"] != "ok" or r["cached_experts"] != r["experts"] for r in pipeline if int(r["devices"]) < said)
    [tp] = [s for s in prose(page) if s.startswith("Tensor parallel inside every expert")]
    at = int(re.search(r"At (\d+) devices", tp).group(1))
    assert {"scheme": "dllama_allgather_tp", "devices": str(at), "status": "ok"}.items() <= \
        next(r for r in rows if r["scheme"] == "dllama_allgather_tp" and r["devices"] == str(at)).items()


@pytest.mark.slow
def test_speculative_quoted_alpha_is_one_value_in_every_table_and_sentence(executed_pages):
    page = executed_pages["speculative"]
    quoted = next(r["implied_alpha"] for rows in tables(page, "target", "implied_alpha") for r in rows
                  if r["target"].startswith("Llama 2-70B"))
    said = [m.group(1) for s in prose(page) for m in re.finditer(r"quoted alpha,? (?:of )?(\d\.\d+)", s)]
    assert said and set(said) == {quoted}
    [section2] = tables(page, "scheme", "plain_s", "per_token_s", "notes")
    [at_quoted] = tables(page, "scheme", "alpha", "per_token_s", "oom")
    assert {r["alpha"] for r in at_quoted} == {quoted}
    plain = {r["scheme"]: (r["per_token_s"], r["speedup"], r["gamma"]) for r in section2}
    assert {r["scheme"]: (r["per_token_s"], r["speedup"], r["gamma"]) for r in at_quoted}.items() <= plain.items()


@pytest.mark.slow
def test_speculative_threshold_sentence_follows_its_table(executed_pages):
    page = executed_pages["speculative"]
    [claim] = [s for s in prose(page) if "least alpha at which speculation pays" in s and "pipeline" in s]
    [rows] = tables(page, "megatron_tp", "pipeline_offload")
    for scheme, words in (("pipeline_offload", "for the pipeline"), ("megatron_tp", "for Megatron TP")):
        column = [float(r[scheme]) for r in rows if r[scheme] not in ("—", "")]
        part = claim.split(words)[0].rsplit("pays", 1)[-1].rsplit(" and ", 1)[-1]
        if len({f"{v:.2f}" for v in column}) == 1:
            assert f"stays at {column[0]:.2f}" in part, claim
        else:
            assert f"from {column[0]:.2f} to {column[-1]:.2f}" in part, claim
