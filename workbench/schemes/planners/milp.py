"""A small named-variable MILP builder on scipy's HiGHS (`scipy.optimize.milp`).

The planners write their programs by variable name instead of hand-computed column offsets:

    m = MilpBuilder()
    m.add_variable("x", 3, ub=4, integer=True)        # indexed: x[0], x[1], x[2]
    m.add_variable("t")                                # scalar
    m.add_constraint([(("x", 0), 2.0), ("t", -1.0)], high=0.0)
    m.add_constraint(m.sum_of("x"), low=4, high=4)
    m.add_cost("t", 1.0)
    solution = m.build().solve()
    solution.value("x")

Columns are laid out in the order the variables are added and rows in the order the constraints are
added, so a program built in the same order as a hand-offset one hands HiGHS the identical arrays
(A is assembled from (row, column, value) triplets, zero coefficients left out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

from workbench.core.errors import WorkbenchError

Ref = str | tuple[str, int]  # "t" (a scalar) or ("x", i) (entry i of an indexed variable)
Term = tuple[Ref, float]


@dataclass(frozen=True)
class Variable:
    """A named block of columns: a scalar (`size` None, one column) or an indexed variable x[0..size-1]."""

    name: str
    start: int
    size: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise WorkbenchError(f"variable name must be a non-empty string, got {self.name!r}")
        if self.start < 0 or (self.size is not None and self.size < 0):
            raise WorkbenchError(f"variable {self.name!r}: start and size must be >= 0, got {self.start}, {self.size}")

    @property
    def width(self) -> int:
        """Columns it takes: 1 for a scalar, `size` for an indexed variable."""
        return 1 if self.size is None else self.size

    @property
    def columns(self) -> slice:
        """Its columns in the program."""
        return slice(self.start, self.start + self.width)

    def column(self, index: int | None = None) -> int:
        """The column of the scalar (index None) or of entry `index` (0 <= index < size)."""
        if self.size is None:
            if index is not None:
                raise WorkbenchError(f"variable {self.name!r} is a scalar; index must be None, got {index!r}")
            return self.start
        if index is None or isinstance(index, bool) or not isinstance(index, int | np.integer) \
                or not 0 <= index < self.size:
            raise WorkbenchError(f"variable {self.name!r}: index must be an integer in [0, {self.size - 1}], "
                                 f"got {index!r}")
        return self.start + int(index)


def _split(ref: Ref) -> tuple[str, int | None]:
    """A term's reference as (name, index): "t" -> ("t", None), ("x", i) -> ("x", i)."""
    if isinstance(ref, str):
        return ref, None
    if isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[0], str):
        return ref
    raise WorkbenchError(f"a term names a variable as 'name' or ('name', index), got {ref!r}")


def _check_name(variables: Mapping[str, Variable], name: str) -> str:
    """`name` if it is defined, else raise listing the defined ones."""
    if name not in variables:
        raise WorkbenchError(f"unknown variable {name!r}; defined: {', '.join(variables) or 'none'}")
    return name


def _column(variables: Mapping[str, Variable], ref: Ref) -> int:
    """The column a term's reference names ("t" or ("x", i))."""
    name, index = _split(ref)
    return variables[_check_name(variables, name)].column(index)


@dataclass(frozen=True)
class MilpProgram:
    """A MILP in HiGHS form: min c x s.t. lo <= A x <= hi, lb <= x <= ub, x_j integer where integrality_j = 1."""

    c: np.ndarray
    A: csr_matrix
    lo: np.ndarray
    hi: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray
    variables: Mapping[str, Variable]

    def __post_init__(self) -> None:
        n = len(self.c)
        if any(len(v) != n for v in (self.lb, self.ub, self.integrality)) or self.A.shape[1] != n:
            raise WorkbenchError(f"program columns disagree: c {n}, lb {len(self.lb)}, ub {len(self.ub)}, "
                                 f"integrality {len(self.integrality)}, A {self.A.shape[1]}")
        if len(self.lo) != self.A.shape[0] or len(self.hi) != self.A.shape[0]:
            raise WorkbenchError(f"program rows disagree: A {self.A.shape[0]}, lo {len(self.lo)}, hi {len(self.hi)}")
        if sum(v.width for v in self.variables.values()) != n:
            raise WorkbenchError(f"variables cover {sum(v.width for v in self.variables.values())} of {n} columns")

    @property
    def n_variables(self) -> int:
        """Columns of the program."""
        return len(self.c)

    @property
    def n_constraints(self) -> int:
        """Rows of the program."""
        return self.A.shape[0]

    def columns(self, name: str) -> slice:
        """The columns of variable `name`."""
        return self.variables[_check_name(self.variables, name)].columns

    def column(self, name: str, index: int | None = None) -> int:
        """The column of scalar `name` or of entry `index` of indexed `name`."""
        return _column(self.variables, name if index is None else (name, index))

    def solve(self, mip_rel_gap: float = 1e-6, time_limit_s: float | None = None,
              cost: np.ndarray | None = None) -> MilpSolution:
        """Run HiGHS; `cost` replaces c for this solve (bounds on parts of the objective)."""
        options: dict[str, Any] = {"mip_rel_gap": mip_rel_gap}
        if time_limit_s is not None:
            options["time_limit"] = time_limit_s
        result = milp(self.c if cost is None else cost, integrality=self.integrality, bounds=Bounds(self.lb, self.ub),
                      constraints=LinearConstraint(self.A, self.lo, self.hi), options=options)
        return MilpSolution(self, result)


