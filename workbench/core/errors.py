"""The workbench's own error types and one-line argument checks.

Every bad input raises `WorkbenchError` (a `ValueError`) whose message names the parameter and the
allowed range, so notebooks, the CLI and the explorer can show one line instead of a traceback.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


class WorkbenchError(ValueError):
    """Bad input: the message names the parameter and what is allowed."""


class InfeasibleError(WorkbenchError):
    """A valid request that no plan can satisfy; the message starts with 'infeasible:'."""

    def __init__(self, message: str):
        if not message.startswith("infeasible"):
            message = f"infeasible: {message}"
        super().__init__(message)


def require_positive(name: str, value: float) -> float:
    """Return `value` if it is a finite number > 0, else raise naming `name`."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise WorkbenchError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def require_non_negative(name: str, value: float) -> float:
    """Return `value` if it is a finite number >= 0, else raise naming `name`."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise WorkbenchError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def require_int(name: str, value: int, low: int = 1, high: int | None = None) -> int:
    """Return `value` if it is an int in [low, high], else raise naming `name` and the range."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        upper = "" if high is None else f" and <= {high}"
        raise WorkbenchError(f"{name} must be an integer >= {low}{upper}, got {value!r}")
    return value


def require_fraction(name: str, value: float) -> float:
    """Return `value` if it lies in (0, 1], else raise naming `name`."""
    if not isinstance(value, int | float) or not (0 < value <= 1):
        raise WorkbenchError(f"{name} must be in (0, 1], got {value!r}")
    return value


def require_choice(name: str, value: str, allowed: Iterable[str]) -> str:
    """Return `value` if it is one of `allowed`, else raise listing them."""
    allowed = list(allowed)
    if value not in allowed:
        raise WorkbenchError(f"unknown {name} {value!r}; allowed: {', '.join(map(str, allowed))}")
    return value
