"""Notebook prose describes the present: no date stamp and no typed result in any markdown cell.

A number that describes data is rendered from the frame it describes (`workbench.prose.say`, a code
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
    assert not hits, "render these from the data (workbench.prose.say) or reword:\n" + "\n".join(hits)


def test_sentence_and_span_render_numbers_from_values():
    from workbench.errors import WorkbenchError
    from workbench.prose import sentence, span

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
