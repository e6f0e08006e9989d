"""The named-variable MILP builder (workbench.schemes.planners.milp): column layout, the arrays HiGHS gets, solving and
reading back by name, and one-line errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp

from workbench.core.errors import WorkbenchError
from workbench.schemes.planners.milp import MilpBuilder, Variable


def knapsack() -> MilpBuilder:
    """max 3 x0 + 2 x1 + 4 x2 (as min of the negative) s.t. 2 x0 + x1 + 3 x2 <= 4, t >= x0 + x1, x in {0, 1}."""
    m = MilpBuilder()
    m.add_variable("x", 3, ub=1, integer=True)
    m.add_variable("t", ub=10.0)
    m.add_cost("x", [-3.0, -2.0, -4.0])
    m.add_cost("t", 0.5)
    m.add_constraint([(("x", 0), 2.0), (("x", 1), 1.0), (("x", 2), 3.0)], high=4)
    m.add_constraint([("t", 1.0), (("x", 0), -1.0), (("x", 1), -1.0)], low=0)
    return m


def test_columns_follow_the_order_variables_are_added():
    m = knapsack()
    p = m.build()
    assert p.columns("x") == slice(0, 3) and p.column("t") == 3 and p.column("x", 2) == 2
    assert m.column("x", 1) == 1 and p.n_variables == 4 and p.n_constraints == 2
    assert p.c.tolist() == [-3.0, -2.0, -4.0, 0.5]
    assert p.lb.tolist() == [0, 0, 0, 0] and p.ub.tolist() == [1, 1, 1, 10.0]
    assert p.integrality.tolist() == [1, 1, 1, 0]
    assert p.A.toarray().tolist() == [[2, 1, 3, 0], [-1, -1, 0, 1]]
    assert p.lo.tolist() == [-np.inf, 0] and p.hi.tolist() == [4, np.inf]


def test_the_program_is_the_hand_offset_one():
    """Same arrays, so scipy / HiGHS see the same problem as a program written with column offsets."""
    p = knapsack().build()
    A = np.array([[2.0, 1.0, 3.0, 0.0], [-1.0, -1.0, 0.0, 1.0]])
    hand = milp(np.array([-3.0, -2.0, -4.0, 0.5]), integrality=np.array([1, 1, 1, 0]),
                bounds=Bounds(np.zeros(4), np.array([1, 1, 1, 10.0])),
                constraints=LinearConstraint(A, [-np.inf, 0], [4, np.inf]), options={"mip_rel_gap": 1e-6})
    sol = p.solve()
    assert sol.found and np.array_equal(sol.x, hand.x) and sol.objective == hand.fun


def test_solution_reads_back_by_name():
    sol = knapsack().build().solve(mip_rel_gap=0.0)
    assert np.round(sol.value("x")).tolist() == [0, 1, 1]  # 2 + 4 beats 3 + 2 (weight 4 of 4)
    assert isinstance(sol.value("t"), float) and sol.value("t") == pytest.approx(1.0)
    assert sol.objective == pytest.approx(-6.0 + 0.5) and sol.nodes >= 0


def test_cost_override_and_objective_terms():
    m = knapsack()
    assert m.objective_terms() == [(("x", 0), -3.0), (("x", 1), -2.0), (("x", 2), -4.0), ("t", 0.5)]
    m.add_cost("x", 1.0, index=0)  # costs accumulate
    p = m.build()
    assert p.c[0] == -2.0
    sol = p.solve(cost=np.zeros(4))
    assert sol.found and sol.objective == 0.0


def test_zero_coefficients_are_left_out_and_sum_of_names_every_entry():
    m = MilpBuilder()
    m.add_variable("a", 3)
    m.add_constraint([(("a", 0), 0.0), (("a", 1), 2.0)], high=1)
    m.add_constraint(m.sum_of("a", -1.0, indices=[1, 2]), low=-5)
    A = m.build().A
    assert A.nnz == 3 and A.toarray().tolist() == [[0, 2, 0], [0, -1, -1]]
    assert m.sum_of("a") == [(("a", 0), 1.0), (("a", 1), 1.0), (("a", 2), 1.0)]


def test_per_entry_bounds_and_integrality():
    m = MilpBuilder()
    m.add_variable("a", 3, lb=[0, 1, 2], ub=[5, 5, 2], integer=[1, 0, 1])
    p = m.build()
    assert p.lb.tolist() == [0, 1, 2] and p.ub.tolist() == [5, 5, 2] and p.integrality.tolist() == [1, 0, 1]


def test_an_infeasible_program_is_reported_not_read():
    m = MilpBuilder()
    m.add_variable("a", 2, ub=1, integer=True)
    m.add_constraint(m.sum_of("a"), low=3)
    sol = m.build().solve()
    assert not sol.found and sol.x is None
    with pytest.raises(WorkbenchError, match="no solution to read 'a'"):
        sol.value("a")


@pytest.mark.parametrize("build, match", [
    (lambda m: m.add_variable("x"), "variable 'x' is already defined"),
    (lambda m: m.add_variable("y", -1), "size must be None"),
    (lambda m: m.add_variable("y", 2, lb=[0, 1, 2]), r"lb must be a number or 2 numbers"),
    (lambda m: m.add_variable("y", lb=2, ub=1), "lb <= ub"),
    (lambda m: m.add_variable(""), "non-empty string"),
    (lambda m: m.add_variable("y", 2, integer=[0, 2]), "integer must be True/False"),
    (lambda m: m.add_constraint([("nope", 1.0)], high=1), r"unknown variable 'nope'; defined: x, t"),
    (lambda m: m.add_constraint([(("x", 3), 1.0)], high=1), r"index must be an integer in \[0, 2\]"),
    (lambda m: m.add_constraint([(("t", 0), 1.0)], high=1), "is a scalar"),
    (lambda m: m.add_constraint([("x", 1.0)], high=1), r"index must be an integer in \[0, 2\]"),
    (lambda m: m.add_constraint([(3, 1.0)], high=1), "a term names a variable"),
    (lambda m: m.add_constraint([("t", 1.0)], low=2, high=1), "low <= high"),
    (lambda m: m.sum_of("t"), "sum_of needs an indexed variable"),
    (lambda m: m.add_cost("nope", 1.0), "unknown variable 'nope'"),
])
def test_bad_input_raises_one_line_errors(build, match):
    m = MilpBuilder()
    m.add_variable("x", 3)
    m.add_variable("t")
    with pytest.raises(WorkbenchError, match=match):
        build(m)


def test_an_empty_builder_and_a_bad_variable_are_refused():
    with pytest.raises(WorkbenchError, match="at least one variable"):
        MilpBuilder().build()
    with pytest.raises(WorkbenchError, match="start and size must be >= 0"):
        Variable("x", -1)
