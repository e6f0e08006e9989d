"""What notebooks show: numbers in their column's unit with 3 significant digits (no exponent, no prefix without a
unit), PNGs only in a kernel."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from table_units import unit_problems

from workbench.report.display import (
    MISSING,
    SECONDS,
    column_quantity,
    display_table,
    format_bytes,
    format_number,
    human_tables,
    png_width,
    setup_notebook,
    show_inline,
)


@pytest.mark.parametrize("value, text", [(-2.377283e-01, "-0.238"), (1.567599e09, "1,570,000,000"), (1234.5, "1230"),
                                         (20e-6 / 1e-6, "20"), (0.00123, "0.00123"), (7.0, "7"), (999.6, "1000"),
                                         (1.2e-5, "0.0000120"), (0.0, "0"), (-0.0, "0"), (math.nan, MISSING)])
def test_plain_numbers_have_three_significant_digits_and_no_exponent_or_prefix(value, text):
    assert format_number(value) == text


def test_seconds_and_bytes_in_their_units():
    # a seconds column's cells (aligned: 3 significant digits, trailing zeros kept); text uses units.format_seconds
    assert [SECONDS.format(v) for v in (0.01234, 1.5, 2e-6, 0.0, 120.0)] == ["12.3 ms", "1.50 s", "2 µs", "0 s", "120 s"]
    assert [format_bytes(v) for v in (3 * 2**30, 1000, 5e6, 0)] == ["3 GiB", "1000 B", "4.77 MiB", "0 B"]


@pytest.mark.parametrize("column, value, text", [
    ("tokens_per_s", 5.82, "5.82 tokens/s"), ("tokens_per_s", 0.714, "0.714 tokens/s"),
    ("time_per_token_s", 0.172, "172 ms"), ("dram_peak_gb_s", 205.0, "205 GB/s"),
    ("bandwidth_bytes_per_s", 118e6, "118 MB/s"), ("message_overhead_s", 56.4e-6, "56.4 µs"),
    ("latency_ms", 0.1, "100 µs"), ("peak_fp16_gops", 42600.0, "42.6 TOP/s"), ("requests_per_s", 2500.0, "2.50 k/s"),
    ("stored_params", 30.5e9, "30.5 G params"), ("memory_gib", 32.0, "32 GiB"), ("router_mib", 48.0, "48 MiB"),
    ("peak_memory_bytes", 4.24 * 2**30, "4.24 GiB"), ("power_w", 0.5, "500 mW"), ("j_per_token", 1.1, "1.10 J/token"),
    ("speedup", 1.42, "1.42x"), ("bandwidth_mbps", 1000.0, "1 Gbit/s"), ("beta_s_per_byte", 0.979e-9, "0.979 ns/B"),
    ("bandwidth", 118e6, "118,000,000"), ("message_overhead", 56.4e-6, "0.0000564"), ("hit_rate", 0.5, "0.500"),
    ("tokens_per_s", math.nan, MISSING), ("latency", 0.0123, "12.3 ms"), ("w", 4.5, "4.50"), ("s", 128.0, "128"),
])
def test_a_column_is_shown_in_the_unit_of_its_quantity(column, value, text):
    assert column_quantity(column).format(value) == text


def test_the_reported_tables_render_each_column_in_its_own_unit():
    """The moe and devices notebooks' columns that showed tokens/s as '5.82 s', GB/s as '205 s', '56.4 µ', '118 M'."""
    frame = pd.DataFrame({"time_per_token_s": [0.172, 110.0], "tokens_per_s": [5.82, 0.00907], "ttft_s": [3.97, 110.0],
                          "dram_peak_gb_s": [205.0, 12.8], "achieved_gb_s": [59.1, math.nan], "peak_fp16_gops": [42600.0, 288.0],
                          "bandwidth": [118e6, 27.5e6], "message_overhead": [56.4e-6, 56.4e-6], "memory_gib": [32.0, 8.0],
                          "stored_params": [30.5e9, 6.92e9], "power_w": [100.0, 5.4], "memory_efficiency": [0.288, 0.83]})
    shown = display_table(frame)
    problems = [p for column in shown.columns for text in shown[column] for p in unit_problems(column, text)]
    assert problems == []
    assert list(shown["tokens_per_s"]) == ["5.82 tokens/s", "0.00907 tokens/s"]
    assert list(shown["dram_peak_gb_s"]) == ["205 GB/s", "12.8 GB/s"]