@dataclass(frozen=True)
class MilpSolution:
    """HiGHS's answer to a program, read back by variable name (`result` is scipy's OptimizeResult)."""

    program: MilpProgram
    result: Any

    @property
    def found(self) -> bool:
        """Whether HiGHS returned a point (optimal, or the best one within the limits)."""
        return self.result.x is not None

    @property
    def x(self) -> np.ndarray | None:
        """All columns' values (None when nothing was found)."""
        return self.result.x

    @property
    def objective(self) -> float:
        """c x at the returned point."""
        return float(self.result.fun)

    @property
    def nodes(self) -> int:
        """Branch-and-bound nodes HiGHS explored (0 when it does not say)."""
        return int(getattr(self.result, "mip_node_count", 0) or 0)

    @property
    def message(self) -> str:
        """HiGHS's status message."""
        return str(self.result.message)

    def value(self, name: str) -> np.ndarray | float:
        """The values of variable `name`: an array for an indexed variable, a float for a scalar."""
        if not self.found:
            raise WorkbenchError(f"no solution to read {name!r} from: {self.message}")
        var = self.program.variables[_check_name(self.program.variables, name)]
        return self.result.x[var.columns] if var.size is not None else float(self.result.x[var.start])


def _per_column(name: str, what: str, value, width: int) -> np.ndarray:
    """`value` (a number or one per column) as a float array of `width`."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return np.full(width, float(arr))
    if arr.shape != (width,):
        raise WorkbenchError(f"variable {name!r}: {what} must be a number or {width} numbers, got shape {arr.shape}")
    return arr.copy()


class MilpBuilder:
    """Collects named variables, constraints written by name and an objective; `build` lays out the arrays."""

    def __init__(self) -> None:
        self._variables: dict[str, Variable] = {}
        self._lb: list[np.ndarray] = []
        self._ub: list[np.ndarray] = []
        self._integer: list[np.ndarray] = []
        self._cost: dict[str, np.ndarray] = {}
        self._triplets: list[tuple[int, int, float]] = []
        self._lo: list[float] = []
        self._hi: list[float] = []
        self._width = 0

    @property
    def n_variables(self) -> int:
        """Columns so far."""
        return self._width

    def add_variable(self, name: str, size: int | None = None, lb=0.0, ub=np.inf, integer=False) -> Variable:
        """Add scalar `name` (size None) or indexed name[0..size-1] with bounds and integrality (per entry or one)."""
        if name in self._variables:
            raise WorkbenchError(f"variable {name!r} is already defined")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 0):
            raise WorkbenchError(f"variable {name!r}: size must be None (a scalar) or an integer >= 0, got {size!r}")
        var = Variable(name, self._width, None if size is None else int(size))
        low, high = _per_column(name, "lb", lb, var.width), _per_column(name, "ub", ub, var.width)
        if np.any(np.isnan(low)) or np.any(np.isnan(high)) or np.any(low > high):
            raise WorkbenchError(f"variable {name!r}: bounds must satisfy lb <= ub, got lb={lb!r}, ub={ub!r}")
        flags = _per_column(name, "integer", integer, var.width)
        if not np.isin(flags, (0.0, 1.0)).all():
            raise WorkbenchError(f"variable {name!r}: integer must be True/False (or 1/0 per entry), got {integer!r}")
        self._variables[name] = var
        self._lb.append(low)
        self._ub.append(high)
        self._integer.append(flags)
        self._cost[name] = np.zeros(var.width)
        self._width += var.width
        return var

    def column(self, name: str, index: int | None = None) -> int:
        """The column of scalar `name` or of entry `index` of indexed `name`."""
        return _column(self._variables, name if index is None else (name, index))

    def sum_of(self, name: str, coef: float = 1.0, indices: Iterable[int] | None = None) -> list[Term]:
        """Terms coef * name[i] for every entry (or for `indices`) of indexed variable `name`."""
        var = self._variables[_check_name(self._variables, name)]
        if var.size is None:
            raise WorkbenchError(f"sum_of needs an indexed variable; {name!r} is a scalar")
        return [((name, i), coef) for i in (range(var.size) if indices is None else indices)]

    def objective_terms(self) -> list[Term]:
        """The objective so far as terms, every column in column order (for a constraint on c x itself)."""
        return [(name if var.size is None else (name, i), cost) for name, var in self._variables.items()
                for i, cost in enumerate(self._cost[name])]

    def add_constraint(self, terms: Iterable[Term], low: float = -np.inf, high: float = np.inf) -> int:
        """Add low <= sum(coef * ref) <= high (zero coefficients are left out); returns the row."""
        if low > high:
            raise WorkbenchError(f"constraint bounds must satisfy low <= high, got low={low!r}, high={high!r}")
        row = len(self._lo)
        self._triplets.extend((row, _column(self._variables, ref), coef) for ref, coef in terms if coef != 0)
        self._lo.append(low)
        self._hi.append(high)
        return row

    def add_cost(self, name: str, coefs, index: int | None = None) -> None:
        """Add `coefs` to the objective's coefficients of `name` (all entries, or entry `index`)."""
        var = self._variables[_check_name(self._variables, name)]
        if index is None:
            self._cost[name] += _per_column(name, "cost", coefs, var.width)
        else:
            self._cost[name][var.column(index) - var.start] += coefs

    def build(self) -> MilpProgram:
        """The program's arrays: columns in the order variables were added, rows in the order of the constraints."""
        if not self._variables:
            raise WorkbenchError("a program needs at least one variable")
        shape = (len(self._lo), self._width)
        if self._triplets:
            r, j, v = zip(*self._triplets)
            A = csr_matrix((v, (r, j)), shape=shape)
        else:
            A = csr_matrix(shape)
        return MilpProgram(np.concatenate(list(self._cost.values())), A, np.array(self._lo, float), np.array(self._hi, float),
                           np.concatenate(self._lb), np.concatenate(self._ub), np.concatenate(self._integer),
                           MappingProxyType(dict(self._variables)))

