"""Speculative decoding's cost: a draft proposes `gamma` tokens, the target verifies them in one forward of
gamma + 1 tokens under a registered scheme, and on average `expected_tokens` of them are kept per step
(JAX-free; above `schemes`, below the arena).

A verify step is a decode step of gamma + 1 new tokens attending kv_len + gamma keys
(`Workload.verify_tokens`), costed by the registered scheme itself: the operator table turns its GEMVs into
GEMMs of gamma + 1 rows, and for a mixture-of-experts target the experts of gamma + 1 tokens come from the
table's routing union (`workbench.model.routing.expected_distinct`). Where the draft runs (`PLACEMENTS`):

* **root**: on the target's first device, serially before the verify (llama.cpp's `--model-draft`);
* **own**: on a device of its own; each step it hands its gamma token ids to the root and gets the accepted
  ones back over one link (two messages);
* **ring**: prima.cpp's speculative mode on its piped ring: the draft is not split, it is loaded whole and
  locked in memory on the head device (Lizonghang/prima.cpp@bdf9d8e examples/speculative/speculative.cpp:73-75),
  drafts serially (:576), then one `llama_decode` of the drafted batch goes once round the ring (:594); the
  head tells the other devices how to trim their KV caches with one command before the verify (:588) and four
  after it (:427-430), small messages on the ring's sockets.

The acceptance model: i.i.d. with per-token probability alpha (Leviathan et al. 2023, Sec. 3.1), where a
step keeps (1 - alpha^(gamma+1)) / (1 - alpha) tokens on average, or a distribution of accepted lengths.
A draft named "ngram" is prompt lookup (llama.cpp's `lookup` example): no model, no draft time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.core.fields import FieldSpec, TomlKey, declared
from workbench.core.io import REPO_ROOT
from workbench.core.units import GIB, format_seconds
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import Link, Topology, point_to_point
from workbench.model.models import TransformerConfig, get_model
from workbench.schemes.base import Cluster, Evaluator, SchemeResult, Workload, spec_of
from workbench.schemes.baselines import SINGLE_DEVICE
from workbench.schemes.catalogue import DRAFT_PLACEMENTS

ACCEPTANCE_CSV = REPO_ROOT / "data" / "speculative" / "acceptance.csv"
PLACEMENTS = DRAFT_PLACEMENTS  # where a draft runs (`workbench.schemes.catalogue`)
NGRAM = "ngram"  # prompt lookup: drafts by matching the prompt's n-grams, no model (~0 cost)
MAX_GAMMA = 16  # best_gamma's search range, 1..16 (llama.cpp's common_speculative_params n_draft = 16)
TOKEN_ID_BYTES = 4  # a token id on the wire: llama.cpp's llama_token is int32_t (include/llama.h)
# prima.cpp's KV-cache commands per verify step (speculative.cpp:588 before, :427-430 after): a name and up to
# four int32 arguments each (src/llama.cpp llama_send_kv_cache_seq_*), at most 9 + 16 bytes
RING_COMMANDS_PER_STEP = 5
RING_COMMAND_BYTES = 25
DRAFT_SCHEME = SINGLE_DEVICE  # how a draft forward is costed: the baseline on its one device



@dataclass(frozen=True)
class Speculation:
    """A speculative decoding setting: the draft (a registered model name or "ngram"), where it runs, how many
    tokens it drafts per step (`gamma`) and how many of them the target accepts: i.i.d. with probability
    `alpha`, or `accepted_lengths[k]` = P(exactly k drafted tokens accepted; the last entry: at least that many)."""

    draft: str = declared(FieldSpec('the draft: a registered model name, or "ngram" (prompt lookup, no model)',
                                    kind="text", toml=(TomlKey("draft"),)), NGRAM)
    placement: str = declared(FieldSpec(
        "where the draft runs: root (the target's first device), own (a device of its own: draft_device, over "
        "the [network] link), ring (prima.cpp's head device of its piped ring)", kind="text",
        toml=(TomlKey("placement"),)), "root")
    gamma: int = declared(FieldSpec("tokens the draft proposes per verify step", "tokens", 1, math.inf,
                                    file_high=4 * MAX_GAMMA, kind="integer", toml=(TomlKey("gamma", 1.0, "tokens"),)), 4)
    alpha: float | None = declared(FieldSpec("probability the target accepts each drafted token, i.i.d. "
                                             "(or accepted_lengths)", "1", 0.0, 1.0, high_open=True,
                                             toml=(TomlKey("alpha"),)), None)
    accepted_lengths: tuple[float, ...] | None = None
    device: DeviceSpec | None = None  # the draft's own device (placement "own")
    link: Link | None = None  # the link between the draft's device and the root (placement "own")
    draft_config: TransformerConfig | None = None  # a draft read from its file (`draft` is then its name)

    def __post_init__(self) -> None:
        require_choice("placement", self.placement, PLACEMENTS)
        require_int("gamma", self.gamma, low=1)
        if (self.alpha is None) == (self.accepted_lengths is None):
            raise WorkbenchError("speculation needs exactly one acceptance model: alpha or accepted_lengths")
        if self.alpha is not None and not (isinstance(self.alpha, int | float) and 0.0 <= self.alpha < 1.0):
            raise WorkbenchError(f"alpha must be a number in [0, 1), got {self.alpha!r}")
        if self.accepted_lengths is not None:
            check_lengths(self.accepted_lengths)
            object.__setattr__(self, "accepted_lengths", tuple(float(p) for p in self.accepted_lengths))
        if self.placement == "own" and (self.device is None or self.link is None):
            raise WorkbenchError("placement 'own' needs the draft's device and its link to the root")
        if self.draft != NGRAM and self.draft_config is None:
            get_model(self.draft)

    @property
    def draft_model(self) -> TransformerConfig | None:
        """The draft's model: read from its file, else the registered one (None for n-gram prompt lookup)."""
        if self.draft_config is not None:
            return self.draft_config
        return None if self.draft == NGRAM else get_model(self.draft)


