"""Regroup `workbench/` into folders that are its layers: move every top-level module into its layer's package and
rewrite every reference to it (issue 41, deliverable 3).

Re-runnable and idempotent: a module already in its new place is left there, one that does not exist is passed
over, and a top-level entry of `workbench/` that MAPPING does not place stops the script before anything moves.

    python scripts/regroup.py            # move, rewrite, write the aliases and the layout block of the docs
    python scripts/regroup.py --check    # only list what would move, and fail on unmapped top-level entries

Layers, bottom to top (each may import only the ones below it; `workbench.LAYERS` is the order the test checks):

    core      errors, units, fields, atomic io, provenance constants, the timeline simulator, apportioning
    report    the Recorder (results.csv + charts), display, chart checks, prose, the scoreboard, the notebook runner
    model     what a Transformer is: sizes and FLOPs, weight formats, MoE routing, GGUF model files
    machine   what it runs on: devices, links and collectives, an engine's matmul kernels on a device
    schemes   who computes and sends what (papers' and engines' schemes; STI's quantizer and shards),
              and schemes/planners, the papers' planners
    kernels   JAX programs of the schemes (and the accelerator roofline that holds them to a device)
    papers    one module per paper: experiments returning tidy frames (STI's MiniLM, the golden planner cases)
    scenarios a deployment you describe: the TOML, every scheme on it (arena), what-if, the explorer, speculation,
              MoE advice, scaling, regimes, calibration
    measure   real processes here: the multi-process cluster, llama.cpp runs, the machine profile
    studies   the workbench's own studies (over scenarios and measurements)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it, so no reader sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode)
    os.replace(tmp, path)

# Old dotted module (a top-level module, or a whole package: its submodules follow it) -> new dotted module.
# `userconfig` and `explore` may be a module or a package; either moves whole.
MAPPING: dict[str, str] = {
    # core: the foundation every layer stands on
    "workbench.errors": "workbench.core.errors",
    "workbench.units": "workbench.core.units",
    "workbench.fields": "workbench.core.fields",
    "workbench.io": "workbench.core.io",
    "workbench.constants": "workbench.core.constants",
    "workbench.simulate": "workbench.core.simulate",
    "workbench.apportion": "workbench.core.apportion",
    # report: recording and showing results
    "workbench.results": "workbench.report.results",
    "workbench.display": "workbench.report.display",
    "workbench.chartcheck": "workbench.report.chartcheck",
    "workbench.livechart": "workbench.report.livechart",
    "workbench.prose": "workbench.report.prose",
    "workbench.fidelity": "workbench.report.fidelity",
    "workbench.runner": "workbench.report.runner",
    # model: the Transformer being served
    "workbench.models": "workbench.model.models",
    "workbench.formats": "workbench.model.formats",
    "workbench.routing": "workbench.model.routing",
    "workbench.modelfile": "workbench.model.modelfile",
    # machine: the devices and links it runs on
    "workbench.hardware": "workbench.machine.hardware",
    "workbench.network": "workbench.machine.network",
    "workbench.kernel_cost": "workbench.machine.kernel_cost",
    # schemes: partitions, the papers' and engines' schemes, their planners (STI's quantizer and shards go with STI)
    "workbench.quantize": "workbench.schemes.sti_quantize",
    "workbench.shards": "workbench.schemes.sti_shards",
    "workbench.planners": "workbench.schemes.planners",
    # kernels: JAX programs and the roofline of one device running them
    "workbench.accelerator": "workbench.kernels.accelerator",
    # papers: reproductions (and what only they use)
    "workbench.minilm": "workbench.papers.sti_minilm",
    "workbench.golden": "workbench.papers.golden",
    # scenarios: a deployment described by its user, every scheme on it, and the analyses over that arena
    "workbench.userconfig": "workbench.scenarios.userconfig",
    "workbench.arena": "workbench.scenarios.arena",
    "workbench.arena_charts": "workbench.scenarios.arena_charts",
    "workbench.speculative": "workbench.scenarios.speculative",
    "workbench.moe_advice": "workbench.scenarios.moe_advice",
    "workbench.scaling": "workbench.scenarios.scaling",
    "workbench.regimes": "workbench.scenarios.regimes",
    "workbench.llamabench": "workbench.scenarios.llamabench",
    "workbench.calibrate": "workbench.scenarios.calibrate",
    "workbench.whatif": "workbench.scenarios.whatif",
    "workbench.explore": "workbench.scenarios.explore",
    # measure: real processes on this machine
    "workbench.cluster": "workbench.measure.cluster",
    "workbench.engines": "workbench.measure.engines",
    "workbench.profile": "workbench.measure.profile",
}

# The layer packages (bottom to top) with the one-line docstring a new package's __init__.py gets. Keep the order
# equal to `workbench.LAYERS` (the script checks it).
LAYER_DOCS: dict[str, str] = {
    "core": "The core layer: errors, units, declared fields, atomic output, provenance constants, the timeline "
            "simulator and integer apportioning.",
    "report": "The report layer: the Recorder (results.csv and charts), tables in human units, chart checks, "
              "prose from data, the fidelity scoreboard and the notebook runner.",
    "model": "The model layer: the Transformer served (sizes, bytes, FLOPs), weight formats, MoE routing and model "
             "files.",
    "machine": "The machine layer: devices (peaks, memory, power), links and collectives, and an engine's matmul "
               "kernels on a device.",
    "schemes": None,  # standing package: its own docstring says its layer
    "schemes.planners": None,
    "kernels": None,
    "papers": None,
    "scenarios": "The scenarios layer: a deployment you describe (userconfig), every scheme on it (arena), and "
                 "the analyses over it: what-if, the explorer, speculation, MoE advice, scaling, regimes, calibration.",
    "measure": "The measure layer: real processes on this machine: the multi-process cluster, engine runs and the "
               "machine profile.",
    "studies": None,
}

ROOT_ENTRIES = {"__init__.py", "__main__.py"}
TEXT_SUFFIXES = {".py", ".md", ".toml", ".json", ".ipynb", ".cfg", ".ini", ".txt", ".yml", ".yaml", ".sh", ".rst"}
TEXT_NAMES = {"Makefile"}
SKIP_PREFIXES = ("figures/", "data/reported/")  # outputs and paper numbers: never rewritten
LINTED = ("workbench", "tests", "benchmarks", "scripts")  # `make lint`'s folders (and scripts/)
ALIASES_BEGIN = "# regroup: old module -> new module (written by scripts/regroup.py; one release of import shims)"
ALIASES_END = "# regroup: end"


def fail(message: str) -> None:
    """Stop the script with one line on stderr."""
    print(f"regroup: {message}", file=sys.stderr)
    raise SystemExit(1)


def git(root: Path, *args: str) -> str:
    """Run git in `root` and return its stdout."""
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def module_path(root: Path, dotted: str) -> Path | None:
    """The file or package folder of `dotted` under `root`, or None when it does not exist."""
    base = root.joinpath(*dotted.split("."))
    if base.is_dir() and (base / "__init__.py").is_file():
        return base
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def layer_packages() -> list[str]:
    """The layer packages' top-level names, bottom to top."""
    return list(dict.fromkeys(name.split(".")[0] for name in LAYER_DOCS))


