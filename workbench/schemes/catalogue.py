"""The scheme catalogue: one typed record (`SchemeSpec`) per registered scheme, and the one registry holding them.

Everything the workbench asks about a scheme lives on its spec, given once where the scheme registers
(`workbench.schemes.base.register`): where its cost model comes from (`origin`), the family whose cost module it
shares (`family`), how it splits a layer over devices (`partition`), what it costs (a dense FFN, a mixture of
experts, or both), whether its decode step verifies several tokens (speculation), where a speculative draft may
run beside it, the options section a deployment sets for it, and the engine whose quantized kernels it runs.
Callers ask the catalogue (`load_all().filter(moe=True)`, `load_all().spec(name).family`), never a table of names.

The catalogue maps a name to the (paper, evaluator) pair the arena evaluates (`workbench.scenarios.arena.Registry`), so a
filtered or options-applied copy of it is a plain mapping of the same shape; `spec(name)` gives the whole record.
This module imports nothing of `workbench.schemes` (base imports it), so no import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields

from workbench.core.errors import WorkbenchError

# How a scheme splits a layer over its devices: one device (nothing split), tensor parallel (heads and FFN
# columns), a layer pipeline, experts over devices, the sequence (tokens), or a mix planned per layer (Galaxy's HMP)
PARTITIONS = ("one", "tp", "pipeline", "expert", "sequence", "hybrid")
# Where a speculative draft runs (`workbench.scenarios.speculative.Speculation.placement`): the target's first device, a
# device of its own, or prima.cpp's head device of its piped ring (only a scheme running that ring offers it)
DRAFT_PLACEMENTS = ("root", "own", "ring")
PLAIN_PLACEMENTS = ("root", "own")  # what every scheme offers


@dataclass(frozen=True)
class SchemeSpec:
    """One registered scheme: its name, where its cost model comes from, how it partitions and what it costs."""

    name: str
    paper: str  # the arena's `paper` column (data/reported's paper key, or "baseline")
    origin: str  # the paper, or the engine and version, whose mechanism the cost model follows
    family: str  # the schemes sharing one cost module (Galaxy's five, distributed-llama's releases)
    partition: str  # one of PARTITIONS
    evaluator: Callable  # (model, cluster, workload) -> SchemeResult, as registered (wrappers applied)
    moe: bool = False  # costs a mixture of experts through the operator table's expert rows
    dense: bool = True  # costs a dense model (False: MoE only, the MoE engines' partitions)
    no_moe: str = ""  # why it cannot cost a mixture of experts (one line; required when moe is False)
    no_operators: str = ""  # why its results carry no operator rows (one line); "": they carry them
    engine: str = ""  # whose quantized kernels its weight matmuls run (`workbench.machine.kernel_cost`); "": its own
    single_token: str = ""  # why its decode step carries one token (a verify step is n/a); "": it verifies several
    draft_placements: tuple[str, ...] = PLAIN_PLACEMENTS  # where a speculative draft may run beside it
    options: type | None = None  # its `[schemes.<section>]` options dataclass (`options.SECTION`), None: takes none

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise WorkbenchError(f"scheme name must be an identifier (letters, digits, _), got {self.name!r}")
        for what in ("paper", "origin", "family"):
            if not isinstance(getattr(self, what), str) or not getattr(self, what).strip():
                raise WorkbenchError(f"{self.name}: {what} must be non-empty text, got {getattr(self, what)!r}")
        if self.partition not in PARTITIONS:
            raise WorkbenchError(f"{self.name}: partition must be one of {', '.join(PARTITIONS)}; "
                                 f"got {self.partition!r}")
        if not callable(self.evaluator):
            raise WorkbenchError(f"{self.name}: evaluator must be callable, got {self.evaluator!r}")
        if not (self.moe or self.dense):
            raise WorkbenchError(f"{self.name}: a scheme costs a dense model, a mixture of experts or both "
                                 f"(moe=False with dense=False costs nothing)")
        if self.moe == bool(self.no_moe.strip()):
            raise WorkbenchError(f"{self.name}: no_moe must say in one line why a scheme cannot cost a mixture of "
                                 f"experts when moe is False, and be empty when it can; got moe={self.moe}, "
                                 f"no_moe={self.no_moe!r}")
        if "\n" in self.no_moe:
            raise WorkbenchError(f"{self.name}: no_moe must be one line, got {self.no_moe!r}")
        if self.partition == "expert" and self.dense:
            raise WorkbenchError(f"{self.name}: an expert partition needs experts: register it with dense=False")
        if not self.draft_placements or not set(self.draft_placements) <= set(DRAFT_PLACEMENTS) \
                or not set(PLAIN_PLACEMENTS) <= set(self.draft_placements):
            raise WorkbenchError(f"{self.name}: draft_placements must hold {', '.join(PLAIN_PLACEMENTS)} and "
                                 f"only {', '.join(DRAFT_PLACEMENTS)}; got {self.draft_placements!r}")
        if self.options is not None and not (isinstance(self.options, type)
                                              and isinstance(self.options.__dict__.get("SECTION"), str)):
            raise WorkbenchError(f"{self.name}: options must be an options dataclass with a SECTION name, "
                                 f"got {self.options!r}")

    @property
    def multi_token(self) -> bool:
        """True when its decode step can carry several new tokens (a speculative verify step)."""
        return not self.single_token


CRITERIA = tuple(f.name for f in fields(SchemeSpec) if f.name not in ("name", "evaluator"))


class Catalogue(Mapping):
    """Every registered scheme in registration order: name -> (paper, evaluator) for the arena, `spec(name)` the
    whole `SchemeSpec`, `filter(...)` the names matching spec fields."""

    def __init__(self) -> None:
        self._specs: dict[str, SchemeSpec] = {}

    def __getitem__(self, name: str) -> tuple[str, Callable]:
        spec = self._specs[name]
        return spec.paper, spec.evaluator

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def add(self, spec: SchemeSpec) -> None:
        """Hold `spec` under its name (a second spec under a held name replaces it: re-importing a module)."""
        if not isinstance(spec, SchemeSpec):
            raise WorkbenchError(f"a catalogue holds SchemeSpec records, got {spec!r}")
        self._specs[spec.name] = spec

    def reorder(self, rank: dict[str, int]) -> None:
        """Put the specs in the order of their evaluator's module in `rank` (a module not ranked last), keeping
        each module's registration order (the arena's row order, whatever was imported first)."""
        specs = sorted(self._specs.values(), key=lambda s: rank.get(s.evaluator.__module__, len(rank)))
        self._specs = {s.name: s for s in specs}

    def remove(self, name: str) -> None:
        """Drop a registered scheme (a test's or a toy engine's, after it ran)."""
        if name not in self._specs:
            raise WorkbenchError(f"unknown scheme {name!r}: nothing to remove")
        del self._specs[name]

    def spec(self, name: str) -> SchemeSpec:
        """The spec of a registered scheme (one line naming the registered ones otherwise)."""
        if name not in self._specs:
            raise WorkbenchError(f"unknown scheme {name!r}; registered: {', '.join(self._specs)}")
        return self._specs[name]

    def specs(self) -> tuple[SchemeSpec, ...]:
        """Every spec, in registration order."""
        return tuple(self._specs.values())

    def filter(self, **criteria) -> tuple[str, ...]:
        """The names whose spec has each given field equal to its value (`filter(moe=True)`,
        `filter(family="galaxy", partition="tp")`), in registration order."""
        unknown = sorted(set(criteria) - set(CRITERIA))
        if unknown:
            raise WorkbenchError(f"catalogue filter: unknown field {', '.join(unknown)}; allowed: {', '.join(CRITERIA)}")
        return tuple(s.name for s in self._specs.values() if all(getattr(s, k) == v for k, v in criteria.items()))

    def sections(self) -> dict[str, type]:
        """Options section name -> its options dataclass, for every scheme that takes options (sorted by name)."""
        found = {s.options.SECTION: s.options for s in self._specs.values() if s.options is not None}
        return dict(sorted(found.items()))