def check_lengths(probabilities) -> None:
    """One line unless `probabilities` is a non-empty list of numbers in [0, 1] summing to 1."""
    p = np.asarray(probabilities, dtype=float) if len(probabilities) else np.zeros(0)
    if p.size == 0 or np.any(~np.isfinite(p)) or np.any(p < 0) or abs(p.sum() - 1.0) > 1e-6:
        raise WorkbenchError(f"accepted_lengths must be probabilities >= 0 that sum to 1, got {list(probabilities)!r}")


# ---- the acceptance model -----------------------------------------------------------------------------------
def expected_tokens(gamma: int, alpha: float | None = None, accepted_lengths=None) -> float:
    """Expected tokens a verify step yields: the accepted drafted tokens plus the target's own next one;
    i.i.d. (1 - alpha^(gamma+1)) / (1 - alpha), or sum_k P(k) (min(k, gamma) + 1) for a distribution."""
    require_int("gamma", gamma, low=1)
    if accepted_lengths is not None:
        check_lengths(accepted_lengths)
        p = np.asarray(accepted_lengths, dtype=float)
        return float(np.sum(p * (np.minimum(np.arange(p.size), gamma) + 1)))
    if alpha is None or not 0.0 <= alpha < 1.0:
        raise WorkbenchError(f"alpha must be a number in [0, 1), got {alpha!r}")
    return float((1.0 - alpha ** (gamma + 1)) / (1.0 - alpha))


def simulate_tokens(gamma: int, steps: int, seed: int, alpha: float | None = None, accepted_lengths=None) -> float:
    """Monte-Carlo of the acceptance model: mean tokens per verify step over `steps` steps (i.i.d.: each drafted
    token accepted with probability alpha until the first rejection; else accepted lengths drawn from the list)."""
    rng = np.random.default_rng(seed)
    if accepted_lengths is not None:
        p = np.asarray(accepted_lengths, dtype=float)
        accepted = np.minimum(rng.choice(p.size, size=steps, p=p / p.sum()), gamma)
    else:
        hits = rng.random((steps, gamma)) < alpha
        accepted = np.where(hits.all(axis=1), gamma, np.argmin(hits, axis=1))
    return float(np.mean(accepted + 1))