def unmapped_entries(root: Path) -> list[str]:
    """Top-level entries of workbench/ that MAPPING does not place and that are not layer packages."""
    placed = {old.split(".")[1] for old in MAPPING} | set(layer_packages()) | ROOT_ENTRIES
    found = []
    for entry in sorted((root / "workbench").iterdir()):
        if entry.name.startswith((".", "__pycache__")) or entry.suffix in (".pyc",):
            continue
        name = entry.stem if entry.is_file() else entry.name
        if entry.is_file() and entry.suffix != ".py":
            found.append(entry.name)
        elif entry.name not in placed and name not in placed:
            found.append(entry.name)
    return found


def check_layers(root: Path) -> None:
    """Fail unless workbench/__init__.py's LAYERS lists LAYER_DOCS' packages in the same order."""
    text = (root / "workbench" / "__init__.py").read_text()
    match = re.search(r"^LAYERS\s*=\s*\(([^)]*)\)", text, re.M)
    if not match:
        fail("workbench/__init__.py declares no LAYERS tuple")
    declared = re.findall(r"\"([\w.]+)\"", match.group(1))
    if declared != list(LAYER_DOCS):
        fail(f"workbench.LAYERS {declared} differs from LAYER_DOCS {list(LAYER_DOCS)}")


def planned_moves(root: Path) -> list[tuple[Path, Path]]:
    """(old path, new path) for every mapped module still at its old place; fail where both places exist."""
    moves = []
    for old, new in MAPPING.items():
        src, dst = module_path(root, old), module_path(root, new)
        if src is not None and dst is not None:
            fail(f"{old} and {new} both exist: merge them by hand first")
        if src is not None:
            leaf = root.joinpath(*new.split("."))
            moves.append((src, leaf if src.is_dir() else leaf.with_suffix(".py")))
    return moves


