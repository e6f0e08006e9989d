"""The one text form of a time (`units.format_seconds`): notes, readouts and chart titles all use it."""

import math

from workbench.core.units import format_seconds, short_number


def test_a_time_reads_in_its_unit_with_three_significant_digits():
    values = (2.5, 0.0123, 5e-5, 2e-9, 0.0, 1234.5, 0.9996, -0.02)
    assert [format_seconds(v) for v in values] == ["2.5 s", "12.3 ms", "50 µs", "2 ns", "0 s", "1234 s", "1 s",
                                                   "-20 ms"]


def test_an_unknown_time_is_n_a_never_a_number():
    assert [format_seconds(v) for v in (math.nan, math.inf, -math.inf)] == ["n/a"] * 3


def test_short_numbers_have_no_exponent():
    assert [short_number(v) for v in (1.0, 2.5, 250.0, 1500.0, -12345.0)] == ["1", "2.5", "250", "1500", "-12345"]