def _solve_alpha(target: float, of_alpha, what: str) -> float:
    """The alpha in [0, 1) where the increasing function `of_alpha` reaches `target` (bisection)."""
    low, high = 0.0, 1.0 - 1e-12
    if not of_alpha(low) <= target < of_alpha(high):
        raise WorkbenchError(f"{what} must lie in [{of_alpha(low):g}, {of_alpha(high):g}), got {target!r}")
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if of_alpha(mid) < target else (low, mid)
    return (low + high) / 2


def alpha_from_tokens(tokens_per_step: float, gamma: int) -> float:
    """The i.i.d. alpha whose expected tokens per step at `gamma` is `tokens_per_step` (a derived conversion of
    a quoted mean accepted length, EAGLE's tau or Spec-Bench's #Mean Accepted Tokens)."""
    return _solve_alpha(tokens_per_step, lambda a: expected_tokens(gamma, a), "tokens per step")


def alpha_from_accept_fraction(fraction: float, gamma: int) -> float:
    """The i.i.d. alpha whose expected accepted share of `gamma` drafted tokens is `fraction` (llama.cpp's
    'accept' = n_accept / n_drafted, with every step drafting gamma tokens)."""
    return _solve_alpha(fraction, lambda a: (expected_tokens(gamma, a) - 1.0) / gamma, "accept fraction")


def acceptance_table() -> pd.DataFrame:
    """The quoted acceptance rates (data/speculative/acceptance.csv: draft, target, task, gamma, metric, value,
    kind, source), each with the i.i.d. alpha it implies where its gamma is known, and for a mean tokens per
    step tau the least alpha that yields it at any gamma, 1 - 1/tau (both derived)."""
    table = pd.read_csv(ACCEPTANCE_CSV)
    def implied(row) -> float:
        if row.metric == "draft_accept_fraction" and not np.isnan(row.gamma):
            return alpha_from_accept_fraction(float(row.value), int(row.gamma))
        if row.metric == "mean_tokens_per_step" and not np.isnan(row.gamma):
            return alpha_from_tokens(float(row.value), int(row.gamma))
        return float("nan")
    least = np.where(table.metric == "mean_tokens_per_step", 1.0 - 1.0 / table.value, np.nan)
    return table.assign(implied_alpha=table.apply(implied, axis=1), alpha_at_least=least)


def expected_verify_experts(n_experts: int, k: int, gamma: int, routing=None) -> float:
    """Expected distinct experts one MoE layer streams in a verify step of gamma + 1 tokens (the routing union)."""
    from workbench.model.routing import UNIFORM, expected_distinct

    return float(expected_distinct(UNIFORM if routing is None else routing, n_experts, k, gamma + 1))


# ---- one verify step under a scheme --------------------------------------------------------------------------
def verify_workload(workload: Workload, gamma: int) -> Workload:
    """The verify step of a decode `workload`: gamma + 1 new tokens attending kv_len + gamma keys."""
    if workload.phase != "decode":
        raise WorkbenchError(f"speculation applies to decode, got phase {workload.phase!r}")
    return replace(workload, kv_len=workload.kv_len + gamma, verify_tokens=gamma + 1)


def verify_result(scheme: str, evaluator: Evaluator, model: TransformerConfig, cluster: Cluster,
                  workload: Workload, gamma: int) -> SchemeResult:
    """The registered scheme's cost of one verify step; n/a for a scheme whose decode carries one token
    (`SchemeSpec.single_token` says why)."""
    why = spec_of(scheme).single_token
    if why:
        raise WorkbenchError(f"n/a: {why}")
    return evaluator(model, cluster, verify_workload(workload, gamma))


def expert_misses(result: SchemeResult, model: TransformerConfig, workload: Workload) -> float:
    """Seconds a verify step spends streaming experts a one-token step would not touch: its busiest device's FFN
    (expert) rows' memory time, all its layers, times the share of the experts streamed beyond one token's (the
    routing union of the step's tokens, `routing.expected_distinct`, plus the shared experts). 0 for a dense
    target; NaN (unknown, never 0) for a scheme that attaches no operator rows: `experts_unknown` says why."""
    if not model.is_moe:
        return 0.0
    if result.operators is None:
        return math.nan
    from workbench.model.routing import expected_distinct

    routing = workload.routing

    def touched(tokens: int) -> float:
        return float(expected_distinct(routing, model.n_experts, model.n_active_experts, tokens)) \
            + model.n_shared_experts
    many = touched(workload.new_tokens)
    share = (many - touched(1)) / many if many > 0 else 0.0
    rows = [r for r in result.operators.rows if r.operator.name in ("ffn1", "ffn2")]
    return result.operators.layers * float(sum(float(r.part("memory")) for r in rows)) * share


