"""What notebooks show: numbers in human units with 3 significant digits (no exponent), PNGs only in a kernel."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.display import (
    MISSING,
    display_table,
    format_bytes,
    format_number,
    format_seconds,
    human_tables,
    png_width,
    setup_notebook,
    show_inline,
)


@pytest.mark.parametrize("value, text", [(-2.377283e-01, "-0.238"), (1.567599e09, "1.57 G"), (1234.5, "1230"), (20e-6 / 1e-6, "20"),
                                         (0.00123, "0.00123"), (7.0, "7"), (3e13, "30 T"), (999.6, "1000"),
                                         (1.2e-5, "12 µ"), (0.0, "0"), (math.nan, MISSING)])
def test_numbers_have_three_significant_digits_and_no_exponent(value, text):
    assert format_number(value) == text


def test_seconds_and_bytes_in_their_units():
    assert [format_seconds(v) for v in (0.01234, 1.5, 2e-6, 0.0, 120.0)] == ["12.3 ms", "1.50 s", "2 µs", "0 s", "120 s"]
    assert [format_bytes(v) for v in (3 * 2**30, 1000, 5e6)] == ["3 GiB", "1000 B", "4.77 MiB"]


def test_display_table_formats_by_column_name_and_tidy_rows_by_unit():
    frame = pd.DataFrame({"model": ["a", "b"], "latency_s": [0.0123, math.nan], "weights_bytes": [1.567599e9, 3e6],
                          "error": [-2.377283e-01, 0.5], "devices": [1, 2]})
    shown = display_table(frame)
    assert shown.to_dict("list") == {"model": ["a", "b"], "latency_s": ["12.3 ms", MISSING],
                                     "weights_bytes": ["1.46 GiB", "2.86 MiB"], "error": ["-0.238", "0.500"],
                                     "devices": [1, 2]}
    assert frame["latency_s"].iloc[0] == 0.0123  # the frame itself keeps full precision
    tidy = pd.DataFrame({"quantity": ["params", "latency", "error"], "value": [1.567599e9, 0.0123, -0.2377283],
                         "unit": ["params", "s", ""]})
    assert list(display_table(tidy)["value"]) == ["1.57 G params", "12.3 ms", "-0.238"]
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
