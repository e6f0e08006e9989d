"""The MCU paper's partition rules and reduction tree, free of JAX so cost models import them cheaply.

Used by both the `shard_map` kernel (workbench.kernels.mcu_siracusa) and the cost model
(workbench.schemes.mcu_siracusa): one definition of which chips talk to which.
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError, require_int
from workbench.model.models import TransformerConfig

GROUP_SIZE = 4  # the paper's groups of four (Sec. II-B, Fig. 1)


# ---- validation --------------------------------------------------------------------------------
def check_partition(cfg: TransformerConfig, n_chips: int) -> None:
    """Raise WorkbenchError unless `n_chips` splits heads, KV heads and the FFN width evenly."""
    require_int("n_chips", n_chips, low=1)
    if n_chips > cfg.n_kv_heads:
        raise WorkbenchError(
            f"n_chips must be <= the number of (KV) heads of {cfg.name!r} ({cfg.n_kv_heads}) for head-wise "
            f"partitioning, got {n_chips}")
    for name, size in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("d_ff", cfg.d_ff)):
        if size % n_chips:
            raise WorkbenchError(f"n_chips ({n_chips}) must divide {name} ({size}) of {cfg.name!r}")


# ---- the reduction tree --------------------------------------------------------------------------
def tree_strides(n_chips: int, group_size: int = GROUP_SIZE) -> list[int]:
    """Distance between the chips that take part in each level of the tree: 1, g, g^2, ... (< n)."""
    require_int("group_size", group_size, low=2)
    strides, s = [], 1
    while s < n_chips:
        strides.append(s)
        s *= group_size
    return strides


def tree_steps(n_chips: int, group_size: int = GROUP_SIZE) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Reduction messages, bottom-up: (stride, member slot j, [(member, leader) pairs]); one ppermute each."""
    steps = []
    for stride in tree_strides(n_chips, group_size):
        for j in range(1, group_size):
            pairs = [(lead + j * stride, lead) for lead in range(0, n_chips, group_size * stride)
                     if lead + j * stride < n_chips]
            if pairs:
                steps.append((stride, j, pairs))
    return steps
