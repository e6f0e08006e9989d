"""Scheme options a deployment sets: `[schemes.<section>]` tables in the TOML and the `options` column of
`calibrate`'s CSV ("version=0.7; syncs_per_layer=2"), each key declared once in its scheme's options dataclass
(`workbench.core.fields.declared`), from which the parser, the range checks and docs/keys.md's rows derive.

Sections are the catalogue's (`sections()`: each registered scheme's `SchemeSpec.options` dataclass, named by its
`SECTION`): `dllama` (`workbench.schemes.engines.DllamaOptions`: version, syncs_per_layer) and `llamacpp`
(`workbench.schemes.edge_engines.LlamaCppOptions`: tensor_split). An options object says
which of its schemes the arena shows (`schemes()`), checks itself against a cluster (`check(n_devices)`) and gives
the evaluator its options change (`evaluator`; the registered ones keep the arena's (model, cluster, workload)
signature).
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench.core.errors import WorkbenchError
from workbench.core.fields import FieldSpec, declared_fields
from workbench.schemes.base import load_all


def sections() -> dict[str, type]:
    """Section name -> options dataclass, of every registered scheme that takes options (sorted by name)."""
    return load_all().sections()


def _keys(section: str) -> dict[str, tuple[str, FieldSpec]]:
    """TOML key -> (field name, spec) of a section's declared options."""
    return {tk.key: (f.name, spec) for f, spec in declared_fields(sections()[section]) for tk in spec.toml}


def parse_section(where: str, section: str, table) -> object:
    """One `[schemes.<section>]` table -> its options object (one-line errors naming the key and its range)."""
    if section not in sections():
        raise WorkbenchError(f"{where}: schemes.{section} is not a scheme options section; allowed: "
                             f"{', '.join(sections())}")
    if not isinstance(table, Mapping):
        raise WorkbenchError(f"{where}: schemes.{section} must be a table, got {table!r}")
    keys = _keys(section)
    values = {}
    for key, value in table.items():
        if key not in keys:
            raise WorkbenchError(f"{where}: unknown key schemes.{section}.{key}; allowed: {', '.join(keys)}")
        name, spec = keys[key]
        if spec.kind == "text":
            if not isinstance(value, str):
                raise WorkbenchError(f"{where}: schemes.{section}.{key} must be text, got {value!r}")
            values[name] = value
        else:
            values[name] = spec.check(f"{where}: schemes.{section}.{key}", value, from_file=True)
    try:
        return sections()[section](**values)
    except WorkbenchError as exc:
        text = str(exc)
        named = text.split(" ", 1)[0] in keys  # "tensor_split must be ...": name it schemes.<section>.<key>
        raise WorkbenchError(f"{where}: {f'schemes.{section}.' if named else ''}{text}") from None


def parse_schemes(where: str, table) -> tuple:
    """The whole `[schemes]` table -> a tuple of options objects (one per section given)."""
    if not isinstance(table, Mapping):
        raise WorkbenchError(f"{where}: schemes must be a table of [schemes.<section>] tables, got {table!r}")
    return tuple(parse_section(where, section, sub) for section, sub in table.items())


def check_cluster(where: str, options: tuple, n_devices: int) -> tuple:
    """`options` checked against a cluster of `n_devices` (each options object's `check(n_devices)`: a
    tensor_split with one number per device), each error one line naming schemes.<section>.<key>."""
    for opts in options:
        section = type(opts).SECTION
        try:
            opts.check(n_devices)
        except WorkbenchError as exc:
            raise WorkbenchError(f"{where}: schemes.{section}.{exc}") from None
    return options


def parse_text(where: str, scheme: str, text: str) -> tuple:
    """A CSV cell "key=value; key=value" for `scheme`'s options section -> options objects (empty cell: none)."""
    text = "" if text is None or text != text else str(text).strip()  # NaN from an empty CSV cell
    if not text:
        return ()
    section = section_of(scheme)
    if section is None:
        raise WorkbenchError(f"{where}: scheme {scheme!r} takes no options; sections: {', '.join(sections())}")
    table = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise WorkbenchError(f"{where}: options must be key=value[; key=value], got {text!r}")
        key, value = key.strip(), value.strip()
        integer = key in _keys(section) and _keys(section)[key][1].kind == "integer"
        table[key] = int(value) if integer and value.lstrip("-").isdigit() else value
    return (parse_section(where, section, table),)


def section_of(scheme: str) -> str | None:
    """The options section of `scheme` (its `SchemeSpec.options`; None: an unregistered one or one taking none)."""
    catalogue = load_all()
    options = catalogue.spec(scheme).options if scheme in catalogue else None
    return None if options is None else options.SECTION


def apply_options(registry: Mapping, options: tuple) -> dict:
    """`registry` with each options object applied: its section's schemes limited to `schemes()` and their
    evaluators replaced by the options' own (a registry without options is returned as a copy)."""
    out = dict(registry)
    for opts in options:
        section_schemes = set(load_all().filter(options=type(opts)))
        keep = set(opts.schemes())
        for scheme in section_schemes & set(out):
            if scheme not in keep:
                del out[scheme]
                continue
            evaluator = opts.evaluator(scheme)
            if evaluator is not None:
                out[scheme] = (out[scheme][0], evaluator)
    return out


def key_rows() -> list[tuple[str, FieldSpec]]:
    """(table, spec) of every declared option, for docs/keys.md."""
    return [(f"[schemes.{section}]", spec) for section, cls in sections().items() for _, spec in declared_fields(cls)]
