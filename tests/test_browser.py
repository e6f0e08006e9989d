"""The explorer notebook in a real browser: Voila on 127.0.0.1, Debian's Chromium headless via Playwright.

Moves the device-count slider and checks that the charts and the summary number change, then drags the
memory budget to its minimum and checks that the one-line message appears and the charts stay. A second
test checks (issue 19): the page shows the best line once, and it follows a change; a bad TOML path shows
its one line while the other controls keep working; the log breakdown keeps the winner's bar readable
beside out-of-memory bars of minutes, linear is one click away; every chart title names the setting.
A third (issue 31) moves the bandwidth slider ten times: every chart redraws in place (no re-embed), and the
median time from the key press to the last chart's new drawing goes to figures/explorer/redraw.json.
Screenshots of each state go to figures/explorer/.
Skips (printing why) when /usr/bin/chromium is missing, except in CI (CI=true), where it fails.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from workbench.core.io import FIGURES_DIR, NOTEBOOKS_DIR

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SERVER_START_S = 60
PAGE_READY_MS = 120_000
UPDATE_MS = 30_000

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing (install Debian's chromium: bash scripts/ensure_chromium.sh)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser test must run in CI: {reason}")
    print(f"skipping the browser test: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"voila exited early with code {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.25)
    raise TimeoutError(f"voila did not listen on 127.0.0.1:{port} within {timeout_s} s")


@pytest.fixture
def voila_url(tmp_path):
    """Serve notebooks/explore.ipynb with Voila on 127.0.0.1; always kill the server afterwards."""
    _require_chromium()
    from workbench.report.runner import ensure_kernel

    ensure_kernel()
    port = _free_port()
    voila = Path(sys.executable).with_name("voila")
    log = open(tmp_path / "voila.log", "w")
    proc = subprocess.Popen(
        [str(voila), str(NOTEBOOKS_DIR / "explore.ipynb"), "--no-browser", f"--port={port}",
         "--Voila.ip=127.0.0.1", "--Voila.port_retries=0", "--VoilaConfiguration.show_tracebacks=True"],
        cwd=NOTEBOOKS_DIR, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    try:
        _wait_for_port(port, proc, SERVER_START_S)
        yield f"http://127.0.0.1:{port}/"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()
        print((tmp_path / "voila.log").read_text()[-3000:])


def _summary(page) -> str:
    return page.locator(".wb-summary").inner_text()


def _chart_svg(page, name: str) -> str:
    return page.locator(f".wb-chart-{name} svg").first.inner_html()


def _settled(page, timeout_s: float = 30.0) -> tuple[str, str]:
    """(summary, ranking SVG) once they stop changing: a slider moved by several steps sends several updates."""
    deadline, last, same = time.monotonic() + timeout_s, None, 0
    while time.monotonic() < deadline:
        state = (_summary(page), _chart_svg(page, "ranking"))
        same = same + 1 if state == last else 0
        if same >= 3:
            return state
        last = state
        page.wait_for_timeout(500)
    raise TimeoutError("the explorer kept changing for 30 s")


def _press(page, control: str, key: str, times: int = 1) -> None:
    """Move a slider with the keyboard, as a person would after clicking its handle."""
    handle = page.locator(f".wb-{control} .noUi-handle").first
    handle.focus()
    for _ in range(times):
        handle.press(key)


def test_explorer_follows_slider_and_shows_invalid_message(voila_url):
    from playwright.sync_api import sync_playwright

    out = FIGURES_DIR / "explorer"
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1500})
            page.goto(voila_url, timeout=PAGE_READY_MS)
            page.wait_for_selector(".wb-summary b", timeout=PAGE_READY_MS)
            page.wait_for_selector(".wb-chart-ranking svg .mark-symbol path", timeout=PAGE_READY_MS)
            summary0, svg0 = _settled(page)
            assert "best" in summary0, summary0

            # 4 devices -> 2: the ranking and the best latency must change.
            _press(page, "n-devices", "ArrowLeft", times=2)
            page.wait_for_function(
                "s => document.querySelector('.wb-summary').innerText !== s", arg=summary0, timeout=UPDATE_MS)
            page.wait_for_function(
                "s => document.querySelector('.wb-chart-ranking svg').innerHTML !== s", arg=svg0, timeout=UPDATE_MS)
            summary1, svg1 = _settled(page)
            assert page.locator(".wb-n-devices .widget-readout").inner_text().strip() == "2"
            assert summary1 != summary0 and svg1 != svg0
            assert page.locator(".wb-message").inner_text().strip() == ""
            page.screenshot(path=str(out / "explorer.png"), full_page=True)

            # A memory budget nothing fits in: one line, no traceback, previous charts kept.
            _press(page, "memory-gib", "Home")
            page.wait_for_function(
                "() => document.querySelector('.wb-message').innerText.includes('infeasible')", timeout=UPDATE_MS)
            message = page.locator(".wb-message").inner_text()
            assert "Traceback" not in page.content()
            assert len(message.strip().splitlines()) == 1, message
            assert _chart_svg(page, "ranking") == svg1
            assert _summary(page) == summary1
            page.screenshot(path=str(out / "explorer_invalid.png"), full_page=True)
        finally:
            browser.close()


def _bar_widths(page) -> list[float]:
    """Width in px of each breakdown bar (its stacked segments summed), top row (the fastest scheme) first."""
    paths = page.eval_on_selector_all(
        ".wb-chart-breakdown svg path[aria-roledescription='bar']", "els => els.map(e => e.getAttribute('d'))")
    rows: dict[float, float] = {}
    for d in paths:
        m = re.match(r"M(-?[\d.e-]+),(-?[\d.e-]+)h(-?[\d.e-]+)", d or "")
        if m:
            rows[float(m.group(2))] = rows.get(float(m.group(2)), 0.0) + abs(float(m.group(3)))
    return [rows[y] for y in sorted(rows)]


def _title_text(page, name: str) -> str:
    """Every text of a chart's title group(s): the setting the chart was drawn for."""
    return " ".join(page.eval_on_selector_all(
        f".wb-chart-{name} svg .role-title-text text, .wb-chart-{name} svg .role-title-subtitle text",
        "els => els.map(e => e.textContent)"))


