"""The communication of a training step: five patterns, each timed and checked as the collectives are.

A pattern is what one kind of parallelism puts on the network in one training step of a model shape
(:data:`MODELS`, from the models' public configs; the suite ``suites/test_training_traffic.py`` names the
sources).  One *iteration* of a pattern, the unit that is timed, and how a training step is made of them:

* ``dp_grad_sync`` (data parallel): the model's whole bf16 gradient all-reduced over the world in the
  buckets of PyTorch DDP's defaults -- a first bucket of 1 MiB (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)
  then buckets of 25 MiB (``bucket_cap_mb=25``), the last one the rest; parameter boundaries are not modelled
  -- launched back to back (``async_op=True``, then waited for), as DDP's reducer launches them.  One
  iteration is one full gradient sync, once per step.  bytes = the gradient G; busbw = G / t x 2(n-1)/n,
  all_reduce's factor.
* ``moe_all_to_all`` (mixture of experts, expert parallel over the world): per MoE layer, the dispatch of
  the routed tokens to their experts' ranks and the combine back, two ``all_to_all_single`` with uneven
  splits.  Every rank routes ``tokens`` tokens to ``top_k`` distinct experts each, drawn (seeded) from a
  skewed expert-load distribution: expert weights ``1 / k**zipf`` over a seeded permutation of the experts;
  the experts are spread over the ranks in contiguous blocks.  One iteration is one layer's dispatch and
  combine; a step has ``moe_layers x 2`` of them (forward and backward).  bytes = twice the mean bytes a
  rank sends in one all-to-all; the busbw factor is the share of those bytes that leave their rank (the
  uneven counterpart of all_to_all's (n-1)/n).  The imbalance is stated in ``info``: the busiest expert's
  and the busiest rank's load against the mean.
* ``tp_layer`` (tensor parallel with sequence parallelism, as Megatron-LM): per transformer layer,
  forward, an all-gather before and a reduce-scatter after the attention and again around the MLP, of the
  activation ``seq x micro_batch x hidden`` (bf16), inside tensor-parallel groups (every group at once).
  One iteration is one layer's forward (2 all-gathers, 2 reduce-scatters); a step has ``layers x 2`` of them
  (the backward pass runs the same four, swapped).  bytes = 4 S, S the full activation; busbw factor
  (t-1)/t on groups of t ranks.
* ``pp_send_recv`` (pipeline parallel): one micro-batch's activation (``seq x micro_batch x hidden``, bf16)
  sent from every stage to the next at once, then its gradient from every stage to the previous at once.
  One iteration is one micro-batch forward and backward; a step has ``micro_batches`` of them.  bytes = 2 S;
  busbw factor 1 (S / t per link and direction).
* ``overlap_dp_tp`` (data and tensor parallel at once): the backward pass, where DDP all-reduces the
  gradient buckets while the layers' tensor-parallel collectives run: ``dp_grad_sync``'s whole gradient on a
  communicator of the world's ranks (a group of its own) and, at the same time, ``tp_layer``'s four
  collectives once per layer in the tensor-parallel groups (another communicator).  On GPU each part runs on
  a CUDA stream of its own that starts from one event on the current stream and joins it at the end; on CPU
  (gloo) the gradient sync runs in a second thread.  Each part is timed alone, then both together;
  ``info["overlap"]`` gives each part's median time alone and overlapped (from the common start to the
  part's end; per iteration the slowest rank's) and their ratios, ``dp_slowdown`` and ``tp_slowdown``.  The
  measurement (what is gated) is the overlapped iteration, once per step.  bytes = G + 4 S x layers; busbw
  factor the mean of the parts' factors weighted by their bytes.  Scaled, it has 1/16 of the layers, as
  its gradient has 1/16 of the buckets.

The per-step figure (``info["step_comm_s"]``, and ``info["step"]`` in words) is the iteration's median time
times the iterations per step: the communication time of a step if none of it overlapped with compute or
with each other (the overlap pattern's iteration is the overlapped one).  ``info["step_label"]`` names the
pattern and shape in plain words ("the data-parallel gradient sync of the llama3-8b shape on 8 ranks").

After the timed samples every pattern times single iterations one by one, as the collectives time single
ops (:func:`.single_op_timing.single_op_phase`: a budget of ``tail_time_s``, default 3 x ``min_time_s``, the same
count on every rank), and ``info["tail"]`` holds their figures (:func:`.collective_results.tail_info`).

``scale`` divides the element counts, so that the CPU variant (gloo) stays quick: the DP gradient, and the
hidden size of the other patterns (the token counts, the routing and the number of layers stay).  A scaled
DP gradient's bucket caps are divided by ``scale / SCALED_BUCKETS_FEWER``: it has 1/16 of the full model's
buckets (40 instead of 614 for llama3-8b; ``info["buckets"]``), as gloo takes about a millisecond per
all-reduce however small; the overlap's tensor-parallel part likewise has 1/16 of the layers
(``info["overlap_layers"]``).  On GPU the scale is 1.

This module holds what each pattern is, all of it, so that a new pattern is added here alone: its name and
words (:data:`PATTERNS`, its spec in :data:`SPECS`), its plan (:func:`plan`: the plan of a pattern for a shape,
world and scale, with its bytes, factor and per-step count), its buffers on a rank (one case class each) and
their dispatch in the per-rank task :func:`run_pattern`, and :func:`to_measurement` (the ranks' results -> one
:class:`Measurement`, or :class:`WrongResult`).  What the patterns share naming none is
:mod:`.pattern_runs`' (a case timed with :func:`pytest_gpucomm.ops.timing.measure`, the plan agreed by every
rank, each iteration launched eagerly, the results checked after timing, who waited for whom as
:func:`.across_ranks.iteration_stats` finds it), and the model shapes are :mod:`.model_shapes`'
(:data:`MODELS`).

Imports no torch: the task imports it when it runs.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional, Sequence, cast

from ..measurement import Measurement, MeasurementInfo, OverlapInfo
from ..units import describe_duration, format_gbps, format_size
from ..vocab import DEFAULT_MAX_SAMPLES, DEFAULT_MIN_TIME_S
from .collective_results import BenchResult, WrongResult, ranks_clocks, ranks_info, tail_info
from .model_shapes import MODELS, ModelShape
from .pattern_runs import PatternPlan, PatternResult, check_results, check_rows, merge_checks, run_case, sub_group
from .specs import COLLECTIVE, OpSpec

if TYPE_CHECKING:
    from torch import Tensor
    from torch.distributed import ProcessGroup
    from ..ranks.context import RankContext

#: ``MODELS``, ``ModelShape`` (:mod:`.model_shapes`) and ``WrongResult`` named here too: test files add to MODELS
__all__ = ["PATTERNS", "MODELS", "ModelShape", "CPU_SCALE", "SCALED_BUCKETS_FEWER", "DDP_FIRST_BUCKET_BYTES",
           "DDP_BUCKET_BYTES", "plan", "ddp_buckets", "moe_counts", "waits_for_all", "run_pattern", "to_measurement",
           "WrongResult"]

DP, MOE, TP, PP, OVERLAP = "dp_grad_sync", "moe_all_to_all", "tp_layer", "pp_send_recv", "overlap_dp_tp"
#: the patterns, in the suite's order
PATTERNS = (DP, MOE, TP, PP, OVERLAP)
#: what each pattern is, in plain words (``info["step_label"]``)
WHAT = {DP: "data-parallel gradient sync", MOE: "mixture-of-experts all-to-all",
        TP: "tensor-parallel layer collectives", PP: "pipeline-parallel send/recv",
        OVERLAP: "data-parallel gradient sync overlapped with the tensor-parallel collectives"}
#: their specs (:mod:`.specs`): a training step runs over the process group, as a collective does
SPECS = tuple(OpSpec(name, COLLECTIVE, COLLECTIVE) for name in PATTERNS)

#: PyTorch DDP's default bucket caps: ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` and ``bucket_cap_mb=25``
DDP_FIRST_BUCKET_BYTES = 1 << 20
DDP_BUCKET_BYTES = 25 << 20

#: the CPU variant's scale (gloo): element counts divided by this
CPU_SCALE = 4096
#: a scaled DP gradient (scale > 1) has this many times fewer buckets than the full model's
SCALED_BUCKETS_FEWER = 16

BF16 = 2  # bytes per element

def ddp_buckets(total: int, first: int, cap: int) -> list[int]:
    """The sizes of DDP's buckets (elements) of a gradient of ``total`` elements: ``first``, then ``cap``
    each, the last one the rest."""
    if total < 1 or first < 1 or cap < 1:
        raise ValueError(f"a gradient of {total} elements in buckets of {first} then {cap}: all must be >= 1")
    out = [min(first, total)]
    left = total - out[0]
    while left > 0:
        out.append(min(cap, left))
        left -= out[-1]
    return out


def moe_counts(world: int, tokens: int, experts: int, top_k: int, zipf: float, seed: int) -> tuple[list[list[int]],
                                                                                                    list[int]]:
    """(counts, expert_load): ``counts[i][j]`` the routed tokens rank i sends to rank j in one dispatch, and
    the tokens each expert gets.  Every rank routes ``tokens`` tokens to ``top_k`` distinct experts drawn
    without replacement (Gumbel top-k) with weights ``1 / k**zipf`` over a seeded permutation of the experts;
    expert e lives on rank ``e * world // experts``."""
    import numpy as np

    if not (1 <= top_k <= experts):
        raise ValueError(f"top_k={top_k} experts per token of {experts}: need 1 <= top_k <= experts")
    rng = np.random.default_rng(seed)
    order = rng.permutation(experts)
    logw = np.empty(experts)
    logw[order] = -zipf * np.log(np.arange(1, experts + 1))
    owner = np.arange(experts) * world // experts
    counts = np.zeros((world, world), dtype=np.int64)
    load = np.zeros(experts, dtype=np.int64)
    for r in range(world):
        g = logw[None, :] + rng.gumbel(size=(tokens, experts))
        chosen = np.argpartition(-g, top_k - 1, axis=1)[:, :top_k].ravel()
        per_expert = np.bincount(chosen, minlength=experts)
        load += per_expert
        counts[r] = np.bincount(owner, weights=per_expert, minlength=world).astype(np.int64)
    return counts.tolist(), load.tolist()


