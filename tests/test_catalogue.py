"""The scheme catalogue: one SchemeSpec per registered scheme, its invariants, and the questions callers ask it."""

from __future__ import annotations

import pytest

from workbench.core.errors import WorkbenchError
from workbench.scenarios.moe_advice import REASONS
from workbench.schemes.base import load_all, spec_of
from workbench.schemes.catalogue import PARTITIONS, Catalogue, SchemeSpec


def _spec(**changes) -> SchemeSpec:
    fields = dict(name="x_tp", paper="p", origin="a test", family="p", partition="tp", evaluator=lambda *a: None,
                  no_moe="a test")
    return SchemeSpec(**{**fields, **changes})


@pytest.mark.parametrize(("changes", "message"), [
    ({"name": "not a name"}, "scheme name must be an identifier"),
    ({"origin": " "}, "origin must be non-empty text"),
    ({"partition": "diagonal"}, "partition must be one of one, tp, pipeline"),
    ({"evaluator": 3}, "evaluator must be callable"),
    ({"moe": False, "dense": False}, "costs nothing"),
    ({"partition": "expert", "moe": True, "no_moe": ""}, "expert partition needs experts"),
    ({"no_moe": ""}, "no_moe must say in one line why"),
    ({"moe": True}, "no_moe must say in one line why"),
    ({"no_moe": "two\nlines"}, "no_moe must be one line"),
    ({"draft_placements": ("root",)}, "draft_placements must hold root, own"),
    ({"draft_placements": ("root", "own", "moon")}, "draft_placements must hold"),
    ({"options": dict}, "options must be an options dataclass with a SECTION"),
])
def test_a_spec_refuses_what_no_scheme_can_be(changes, message):
    with pytest.raises(WorkbenchError, match=message):
        _spec(**changes)


def test_every_registered_scheme_has_a_spec_with_a_known_partition():
    catalogue = load_all()
    assert len(catalogue.specs()) == len(catalogue) >= 27  # 28 before dllama_moe_tp joined dllama_allgather_tp
    for spec in catalogue.specs():
        assert catalogue[spec.name] == (spec.paper, spec.evaluator) and spec.partition in PARTITIONS
    assert set(catalogue.filter(dense=False)) <= set(catalogue.filter(moe=True))
    assert {spec_of(n).partition for n in catalogue.filter(moe=True)} >= set(REASONS)  # every MoE partition runs


def test_filter_matches_fields_and_refuses_an_unknown_one():
    catalogue = load_all()
    assert catalogue.filter(family="galaxy")[0] == "local" and "galaxy_hmp" in catalogue.filter(family="galaxy")
    assert catalogue.filter(family="galaxy", partition="hybrid") == ("galaxy_hmp", "galaxy_hmp_overlap")
    with pytest.raises(WorkbenchError, match="unknown field colour"):
        catalogue.filter(colour="red")
    with pytest.raises(WorkbenchError, match="unknown scheme 'nope'; registered: local"):
        spec_of("nope")


def test_a_catalogue_holds_specs_removes_them_and_orders_them_by_module():
    catalogue = Catalogue()
    first, second = _spec(name="a_tp"), _spec(name="b_tp", evaluator=print)
    catalogue.add(second)
    catalogue.add(first)
    catalogue.reorder({first.evaluator.__module__: 0, second.evaluator.__module__: 1})
    assert list(catalogue) == ["a_tp", "b_tp"]
    catalogue.remove("a_tp")
    assert list(catalogue) == ["b_tp"]
    with pytest.raises(WorkbenchError, match="unknown scheme 'a_tp'"):
        catalogue.remove("a_tp")
    with pytest.raises(WorkbenchError, match="holds SchemeSpec records"):
        catalogue.add(("p", print))


def test_most_schemes_cost_a_mixture_of_experts_and_the_rest_say_why():
    """Issue 41: every scheme the catalogue marks dense-only gives its one-line reason, and the refusal carries it."""
    from workbench.model.models import get_model
    from workbench.schemes.workload import Workload

    catalogue = load_all()
    dense_only = [spec for spec in catalogue.specs() if not spec.moe]
    assert len(catalogue.filter(moe=True)) >= 19 and all(spec.no_moe.strip() for spec in dense_only)
    spec = spec_of("hepti_ws")
    with pytest.raises(WorkbenchError, match="not a mixture of experts .*: each device streams the experts"):
        spec.evaluator(get_model("Qwen3-30B-A3B"), None, Workload("decode", 64, 64))


def test_every_result_carries_its_operator_rows_or_says_why():
    """Issue 41: a result's rows (`operators`) or its declared reason (`no_operators`), never silently neither."""
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    for example in ("examples/laptops_wifi.toml", "examples/qwen3_moe_pi5.toml"):
        arena = arena_for_config(load_config(example))
        results = [e.result for e in arena.entries if e.result is not None]
        assert results and all((r.operators is None) != (not r.no_operators) for r in results)
        assert any(r.operators is not None for r in results) and any(r.no_operators for r in results)


def test_a_scheme_whose_result_has_no_rows_must_say_why():
    from workbench.schemes.base import SchemeResult, says_why_no_rows

    def bare(model, cluster, workload):
        return SchemeResult("toy", "p", "decode", 1.0, compute_s=1.0)

    with pytest.raises(WorkbenchError, match="toy: its result carries no operator rows"):
        says_why_no_rows("toy", "", bare)(None, None, None)
    assert says_why_no_rows("toy", "a reason", bare)(None, None, None).no_operators == "a reason"
    with pytest.raises(WorkbenchError, match="needs no no_operators reason"):
        SchemeResult("toy", "p", "decode", 1.0, operators=load_all_breakdown(), no_operators="x")


def load_all_breakdown():
    """One real operator breakdown (a megatron_tp result's) to build an inconsistent result from."""
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    arena = arena_for_config(load_config("examples/laptops_wifi.toml"), phases=("decode",), schemes=["megatron_tp"])
    return next(e.result.operators for e in arena.entries if e.result is not None)