def _wait_change(page, selector_js: str, before: str) -> None:
    page.wait_for_function(f"s => ({selector_js}) !== s", arg=before, timeout=UPDATE_MS)


SUMMARY_JS = "document.querySelector('.wb-summary').innerText"
RANKING_JS = "document.querySelector('.wb-chart-ranking svg').innerHTML"
BREAKDOWN_JS = "document.querySelector('.wb-chart-breakdown svg').innerHTML"
MESSAGE_JS = "document.querySelector('.wb-message').innerText"
BARS_DRAWN_JS = ("[...document.querySelectorAll(\".wb-chart-breakdown svg path[aria-roledescription='bar']\")]"
                 ".some(e => e.getBBox().width > 0)")


def test_explorer_best_line_toml_recovery_log_breakdown_and_titles(voila_url):
    from playwright.sync_api import sync_playwright

    out = FIGURES_DIR / "explorer"
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 2200})
            page.goto(voila_url, timeout=PAGE_READY_MS)
            page.wait_for_selector(".wb-summary b", timeout=PAGE_READY_MS)
            # a drawn bar (a segment below the log axis' floor, such as a small first component, has no width)
            page.wait_for_selector(".wb-chart-breakdown svg path[aria-roledescription='bar']", state="attached",
                                   timeout=PAGE_READY_MS)
            page.wait_for_function(BARS_DRAWN_JS, timeout=PAGE_READY_MS)
            summary0, _ = _settled(page)

            # Titles name the setting: model, cluster, bandwidth, phase (and memory budget).
            titles0 = {name: _title_text(page, name) for name in ("breakdown", "ranking", "memory")}
            for name, title in titles0.items():
                for part in ("Llama 2-13B", "4x Raspberry Pi 5", "1 Gbps", "50 µs/hop", "prefill", "7.0 GiB/device"):
                    assert part in title, (name, part, title)
            assert page.locator(".wb-bandwidth-mbps-readout").inner_text().strip() == "1 Gbps"
            assert page.locator(".wb-memory-gib-readout").inner_text().strip() == "7.0 GiB"

            # Log breakdown (the default): the winner's bar stays readable beside OOM bars of minutes.
            widths = _bar_widths(page)
            assert "(OOM)" in page.locator(".wb-chart-breakdown svg").first.text_content()
            assert widths[0] >= 0.3 * max(widths) and widths[0] >= 40, widths
            labels = page.eval_on_selector_all(".wb-chart-breakdown svg .role-axis-label text",
                                               "els => els.map(e => e.textContent)")
            assert all(re.fullmatch(r"(1|10|100|1000|10000) (µs|ms|s)", t) for t in labels if t[:1].isdigit()), labels
            page.screenshot(path=str(out / "explorer_log.png"), full_page=True)

            # Linear is one click away; there the winner is a sliver (why log is the default).
            breakdown = page.evaluate(BREAKDOWN_JS)
            page.locator(".wb-scale button", has_text="linear").click()
            _wait_change(page, BREAKDOWN_JS, breakdown)
            page.wait_for_timeout(500)
            linear = _bar_widths(page)
            assert linear[0] / max(linear) < widths[0] / max(widths), (linear, widths)
            assert _summary(page) == summary0  # a view change, not a recompute
            page.screenshot(path=str(out / "explorer_linear.png"), full_page=True)
            page.locator(".wb-scale button", has_text="log").click()

            # The best line after a change: shown once on the page, and it is the new one.
            _press(page, "n-devices", "ArrowLeft", times=2)
            _wait_change(page, SUMMARY_JS, summary0)
            summary1, _ = _settled(page)
            body = page.locator("body").inner_text()
            assert body.count("best TTFT") == 1, body
            assert summary1.splitlines()[0] in body and summary1 != summary0
            titles1 = {name: _title_text(page, name) for name in titles0}
            assert all("2x Raspberry Pi 5" in t for t in titles1.values()) and titles1 != titles0

            # A bad TOML path: one line, and model, devices and phase still redraw the charts.
            toml = page.locator(".wb-toml input")
            toml.fill("/nonexistent/mine.toml")
            toml.press("Enter")
            page.wait_for_function(f"() => ({MESSAGE_JS}).includes('does not exist')", timeout=UPDATE_MS)
            message = page.locator(".wb-message").inner_text().strip()
            assert len(message.splitlines()) == 1 and "Traceback" not in page.content(), message
            page.locator(".wb-model select").select_option("Llama 2-7B")
            page.wait_for_function("() => document.querySelector('.wb-chart-breakdown svg').textContent"
                                   ".includes('Llama 2-7B on')", timeout=UPDATE_MS)
            summary2, _ = _settled(page)
            _press(page, "n-devices", "ArrowRight")
            _wait_change(page, SUMMARY_JS, summary2)
            _settled(page)
            ranking = page.evaluate(RANKING_JS)
            page.locator(".wb-phase button", has_text="decode").click()
            _wait_change(page, RANKING_JS, ranking)
            _settled(page)
            assert "best time per token" in _summary(page)
            assert all("decode" in t and "3x Raspberry Pi 5" in t for t in
                       (_title_text(page, n) for n in titles0))
            assert "does not exist" in page.locator(".wb-message").inner_text()  # still says why
            page.screenshot(path=str(out / "explorer_bad_toml.png"), full_page=True)
            toml.fill("")
            toml.press("Enter")
            page.wait_for_function(f"() => ({MESSAGE_JS}).trim() === ''", timeout=UPDATE_MS)
        finally:
            browser.close()


