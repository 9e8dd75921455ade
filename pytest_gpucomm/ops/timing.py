"""The timing engine: warm-up, adaptive iteration counts, per-iteration samples.

An operation to time implements :class:`Timed`: ``sample(batch)`` enqueues ``batch`` back-to-back
iterations and returns a callable that, once the work has finished, gives the seconds they took.
GPU operations time with device events (CUDA or ROCm/HIP through torch); host operations with the host
clock.  A *sample* is the time of one iteration; for small messages one sample is the mean of ``batch``
iterations run back to back (a batch), so that what is measured is the transfer and not the launch.

The engine is deterministic once its estimate is agreed: with ``agree`` (the maximum of a value over all
ranks of a process group) every rank of a collective chooses the same batch size and sample count.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from ..vocab import DEFAULT_MAX_SAMPLES, DEFAULT_MIN_TIME_S

if TYPE_CHECKING:
    from .clocks import Sampler

__all__ = ["TimingSettings", "Timed", "measure", "Plan", "plan"]


@dataclass(frozen=True)
class TimingSettings:
    """How long and how often to measure one case.

    ``min_time_s`` is the measuring time to fill per size (warm-up excluded).  The default, 0.1 s, keeps
    the shipped suites quick; ``--gpucomm-min-time=1`` reproduces the one-second-per-size runs of the
    published benchmarks.
    """

    min_time_s: float = DEFAULT_MIN_TIME_S
    min_samples: int = 10
    max_samples: int = DEFAULT_MAX_SAMPLES
    #: warm-up: this many iterations first (they pay for set-up), then more until about
    #: ``warmup_min_s`` of steady work has run (clocks, caches), at most ``max_warmup_iters``
    warmup_iters: int = 3
    warmup_min_s: float = 0.01
    max_warmup_iters: int = 2000
    #: a batch of iterations should last at least this long, so that per-launch costs and the
    #: resolution of the clock do not dominate a sample
    target_batch_s: float = 200e-6
    #: and at most this many iterations (None: no cap)
    max_batch: Optional[int] = None
    #: a batch larger than this is a whole multiple of it (the ops of one CUDA graph, replayed)
    batch_step: int = 1
    #: at most this much work is enqueued before the host waits for the device
    max_enqueue_s: float = 0.25
    #: and at most this many iterations, so the device queue never fills and blocks the host
    max_inflight_iters: int = 256

    def __post_init__(self) -> None:
        if not (self.min_time_s >= 0 and math.isfinite(self.min_time_s)):
            raise ValueError(f"min_time_s must be a non-negative number of seconds, got {self.min_time_s!r}")
        if self.max_batch is not None and self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, got {self.max_batch!r}")
        if self.batch_step < 1 or (self.max_batch is not None and self.max_batch > self.batch_step
                                   and self.max_batch % self.batch_step):
            raise ValueError(f"batch_step must be at least 1 and divide max_batch, got {self.batch_step!r} "
                             f"and {self.max_batch!r}")
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError(
                f"need 1 <= min_samples <= max_samples, got {self.min_samples} and {self.max_samples}"
            )


class Timed(Protocol):
    def sample(self, batch: int) -> Callable[[], float]:
        """Enqueue ``batch`` iterations; the returned callable gives their total seconds after sync()."""

    def sync(self) -> None:
        """Wait until all enqueued work has finished."""


@dataclass(frozen=True)
class Plan:
    batch: int  # iterations per sample (batch)
    samples: int  # samples to take
    estimate_s: float  # estimated time of one iteration


def plan(estimate_s: float, settings: TimingSettings) -> Plan:
    """Choose the batch size and the number of samples from an estimated iteration time."""
    est = max(estimate_s, 1e-9)
    batch = 1 if est >= settings.target_batch_s else int(math.ceil(settings.target_batch_s / est - 1e-9))
    step = settings.batch_step
    if batch > step:
        batch = int(math.ceil(batch / step)) * step
    if settings.max_batch is not None:
        batch = min(batch, settings.max_batch)
    per_sample = batch * est
    samples = int(math.ceil(settings.min_time_s / per_sample - 1e-9)) if settings.min_time_s > 0 else 0
    samples = max(settings.min_samples, min(settings.max_samples, samples))
    return Plan(batch=batch, samples=samples, estimate_s=est)


def _identity(x: float) -> float:
    return x


def measure(
    op: Timed,
    settings: TimingSettings,
    *,
    agree: Optional[Callable[[float], float]] = None,
    prepare: Optional[Callable[[Plan], None]] = None,
    clocks: Optional["Sampler"] = None,
) -> tuple[list[float], Plan]:
    """Warm up, estimate, plan, and take the samples.  Returns per-iteration seconds and the plan.

    ``agree`` maps a local value to the maximum over all participants (identity for a single process).
    ``prepare`` is called with the plan before the timed samples (a collective captures its graph there).
    ``clocks`` reads the devices' clocks and throttle reasons while the timed samples run
    (:class:`pytest_gpucomm.ops.clocks.Sampler`: from the first timed batch to the end of the last).
    """
    agree = agree or _identity
    # Warm-up: first calls pay for allocation, peer-access set-up, communicator creation, caches; then
    # steady work until clocks and caches settle.  Every rank of a process group runs the same number of
    # iterations: the count comes from the agreed (slowest) time per iteration.
    for _ in range(settings.warmup_iters):
        op.sample(1)
    op.sync()
    if settings.warmup_min_s > 0:
        t0 = time.perf_counter()
        for _ in range(3):
            op.sample(1)
        op.sync()
        per = max(agree((time.perf_counter() - t0) / 3), 1e-9)
        extra = min(settings.max_warmup_iters, int(math.ceil(settings.warmup_min_s / per)))
        while extra > 0:
            k = min(extra, settings.max_inflight_iters)
            for _ in range(k):
                op.sample(1)
            op.sync()
            extra -= k
    # Estimate one iteration from a few single-iteration samples, then from a trial batch.
    probes = [op.sample(1) for _ in range(3)]
    op.sync()
    est = sorted(p() for p in probes)[1]
    trial = plan(agree(est), settings)
    if trial.batch > 1:
        # Launch and clock overheads inflate a single iteration: re-estimate from a batch.
        getter = op.sample(trial.batch)
        op.sync()
        est = getter() / trial.batch
    final = plan(agree(est), settings)
    if prepare is not None:
        prepare(final)
    samples: list[float] = []
    per_sample = max(final.batch * final.estimate_s, 1e-9)
    chunk = max(1, min(final.samples, int(settings.max_enqueue_s / per_sample),
                       settings.max_inflight_iters // final.batch))
    if clocks is not None:
        clocks.start()
    try:
        while len(samples) < final.samples:
            k = min(chunk, final.samples - len(samples))
            getters = [op.sample(final.batch) for _ in range(k)]
            op.sync()
            samples.extend(g() / final.batch for g in getters)
    finally:
        if clocks is not None:
            clocks.stop()
    return samples, final