def ensure_package(root: Path, folder: Path) -> None:
    """Create `folder` as a package (with its layer's docstring) and git-add its __init__.py."""
    init = folder / "__init__.py"
    if init.exists():
        return
    rel = ".".join(folder.relative_to(root / "workbench").parts)
    doc = LAYER_DOCS.get(rel)
    if doc is None:
        fail(f"no docstring for the new package workbench.{rel}: add it to LAYER_DOCS")
    folder.mkdir(parents=True, exist_ok=True)
    init.write_text(f'"""{doc}"""\n')
    git(root, "add", str(init.relative_to(root)))


def shift_parents(path: Path, depth: int) -> None:
    """Deepen `Path(__file__)...parents[k]` in a moved file by `depth` folders (e.g. io.py's REPO_ROOT)."""
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for file in files:
        text = file.read_text()
        new = re.sub(r"(Path\(__file__\)(?:\.resolve\(\))?\.parents\[)(\d+)\]",
                     lambda m: f"{m.group(1)}{int(m.group(2)) + depth}]", text)
        if new != text:
            write_atomically(file, new)


def move(root: Path, moves: list[tuple[Path, Path]]) -> None:
    """git mv every planned move, creating the layer packages it needs."""
    for src, dst in moves:
        folder = dst.parent
        chain = []
        while folder != root / "workbench" and not (folder / "__init__.py").exists():
            chain.append(folder)
            folder = folder.parent
        for pkg in reversed(chain):
            ensure_package(root, pkg)
        git(root, "mv", str(src.relative_to(root)), str(dst.relative_to(root)))
        shift_parents(dst, len(dst.relative_to(root).parts) - len(src.relative_to(root).parts))
        print(f"moved {src.relative_to(root)} -> {dst.relative_to(root)}")


def split_from_imports(text: str, top: dict[str, str]) -> str:
    """`from workbench import a, b as c` -> one `from workbench.<layer> import <leaf>` per moved name."""
    pattern = re.compile(r"(?m)(?:^|(?<=\\n))([ \t]*)from workbench import ([A-Za-z_]\w*(?: as \w+)?"
                         r"(?:, *[A-Za-z_]\w*(?: as \w+)?)*)(?=$|\\n|\")")

    def one(match: re.Match) -> str:
        indent, names = match.group(1), match.group(2)
        in_json = match.string[max(0, match.start() - 2):match.start()] == "\\n"  # a notebook's JSON string
        sep = "\\n" if in_json else "\n"
        kept, lines = [], []
        for item in (n.strip() for n in names.split(",")):
            name, _, alias = item.partition(" as ")
            if name not in top:
                kept.append(item)
                continue
            parent, leaf = top[name].rsplit(".", 1)
            alias = alias or (name if leaf != name else "")
            lines.append(f"from {parent} import {leaf}" + (f" as {alias}" if alias else ""))
        if not lines:
            return match.group(0)
        if kept:
            lines.insert(0, f"from workbench import {', '.join(kept)}")
        return indent + (sep + indent).join(lines)

    return pattern.sub(one, text)


def rewrite_text(text: str) -> str:
    """Every reference to a mapped module in `text` rewritten to its new place (idempotent)."""
    top = {old.split(".", 1)[1]: new for old, new in MAPPING.items()}
    text = split_from_imports(text, top)
    for old in sorted(MAPPING, key=len, reverse=True):
        new = MAPPING[old]
        text = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", new, text)
        old_path, new_path = old.replace(".", "/"), new.replace(".", "/")
        text = re.sub(rf"(?<![\w.\-/]){re.escape(old_path)}(?![\w\-])", new_path, text)
        name, parts = old.split(".", 1)[1], new.split(".")[1:]
        prefix = "".join(f'"{p}" / ' for p in parts[:-1])
        for anchor in (r'"workbench"\s*/\s*', r"Path\(workbench\.__file__\)(?:\.resolve\(\))?\.parent\s*/\s*"):
            text = re.sub(rf'({anchor})"{re.escape(name)}(\.py)?"',
                          lambda m, last=parts[-1], pre=prefix: f'{m.group(1)}{pre}"{last}{m.group(2) or ""}"', text)
    return text