# ---- issue 31: a slider move as the browser shows it ------------------------------------------------
MOVES = 10
CHARTS = ("breakdown", "ranking", "memory")
WATCH_JS = """names => {
  window.__wb = {marks: [], svgs: {}};
  document.addEventListener('keydown', () => window.__wb.marks.push(['key', performance.now()]), true);
  for (const name of names) {
    const el = document.querySelector('.wb-chart-' + name);
    window.__wb.svgs[name] = el.querySelector('svg');
    new MutationObserver(() => window.__wb.marks.push([name, performance.now()]))
      .observe(el, {subtree: true, childList: true, characterData: true, attributes: true});
  }
}"""
SUBTITLE_JS = ("Array.from(document.querySelectorAll('.wb-chart-ranking svg .role-title-subtitle text'))"
               ".map(e => e.textContent).join(' ')")
SAME_SVGS_JS = "names => names.every(n => document.querySelector('.wb-chart-' + n + ' svg') === window.__wb.svgs[n])"


def redraw_ms(marks: list) -> float:
    """Milliseconds from the key press to the last chart's new drawing (every chart must have redrawn)."""
    key = next(t for name, t in marks if name == "key")
    last = {name: max(t for n, t in marks if n == name) for name in CHARTS if any(n == name for n, _ in marks)}
    assert set(last) == set(CHARTS), f"charts not redrawn: {set(CHARTS) - set(last)}"
    return max(last.values()) - key


class SliderMoves:
    """The explorer page with the bandwidth slider focused; `move()` presses ArrowLeft (a value not seen
    before: no cached view) and returns the page-clock time to the last chart's new drawing (ms)."""

    def __init__(self, page):
        self.page, self.times, self.titles = page, [], []
        page.wait_for_selector(".wb-chart-ranking svg .mark-symbol path", timeout=PAGE_READY_MS)
        _settled(page)
        page.evaluate(WATCH_JS, list(CHARTS))
        self.handle = page.locator(".wb-bandwidth-mbps .noUi-handle").first
        self.handle.focus()

    def move(self) -> float:
        title = self.page.evaluate(SUBTITLE_JS)
        self.page.evaluate("() => { window.__wb.marks = []; }")
        self.handle.press("ArrowLeft")
        _wait_change(self.page, SUBTITLE_JS, title)  # the subtitle names the bandwidth
        self.page.wait_for_timeout(300)  # let any straggling redraw land (it would count)
        self.times.append(redraw_ms(self.page.evaluate("() => window.__wb.marks")))
        self.titles.append(_title_text(self.page, "ranking"))
        return self.times[-1]

    def in_place(self) -> bool:
        """Whether every chart is still the <svg> it was before the moves (redrawn, not re-embedded)."""
        return self.page.evaluate(SAME_SVGS_JS, list(CHARTS))


