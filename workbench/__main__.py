"""Command line: `python -m workbench reproduce | whatif | cluster` (see --help)."""

from __future__ import annotations

import argparse
import importlib
import sys

from workbench.errors import WorkbenchError


def _reproduce(args: argparse.Namespace) -> int:
    from workbench.runner import parse_parameters, reproduce

    runs = reproduce(only=args.only, params=parse_parameters(args.param), progress=not args.no_progress)
    return 1 if any(r.error for r in runs) else 0


# Subcommands contributed by other modules: name -> (module, help). Each module defines
# `add_arguments(parser)` and `main(args) -> int`.
PLUGINS = {
    "whatif": ("workbench.arena", "evaluate every scheme on devices/network/model from a TOML file"),
    "cluster": ("workbench.cluster", "run an experiment across N local processes with jax.distributed"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("reproduce", help="execute the notebooks and write figures/ + figures/REPORT.md")
    rep.add_argument("--only", nargs="+", metavar="NAME", help="notebook names (stems) to run")
    rep.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="notebook parameter (Python literal or string); repeatable")
    rep.add_argument("--no-progress", action="store_true", help="no per-cell progress bars")
    rep.set_defaults(func=_reproduce)
    for name, (module, help_text) in PLUGINS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        p = sub.add_parser(name, help=help_text)
        mod.add_arguments(p)
        p.set_defaults(func=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
