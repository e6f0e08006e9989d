"""scripts/regroup.py rewrites every kind of reference to a moved module once (a second run changes nothing) and
refuses a tree with a top-level entry it does not place. Old names are built from MAPPING, never written here, so
the script's own rewrite of tests/ leaves these cases intact."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "scripts"))
import regroup  # noqa: E402  (scripts/ is no package)

FLAT = [(o, n) for o, n in regroup.MAPPING.items() if o.count(".") == 1 and n.rsplit(".", 1)[1] == o.split(".")[1]]
RENAMED = [(o, n) for o, n in regroup.MAPPING.items() if n.rsplit(".", 1)[1] != o.split(".")[1]]


def short(dotted: str) -> str:
    """The name after `workbench.`."""
    return dotted.split(".", 1)[1]


def test_dotted_names_and_paths_move_once():
    old, new = FLAT[0]
    text = (f"import {old}\nfrom {old}.sub import x\nmock.patch('{old}.f')\n"
            f"see {old.replace('.', '/')}.py and {old.replace('.', '/')}/\n")
    once = regroup.rewrite_text(text)
    assert once == (f"import {new}\nfrom {new}.sub import x\nmock.patch('{new}.f')\n"
                    f"see {new.replace('.', '/')}.py and {new.replace('.', '/')}/\n")
    assert regroup.rewrite_text(once) == once


def test_a_longer_name_sharing_a_prefix_is_not_touched():
    old, _ = FLAT[0]
    text = f"{old}_extra and x{old} and {old}x"
    assert regroup.rewrite_text(text) == text


def test_from_workbench_import_is_split_per_layer_keeping_aliases():
    (a_old, a_new), (b_old, b_new) = FLAT[0], FLAT[-1]
    text = f"    from workbench import {short(a_old)}, {short(b_old)} as bb, papers\n"
    assert regroup.rewrite_text(text) == (f"    from workbench import papers\n"
                                          f"    from {a_new.rsplit('.', 1)[0]} import {short(a_old)}\n"
                                          f"    from {b_new.rsplit('.', 1)[0]} import {short(b_old)} as bb\n")


def test_a_renamed_module_keeps_its_old_name_as_the_alias():
    old, new = RENAMED[0]
    parent, leaf = new.rsplit(".", 1)
    assert regroup.rewrite_text(f"from workbench import {short(old)}\n") == \
        f"from {parent} import {leaf} as {short(old)}\n"


def test_a_notebooks_json_string_is_split_inside_the_string():
    (a_old, a_new), (b_old, b_new) = FLAT[0], FLAT[-1]
    text = f'"source": "import x\\nfrom workbench import {short(a_old)}, {short(b_old)}\\ny = 1"'
    assert regroup.rewrite_text(text) == (f'"source": "import x\\nfrom {a_new.rsplit(".", 1)[0]} import '
                                          f'{short(a_old)}\\nfrom {b_new.rsplit(".", 1)[0]} import {short(b_old)}'
                                          f'\\ny = 1"')


def test_path_parts_in_python_gain_the_layer_folder():
    old, new = FLAT[0]
    layer = new.split(".")[1]
    text = f'REPO_ROOT / "workbench" / "{short(old)}.py"'
    assert regroup.rewrite_text(text) == f'REPO_ROOT / "workbench" / "{layer}" / "{short(old)}.py"'


def make_tree(tmp_path: Path, names: list[str]) -> Path:
    """A bare checkout whose workbench/ holds `names` (files ending .py, else packages)."""
    pkg = tmp_path / "workbench"
    pkg.mkdir()
    for name in ["__init__.py", *names]:
        if name.endswith(".py"):
            (pkg / name).write_text("")
        else:
            (pkg / name).mkdir()
            (pkg / name / "__init__.py").write_text("")
    return tmp_path


def test_an_unmapped_top_level_entry_is_listed(tmp_path):
    root = make_tree(tmp_path, [short(FLAT[0][0]) + ".py", "stray.py", "strays", "notes.txt"])
    assert regroup.unmapped_entries(root) == ["notes.txt", "stray.py", "strays"]


def test_a_module_or_a_package_of_the_same_name_both_move(tmp_path):
    old, new = FLAT[0]
    root = make_tree(tmp_path, [short(old)])  # the module became a package on another branch
    [(src, dst)] = regroup.planned_moves(root)
    assert src == root / "workbench" / short(old) and dst == root.joinpath(*new.split("."))


def test_both_places_existing_is_refused(tmp_path):
    old, new = FLAT[0]
    root = make_tree(tmp_path, [short(old) + ".py", new.split(".")[1]])
    (root.joinpath(*new.split(".")).with_suffix(".py")).write_text("")
    with pytest.raises(SystemExit):
        regroup.planned_moves(root)
