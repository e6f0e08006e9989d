"""Toy engine: a layer pipeline on llama.cpp's kernels whose master may hold a set number of layers (the template).

Copy to `workbench/schemes/<engine>.py` (docs/adding_an_engine.md, "Adding an engine or scheme"); the pieces
below are the ones every engine's module has, each in the place the page names:

* kernels: `register(..., engine=ENGINE)` makes every weight matmul run that engine's quantized kernels
  (`workbench.machine.kernel_cost`, data/kernels/); this toy runs llama.cpp's, as prima.cpp does.
* traffic: what crosses the network per step, costed on the network's tables (`workbench.machine.network`); a pipeline's
  is one activation hand-off per device boundary (`handoffs`, the bytes `schemes.pipeline` times).
* options: a frozen dataclass of declared fields (`workbench.core.fields.declared`) named by `SECTION`, the
  deployment's `[schemes.<SECTION>]` table; the catalogue hands it to the TOML parser and docs/keys.md.
* registration: `@register` builds the scheme's `SchemeSpec` (origin, family, partition, what it costs).

A real engine models its mechanism from the engine's source at the version measured (file:line in docstrings).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from workbench.core.errors import WorkbenchError
from workbench.core.fields import FieldSpec, TomlKey, check_declared, declared
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import (
    Cluster,
    SchemeResult,
    Workload,
    load_all,
    register,
    runs_engine,
    with_streaming_split,
)
from workbench.schemes.pipeline import PipelinePlan, evaluate_pipeline, handoff_bytes

ENGINE = "llama.cpp"  # whose kernels the toy's matmuls run (`workbench.machine.kernel_cost.ENGINES`)
FAMILY = "toyring"  # the engine's schemes (one here)
SCHEME = "toyring_pipeline"  # the scheme this module registers


# ---- traffic: what one step sends ----------------------------------------------------------------------
def handoffs(model: TransformerConfig, cluster: Cluster, workload: Workload) -> tuple[float, ...]:
    """Bytes of each activation hand-off of one step: one per device boundary, the step's new tokens' rows."""
    return (handoff_bytes(model, workload),) * (cluster.n - 1)


# ---- the split and the cost ------------------------------------------------------------------------------
def toy_layers(n_layers: int, n_devices: int, master_layers: int = 0) -> tuple[int, ...]:
    """Layers per device: `master_layers` on device 0 (0: an even share) and the rest as even as possible."""
    if n_devices == 1:
        return (n_layers,)
    first = master_layers or n_layers // n_devices
    if not 1 <= first <= n_layers - (n_devices - 1):
        raise WorkbenchError(f"master_layers must be in [1, {n_layers - (n_devices - 1)}] for {n_layers} layers on "
                             f"{n_devices} devices, got {master_layers}")
    rest, extra = divmod(n_layers - first, n_devices - 1)
    return (first,) + tuple(rest + (i < extra) for i in range(n_devices - 1))


def evaluate_toy(model: TransformerConfig, cluster: Cluster, workload: Workload,
                 master_layers: int = 0) -> SchemeResult:
    """The toy's step: the shared pipeline cost path (`schemes.pipeline`: compute, hand-offs, memory) on its split."""
    plan = PipelinePlan(toy_layers(model.n_layers, cluster.n, master_layers))
    result = evaluate_pipeline(model, cluster, workload, plan, scheme=SCHEME)
    return replace(result, paper=FAMILY, notes=f"toy ring, layers {' / '.join(map(str, plan.layers))}")


# ---- options: the deployment's [schemes.toyring] table -------------------------------------------------
@dataclass(frozen=True)
class ToyOptions:
    """The toy engine's options in a deployment ([schemes.toyring]): the master's layer count."""

    SECTION: ClassVar[str] = "toyring"

    master_layers: int = declared(FieldSpec("layers on the toy ring's master (device 0); 0: an even share",
                                            "layers", 0, 4096, kind="integer", toml=(TomlKey("master_layers"),)),
                                  default=0)

    def __post_init__(self) -> None:
        check_declared(self, "schemes.toyring.")

    def check(self, n_devices: int) -> None:
        """A master needs a device after it to hand off to (one device holds every layer)."""
        if self.master_layers and n_devices < 2:
            raise WorkbenchError(f"master_layers needs at least 2 devices, got {n_devices}")

    def schemes(self) -> tuple[str, ...]:
        """The engine's schemes the arena shows: every one registered with these options."""
        return load_all().filter(options=ToyOptions)

    def evaluator(self, scheme: str):
        """The toy's evaluator on these options (registered form: the engine's kernels, the streaming split);
        None where the registered one already is it."""
        if not self.master_layers:
            return None

        def evaluate(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
            return evaluate_toy(model, cluster, workload, self.master_layers)
        return runs_engine(ENGINE, with_streaming_split(evaluate))


# ---- registration: the scheme's catalogue entry ------------------------------------------------------------
@register(SCHEME, FAMILY, origin="a toy: llama.cpp's RPC layer split with a fixed master share (no real engine)",
          partition="pipeline", moe=True, no_operators=common.PIPELINE_ROWS, engine=ENGINE, options=ToyOptions)
def evaluate_toyring_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """The toy ring with an even split."""
    return evaluate_toy(model, cluster, workload)