def _tp_groups(world: int, groups: Optional[Sequence[Sequence[int]]]) -> list[list[int]]:
    if groups is None:
        if world < 2 or world % 2:
            raise ValueError(f"tensor-parallel groups of 2 need an even world of 2 ranks or more, got {world}")
        return [[r, r + 1] for r in range(0, world, 2)]
    out = [sorted(int(r) for r in g) for g in groups]
    flat = sorted(r for g in out for r in g)
    if flat != list(range(world)) or len({len(g) for g in out}) != 1 or len(out[0]) < 2:
        raise ValueError(f"tensor-parallel groups {groups!r}: each rank 0..{world - 1} once, groups of one size >= 2")
    return out


def plan(pattern: str, model: ModelShape, world: int, scale: int = 1, *,
         tp_groups: Optional[Sequence[Sequence[int]]] = None,
         stages: Optional[Sequence[Sequence[int]]] = None) -> PatternPlan:
    """The plan of ``pattern`` for ``model`` on ``world`` ranks, element counts divided by ``scale``.

    ``tp_groups``: the tensor-parallel groups (global ranks; default: pairs of neighbouring ranks).
    ``stages``: the pipeline's stages in order, each the ranks of one stage (default: one rank per stage);
    rank k of a stage sends to rank k of the next.  ValueError, naming the value, where the pattern cannot
    run on this world or shape."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1:
        raise ValueError(f"scale={scale!r}: expected a whole number >= 1")
    if world < 2:
        raise ValueError(f"{pattern} needs 2 ranks or more, got a world of {world}")
    info: MeasurementInfo = {"model": model.name, "pattern": pattern, "scale": scale}
    if pattern == OVERLAP:
        return _plan_overlap(model, world, scale, info, tp_groups)
    if pattern == DP:
        return _plan_dp(model, world, scale, info)
    if pattern == MOE:
        return _plan_moe(model, world, scale, info)
    if pattern == TP:
        return _plan_tp(model, world, scale, info, tp_groups)
    return _plan_pp(model, world, scale, info, stages)


def _activation(model: ModelShape, scale: int) -> tuple[int, int]:
    """The width of a token's activation and the elements of one activation, scaled."""
    width = max(1, model.hidden // scale)
    return width, model.seq * model.micro_batch * width


def _plan_overlap(model: ModelShape, world: int, scale: int, info: MeasurementInfo,
                  tp_groups: Optional[Sequence[Sequence[int]]]) -> PatternPlan:
    """The gradient sync while the layers' tensor-parallel collectives run."""
    dp = plan(DP, model, world, scale)
    tp = plan(TP, model, world, scale, tp_groups=tp_groups)
    fewer = scale // max(1, scale // SCALED_BUCKETS_FEWER)  # as the scaled gradient's buckets
    layers = -(-model.layers // fewer)
    dp_bytes, tp_bytes = dp.bytes_per_iter, tp.bytes_per_iter * layers
    factor = (dp_bytes * dp.busbw_factor + tp_bytes * tp.busbw_factor) / (dp_bytes + tp_bytes)
    info.update(cast(MeasurementInfo, {k: v for k, v in dp.info.items() if k not in info}))
    info.update({"tp": tp.info["tp"], "tp_groups": tp.info["tp_groups"], "layers": model.layers,
                 "overlap_layers": layers, "activation_bytes": tp.info["activation_bytes"], "dp_bytes": dp_bytes,
                 "tp_bytes": tp_bytes})
    return PatternPlan(OVERLAP, model.name, world, scale, {"dp": dp.spec, "tp": tp.spec, "layers": layers},
                       dp_bytes + tp_bytes, factor, 1,
                       f"the gradient sync of {format_size(dp_bytes)} in {dp.info['buckets']} buckets while "
                       f"{layers} layers' tensor-parallel collectives run, 4 each", info)


def _plan_dp(model: ModelShape, world: int, scale: int, info: MeasurementInfo) -> PatternPlan:
    """One full gradient sync in DDP's buckets."""
    if model.params <= 0:
        raise ValueError(f"model {model.name!r} has no data-parallel gradient in this suite")
    total = max(1, int(model.params) // scale)
    bucket_scale = max(1, scale // SCALED_BUCKETS_FEWER)  # scaled: 1/16 of the buckets (see the docstring)
    first = max(1, DDP_FIRST_BUCKET_BYTES // BF16 // bucket_scale)
    cap = max(1, DDP_BUCKET_BYTES // BF16 // bucket_scale)
    buckets = ddp_buckets(total, first, cap)
    info.update({"buckets": len(buckets), "params": model.params, "bucket_bytes": cap * BF16,
                 "first_bucket_bytes": first * BF16})
    if model.dp_note:
        info["gradient"] = model.dp_note
    return PatternPlan(DP, model.name, world, scale, {"total": total, "first": first, "cap": cap},
                       total * BF16, 2 * (world - 1) / world, 1,
                       f"one full gradient sync of {format_size(total * BF16)} in {len(buckets)} buckets", info)


def _plan_moe(model: ModelShape, world: int, scale: int, info: MeasurementInfo) -> PatternPlan:
    """One MoE layer's dispatch and combine, with the experts' skewed load."""
    if not model.moe:
        raise ValueError(f"model {model.name!r} has no experts")
    width, _ = _activation(model, scale)
    tokens = model.seq * model.micro_batch
    counts, load = moe_counts(world, tokens, model.experts, model.top_k, model.zipf, model.seed)
    sent = [sum(row) for row in counts]
    received = [sum(counts[i][j] for i in range(world)) for j in range(world)]
    rows = sum(sent)
    off = rows - sum(counts[i][i] for i in range(world))
    mean_rows = rows / world
    info.update({"experts": model.experts, "top_k": model.top_k, "tokens_per_rank": tokens,
                 "moe_layers": model.moe_layers, "zipf": model.zipf, "seed": model.seed,
                 "expert_imbalance": max(load) / (sum(load) / len(load)),
                 "rank_imbalance": max(received) / mean_rows,
                 "imbalance": (f"busiest expert {max(load) / (sum(load) / len(load)):.2f}x the mean expert load, "
                               f"busiest rank receives {max(received) / mean_rows:.2f}x the mean "
                               f"(weights 1/k^{model.zipf:g}, seed {model.seed})")})
    return PatternPlan(MOE, model.name, world, scale, {"counts": counts, "width": width},
                       int(round(2 * mean_rows * width * BF16)), off / rows if rows else 0.0,
                       2 * model.moe_layers,
                       "one MoE layer's dispatch and combine all-to-all", info)


def _plan_tp(model: ModelShape, world: int, scale: int, info: MeasurementInfo,
             tp_groups: Optional[Sequence[Sequence[int]]]) -> PatternPlan:
    """One layer's forward in tensor-parallel groups."""
    _, act = _activation(model, scale)
    groups = _tp_groups(world, tp_groups)
    t = len(groups[0])
    count = max(t, act // t * t)
    info.update({"tp": t, "tp_groups": groups, "layers": model.layers, "activation_bytes": count * BF16})
    return PatternPlan(TP, model.name, world, scale, {"groups": groups, "count": count},
                       4 * count * BF16, (t - 1) / t, 2 * model.layers,
                       "one layer's forward: 2 all-gathers and 2 reduce-scatters of the activation", info)


def _plan_pp(model: ModelShape, world: int, scale: int, info: MeasurementInfo,
             stages: Optional[Sequence[Sequence[int]]]) -> PatternPlan:
    """One micro-batch through the pipeline's stages, forward and back."""
    _, act = _activation(model, scale)
    st = [[r] for r in range(world)] if stages is None else [[int(r) for r in s] for s in stages]
    if len(st) < 2 or len({len(s) for s in st}) != 1 or sorted(r for s in st for r in s) != list(range(world)):
        raise ValueError(f"pipeline stages {stages!r}: 2 stages or more of one size, each rank 0..{world - 1} once")
    fwd = [[a[k], b[k]] for a, b in zip(st, st[1:]) for k in range(len(a))]
    info.update({"stages": len(st), "micro_batches": model.micro_batches, "activation_bytes": act * BF16})
    return PatternPlan(PP, model.name, world, scale, {"forward": fwd, "count": act},
                       2 * act * BF16, 1.0, model.micro_batches,
                       "one micro-batch: its activation to the next stage, its gradient back", info)


# -- per-rank side --------------------------------------------------------------------------------

class _DataParallel:
    """The gradient in one flat buffer; each iteration all-reduces its DDP buckets, launched back to back."""

    def __init__(self, torch: ModuleType, dist: ModuleType, device: str, world: int, total: int, first: int, cap: int,
                 group: Optional[ProcessGroup] = None) -> None:
        self.torch, self.dist, self.world, self.group = torch, dist, world, group
        self.grad = torch.empty(total, device=device, dtype=torch.bfloat16)
        self.views, at = [], 0
        for k in ddp_buckets(total, first, cap):
            self.views.append(self.grad[at:at + k])
            at += k
        self.fill()

    def _pattern(self, lo: int, hi: int) -> Tensor:
        torch = self.torch
        return torch.arange(lo, hi, device=self.grad.device, dtype=torch.int64) % 3 + 1

    def fill(self) -> None:
        """Every rank's gradient 1, 2, 3, 1, ...: the sum is the world size times it, exact in bf16 up to 85 ranks."""
        step = 1 << 26
        for lo in range(0, self.grad.numel(), step):
            hi = min(lo + step, self.grad.numel())
            self.grad[lo:hi].copy_(self._pattern(lo, hi))

    @property
    def launches(self) -> int:
        """The collectives of one iteration: one all-reduce per bucket."""
        return len(self.views)

    def run(self) -> None:
        works = [self.dist.all_reduce(v, group=self.group, async_op=True) for v in self.views]
        for w in works:
            w.wait()

    def check(self) -> tuple[int, int, Optional[tuple[int, float, float]]]:
        acc: list[Any] = [0, 0, None]
        step = 1 << 26
        for lo in range(0, self.grad.numel(), step):
            hi = min(lo + step, self.grad.numel())
            merge_checks(acc, check_rows(self.torch, self.grad[lo:hi], self._pattern(lo, hi) * self.world), lo)
        return acc[0], acc[1], acc[2]


def _segment_rows(torch: ModuleType, counts: Sequence[int], src_of: Sequence[int], dst_of: Sequence[int], width: int,
                  device: str) -> Tensor:
    """Rows of ``width`` made of segments, segment s of ``counts[s]`` rows from rank ``src_of[s]`` to rank
    ``dst_of[s]``: element (i, c) of a segment is ``(5 src + 3 dst + i + c) % 251 + 1`` (exact in bf16; a
    segment or a row in the wrong place changes its values)."""
    parts = []
    col = torch.arange(width, device=device, dtype=torch.int32)
    for k, s, d in zip(counts, src_of, dst_of):
        if k:
            i = torch.arange(k, device=device, dtype=torch.int32)
            parts.append(((5 * s + 3 * d + i[:, None] + col[None, :]) % 251 + 1).to(torch.bfloat16))
    if not parts:
        return torch.empty(0, width, device=device, dtype=torch.bfloat16)
    return torch.cat(parts)


class _Experts:
    """This rank's routed tokens, ordered by destination rank: dispatch (uneven all-to-all) then combine."""

    def __init__(self, torch: ModuleType, dist: ModuleType, device: str, rank: int, counts: Sequence[Sequence[int]],
                 width: int) -> None:
        n = len(counts)
        self.torch, self.dist, self.device, self.rank, self.width = torch, dist, device, rank, width
        self.send_splits = [int(counts[rank][j]) for j in range(n)]
        self.recv_splits = [int(counts[i][rank]) for i in range(n)]
        self.sent = _segment_rows(torch, self.send_splits, [rank] * n, range(n), width, device)
        self.expect_recv = _segment_rows(torch, self.recv_splits, range(n), [rank] * n, width, device)
        self.recv = torch.empty(sum(self.recv_splits), width, device=device, dtype=torch.bfloat16)
        self.back = torch.empty(sum(self.send_splits), width, device=device, dtype=torch.bfloat16)
        self.fill()

    def fill(self) -> None:
        self.recv.fill_(-7)
        self.back.fill_(-7)

    @property
    def launches(self) -> int:
        """The collectives of one iteration: dispatch and combine."""
        return 2

    def run(self) -> None:
        a2a = self.dist.all_to_all_single
        a2a(self.recv, self.sent, output_split_sizes=self.recv_splits, input_split_sizes=self.send_splits)
        a2a(self.back, self.recv, output_split_sizes=self.send_splits, input_split_sizes=self.recv_splits)

    def check(self) -> tuple[int, int, Optional[tuple[int, float, float]]]:
        acc: list[Any] = [0, 0, None]
        merge_checks(acc, check_rows(self.torch, self.recv, self.expect_recv))
        merge_checks(acc, check_rows(self.torch, self.back, self.sent), self.recv.numel())
        return acc[0], acc[1], acc[2]


class _TensorParallel:
    """One layer's forward: all-gather, reduce-scatter, all-gather, reduce-scatter of the activation in this
    rank's tensor-parallel group (the collective suite's all_gather and reduce_scatter, checked as there)."""

    def __init__(self, torch: ModuleType, dist: ModuleType, device: str, rank: int, groups: Sequence[Sequence[int]],
                 count: int, backend: str) -> None:
        from .collectives import OPS
        from .timed_case import CollectiveCase

        self.torch = torch
        handle, ranks = sub_group(dist, groups, rank, backend)
        t, me = len(ranks), ranks.index(rank)
        self.ag = CollectiveCase(torch, dist, OPS["all_gather"], count, me, t, device, torch.bfloat16, False,
                        group=handle, ranks=ranks)
        self.rs = CollectiveCase(torch, dist, OPS["reduce_scatter"], count, me, t, device, torch.bfloat16, False,
                        group=handle, ranks=ranks)

    def fill(self) -> None:
        self.ag.fill()
        self.rs.fill()

    @property
    def launches(self) -> int:
        """The collectives of one iteration: two all-gathers, two reduce-scatters."""
        return 4

    def run(self) -> None:
        self.ag.run()
        self.rs.run()
        self.ag.run()
        self.rs.run()

    def check(self) -> tuple[int, int, Optional[tuple[int, float, float]]]:
        acc: list[Any] = [0, 0, None]
        merge_checks(acc, check_rows(self.torch, self.ag.result(), self.ag.expected()))
        merge_checks(acc, check_rows(self.torch, self.rs.result(), self.rs.expected()), self.ag.result().numel())
        return acc[0], acc[1], acc[2]


class _Pipeline:
    """One micro-batch: every stage sends its activation to the next at once, then its gradient back."""

    def __init__(self, torch: ModuleType, dist: ModuleType, device: str, rank: int, forward: Sequence[Sequence[int]],
                 count: int) -> None:
        from .nodes import PhaseExchange

        self.fwd = PhaseExchange(torch, dist, rank, forward, count, device, torch.bfloat16)
        self.bwd = PhaseExchange(torch, dist, rank, [[d, s] for s, d in forward], count, device, torch.bfloat16)

    def fill(self) -> None:
        self.fwd.fill()
        self.bwd.fill()

    @property
    def launches(self) -> int:
        """The batched send/recv calls of one iteration: forward and backward."""
        return 2

    def run(self) -> None:
        self.fwd.run()
        self.bwd.run()

    def check(self) -> tuple[int, int, Optional[tuple[int, float, float]]]:
        acc: list[Any] = [0, 0, None]
        merge_checks(acc, self.fwd.check())
        merge_checks(acc, self.bwd.check(), self.fwd.out.numel() if self.fwd.out is not None else 0)
        return acc[0], acc[1], acc[2]


class _Overlap:
    """The backward pass of data and tensor parallelism at once: the whole gradient all-reduced in DDP's
    buckets on a group of the world's ranks (:class:`_DataParallel`) while ``layers`` x the tensor-parallel
    layer's four collectives run in their groups (:class:`_TensorParallel`).  :meth:`iteration` runs either
    part alone or both: on GPU each part on a CUDA stream of its own, both starting after an event on the
    current stream, which waits for both at the end; on CPU the gradient sync in a second thread."""

    def __init__(self, torch: ModuleType, dist: ModuleType, device: str, rank: int, world: int, spec: dict[str, Any],
                 backend: str, gpu: bool) -> None:
        self.torch, self.gpu, self.layers = torch, gpu, int(spec["layers"])
        d, t = spec["dp"], spec["tp"]
        dp_group, _ = sub_group(dist, [list(range(world))], rank, backend, use="dp")
        self.dp = _DataParallel(torch, dist, device, world, d["total"], d["first"], d["cap"], group=dp_group)
        self.tp = _TensorParallel(torch, dist, device, rank, t["groups"], t["count"], backend)
        if gpu:
            self.streams = (torch.cuda.Stream(), torch.cuda.Stream())

    def fill(self) -> None:
        self.dp.fill()
        self.tp.fill()

    def _tp_run(self) -> None:
        for _ in range(self.layers):
            self.tp.run()

    def iteration(self, dp: bool = True, tp: bool = True, timed: bool = True) -> Any:
        """Run the parts asked for.  CPU: returns (total, dp part, tp part) seconds, a part's from the start to
        its end (0 where it did not run).  GPU: returns the events (start, end, dp end, tp end) to read after
        a sync (None where not ``timed`` or the part did not run)."""
        if not self.gpu:
            import threading
            import time

            t0 = time.perf_counter()
            box: dict[str, Any] = {}

            def dp_part() -> None:
                try:
                    self.dp.run()
                    box["dp"] = time.perf_counter() - t0
                except BaseException as e:  # raised in the calling thread after the join
                    box["error"] = e

            thread = None
            if dp and tp:
                thread = threading.Thread(target=dp_part, name="gpucomm-overlap-dp", daemon=True)
                thread.start()
            elif dp:
                dp_part()
            if tp:
                self._tp_run()
                box["tp"] = time.perf_counter() - t0
            if thread is not None:
                thread.join()
            if "error" in box:
                raise box["error"]
            return time.perf_counter() - t0, box.get("dp", 0.0), box.get("tp", 0.0)
        cuda = self.torch.cuda
        cur = cuda.current_stream()
        ev = (lambda: cuda.Event(enable_timing=True)) if timed else (lambda: None)  # noqa: E731
        start, end = ev(), ev()
        ends: list[Any] = [None, None]
        if start is not None:
            start.record(cur)
        for k, (on, part) in enumerate(((dp, self.dp.run), (tp, self._tp_run))):
            if on:
                stream = self.streams[k]
                stream.wait_stream(cur)
                with cuda.stream(stream):
                    part()
                ends[k] = ev()
                if ends[k] is not None:
                    ends[k].record(stream)
        for k, on in enumerate((dp, tp)):
            if on:
                cur.wait_stream(self.streams[k])
        if end is not None:
            end.record(cur)
        return start, end, ends[0], ends[1]

    def seconds(self, marks: Any) -> tuple[float, float, float]:
        """(total, dp part, tp part) of what :meth:`iteration` returned, after a sync."""
        if not self.gpu:
            return marks
        start, end, dp_end, tp_end = marks
        return tuple(start.elapsed_time(e) / 1e3 if e is not None else 0.0  # type: ignore[return-value]
                     for e in (end, dp_end, tp_end))

    @property
    def launches(self) -> int:
        """The collectives of one iteration: the gradient's buckets and every layer's four."""
        return self.dp.launches + self.layers * self.tp.launches

    def run(self) -> None:
        """Both parts, once, untimed (the single-op phase and the check)."""
        self.iteration(timed=False)

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def check(self) -> tuple[int, int, Optional[tuple[int, float, float]]]:
        acc: list[Any] = [0, 0, None]
        merge_checks(acc, self.dp.check())
        merge_checks(acc, self.tp.check(), self.dp.grad.numel())
        return acc[0], acc[1], acc[2]


def run_pattern(ctx: RankContext, pattern: str, spec: dict[str, Any], min_time_s: float = DEFAULT_MIN_TIME_S,
                max_samples: int = DEFAULT_MAX_SAMPLES, tail_time_s: Optional[float] = None) -> PatternResult:
    """Per-rank task, on every rank of the job's default group: build the pattern's buffers from ``spec``
    (:func:`plan`) and run them (:func:`.pattern_runs.run_case`): time its iterations (warm-up, plan agreed by
    every rank; the overlap: each part alone, then both), time single iterations one by one
    (:func:`.single_op_timing.single_op_phase`: ``tail_time_s``, None: 3 x ``min_time_s``; 0 skips them), then
    run one more on fresh inputs and poisoned outputs and count the wrong elements; last, with the other ranks,
    each iteration's time (the slowest rank's) and who arrived last (:func:`.across_ranks.iteration_stats`)."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    if ctx.group is not None:
        raise ValueError(f"{pattern} runs over the job's default group, not a sub-group")

    def make_case() -> Any:
        import torch
        import torch.distributed as dist

        n, r, gpu = ctx.world_size, ctx.rank, ctx.device.startswith("cuda")
        if pattern == DP:
            return _DataParallel(torch, dist, ctx.device, n, spec["total"], spec["first"], spec["cap"])
        if pattern == MOE:
            return _Experts(torch, dist, ctx.device, r, spec["counts"], spec["width"])
        if pattern == TP:
            return _TensorParallel(torch, dist, ctx.device, r, spec["groups"], spec["count"], ctx.backend)
        if pattern == PP:
            return _Pipeline(torch, dist, ctx.device, r, spec["forward"], spec["count"])
        return _Overlap(torch, dist, ctx.device, r, n, spec, ctx.backend, gpu)

    # the overlap: its two parts (the gradient sync, the tensor-parallel collectives) timed alone, then together
    return run_case(ctx, make_case, min_time_s=min_time_s, max_samples=max_samples, tail_time_s=tail_time_s,
                    parts=("dp", "tp") if pattern == OVERLAP else None, note_starts=waits_for_all(pattern, spec))


def waits_for_all(pattern: str, spec: dict[str, Any]) -> bool:
    """Whether no rank ends an iteration of the pattern before every rank has begun it: the gradient sync's
    all-reduces; the MoE all-to-alls where every rank sends tokens to every other (a rank that gets none from
    another need not wait for it); not the tensor-parallel groups (each waits for its own), not the pipeline's
    stages (each waits for the one before), not the overlap (:func:`.pattern_runs.run_case`)."""
    if pattern == DP:
        return True
    if pattern == MOE:
        counts = spec["counts"]
        return all(c > 0 for i, row in enumerate(counts) for j, c in enumerate(row) if i != j)
    return False


# -- the controller's side ------------------------------------------------------------------------

def to_measurement(results: Sequence[BenchResult], p: PatternPlan, *, backend: str) -> Measurement:
    """The measurement of the ranks' results (ordered by rank) for the plan ``p``; :class:`WrongResult`,
    naming every rank that saw a wrong element, if any did."""
    check_results(results, p, backend=backend)
    first = results[0]
    samples = list(first.samples_s)
    info: MeasurementInfo = {"backend": backend, "batch": first.batch, "graph": False,
                             "timer": "device events" if backend != "gloo" else "host clock", **p.info,
                            "iteration": p.iteration, "per_step": p.per_step}
    m = Measurement(op=p.pattern, size_bytes=p.bytes_per_iter, samples_s=samples,
                    devices=tuple(f"rank{r.rank}" for r in results), busbw_factor=p.busbw_factor,
                    world_size=len(results), dtype="bfloat16", kind="collective", info=info)
    step_s = m.median_s * p.per_step
    label = (f"the {WHAT[p.pattern]} of the {p.model} shape on {len(results)} ranks"
             f"{'' if p.scale == 1 else f' (scaled 1/{p.scale})'}")
    each = (f"{p.iteration}" if p.per_step == 1
            else f"{p.per_step} x {describe_duration(m.median_s, fixed=True)}, each {p.iteration}")
    info["step_comm_s"] = step_s
    info["step_label"] = label
    info["step"] = (f"{label}: {describe_duration(step_s, fixed=True)} per training step, {each}; "
                    f"busbw {format_gbps(m.busbw_gbps)} GB/s")
    figures = getattr(first, "overlap", None)
    if p.pattern == OVERLAP and figures:
        ov: dict[str, Any] = dict(figures)
        ov["dp_slowdown"] = ov["dp_overlapped_s"] / ov["dp_alone_s"] if ov["dp_alone_s"] > 0 else None
        ov["tp_slowdown"] = ov["tp_overlapped_s"] / ov["tp_alone_s"] if ov["tp_alone_s"] > 0 else None
        info["overlap"] = cast(OverlapInfo, ov)

        def part(name: str, key: str) -> str:
            alone, over, slow = ov[f"{key}_alone_s"], ov[f"{key}_overlapped_s"], ov[f"{key}_slowdown"]
            return (f"{name} {describe_duration(alone, fixed=True)} alone, "
                    f"{describe_duration(over, fixed=True)} overlapped"
                    f"{'' if slow is None else f' ({slow:.2f}x)'}")

        info["step"] += f"; {part('the gradient sync', 'dp')}, {part('the tensor-parallel collectives', 'tp')}"
    info["ranks"] = ranks_info(results)
    if first.op_times_s:
        info["tail"] = tail_info(results)
    info.update({"clocks": ranks_clocks(results)} if any(r.clocks for r in results) else {})
    return m