def experts_unknown(scheme: str) -> str:
    """Why a MoE verify step's expert streaming is n/a under `scheme` (it attaches no operator rows)."""
    return (f"{scheme} attaches no operator rows, so its verify step's expert streaming cannot be told apart from "
            "its other memory time")


# ---- the draft ------------------------------------------------------------------------------------------------
def draft_device(spec: Speculation, cluster: Cluster) -> DeviceSpec:
    """The device the draft runs on: its own, else the target's first (root / the ring's head device)."""
    return spec.device if spec.placement == "own" else cluster.devices[0]


def draft_bytes(draft: TransformerConfig, workload: Workload) -> float:
    """Bytes the draft holds: its weights at the workload's width and its KV cache at kv_len + gamma."""
    return draft.weight_bytes(workload.weight_bits) + draft.kv_cache_bytes(workload.kv_len, workload.cache_bits)


def check_draft(spec: Speculation, target: TransformerConfig, cluster: Cluster, workload: Workload) -> None:
    """One line for a draft larger than the target, one whose vocabulary is not the target's or one that does not
    fit its device's memory."""
    draft = spec.draft_model
    if draft is None:
        return
    if draft.total_params() >= target.total_params():
        raise WorkbenchError(f"draft {draft.name} ({draft.total_params() / 1e9:.3g}B parameters) must be smaller than "
                             f"the target {target.name} ({target.total_params() / 1e9:.3g}B)")
    if draft.vocab_size != target.vocab_size:
        raise WorkbenchError(f"draft {draft.name} has a vocabulary of {draft.vocab_size} tokens, the target "
                             f"{target.name} one of {target.vocab_size}: the target verifies the draft's token ids, so "
                             f"both must share one tokenizer; allowed: {', '.join(allowed_drafts(target))}")
    device, need = draft_device(spec, cluster), draft_bytes(draft, workload)
    if need > device.memory_bytes:
        raise WorkbenchError(f"infeasible: draft {draft.name} needs {need / GIB:.3g} GiB, more than its device "
                             f"{device.name} holds ({device.memory_bytes / GIB:.3g} GiB)")


def allowed_drafts(target: TransformerConfig) -> list[str]:
    """The drafts a target can verify: n-gram prompt lookup and every registered decoder smaller than the target
    with its vocabulary size (the same tokenizer, as far as the registry tells)."""
    from workbench.model.models import MODELS

    return [NGRAM] + [name for name, m in MODELS.items() if m.is_decoder and m.vocab_size == target.vocab_size
                      and m.total_params() < target.total_params()]


def draft_step_time(spec: Speculation, cluster: Cluster, workload: Workload, evaluator: Evaluator) -> float:
    """Seconds of one draft forward (one token at kv_len) on its device, costed by the single-device baseline."""
    draft = spec.draft_model
    if draft is None:
        return 0.0
    device = draft_device(spec, cluster)
    alone = Cluster((device,), Topology("direct", 1, cluster.topology.link))
    return float(evaluator(draft, alone, replace(workload, verify_tokens=1)).latency_s)


def handoff_time(spec: Speculation, cluster: Cluster, accepted: float) -> float:
    """Communication a step adds: own device: the gamma drafted ids to the root and the accepted ids back (each
    waited for); ring: prima.cpp's five KV-cache commands relayed along the ring's n - 1 hops; root: none."""
    if spec.placement == "own":
        link = spec.link
        out = point_to_point(spec.gamma * TOKEN_ID_BYTES, link.bandwidth_bytes_per_s, link.latency_s,
                             message_overhead=link.message_overhead_s)
        back = point_to_point(accepted * TOKEN_ID_BYTES, link.bandwidth_bytes_per_s, link.latency_s,
                              message_overhead=link.message_overhead_s)
        return float(out + back)
    if spec.placement == "ring" and cluster.n > 1:
        # each device applies a command and relays it before the batch behind it on the same socket
        # (src/llama.cpp:18336-18358): the wire latency overlaps the batch's, the relays' endpoint time and bytes add
        link = cluster.topology.link
        relay = point_to_point(RING_COMMAND_BYTES, link.bandwidth_bytes_per_s, 0.0,
                               message_overhead=link.message_overhead_s)
        return float(RING_COMMANDS_PER_STEP * (cluster.n - 1) * relay)
    return 0.0