@pytest.mark.parametrize("column, text", [("tokens_per_s", "5.82 s"), ("tokens_per_s", "9.07 ms"),
                                          ("dram_peak_gb_s", "205 s"), ("message_overhead", "56.4 µ"),
                                          ("bandwidth", "118 M"), ("stored_params", "30.5 G"), ("latency_s", "0.0123"),
                                          ("weights_bytes", "1.57 G"), ("hit_rate", "500 ms"),
                                          ("message_overhead", "56.4 µs"), ("margin", "1.42x")])
def test_the_unit_check_refuses_a_unit_that_is_not_its_columns(column, text):
    assert unit_problems(column, text)


def test_the_unit_check_passes_right_units_and_cells_that_are_not_numbers():
    for column, text in [("tokens_per_s", "5.82 tokens/s"), ("latency_s", "12.3 ms"), ("weights_bytes", "1.46 GiB"),
                         ("devices", "4"), ("error", "-0.238"), ("notes", "layers 12 / 12"), ("model", "Llama 2-7B"),
                         ("latency_s", MISSING), ("value", "1.57 G params"), ("power_w", "5.40 W"),
                         ("points", "2 processes"), ("campaign", "2026-11-24a"), ("mode", "1d"), ("hit_rate", "50 %")]:
        assert unit_problems(column, text) == [], (column, text)


def test_display_table_formats_by_column_name_and_tidy_rows_by_unit():
    frame = pd.DataFrame({"model": ["a", "b"], "latency_s": [0.0123, math.nan], "weights_bytes": [1.567599e9, 3e6],
                          "error": [-2.377283e-01, 0.5], "devices": [1, 2], "message_bytes": [2048, 64]})
    shown = display_table(frame)
    assert shown.to_dict("list") == {"model": ["a", "b"], "latency_s": ["12.3 ms", MISSING],
                                     "weights_bytes": ["1.46 GiB", "2.86 MiB"], "error": ["-0.238", "0.500"],
                                     "devices": [1, 2], "message_bytes": ["2 KiB", "64 B"]}
    assert frame["latency_s"].iloc[0] == pytest.approx(0.0123)  # the frame itself keeps full precision
    tidy = pd.DataFrame({"quantity": ["params", "latency", "error", "rate", "bandwidth", "speedup", "count"],
                         "value": [1.567599e9, 0.0123, -0.2377283, 5.82, 205.0, 1.42, 3e6],
                         "unit": ["params", "s", "", "1/s", "GB/s", "x", "devices"]})
    assert list(display_table(tidy)["value"]) == ["1.57 G params", "12.3 ms", "-0.238", "5.82 /s", "205 GB/s", "1.42x",
                                                  "3 M devices"]
    assert "e+" not in display_table(frame).to_html() + display_table(tidy).to_html()


def test_outside_a_kernel_nothing_is_displayed_or_registered(tmp_path, capsys):
    show_inline(tmp_path / "missing.png", alt="chart nb/x")  # not read: no kernel, nothing shown
    human_tables()
    setup_notebook(interactive=True)
    assert capsys.readouterr().out == ""


def test_png_width_reads_the_header():
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + (640).to_bytes(4, "big") + (480).to_bytes(4, "big")
    assert png_width(header) == 640
    with pytest.raises(ValueError, match="PNG"):
        png_width(b"GIF89a" + bytes(20))
