"""The copy kernels of :mod:`.sm_copy`, in Triton: imported by it where the first copy by kernel is set up, never at
the package's import (machines without a GPU have no Triton).  Offsets are 64-bit (buffers past 2 GiB); loads
bypass L1 (``.cg``); the last chunk is masked.

- ``copy_one_way``: ``dst`` = ``src`` (``n`` elements), ``reps`` times, chunk ``c`` by program ``c mod programs``;
- ``copy_both_ways``: ``d1`` = ``s1`` and ``d2`` = ``s2`` at once, in the layout ``LAYOUT`` (the index of
  :data:`.sm_copy.BIDIR_LAYOUTS`): 0 ``programs`` (even programs one way, odd the other), 1 ``alternate`` (each
  program a chunk one way, then the same chunk the other way), 2 ``paired`` (each program loads a chunk of each
  direction, then stores both).
"""

import triton
import triton.language as tl

__all__ = ["copy_one_way", "copy_both_ways"]


@triton.jit
def copy_one_way(dst, src, n, reps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    chunks = tl.cdiv(n, BLOCK)
    for _ in range(reps):
        for c in range(pid, chunks, nprog):
            offs = c.to(tl.int64) * BLOCK + lanes  # type: ignore[attr-defined]
            m = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=m, cache_modifier=".cg"), mask=m)


@triton.jit
def copy_both_ways(d1, s1, d2, s2, n, reps, BLOCK: tl.constexpr, LAYOUT: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    chunks = tl.cdiv(n, BLOCK)
    if LAYOUT == 0:  # programs: even programs one way, odd programs the other
        half = nprog // 2
        p = pid // 2
        for _ in range(reps):
            for c in range(p, chunks, half):
                offs = c.to(tl.int64) * BLOCK + lanes  # type: ignore[attr-defined]
                m = offs < n
                if pid % 2 == 0:
                    tl.store(d1 + offs, tl.load(s1 + offs, mask=m, cache_modifier=".cg"), mask=m)
                else:
                    tl.store(d2 + offs, tl.load(s2 + offs, mask=m, cache_modifier=".cg"), mask=m)
    elif LAYOUT == 1:  # alternate: a chunk one way, then the same chunk the other way
        for _ in range(reps):
            for c in range(pid, chunks, nprog):
                offs = c.to(tl.int64) * BLOCK + lanes  # type: ignore[attr-defined]
                m = offs < n
                tl.store(d1 + offs, tl.load(s1 + offs, mask=m, cache_modifier=".cg"), mask=m)
                tl.store(d2 + offs, tl.load(s2 + offs, mask=m, cache_modifier=".cg"), mask=m)
    else:  # paired: both loads in flight, then both stores
        for _ in range(reps):
            for c in range(pid, chunks, nprog):
                offs = c.to(tl.int64) * BLOCK + lanes  # type: ignore[attr-defined]
                m = offs < n
                a = tl.load(s1 + offs, mask=m, cache_modifier=".cg")
                b = tl.load(s2 + offs, mask=m, cache_modifier=".cg")
                tl.store(d1 + offs, a, mask=m)
                tl.store(d2 + offs, b, mask=m)