# ---- the whole estimate ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VerifyTraffic:
    """A verify step's communication against a one-token step's ((per-message, bytes) seconds each) and the
    draft's hand-off seconds a step: what `losing_reason` compares."""

    verify_comm: tuple[float, float] = (0.0, 0.0)
    plain_comm: tuple[float, float] = (0.0, 0.0)
    handoff_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("verify_comm", "plain_comm"):
            pair = getattr(self, name)
            if len(pair) != 2 or not all(x >= 0 for x in pair):
                raise WorkbenchError(f"{name} must be two seconds >= 0 (per-message, bytes), got {pair!r}")
        if not self.handoff_s >= 0:
            raise WorkbenchError(f"handoff_s must be >= 0 s, got {self.handoff_s!r}")


@dataclass(frozen=True)
class SpeculativeCost:
    """Expected time per token with speculation and its parts (each per token: step seconds / tokens per step)."""

    scheme: str
    gamma: int
    tokens_per_step: float
    plain_s: float  # time per token of plain decode under the same scheme
    draft_s: float
    verify_compute_s: float  # the verify's device time (arithmetic, memory streaming, fixed, serial, IO)
    verify_experts_s: float  # of which its MoE expert misses (0 for a dense target; NaN: unknown, experts_note)
    communication_s: float  # the verify's collectives + the draft's hand-off
    extra: dict = field(default_factory=dict, compare=False)
    expert_reads_s: float = 0.0  # of verify_experts_s its storage reads (known even where the streaming is not)
    experts_note: str = ""  # why verify_experts_s is NaN ("" when known)
    traffic: VerifyTraffic = field(default_factory=VerifyTraffic, compare=False)  # the step's traffic (zeros: none)

    @property
    def per_token_s(self) -> float:
        """Expected seconds per generated token."""
        return self.draft_s + self.verify_compute_s + self.communication_s

    @property
    def speedup(self) -> float:
        """Plain decode's time per token over speculation's (> 1: speculation pays)."""
        return self.plain_s / self.per_token_s

    @property
    def losing_part(self) -> str:
        """The largest per-token part: what to shrink when speculation loses. Where the expert streaming is
        unknown the verify compute says so and the expert misses count their storage reads only."""
        unknown = math.isnan(self.verify_experts_s)
        experts = self.expert_reads_s if unknown else self.verify_experts_s
        compute = "verify compute (expert streaming n/a)" if unknown else "verify compute"
        parts = {"draft": self.draft_s, compute: self.verify_compute_s - experts, "verify expert misses": experts,
                 "communication": self.communication_s}
        return max(parts.items(), key=lambda kv: kv[1])[0]

    def row(self) -> dict:
        """A flat dict for a DataFrame row."""
        return {"scheme": self.scheme, "gamma": self.gamma, "tokens_per_step": self.tokens_per_step,
                "plain_s": self.plain_s, "per_token_s": self.per_token_s, "speedup": self.speedup,
                "draft_s": self.draft_s, "verify_compute_s": self.verify_compute_s,
                "verify_experts_s": self.verify_experts_s, "expert_reads_s": self.expert_reads_s,
                "communication_s": self.communication_s, "losing_part": self.losing_part,
                "experts_note": self.experts_note}


@dataclass(frozen=True)
class VerifyStep:
    """The parts of one verify step that do not depend on the acceptance (seconds per step), and the one-token
    step's communication beside the verify's (what `losing_reason` compares)."""

    scheme: str
    gamma: int
    plain_s: float  # plain decode's time per token under the scheme
    draft_s: float  # gamma draft forwards
    verify_s: float  # the target's forward of gamma + 1 tokens
    collectives_s: float  # of which its communication
    experts_s: float  # of which its MoE expert misses (NaN: unknown, see experts_note)
    oom: bool = False
    expert_reads_s: float = 0.0  # of experts_s the storage reads (known)
    experts_note: str = ""
    verify_comm: tuple[float, float] = (0.0, 0.0)  # the verify's (per-message, bytes) seconds
    plain_comm: tuple[float, float] = (0.0, 0.0)  # the one-token step's


