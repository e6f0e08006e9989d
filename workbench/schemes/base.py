"""Common types every scheme evaluator takes and returns (the arena's contract)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import Topology
from workbench.model.models import TransformerConfig
from workbench.schemes.catalogue import PLAIN_PLACEMENTS, Catalogue, SchemeSpec
from workbench.schemes.common import Breakdown, memory_share
from workbench.schemes.workload import PHASES, Workload  # noqa: F401 (PHASES: re-exported, the arena's contract)


@dataclass(frozen=True)
class Cluster:
    """Devices (one spec each, possibly different) joined by one topology; `shared_machine`, when the devices
    are co-located processes of one machine, is that machine whole: work one device does while the others
    wait for it (a master's embedding, head and host work) runs on all of it, not on the device's share."""

    devices: tuple[DeviceSpec, ...]
    topology: Topology
    shared_machine: DeviceSpec | None = None

    def __post_init__(self) -> None:
        if not self.devices:
            raise WorkbenchError("a cluster needs at least one device")
        if len(self.devices) != self.topology.n_devices:
            raise WorkbenchError(
                f"cluster has {len(self.devices)} devices but the topology is for {self.topology.n_devices}")

    @property
    def n(self) -> int:
        """Number of devices."""
        return len(self.devices)

    def serial_device(self, device: DeviceSpec) -> DeviceSpec:
        """Where `device`'s serial work runs: the shared machine whole, else the device itself."""
        return self.shared_machine if self.shared_machine is not None else device


def over_budget_note(peak: tuple[float, ...], budget: tuple[float, ...], names: tuple[str, ...]) -> str:
    """'' if every device's peak fits its budget, else the one 'infeasible: ...' wording naming the device with
    the most bytes over (the first of equals), its peak, budget and overflow: every scheme's over-budget note."""
    over = [float(p) - float(b) for p, b in zip(peak, budget)]
    if not any(o > 0 for o in over):
        return ""
    d = max(range(len(over)), key=over.__getitem__)
    return (f"infeasible: device {d} ({names[d]}) needs {float(peak[d]):.4g} B but its budget is "
            f"{float(budget[d]):.4g} B ({over[d]:.4g} B do not fit)")


@dataclass(frozen=True)
class MoEParts:
    """A MoE step's seconds by part (attention with its connective blocks, router, expert compute, expert misses
    from storage, communication): what the MoE schemes add to their result (`SchemeResult.detail`)."""

    attention_s: float
    router_s: float
    experts_s: float
    misses_s: float
    comm_s: float
    traffic: object | None = None  # distributed-llama's per-step sync traffic (`moe.dllama_traffic`); None: not its
    stages: tuple[dict, ...] = ()  # the layer pipeline's per-device stages (layers, cache, memory...); (): none
    misses_per_step: float | None = None  # expert misses a step (the layer pipeline's); None: no expert cache
    expert_bytes_per_step: float | None = None  # expert bytes read a step (the layer pipeline's); None: as above
    slowest_pairs: float | None = None  # EP: the slowest device's expert-token pairs per layer; None: not EP
    mean_pairs: float | None = None  # EP: the mean over devices; None: not EP

    def __post_init__(self) -> None:
        for name in ("attention_s", "router_s", "experts_s", "misses_s", "comm_s"):
            if not getattr(self, name) >= 0:
                raise WorkbenchError(f"MoE part {name} must be >= 0 s, got {getattr(self, name)!r}")

    def seconds(self) -> dict[str, float]:
        """The five parts by name (seconds)."""
        return {"attention_s": self.attention_s, "router_s": self.router_s, "experts_s": self.experts_s,
                "misses_s": self.misses_s, "comm_s": self.comm_s}


@dataclass(frozen=True)
class SchemeResult:
    """One scheme's cost on one model/cluster/workload, with the latency broken down."""

    scheme: str
    paper: str
    phase: str
    latency_s: float
    compute_s: float = 0.0  # kernels' time where their arithmetic binds (the roofline's compute side)
    comm_link_latency_s: float = 0.0  # communication time due to per-hop latency
    comm_bytes_s: float = 0.0  # communication time due to bytes / bandwidth
    io_stall_s: float = 0.0  # waiting for weights from storage / off-chip memory
    other_s: float = 0.0
    fixed_s: float = 0.0  # size-independent device time: kernel launches, per-layer framework time
    serial_s: float = 0.0  # work that runs on one device only (embedding, output head, sampling, root work)
    memory_s: float = 0.0  # kernels' time where streaming their bytes binds (the roofline's memory side)
    peak_memory_bytes: tuple[float, ...] = ()
    memory_budget_bytes: tuple[float, ...] = ()
    notes: str = ""
    extra: dict = field(default_factory=dict, compare=False)  # scheme-specific objects (plans, timelines), no costs
    detail: MoEParts | None = None  # the family's typed cost detail (a MoE step's parts); None: the family has none
    # the busiest device's operator rows for one layer (`common.busiest_breakdown`); None: not costed that way
    operators: Breakdown | None = field(default=None, compare=False)
    no_operators: str = field(default="", compare=False)  # why `operators` is None (one line); "" when it is not

    def __post_init__(self) -> None:
        if self.operators is not None and self.no_operators:
            raise WorkbenchError(f"{self.scheme}: a result with operator rows needs no no_operators reason, got "
                                 f"{self.no_operators!r}")
        if self.operators is not None and not isinstance(self.operators, Breakdown):
            raise WorkbenchError(f"{self.scheme}: operators must be a common.Breakdown, got {self.operators!r}")
        if self.peak_memory_bytes and self.memory_budget_bytes \
                and len(self.peak_memory_bytes) != len(self.memory_budget_bytes):
            raise WorkbenchError(f"{self.scheme}: {len(self.peak_memory_bytes)} peaks but "
                                 f"{len(self.memory_budget_bytes)} budgets; one per device")
        if self.detail is not None and not isinstance(self.detail, MoEParts):
            raise WorkbenchError(f"{self.scheme}: detail must be a MoEParts or None, got {self.detail!r}")

    @property
    def oom(self) -> bool:
        """Whether some device's peak exceeds its budget (derived: never set apart from the bytes)."""
        return any(p > b for p, b in zip(self.peak_memory_bytes, self.memory_budget_bytes))

    @property
    def parts_s(self) -> float:
        """The sum of the breakdown's components (equals latency_s for every scheme)."""
        return (self.compute_s + self.memory_s + self.fixed_s + self.serial_s + self.comm_link_latency_s + self.comm_bytes_s
                + self.io_stall_s + self.other_s)

    def carve(self, fixed_s: float = 0.0, serial_s: float = 0.0) -> SchemeResult:
        """A copy that shows `fixed_s` and `serial_s` as their own components, taken out of compute_s
        (where the evaluator counted them); the latency is unchanged."""
        from dataclasses import replace

        fixed_s, serial_s = float(fixed_s), float(serial_s)
        if fixed_s < 0 or serial_s < 0 or fixed_s + serial_s > self.compute_s * (1 + 1e-9) + 1e-15:
            raise WorkbenchError(f"{self.scheme}: fixed ({fixed_s:.3g} s) + serial ({serial_s:.3g} s) exceed "
                                 f"compute ({self.compute_s:.3g} s)")
        return replace(self, compute_s=max(self.compute_s - fixed_s - serial_s, 0.0),
                       fixed_s=self.fixed_s + fixed_s, serial_s=self.serial_s + serial_s)

    def split_streaming(self, share: float) -> SchemeResult:
        """A copy whose compute_s (roofline time) shows `share` of it as memory_s, the time memory streaming
        binds (`common.memory_share`); the two sum to the compute_s before bit for bit, the latency unchanged."""
        from dataclasses import replace

        if not 0.0 <= share <= 1.0:
            raise WorkbenchError(f"{self.scheme}: memory share must be in [0, 1], got {share!r}")
        arithmetic = self.compute_s - self.compute_s * share
        return replace(self, compute_s=arithmetic, memory_s=self.memory_s + (self.compute_s - arithmetic))

    @property
    def bound(self) -> str:
        """What bounds the step: its largest component group (memory, compute, fixed, serial, communication,
        IO, other; the first of equals); "" for a step of no time."""
        groups = {"memory": self.memory_s, "compute": self.compute_s, "fixed": self.fixed_s, "serial": self.serial_s,
                  "communication": self.comm_link_latency_s + self.comm_bytes_s, "IO": self.io_stall_s,
                  "other": self.other_s}
        name, seconds = max(groups.items(), key=lambda kv: kv[1])
        return name if seconds > 0 else ""

    def row(self) -> dict:
        """A flat dict for a DataFrame row."""
        return {
            "scheme": self.scheme, "paper": self.paper, "phase": self.phase, "latency_s": self.latency_s,
            "compute_s": self.compute_s, "memory_s": self.memory_s, "comm_link_latency_s": self.comm_link_latency_s,
            "comm_bytes_s": self.comm_bytes_s, "io_stall_s": self.io_stall_s, "other_s": self.other_s,
            "fixed_s": self.fixed_s, "serial_s": self.serial_s,
            "bound": self.bound, "peak_memory_bytes": max(self.peak_memory_bytes, default=0.0), "oom": self.oom,
            "notes": self.notes,
        }


def costed(scheme: str, paper: str, phase: str, latency_s: float, names: tuple[str, ...], notes: str = "",
           **fields) -> SchemeResult:
    """The one builder of a memory-checked result: a SchemeResult whose notes are the scheme's own `notes`
    then the over-budget note of its peaks and budgets (`over_budget_note`, `names` the devices)."""
    note = over_budget_note(fields.get("peak_memory_bytes", ()), fields.get("memory_budget_bytes", ()), names)
    return SchemeResult(scheme, paper, phase, latency_s, notes="; ".join(x for x in (notes, note) if x), **fields)


Evaluator = Callable[[TransformerConfig, Cluster, Workload], SchemeResult]
SCHEMES = Catalogue()  # the one catalogue: every registered scheme's SchemeSpec (`load_all` fills it)


def register(name: str, paper: str, *, origin: str, partition: str, family: str = "", streaming: bool = True,
             moe: bool = False, dense: bool = True, no_moe: str = "", no_operators: str = "", engine: str = "", single_token: str = "",
             draft_placements: tuple[str, ...] = PLAIN_PLACEMENTS,
             options: type | None = None) -> Callable[[Evaluator], Evaluator]:
    """Decorator: add an evaluator to the catalogue as a `SchemeSpec` under `name` (from `paper`; `origin`, the
    paper or engine and version it follows; `family`, the schemes sharing its cost module, default `paper`;
    `partition`, one of `catalogue.PARTITIONS`); a name another evaluator already holds is an error
    (re-importing the same module is not).

    With `streaming` (the schemes costed on the shared roofline, `schemes.common`) the registered evaluator
    splits its result's compute_s into arithmetic and memory streaming (`with_streaming_split`); a scheme
    whose compute has no roofline (STI's per-layer profile) or that times its memory traffic itself (the
    MCU's L2 transfers) registers with streaming=False.

    With `moe` the scheme costs a mixture of experts' FFN through the operator table's expert rows
    (`common.layer_operators`); without, it costs a dense FFN by its own formulas, and a MoE model is n/a
    for it (one line saying so, with `no_moe`, the reason it cannot), never silently costed as a dense model of the
    expert width. A scheme with
    `dense` False costs mixtures of experts only (the MoE engines' partitions).

    With `engine` (llama.cpp, distributed-llama) the scheme is that engine's and its weight matmuls run the engine's
    quantized kernels (`runs_engine`: `Workload.engine`, `workbench.machine.kernel_cost`), whatever the deployment says.
    `single_token` says why its decode step carries one token (a speculative verify step is then n/a),
    `draft_placements` where a draft may run beside it, `options` its `[schemes.<section>]` options dataclass.

    A result carries its busiest device's operator rows (`SchemeResult.operators`) or says why not
    (`SchemeResult.no_operators`): a scheme whose results carry none registers `no_operators`, the reason, and a result
    of a scheme without one that carries no rows is an error."""
    def wrap(fn: Evaluator) -> Evaluator:
        known = SCHEMES.get(name)
        if known is not None and (known[0], known[1].__qualname__, known[1].__module__) != \
                (paper, fn.__qualname__, fn.__module__):
            raise WorkbenchError(f"scheme {name!r} is already registered by {known[1].__module__}."
                                 f"{known[1].__qualname__}; pick another name")
        evaluator = with_streaming_split(fn) if streaming else fn
        if engine:
            evaluator = runs_engine(engine, evaluator)
        if not moe:
            evaluator = dense_only(name, no_moe, evaluator)
        evaluator = says_why_no_rows(name, no_operators, evaluator)
        SCHEMES.add(SchemeSpec(name=name, paper=paper, origin=origin, family=family or paper, partition=partition,
                               evaluator=evaluator, moe=moe, dense=dense, no_moe=no_moe, no_operators=no_operators,
                               engine=engine, single_token=single_token,
                               draft_placements=tuple(draft_placements), options=options))
        return evaluator
    return wrap


def one_device_takes(reference: Callable[[], Evaluator], note: str) -> Callable[[Evaluator], Evaluator]:
    """Decorator factory for a partition scheme's evaluator: on one device the scheme splits nothing, so its time
    (latency and every component) is what `reference()` (the evaluator of the unsplit run) gives; its memory, OOM
    and notes stay its own, `note` added to the notes. `reference` is called late, so modules may name an
    evaluator defined after them."""
    import functools
    from dataclasses import fields, replace

    def decorate(evaluate: Evaluator) -> Evaluator:
        @functools.wraps(evaluate)
        def wrapped(model: TransformerConfig, cluster: Cluster, workload: Workload, *args, **kwargs) -> SchemeResult:
            own = evaluate(model, cluster, workload, *args, **kwargs)
            if cluster.n != 1:
                return own
            whole = reference()(model, cluster, workload)
            times = {f.name: getattr(whole, f.name) for f in fields(SchemeResult) if f.name.endswith("_s")}
            return replace(own, **times, notes=f"{own.notes}; {note}" if own.notes else note)
        return wrapped
    return decorate


def runs_engine(engine: str, fn: Evaluator) -> Evaluator:
    """`fn` on its workload with `engine`'s kernels; a width given as bits alone means the engine's one format of that
    width, else one line (an engine's time depends on the kernel: llama.cpp's 4.5 bits are q4_0 or q4_k)."""
    import functools
    from dataclasses import replace

    @functools.wraps(fn)
    def evaluator(model: TransformerConfig, cluster: Cluster, workload: Workload, *args, **kwargs) -> SchemeResult:
        from workbench.machine.kernel_cost import format_for_bits

        fmt = workload.weight_format or format_for_bits(engine, workload.weight_bits)
        return fn(model, cluster, replace(workload, engine=engine, weight_format=fmt), *args, **kwargs)
    return evaluator


def says_why_no_rows(name: str, reason: str, fn: Evaluator) -> Evaluator:
    """`fn` whose results without operator rows say why (`reason`, the scheme's), or a one-line error if the scheme
    gave none: unknown is never silently absent."""
    import functools
    from dataclasses import replace

    @functools.wraps(fn)
    def evaluator(model: TransformerConfig, cluster: Cluster, workload: Workload, *args, **kwargs) -> SchemeResult:
        result = fn(model, cluster, workload, *args, **kwargs)
        if result.operators is not None or result.no_operators:
            return result
        if not reason:
            raise WorkbenchError(f"{name}: its result carries no operator rows and the scheme registers no "
                                 f"no_operators reason")
        return replace(result, no_operators=reason)
    return evaluator


def dense_only(name: str, reason: str, fn: Evaluator) -> Evaluator:
    """`fn`, refusing a mixture-of-experts model in one line with the scheme's `reason` (its FFN cost is a dense
    FFN's)."""
    import functools

    @functools.wraps(fn)
    def evaluator(model: TransformerConfig, cluster: Cluster, workload: Workload, *args, **kwargs) -> SchemeResult:
        if model.is_moe:
            raise WorkbenchError(f"{name} costs a dense FFN, not a mixture of experts ({model.name}, "
                                 f"{model.n_experts} experts): {reason}")
        return fn(model, cluster, workload, *args, **kwargs)
    return evaluator


def with_streaming_split(fn: Evaluator) -> Evaluator:
    """`fn` whose result shows the memory-bound share of its roofline time as memory_s (its busiest device's
    operator rows' share when it carries them, `SchemeResult.operators`, exact; else `common.memory_share` of the
    model, the cluster's devices and the workload, the whole step's): the one place every roofline scheme splits; a result
    that already shows memory time (an evaluator calling another registered one, or one that split its own
    devices' operator rows exactly: `common.streaming_share`) is left as it is."""
    import functools

    @functools.wraps(fn)
    def evaluator(model: TransformerConfig, cluster: Cluster, workload: Workload, *args, **kwargs) -> SchemeResult:
        result = fn(model, cluster, workload, *args, **kwargs)
        if result.memory_s > 0 or result.compute_s <= 0:
            return result
        if result.operators is not None:  # exact: the busiest device's own rows
            return result.split_streaming(result.operators.memory_share)
        return result.split_streaming(memory_share(model, cluster.devices, workload))
    return evaluator


# Planner modules that register an evaluator that plans (planners sit above schemes, so such an evaluator lives
# there); named one by one so the registry never imports a planner it does not need (Hepti's MILP pulls in scipy).
PLANNING_EVALUATOR_MODULES = ("workbench.schemes.planners.galaxy", "workbench.schemes.planners.sti")
# Scheme modules no one paper owns (generic baselines): imported after the papers' scheme modules, so the registry
# lists every paper's schemes first and the baselines after them (their order when tpi_llm.py registered them).
BASELINE_MODULES = ("workbench.schemes.baselines",)


def load_all() -> Catalogue:
    """Import every scheme module (the baselines last) and the planner modules that register evaluators; return
    the catalogue.

    The planners are imported by name when a layer above (arena, regimes, explore) asks for the catalogue.
    """
    import importlib
    import pkgutil

    import workbench.schemes as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name not in ("base", "catalogue") and f"workbench.schemes.{info.name}" not in BASELINE_MODULES:
            importlib.import_module(f"workbench.schemes.{info.name}")
    for module in BASELINE_MODULES + PLANNING_EVALUATOR_MODULES:
        importlib.import_module(module)
    names = [f"workbench.schemes.{info.name}" for info in pkgutil.iter_modules(pkg.__path__)
             if f"workbench.schemes.{info.name}" not in BASELINE_MODULES]
    SCHEMES.reorder(_module_rank(tuple(names) + BASELINE_MODULES + PLANNING_EVALUATOR_MODULES))
    return SCHEMES


@functools.lru_cache(maxsize=4)
def _module_rank(modules: tuple[str, ...]) -> dict[str, int]:
    """Module name -> its place when `modules` are imported in order into a fresh process (each one's top-level
    scheme and planner imports first, in source order): the catalogue's order never depends on which module a
    caller happened to import first."""
    import ast
    import importlib.util

    order: list[str] = []

    def imports(name: str) -> list[str]:
        spec = importlib.util.find_spec(name)
        tree = ast.parse(open(spec.origin, encoding="utf-8").read()) if spec and spec.origin else ast.Module([], [])
        found = []
        for node in tree.body:  # top level only: a function's import runs later
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found += [f"{node.module}.{a.name}" for a in node.names] if node.module in ("workbench.schemes",
                                                                                          "workbench.schemes.planners") \
                    else [node.module]
            elif isinstance(node, ast.Import):
                found += [a.name for a in node.names]
        return [n for n in found if n.startswith(("workbench.schemes.", "workbench.schemes.planners."))]

    def visit(name: str, seen: set[str]) -> None:
        if name in seen:
            return
        seen.add(name)
        for dep in imports(name):
            visit(dep, seen)
        order.append(name)

    seen: set[str] = set()
    for name in modules:
        visit(name, seen)
    return {name: i for i, name in enumerate(order)}


def spec_of(name: str) -> SchemeSpec:
    """The catalogue's spec of a registered scheme (every scheme module imported first, unless it is held)."""
    return SCHEMES.spec(name) if name in SCHEMES else load_all().spec(name)