@contextmanager
def explorer_page(url: str, height: int = 1500):
    """A headless Chromium page on the explorer served at `url` (closed on exit)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": height})
            page.goto(url, timeout=PAGE_READY_MS)
            yield page
        finally:
            browser.close()


def record_redraws(times: list[float]) -> float:
    """Write the moves' times and their median to figures/explorer/redraw.json; return the median (ms)."""
    import json
    import statistics

    from workbench.core.io import write_text_atomic

    median = statistics.median(times)
    record = {"median_ms": round(median, 1), "moves_ms": [round(t, 1) for t in times], "moves": len(times),
              "what": "key press on the bandwidth slider -> last of the three charts redrawn (page clock)"}
    write_text_atomic(FIGURES_DIR / "explorer" / "redraw.json", json.dumps(record, indent=1) + "\n")
    print(f"explorer redraw, median of {len(times)} moves: {median:.0f} ms ({', '.join(f'{t:.0f}' for t in times)})")
    return median


def test_a_slider_move_redraws_the_charts_in_place_and_records_the_time(voila_url):
    """Ten moves of the bandwidth slider: each redraws all three charts in place (the same <svg> elements:
    data and titles swapped, no re-embed), and the title follows. The key-press-to-last-chart median goes to
    figures/explorer/redraw.json (the 300 ms target is a benchmark figure, benchmarks/bench_explore_browser.py:
    on the shared 2-core machine the cost model's share varies with the load)."""
    with explorer_page(voila_url) as page:
        moves = SliderMoves(page)
        for _ in range(MOVES):
            moves.move()
        assert moves.in_place(), "a chart was re-embedded, not redrawn in place"
        assert len(set(moves.titles)) == MOVES, moves.titles  # the title is a signal, set on every move
        assert page.locator(".wb-message").inner_text().strip() == ""
    record_redraws(moves.times)


# ---- issues 34 and 35: the draft controls and "will more boards help?" render and answer ------------------
SPECULATION_JS = "document.querySelector('.wb-speculation').innerText"


def test_the_draft_controls_and_will_more_boards_help_render(voila_url):
    """Choosing a draft fills the speculation table (time per token with and without it, best gamma); moving
    gamma changes it; the "will more boards help?" button shows where each scheme stops helping and why."""
    out = FIGURES_DIR / "explorer"
    out.mkdir(parents=True, exist_ok=True)
    with explorer_page(voila_url, height=4200) as page:
        page.wait_for_selector(".wb-summary b", timeout=PAGE_READY_MS)
        _settled(page)
        for control in ("draft", "placement", "gamma", "alpha"):
            assert page.locator(f".wb-{control}").count() == 1, control
        assert page.locator(".wb-speculation").inner_text().strip() == ""  # the preset has no draft
        from workbench.model.models import get_model
        from workbench.scenarios.explore import draft_options

        label = dict((v, k) for k, v in draft_options(get_model("Llama 2-13B"), "none"))["Llama 2-3B"]
        page.locator(".wb-draft select").select_option(label=label)
        page.wait_for_function(f"() => ({SPECULATION_JS}).includes('draft Llama 2-3B (root), gamma 4')",
                               timeout=UPDATE_MS)
        page.wait_for_selector(".wb-chart-speculation svg .mark-symbol path", timeout=UPDATE_MS)  # its chart
        table = page.locator(".wb-speculation").inner_text()
        assert "best gamma" in table and "with draft" in table and "x" in table, table
        _press(page, "gamma", "ArrowRight", times=2)
        page.wait_for_function(f"() => ({SPECULATION_JS}).includes('gamma 6,')", timeout=UPDATE_MS)
        page.locator(".wb-boards-button").click()
        page.wait_for_function("() => document.querySelector('.wb-boards').innerText.includes('will more boards')",
                               timeout=UPDATE_MS)
        boards = page.locator(".wb-boards").inner_text()
        assert "1, 2, 4, 8, 16 copies of" in boards and "what grows there" in boards, boards
        assert page.locator(".wb-message").inner_text().strip() == "" and "Traceback" not in page.content()
        page.screenshot(path=str(out / "explorer_speculation.png"), full_page=True)
        page.locator(".wb-speculation").screenshot(path=str(out / "explorer_speculation_table.png"))
        page.locator(".wb-chart-speculation").screenshot(path=str(out / "explorer_speculation_chart.png"))
        page.locator(".wb-boards").screenshot(path=str(out / "explorer_boards_table.png"))