def verify_step(spec: Speculation, scheme: str, registry, target: TransformerConfig, cluster: Cluster,
                workload: Workload, plain: SchemeResult | None = None) -> VerifyStep:
    """One verify step of `scheme` (a name in `registry`) with `spec`'s draft and gamma: the costly part."""
    check_draft(spec, target, cluster, workload)
    if spec.placement not in spec_of(scheme).draft_placements:
        raise WorkbenchError(f"n/a: placement 'ring' is prima.cpp's piped ring; {scheme} is not a prima.cpp scheme")
    evaluator = registry[scheme][1]
    plain = evaluator(target, cluster, replace(workload, verify_tokens=1)) if plain is None else plain
    verify = verify_result(scheme, evaluator, target, cluster, workload, spec.gamma)
    draft = spec.gamma * draft_step_time(spec, cluster, workload, registry[DRAFT_SCHEME][1])
    streaming = expert_misses(verify, target, verify_workload(workload, spec.gamma))
    reads = storage_misses(verify, plain, target)
    return VerifyStep(scheme, spec.gamma, plain.latency_s, draft, verify.latency_s,
                      verify.comm_link_latency_s + verify.comm_bytes_s, streaming + reads, verify.oom or plain.oom,
                      reads, experts_unknown(scheme) if math.isnan(streaming) else "",
                      (verify.comm_link_latency_s, verify.comm_bytes_s),
                      (plain.comm_link_latency_s, plain.comm_bytes_s))


def storage_misses(verify: SchemeResult, plain: SchemeResult, model: TransformerConfig) -> float:
    """Seconds of expert reads from storage a MoE target's verify step adds over a one-token step (an expert
    cache's misses: `io_stall_s`, e.g. `moe_layer_pipeline`'s); 0 for a dense target."""
    if not model.is_moe:
        return 0.0
    return max(verify.io_stall_s - plain.io_stall_s, 0.0)


def per_token(step: VerifyStep, spec: Speculation, cluster: Cluster, tokens: float) -> SpeculativeCost:
    """A verify step's cost per token when it yields `tokens` on average (the hand-off carries tokens - 1 ids)."""
    handoff = handoff_time(spec, cluster, tokens - 1.0)
    comm = step.collectives_s + handoff
    return SpeculativeCost(step.scheme, step.gamma, tokens, step.plain_s, step.draft_s / tokens,
                           (step.verify_s - step.collectives_s) / tokens, step.experts_s / tokens, comm / tokens,
                           extra={"verify_s": step.verify_s, "oom": step.oom},
                           expert_reads_s=step.expert_reads_s / tokens, experts_note=step.experts_note,
                           traffic=VerifyTraffic(step.verify_comm, step.plain_comm, handoff))


def losing_reason(cost: SpeculativeCost) -> str:
    """The costliest part and why, from the breakdown's own numbers: communication compares the verify step's
    per-message and byte time with a one-token step's (a scheme that sends each sync once per batch row, as
    distributed-llama does, pays gamma + 1 times the messages per sync); compute compares the step's device time
    with plain decode's; the draft gives its forwards' share. An unknown expert streaming is said, with why."""
    part, tokens = cost.losing_part, cost.tokens_per_step
    if part == "communication":
        text = _communication_reason(cost)
    elif part == "draft":
        text = (f"draft: {cost.gamma} draft forwards take {format_seconds(cost.draft_s * tokens)} a step, "
                f"{cost.draft_s / cost.per_token_s:.0%} of the time per token")
    elif part == "verify expert misses":
        known = cost.expert_reads_s if cost.experts_note else cost.verify_experts_s
        text = (f"verify expert misses: {format_seconds(known * tokens)} a step for the experts its gamma + 1 = "
                f"{cost.gamma + 1} tokens touch beyond one token's")
    else:
        text = _compute_reason(cost)
    return f"{text}; expert streaming n/a: {cost.experts_note}" if cost.experts_note else text