def rewrite_files(root: Path) -> list[Path]:
    """Rewrite every tracked text file (not this script, outputs or paper numbers); return those that changed."""
    changed = []
    for rel in git(root, "ls-files").splitlines():
        path = root / rel
        if (rel == "scripts/regroup.py" or rel.startswith(SKIP_PREFIXES) or not path.is_file()
                or (path.suffix not in TEXT_SUFFIXES and path.name not in TEXT_NAMES)):
            continue
        text = path.read_text()
        new = rewrite_text(text)
        if rel == "workbench/__init__.py":
            new = write_aliases(root, new)
        if new != text:
            write_atomically(path, new)
            changed.append(path)
    return changed


def sort_imports(root: Path, changed: list[Path]) -> None:
    """Re-sort the imports of the rewritten Python files the linter checks (new module paths sort elsewhere)."""
    ruff = Path(sys.executable).with_name("ruff")
    files = [str(p.relative_to(root)) for p in changed
             if p.suffix == ".py" and p.relative_to(root).parts[0] in LINTED]
    if not ruff.is_file():
        print(f"regroup: no ruff beside {sys.executable}: run `ruff check --fix --select I {' '.join(LINTED)}`")
    elif files:
        subprocess.run([str(ruff), "check", "--fix", "--select", "I", "--quiet", *files], cwd=root, check=True)


def write_aliases(root: Path, init_text: str) -> str:
    """workbench/__init__.py with its alias block listing every mapped module now at its new place."""
    moved = {old: new for old, new in MAPPING.items()
             if module_path(root, new) is not None and module_path(root, old) is None}
    body = "".join(f'    "{old}": "{new}",\n' for old, new in moved.items())
    block = f"{ALIASES_BEGIN}\nMOVED: dict[str, str] = {{\n{body}}}\n{ALIASES_END}"
    pattern = re.compile(re.escape(ALIASES_BEGIN) + r".*?" + re.escape(ALIASES_END), re.S)
    if not pattern.search(init_text):
        fail("workbench/__init__.py has no alias block between the regroup markers")
    return pattern.sub(lambda _: block, init_text)


def leftovers(root: Path) -> list[str]:
    """`path:line` of every reference to an old name the rewrite did not reach (the alias table aside)."""
    names = "|".join(re.escape(old.split(".", 1)[1]) for old in MAPPING)
    dotted = re.compile(rf"(?<![\w.])workbench[./]({names})(?![\w\-])")
    imported = re.compile(rf"from workbench import \(?[\w ,]*\b({names})\b")
    found = []
    for rel in git(root, "ls-files").splitlines():
        path = root / rel
        if (rel == "scripts/regroup.py" or rel.startswith(SKIP_PREFIXES) or not path.is_file()
                or (path.suffix not in TEXT_SUFFIXES and path.name not in TEXT_NAMES)):
            continue
        text = path.read_text()
        if rel == "workbench/__init__.py":
            text = re.sub(re.escape(ALIASES_BEGIN) + r".*?" + re.escape(ALIASES_END), "", text, flags=re.S)
        found += [f"{rel}:{n}" for n, line in enumerate(text.splitlines(), 1)
                  if dotted.search(line) or imported.search(line)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the checkout")
    parser.add_argument("--check", action="store_true", help="list the moves and unmapped entries; change nothing")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    stray = unmapped_entries(root)
    if stray:
        fail("no mapping for these top-level entries of workbench/ (add them to MAPPING): " + ", ".join(stray))
    check_layers(root)
    moves = planned_moves(root)
    if args.check:
        for src, dst in moves:
            print(f"would move {src.relative_to(root)} -> {dst.relative_to(root)}")
        return 0
    move(root, moves)
    for pkg in layer_packages():
        ensure_package(root, root / "workbench" / pkg)
    changed = rewrite_files(root)
    sort_imports(root, changed)
    print(f"rewrote {len(changed)} files")
    subprocess.run([sys.executable, str(root / "scripts" / "layout_doc.py"), "--root", str(root)], check=True)
    for source in sorted((root / "notebooks" / "src").glob("*.py")):  # the re-sorted sources' notebooks follow them
        subprocess.run([sys.executable, str(root / "scripts" / "py2nb.py"), str(source),
                        str(root / "notebooks" / f"{source.stem}.ipynb")], check=True)
    missed = leftovers(root)
    if missed:
        fail("these lines still name a moved module (rewrite them by hand, or teach rewrite_text): "
             + ", ".join(missed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
