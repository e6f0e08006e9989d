"""Scheme options from the deployment TOML and calibrate's CSV (issue 34 item 3): [schemes.dllama] version picks
the release's one sync structure, syncs_per_layer reaches dllama_root_tp's evaluator, bad values are one-line
errors, docs/keys.md lists the keys (tests/test_fields.py checks the table), a CSV row's options cell wins."""

import copy
import tomllib

import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.scenarios.arena import arena_for_config
from workbench.scenarios.calibrate import predict_parts, read_measurements
from workbench.scenarios.userconfig import config_keys_table, parse_config
from workbench.schemes import engines as S
from workbench.schemes.base import load_all
from workbench.schemes.options import apply_options, parse_text

EXAMPLE = REPO_ROOT / "examples" / "sbc_gigabit.toml"


def _doc(**dllama) -> dict:
    doc = tomllib.loads(EXAMPLE.read_text())
    doc["model"]["name"] = "Llama 2-7B"  # 32 KV heads: every version splits it over 4 boards
    if dllama:
        doc["schemes"] = {"dllama": dllama}
    return doc


def _config(**dllama):
    return parse_config(_doc(**dllama), "test.toml", EXAMPLE.parent)


@pytest.mark.parametrize(("version", "scheme"), [
    ("0.1", "dllama_root8_tp"), ("0.4.0", "dllama_root8_tp"), ("0.5", "dllama_root6_tp"), ("0.7.0", "dllama_root6_tp"),
    ("0.7.1", "dllama_root_tp"), ("v0.10.6", "dllama_root_tp"), ("0.11", "dllama_allgather_tp"),
    ("0.16.4", "dllama_allgather_tp")])
def test_each_release_maps_to_its_sync_structure(version, scheme):
    assert S.scheme_for_version(version) == scheme


def test_version_in_the_toml_keeps_only_that_releases_scheme_in_the_arena():
    engine_schemes = set(load_all().filter(options=S.DllamaOptions))
    assert engine_schemes == set(S.VERSIONS)  # the catalogue's [schemes.dllama] schemes: every release's one
    every = set(arena_for_config(_config()).table().scheme)
    assert engine_schemes <= every
    seven = set(arena_for_config(_config(version="0.7")).table().scheme)
    assert seven & engine_schemes == {"dllama_root6_tp"}
    assert every - seven == engine_schemes - {"dllama_root6_tp"}  # other papers' schemes untouched


def test_syncs_per_layer_reaches_the_root_tp_evaluator():
    config = _config(syncs_per_layer=3)
    table = arena_for_config(config, phases=("decode",), schemes=["dllama_root_tp"]).table()
    own = S.evaluate_root_tp(config.model, config.cluster, config.workload("decode"), 3)
    assert table.latency_s.iloc[0] == pytest.approx(own.latency_s, rel=1e-12)
    link = {k: arena_for_config(_config(syncs_per_layer=k), phases=("decode",), schemes=["dllama_root_tp"])
            .table().comm_link_latency_s.iloc[0] for k in (1, 2, 3)}
    assert link[3] - link[2] == pytest.approx(link[2] - link[1], rel=1e-9) and link[2] > link[1]


@pytest.mark.parametrize(("options", "message"), [
    ({"version": "1.2"}, "version must be a distributed-llama release"),
    ({"version": "0.17"}, "version must be a distributed-llama release"),
    ({"version": 7}, "schemes.dllama.version must be text"),
    ({"syncs_per_layer": 0}, r"schemes.dllama.syncs_per_layer must be an integer in \[1, 16\], got 0"),
    ({"syncs_per_layer": 2.5}, "syncs_per_layer must be an integer"),
    ({"nbatches": 4}, "unknown key schemes.dllama.nbatches; allowed: version, syncs_per_layer")])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(WorkbenchError, match=message) as info:
        _config(**options)
    assert "\n" not in str(info.value) and str(info.value).startswith("test.toml")


def test_unknown_section_is_named():
    doc = _doc()
    doc["schemes"] = {"exo": {"mode": "ring"}}
    with pytest.raises(WorkbenchError, match="schemes.exo is not a scheme options section; allowed: dllama"):
        parse_config(doc, "test.toml", EXAMPLE.parent)


def test_the_keys_table_lists_the_options():
    table = config_keys_table()
    assert "| `[schemes.dllama]` | `version` |" in table and "| `[schemes.dllama]` | `syncs_per_layer` |" in table


def test_csv_options_cell_wins_over_the_config_and_a_missing_scheme_is_named(tmp_path):
    doc = _doc(syncs_per_layer=2)
    path = tmp_path / "m.csv"
    pd.DataFrame([{"scheme": "dllama_root_tp", "devices": 4, "phase": "decode", "tokens": 64, "latency_s": 0.5,
                   "role": "calibration", "options": "syncs_per_layer=3"},
                  {"scheme": "dllama_root_tp", "devices": 4, "phase": "decode", "tokens": 64, "latency_s": 0.5,
                   "role": "validation", "options": ""}]).to_csv(path, index=False)
    rows = read_measurements(path)
    parts = predict_parts(copy.deepcopy(doc), rows, "test.toml", EXAMPLE.parent)
    config = parse_config(doc, "test.toml", EXAMPLE.parent)
    w = config.workload("decode").__class__(phase="decode", seq_len=64, kv_len=64, weight_bits=config.weight_bits,
                                            activation_bits=config.activation_bits)
    for i, k in enumerate((3, 2)):
        assert parts.latency_s.iloc[i] == pytest.approx(S.evaluate_root_tp(config.model, config.cluster, w, k).latency_s)
    rows.loc[0, "options"] = "version=0.4"
    with pytest.raises(WorkbenchError, match="leave out scheme 'dllama_root_tp'"):
        predict_parts(doc, rows, "test.toml", EXAMPLE.parent)
    with pytest.raises(WorkbenchError, match="scheme 'megatron_tp' takes no options"):
        parse_text("row 2", "megatron_tp", "version=0.7")


def test_apply_options_without_options_is_the_registry():
    from workbench.schemes.base import load_all

    registry = load_all()
    assert apply_options(registry, ()) == dict(registry)