def _ratio(new: float, old: float) -> str:
    """'5.0x' (new over old), 'new' where the one-token step had none."""
    return f"{new / old:.1f}x" if old > 0 else ("new" if new > 0 else "none")


def _communication_reason(cost: SpeculativeCost) -> str:
    """Why communication costs most: the verify step's per-message and byte time against a one-token step's."""
    rows, tokens = cost.gamma + 1, cost.tokens_per_step
    (v_link, v_bytes), (p_link, p_bytes) = cost.traffic.verify_comm, cost.traffic.plain_comm
    text = (f"communication: {format_seconds(cost.communication_s)} per token against {format_seconds(p_link + p_bytes)} in plain decode; "
            f"a verify step's per-message time is {_ratio(v_link, p_link)} a one-token step's")
    if p_link > 0 and abs(v_link / p_link - rows) <= 0.05 * rows:
        text += f" (each sync sent once per batch row: gamma + 1 = {rows} messages per sync)"
    text += f" and its bytes {_ratio(v_bytes, p_bytes)}, for {tokens:.2f} tokens a step"
    handoff = cost.traffic.handoff_s
    return text + (f"; the draft's hand-off adds {format_seconds(handoff)} a step" if handoff > 0 else "")


def _compute_reason(cost: SpeculativeCost) -> str:
    """Why the verify's device time costs most: the step against a one-token step's, for the tokens it yields."""
    plain_link, plain_bytes = cost.traffic.plain_comm
    plain_device = cost.plain_s - plain_link - plain_bytes
    step = cost.verify_compute_s * cost.tokens_per_step
    if plain_device <= 0:
        return "verify compute"
    return (f"verify compute: a verify step of gamma + 1 = {cost.gamma + 1} tokens takes {step / plain_device:.2f}x a "
            f"one-token step's device time ({format_seconds(step)} vs {format_seconds(plain_device)}) for {cost.tokens_per_step:.2f} tokens")


def speculative_cost(spec: Speculation, scheme: str, registry, target: TransformerConfig, cluster: Cluster,
                     workload: Workload, plain: SchemeResult | None = None) -> SpeculativeCost:
    """Expected time per token of `scheme` (a name in `registry`) with speculation `spec`, and its parts."""
    step = verify_step(spec, scheme, registry, target, cluster, workload, plain)
    return per_token(step, spec, cluster, expected_tokens(spec.gamma, spec.alpha, spec.accepted_lengths))


def alpha_sweep(spec: Speculation, scheme: str, registry, target: TransformerConfig, cluster: Cluster,
                workload: Workload, alphas, gammas=range(1, MAX_GAMMA + 1)) -> pd.DataFrame:
    """`SpeculativeCost.row()` for every (alpha, gamma): one verify step per gamma, the acceptance applied after."""
    plain = registry[scheme][1](target, cluster, replace(workload, verify_tokens=1))
    rows = []
    for g in gammas:
        step = verify_step(replace(spec, gamma=g), scheme, registry, target, cluster, workload, plain)
        rows += [{"alpha": a, **per_token(step, replace(spec, gamma=g), cluster, expected_tokens(g, a)).row()}
                 for a in alphas]
    return pd.DataFrame(rows)


def best_gamma(spec: Speculation, scheme: str, registry, target: TransformerConfig, cluster: Cluster,
               workload: Workload, gammas=range(1, MAX_GAMMA + 1), plain: SchemeResult | None = None) -> SpeculativeCost:
    """The gamma in 1..16 with the least expected time per token (the smallest of equals)."""
    if plain is None:
        plain = registry[scheme][1](target, cluster, replace(workload, verify_tokens=1))
    costs = [speculative_cost(replace(spec, gamma=g), scheme, registry, target, cluster, workload, plain)
             for g in gammas]
    return min(costs, key=lambda c: (c.per_token_s, c.gamma))


# ---- the per-scheme table: whatif, the explorer and the speculative notebook render it ---------------------------
SCHEME_TABLE_COLUMNS = ("scheme", "plain_s", "oom", "speculative_s", "speedup", "costliest", "why", "experts_note",
                        "best_gamma", "best_gamma_s", "best_gamma_speedup", "best_gamma_tokens_per_step",
                        "best_gamma_costliest", "notes")
