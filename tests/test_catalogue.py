"""The scheme catalogue: one SchemeSpec per registered scheme, its invariants, and the questions callers ask it."""

from __future__ import annotations

import pytest

from workbench.errors import WorkbenchError
from workbench.moe_advice import REASONS
from workbench.schemes.base import load_all, spec_of
from workbench.schemes.catalogue import PARTITIONS, Catalogue, SchemeSpec


def _spec(**changes) -> SchemeSpec:
    fields = dict(name="x_tp", paper="p", origin="a test", family="p", partition="tp", evaluator=lambda *a: None)
    return SchemeSpec(**{**fields, **changes})


@pytest.mark.parametrize(("changes", "message"), [
    ({"name": "not a name"}, "scheme name must be an identifier"),
    ({"origin": " "}, "origin must be non-empty text"),
    ({"partition": "diagonal"}, "partition must be one of one, tp, pipeline"),
    ({"evaluator": 3}, "evaluator must be callable"),
    ({"moe": False, "dense": False}, "costs nothing"),
    ({"partition": "expert", "moe": True}, "expert partition needs experts"),
    ({"draft_placements": ("root",)}, "draft_placements must hold root, own"),
    ({"draft_placements": ("root", "own", "moon")}, "draft_placements must hold"),
    ({"options": dict}, "options must be an options dataclass with a SECTION"),
])
def test_a_spec_refuses_what_no_scheme_can_be(changes, message):
    with pytest.raises(WorkbenchError, match=message):
        _spec(**changes)


def test_every_registered_scheme_has_a_spec_with_a_known_partition():
    catalogue = load_all()
    assert len(catalogue.specs()) == len(catalogue) >= 28
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
