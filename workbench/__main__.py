"""Command line: `python -m workbench reproduce | whatif | cluster | calibrate | profile | engines` (see --help)."""

from __future__ import annotations

import argparse
import importlib
import sys

from workbench.core.errors import WorkbenchError


def _reproduce(args: argparse.Namespace) -> int:
    from workbench.report.runner import parse_parameters, reproduce

    runs = reproduce(only=args.only, params=parse_parameters(args.param), progress=not args.no_progress,
                     build_dir=args.build_dir)
    return 1 if any(r.error for r in runs) else 0


# Subcommands contributed by other modules: name -> (module, help). Each module defines
# `add_arguments(parser)` and `main(args) -> int`; it is imported only when its command runs.
PLUGINS = {
    "whatif": ("workbench.scenarios.whatif", "evaluate every scheme on devices/network/model from a TOML file"),
    "cluster": ("workbench.measure.cluster", "run an experiment across N local processes with jax.distributed"),
    "calibrate": ("workbench.scenarios.calibrate", "fit named constants of a TOML deployment on your measured latencies"),
    "profile": ("workbench.measure.profile.cli", "measure this machine (or a link) and write a device (or [network]) TOML"),
    "engines": ("workbench.measure.engines.cli", "run llama.cpp here (campaign), hold the workbench to it (compare), "
                "run a distributed engine over shaped links (run)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("reproduce", help="execute the notebooks and write figures/ + figures/REPORT.md")
    rep.add_argument("--only", nargs="+", metavar="NAME", help="notebook names (stems) to run")
    rep.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="notebook parameter (Python literal or string); repeatable")
    rep.add_argument("--no-progress", action="store_true", help="no per-cell progress bars")
    rep.add_argument("--build-dir", default=None, metavar="DIR",
                     help="put the executed notebooks in DIR (default: beside their outputs, "
                          "<figures_dir>/<notebook>/<notebook>.ipynb)")
    rep.set_defaults(func=_reproduce)
    for name, (module, help_text) in PLUGINS.items():
        p = sub.add_parser(name, help=help_text, add_help=False)
        p.set_defaults(plugin=module)
    return parser


def plugin_parser(name: str) -> argparse.ArgumentParser:
    """The full parser of one plugin subcommand (its module is imported only when that command runs)."""
    module, help_text = PLUGINS[name]
    parser = argparse.ArgumentParser(prog=f"python -m workbench {name}", description=help_text)
    mod = importlib.import_module(module)
    mod.add_arguments(parser)
    parser.set_defaults(func=mod.main)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line; a plugin's module (e.g. jax for `cluster`) is imported only when it is chosen."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, rest = build_parser().parse_known_args(argv)
    if getattr(args, "plugin", None) is None:
        return build_parser().parse_args(argv)  # errors for unknown arguments of `reproduce`
    return plugin_parser(args.command).parse_args(rest)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return args.func(args)
    except WorkbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