BEST_COLUMNS = SCHEME_TABLE_COLUMNS[8:13]  # the best gamma's columns (n/a when the table is asked without them)


def scheme_row(spec: Speculation, scheme: str, plain: SchemeResult, registry, target: TransformerConfig,
               cluster: Cluster, workload: Workload, best: bool = True, gammas=range(1, MAX_GAMMA + 1),
               best_gammas: dict | None = None) -> dict:
    """One scheme's row of `scheme_table`: plain decode, `spec` at its gamma, and with `best` its best gamma in
    `gammas` (memoised in `best_gammas`: scheme -> `best_gamma`'s answer); n/a with the reason in `notes`."""
    row = {"scheme": scheme, "plain_s": plain.latency_s, "oom": plain.oom}
    try:
        if DRAFT_SCHEME not in registry:  # a registry of stand-ins (tests) cannot cost a draft
            raise WorkbenchError(f"n/a: no {DRAFT_SCHEME} scheme registered to cost the draft on")
        here = speculative_cost(spec, scheme, registry, target, cluster, workload, plain)
        top = best_gammas.get(scheme) if best and best_gammas is not None else None
        if best and top is None:
            top = best_gamma(spec, scheme, registry, target, cluster, workload, gammas, plain=plain)
            if best_gammas is not None:
                best_gammas[scheme] = top
    except WorkbenchError as exc:
        return {**row, "notes": str(exc).splitlines()[0]}
    row |= {"speculative_s": here.per_token_s, "speedup": here.speedup, "costliest": here.losing_part,
            "why": losing_reason(here), "experts_note": here.experts_note, "notes": ""}
    if top is None:
        return row
    return row | {"best_gamma": top.gamma, "best_gamma_s": top.per_token_s, "best_gamma_speedup": top.speedup,
                  "best_gamma_tokens_per_step": top.tokens_per_step, "best_gamma_costliest": top.losing_part}


def scheme_table(spec: Speculation, plains, registry, target: TransformerConfig, cluster: Cluster,
                 workload: Workload, best: bool = True, gammas=range(1, MAX_GAMMA + 1),
                 best_gammas: dict | None = None) -> pd.DataFrame:
    """Per scheme of `plains` ((name, plain decode result) pairs, in order): time per token without (`plain_s`,
    `oom`) and with `spec`'s draft at its gamma (`speculative_s`, `speedup`, the costliest part and why, an expert
    streaming it cannot split out), and with `best` its best gamma in `gammas` (the `best_gamma*` columns, NaN
    without); where a scheme cannot verify several tokens `notes` says why. The one table whatif, the explorer
    and the speculative notebook render (SCHEME_TABLE_COLUMNS)."""
    rows = [scheme_row(spec, name, plain, registry, target, cluster, workload, best, gammas, best_gammas)
            for name, plain in plains]
    return pd.DataFrame(rows).reindex(columns=list(SCHEME_TABLE_COLUMNS)).astype({"best_gamma": "Int64"})


def best_over_gamma(sweep: pd.DataFrame, by=("alpha",)) -> pd.DataFrame:
    """For each group of `by` in an `alpha_sweep` frame, the row of the gamma with the least time per token."""
    ordered = sweep.sort_values([*by, "per_token_s", "gamma"])
    return ordered.groupby(list(by), sort=True).head(1).reset_index(drop=True)


def with_link_latency(cluster: Cluster, latency_s: float) -> Cluster:
    """`cluster` with its link's per-hop latency set to `latency_s`."""
    link = replace(cluster.topology.link, latency_s=latency_s)
    return replace(cluster, topology=replace(cluster.topology, link=link))


def regime_map(spec: Speculation, scheme: str, registry, target: TransformerConfig, cluster: Cluster,
               workload: Workload, alphas, latencies_s, gammas=range(1, MAX_GAMMA + 1)) -> pd.DataFrame:
    """Where speculation pays: for each link latency and alpha, the best gamma's speed-up over plain decode."""
    frames = [best_over_gamma(alpha_sweep(spec, scheme, registry, target, with_link_latency(cluster, lat), workload,
                                          alphas, gammas)).assign(latency_s=lat) for lat in latencies_s]
    return pd.concat(frames, ignore_index=True)
