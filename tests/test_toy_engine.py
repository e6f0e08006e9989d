"""docs/adding_an_engine.md is true: the toy engine in tests/toy_engine/, written from the page, registers one
catalogue entry, runs in the arena and in whatif with its [schemes.<section>] options, and leaves the catalogue
as it found it once removed."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.model.models import get_model
from workbench.scenarios import whatif
from workbench.scenarios.arena import arena_for_config
from workbench.scenarios.userconfig import config_from_text
from workbench.schemes.base import SCHEMES, load_all
from workbench.schemes.options import key_rows, sections

TEMPLATE = Path(__file__).parent / "toy_engine" / "toy_engine.py"
LAPTOPS = REPO_ROOT / "examples" / "laptops_wifi.toml"
PAGE = REPO_ROOT / "docs" / "adding_an_engine.md"


@pytest.fixture
def toy():
    """The template imported as an engine module (registering its scheme), removed afterwards."""
    before = list(load_all())
    spec = importlib.util.spec_from_file_location("toy_engine", TEMPLATE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_engine"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        if "toyring_pipeline" in SCHEMES:
            SCHEMES.remove("toyring_pipeline")
        sys.modules.pop("toy_engine", None)
        assert list(load_all()) == before and "toyring" not in sections()


def _laptops(extra: str = "") -> str:
    return LAPTOPS.read_text() + extra


def test_the_toy_registers_one_spec_with_what_the_page_lists(toy):
    spec = load_all().spec(toy.SCHEME)
    assert (spec.family, spec.partition, spec.engine, spec.options) == ("toyring", "pipeline", "llama.cpp",
                                                                          toy.ToyOptions)
    assert spec.moe and spec.dense and spec.multi_token and "ring" not in spec.draft_placements
    assert load_all().filter(family="toyring") == (toy.SCHEME,) == toy.ToyOptions().schemes()
    assert sections()["toyring"] is toy.ToyOptions
    assert any(table == "[schemes.toyring]" for table, _ in key_rows())  # docs/keys.md would list its key
    assert list(load_all())[-1] == toy.SCHEME  # a scheme from outside workbench/ comes after the workbench's


def test_the_toy_runs_in_the_arena_with_its_kernels_traffic_and_options(toy):
    config = config_from_text(_laptops(), "laptops")
    table = arena_for_config(config, schemes=[toy.SCHEME, "llamacpp_rpc"]).table().set_index(["scheme", "phase"])
    for phase in ("prefill", "decode"):
        row = table.loc[(toy.SCHEME, phase)]
        assert row.status == "ok" and row.latency_s > 0 and row.comm_bytes_s > 0  # 3 hand-offs of 4 laptops
        assert row.paper == "toyring"
    assert len(toy.handoffs(config.model, config.cluster, config.workload("decode"))) == config.cluster.n - 1
    moved = config_from_text(_laptops("\n[schemes.toyring]\nmaster_layers = 4\n"), "laptops")
    shifted = arena_for_config(moved, schemes=[toy.SCHEME]).table().set_index(["scheme", "phase"])
    assert "layers 4 / 12 / 12 / 12" in shifted.loc[(toy.SCHEME, "decode")].notes  # the option reached the split
    assert "layers 10 / 10 / 10 / 10" in table.loc[(toy.SCHEME, "decode")].notes
    with pytest.raises(WorkbenchError, match="schemes.toyring.master_layers"):
        config_from_text(_laptops("\n[schemes.toyring]\nmaster_layers = -1\n"), "laptops")


def test_the_toy_costs_a_mixture_of_experts_on_the_operator_rows(toy):
    config = config_from_text(_laptops(), "laptops")
    moe = get_model("Qwen3-30B-A3B")
    result = load_all()[toy.SCHEME][1](moe, config.cluster, config.workload("decode"))
    assert result.latency_s > 0 and result.scheme == toy.SCHEME


def test_the_toy_runs_in_whatif(toy, tmp_path, capsys):
    path = tmp_path / "toy.toml"
    path.write_text(_laptops("\n[schemes.toyring]\nmaster_layers = 4\n"))
    parser = argparse.ArgumentParser()
    whatif.add_arguments(parser)
    assert whatif.main(parser.parse_args([str(path), "--no-charts", "--out", str(tmp_path / "out")])) == 0
    printed = capsys.readouterr().out
    assert toy.SCHEME in printed and "llamacpp_rpc" in printed


def test_the_page_names_every_place_the_toy_fills():
    page = PAGE.read_text()
    for needle in ("tests/toy_engine/toy_engine.py", "workbench/schemes/<engine>.py", "workbench/machine/kernel_cost.py",
                   "data/kernels/", "workbench/machine/network.py", "SECTION", "[schemes.<section>]", "@register",
                   "origin=", "partition=", "engine=", "options=", "single_token=", "draft_placements=",
                   "tests/test_toy_engine.py", "docs/keys.md"):
        assert needle in page, needle
