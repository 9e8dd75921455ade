"""The noise of single-operation tails, run to run: measure it, and fit the model the tail rule is tuned on.

Measure (one "session"; run several, minutes or days apart, each to its own file)::

    python benchmarks/tail_noise.py --json benchmarks/data/tail_noise_cpu_1.json \
        [--ops all_reduce,all_gather] [--sizes 4KiB,64KiB,1MiB] [--runs 5] [--tail-time 0.3] [--min-time 0.02]

Each of ``--runs`` runs starts a NEW process group (new rank processes, a new communicator: the gate's
re-measures and a new session do the same) and measures every case (op x size) once with
``ops.collectives.bench``; per run and case it keeps the measurement's ``info["tail"]`` (the single ops'
sparse histogram, exact p50/p99, ...), which is what a baseline run's tail sketch is made from.  NCCL on the
GPUs when there are any (world = the number of GPUs, 1 included: a one-rank NCCL group is legal; ``--world``
to use fewer), else gloo on the CPU with world 2.  Defaults: on CPU the sizes 4KiB,64KiB,1MiB; on GPU also
16MiB,256MiB, and ``--tail-time`` 0.1 s, the plugin's default measuring (``--gpucomm-min-time`` 0.1 s:
single ops fill the same time, at most 10,000; a large size then gets few ops, which the fit still reads, but
its share figures are mostly binomial: give ``--tail-time 1`` for them).  On CPU ``--tail-time`` is 0.3 s by
default; the recorded CPU sessions used 1.0.  ``--json PATH`` writes the raw records (compact JSON).

For one H200 (the lead's run), e.g.: ``python benchmarks/tail_noise.py --runs 8 --json tail_noise_h200_1.json``,
again in later sessions to ``_2``, ``_3``; then ``--fit tail_noise_h200_*.json``.

Fit (any number of such files, e.g. several sessions; prints per case, per file and pooled)::

    python benchmarks/tail_noise.py --fit benchmarks/data/tail_noise_cpu_*.json [--fit-json OUT]

The noise model, per case (``fit_case``), in the terms of ``tests/test_tails.py``'s simulation
(an op's time = the run's median x a body factor, and for a share of the ops a slow factor on top):

* ``body_sigma``: the body's lognormal spread, from the interquartile range of log(time / p50), corrected
  for the slow ops' share (the quartiles of the body alone);
* ``slow_share``: the share of ops slower than p50 x exp(4 body_sigma) (a lognormal body puts 3e-5 there),
  and ``slow_factor`` / ``slow_sigma``: the median and the spread (sd of log) of their ratio to p50;
* ``ref_ratio``: the median over the runs of p99 / p50 (the rule's reference ratio); per run, the share of
  ops above p50 x ref_ratio; ``share_sd``: the run-to-run sd of the log of that share with the binomial part
  removed (sqrt(max(0, var - mean((1 - p) / (n p))))), the figure ``gate.tails.fit_spread`` estimates;
* ``share_sd_far``: the same at the median p99.9 / p50 (the rule's second reference level);
* ``drift``: the run-to-run sd of log p50 (the median's drift between process groups).

Pooled figures: ``share_sd`` pools the variances (binomial part removed) over the cases, weighted by their
runs - 1; the others are medians over the cases.  Figures are per file (session) and over all files.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

SCHEMA = "pytest-gpucomm tail-noise"
VERSION = 1
#: an op is slow when above p50 x exp(SLOW_SIGMAS x body_sigma)
SLOW_SIGMAS = 4.0


# -- measuring ----------------------------------------------------------------------------------------

def measure(args: argparse.Namespace) -> dict[str, Any]:
    from pytest_gpucomm.plugin.group import ProcessGroup
    from pytest_gpucomm.env.hardware import detect
    from pytest_gpucomm.ops.collectives import to_measurement, worker_env
    from pytest_gpucomm.ranks import RankPool
    from pytest_gpucomm.units import parse_size

    info = detect(args.device)
    gpu = info.kind == "gpu"
    backend = info.backend
    world = args.world or (info.count if gpu else 2)
    if gpu and not 1 <= world <= info.count:
        raise SystemExit(f"--world {world}: this machine has {info.count} GPUs")
    sizes = args.sizes or ("4KiB,64KiB,1MiB,16MiB,256MiB" if gpu else "4KiB,64KiB,1MiB")
    tail_time = args.tail_time if args.tail_time is not None else (0.1 if gpu else 0.3)
    cases = [(op, parse_size(s)) for op in args.ops.split(",") for s in sizes.split(",")]
    records: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for run in range(args.runs):
        with RankPool(world, backend=backend, device=info.torch_device_type, env=worker_env(backend)) as ex:
            g = ProcessGroup(ex, backend, 600.0)
            for op, n in cases:
                res = g.run("pytest_gpucomm.ops.collectives:bench",
                            {"op": op, "size_bytes": n, "dtype": "float32", "min_time_s": args.min_time,
                             "tail_time_s": tail_time})
                m = to_measurement(res, op=op, backend=backend, dtype="float32", requested_bytes=n)
                tail = m.info["tail"]
                records.append({"run": run, "op": op, "size_bytes": m.size_bytes, "median_s": m.median_s,
                                "tail": tail})
                print(f"run {run}: {op} {m.size_bytes} B: {tail['n']} single ops, p50 {tail['p50_us']:.1f} us, "
                      f"p99/p50 {tail['jitter']:.2f}", flush=True)
    return {"schema": SCHEMA, "version": VERSION, "headline": info.headline(), "host": platform.node(),
            "backend": backend, "world": world, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "wall_s": round(time.monotonic() - t0, 1), "runs": args.runs, "tail_time_s": tail_time,
            "min_time_s": args.min_time, "records": records}


# -- fitting ------------------------------------------------------------------------------------------

def load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: cannot read a tail-noise file ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("records"), list):
        raise SystemExit(f"{path}: not a {SCHEMA!r} file "
                         f"(schema {doc.get('schema') if isinstance(doc, dict) else None!r})")
    return doc


def _body_sigma(hist: Any, w: float) -> float:
    """The body's lognormal sigma from the quartiles, the slow share ``w`` (above the body) taken out."""
    from scipy.stats import norm

    q25, q75 = hist.quantile(0.25), hist.quantile(0.75)
    z = norm.ppf(0.75 / (1 - w)) - norm.ppf(0.25 / (1 - w))
    return math.log(q75 / q25) / z


def fit_run(tail: dict[str, Any], where: str) -> dict[str, Any]:
    """One run's figures: n, p50, body sigma, slow share and factor, p99 / p50."""
    from pytest_gpucomm.sketches import BIN_RATIO, Histogram

    try:
        h = Histogram.from_dict(tail["hist"], where)
        p50, p99 = float(tail["p50_us"]) * 1e-6, float(tail["p99_us"]) * 1e-6
    except (KeyError, TypeError, ValueError) as e:
        raise SystemExit(f"{where}: not a tail record ({e})") from None
    n = h.n
    w, sigma = 0.0, _body_sigma(h, 0.0)
    for _ in range(5):  # body sigma <-> slow share, to a fixed point
        cut = p50 * math.exp(SLOW_SIGMAS * sigma)
        w = min(0.24, h.count_above(cut) / n)  # the body keeps both quartiles (0.75 / (1 - w) < 1)
        sigma = max(_body_sigma(h, w), math.log(BIN_RATIO))
    cut = p50 * math.exp(SLOW_SIGMAS * sigma)
    slow = [(Histogram.lower_edge(i) * math.sqrt(BIN_RATIO) / p50, c) for i, c in h.counts.items()
            if Histogram.lower_edge(i) > cut]
    logs = [math.log(r) for r, c in slow for _ in range(c)]
    return {"n": n, "p50_s": p50, "step_s": float(tail.get("resolution_us") or 0.0) * 1e-6, "ratio": p99 / p50,
            "ratio_far": h.quantile(0.999) / p50, "body_sigma": sigma, "slow_share": w,
            "slow_factor": math.exp(statistics.median(logs)) if logs else None,
            "slow_sigma": statistics.pstdev(logs) if len(logs) >= 2 else None, "hist": h}


def _share_spread(runs: Sequence[dict[str, Any]], key: str) -> tuple[float, list[float], Optional[float]]:
    """At the reference ratio = the median over the runs of ``key`` (p99 / p50 or p99.9 / p50): the ratio, each
    run's share of ops above it, and the run-to-run variance of the log share less the binomial part (None
    with one run)."""
    ref = statistics.median(r[key] for r in runs)
    shares, binom = [], []
    for r in runs:
        k = r["hist"].count_above(r["p50_s"] * ref)
        p = (k + 0.5) / (r["n"] + 1)
        shares.append(p)
        binom.append((1 - p) / (r["n"] * p))
    v = statistics.variance(math.log(p) for p in shares) - statistics.mean(binom) if len(runs) >= 2 else None
    return ref, shares, v


def fit_case(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The noise figures of one case from its runs' :func:`fit_run` figures (see the module's doc)."""
    from pytest_gpucomm.gate.tails import MIN_TICKS

    ref, shares, v = _share_spread(runs, "ratio")
    _, _, v_far = _share_spread(runs, "ratio_far")
    p50 = statistics.median(r["p50_s"] for r in runs)
    step = statistics.median(r["step_s"] for r in runs)
    out: dict[str, Any] = {
        # the rule judges the case only where its p99 lies MIN_TICKS clock steps above the median
        "resolved": (ref - 1.0) * p50 >= MIN_TICKS * step,
        "runs": len(runs), "n": statistics.median(r["n"] for r in runs),
        "p50_us": statistics.median(r["p50_s"] for r in runs) * 1e6, "ref_ratio": ref,
        "body_sigma": statistics.median(r["body_sigma"] for r in runs),
        "slow_share": statistics.median(r["slow_share"] for r in runs),
        "slow_factor": _median_or_none(r["slow_factor"] for r in runs),
        "slow_sigma": _median_or_none(r["slow_sigma"] for r in runs),
        "share_at_ref": statistics.median(shares),
        "share_var": v, "share_sd": None if v is None else math.sqrt(max(0.0, v)),
        "share_var_far": v_far, "share_sd_far": None if v_far is None else math.sqrt(max(0.0, v_far)),
        "drift": statistics.stdev(math.log(r["p50_s"]) for r in runs) if len(runs) >= 2 else None,
    }
    return out


def _median_or_none(xs: Any) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pooled(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pooled figures over cases: share_sd from the variances weighted by runs - 1 over the cases the rule
    judges (``resolved``: their p99 at least MIN_TICKS clock steps above the median), the rest medians."""
    multi = [c for c in cases if c["share_var"] is not None and c.get("resolved", True)]
    df = sum(c["runs"] - 1 for c in multi)
    v = sum((c["runs"] - 1) * c["share_var"] for c in multi) / df if df else None
    v_far = sum((c["runs"] - 1) * c["share_var_far"] for c in multi) / df if df else None
    out = {"cases": len(cases), "resolved": sum(1 for c in cases if c.get("resolved", True)), "df": df,
           "share_sd": None if v is None else math.sqrt(max(0.0, v)),
           "share_sd_far": None if v_far is None else math.sqrt(max(0.0, v_far))}
    for key in ("body_sigma", "slow_share", "slow_factor", "slow_sigma", "ref_ratio", "share_at_ref", "n"):
        out[key] = _median_or_none(c[key] for c in cases)
    out["drift"] = _median_or_none(c["drift"] for c in cases)
    return out


def fit(paths: Sequence[Path]) -> dict[str, Any]:
    """Per file (session) and case, the noise figures; and the pooled figures per file and over all."""
    files: dict[str, Any] = {}
    every: list[dict[str, Any]] = []
    for path in paths:
        doc = load(path)
        by_case: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for j, rec in enumerate(doc["records"]):
            where = f"{path}: records[{j}]"
            try:
                key = (str(rec["op"]), int(rec["size_bytes"]))
                tail = rec["tail"]
            except (KeyError, TypeError, ValueError) as e:
                raise SystemExit(f"{where}: not a tail-noise record ({e!r})") from None
            by_case.setdefault(key, []).append(fit_run(tail, where))
        cases = {f"{op} {size}": fit_case(runs) for (op, size), runs in sorted(by_case.items())}
        every += cases.values()
        files[str(path)] = {"headline": doc.get("headline"), "backend": doc.get("backend"), "world": doc.get("world"),
                            "started": doc.get("started"), "cases": cases, "pooled": pooled(list(cases.values()))}
    return {"files": files, "pooled": pooled(every)}


def _f(x: Optional[float], fmt: str) -> str:
    if x is None:
        width = "".join(ch for ch in fmt.split(".")[0] if ch.isdigit())
        return "-".rjust(int(width) if width else 1)
    return format(x, fmt)


def print_fit(res: dict[str, Any]) -> None:
    head = (f"{'case':<26} {'runs':>4} {'n':>6} {'p50 us':>8} {'body':>6} {'slow':>6} {'x slow':>7} "
            f"{'sd':>5} {'ref':>6} {'@ref':>6} {'s':>6} {'s999':>6} {'drift':>6}")
    for path, f in res["files"].items():
        print(f"{path}: {f['headline']}; world {f['world']} ({f['backend']}); started {f['started']}")
        print(head)
        rows = list(f["cases"].items()) + [("pooled (this file)", f["pooled"])]
        for name, c in rows:
            mark = "" if c.get("resolved", True) else " *"
            print(f"{name + mark:<26} {c.get('runs', c.get('cases')):>4} {_f(c['n'], '6.0f')} "
                  f"{_f(c.get('p50_us'), '8.1f')} "
                  f"{_f(c['body_sigma'], '6.1%')} {_f(c['slow_share'], '6.2%')} {_f(c['slow_factor'], '7.2f')} "
                  f"{_f(c['slow_sigma'], '5.2f')} {_f(c['ref_ratio'], '6.2f')} {_f(c['share_at_ref'], '6.2%')} "
                  f"{_f(c['share_sd'], '6.3f')} {_f(c['share_sd_far'], '6.3f')} {_f(c['drift'], '6.1%')}")
        print()
    p = res["pooled"]
    print("* not resolved: the case's p99 lies fewer than MIN_TICKS clock steps above its median (the rule does not "
          "judge it; left out of the pooled s)")
    print(f"pooled over {len(res['files'])} file(s), {p['cases']} cases, {p['resolved']} resolved ({p['df']} df): "
          f"body sigma "
          f"{_f(p['body_sigma'], '.1%')}, slow share {_f(p['slow_share'], '.2%')} x {_f(p['slow_factor'], '.2f')} "
          f"(sd {_f(p['slow_sigma'], '.2f')}), p99/p50 {_f(p['ref_ratio'], '.2f')}, run-to-run sd of the log "
          f"share above it {_f(p['share_sd'], '.3f')} (binomial part removed; above the p99.9 ratio "
          f"{_f(p['share_sd_far'], '.3f')}), median drift {_f(p['drift'], '.1%')}")
    print("columns: body = body sigma; slow = share of slow ops; x slow = their median ratio to p50, sd = its "
          "log sd; ref = median p99/p50; @ref = median share above ref x p50; s = run-to-run sd of the log "
          "share above ref (binomial part removed), s999 the same above the median p99.9/p50; drift = run-to-run sd "
          "of log p50")


def _jsonable(res: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(res, default=lambda o: None))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter")
    p.add_argument("--sizes", default=None, help="comma-separated (default: 4KiB,64KiB,1MiB; on GPU also "
                   "16MiB,256MiB)")
    p.add_argument("--runs", type=int, default=5, help="runs, each in a new process group (default 5)")
    p.add_argument("--tail-time", type=float, default=None, help="single-op budget per case, seconds "
                   "(default 0.1 on GPU, 0.3 on CPU)")
    p.add_argument("--min-time", type=float, default=0.02, help="batched samples' time per case (default 0.02)")
    p.add_argument("--device", default="auto", choices=("auto", "gpu", "cpu"))
    p.add_argument("--world", type=int, default=None, help="ranks (default: the GPUs, or 2 on CPU)")
    p.add_argument("--json", type=Path, default=None, help="write the raw per-run tail records here")
    p.add_argument("--fit", type=Path, nargs="+", default=None, help="fit the noise model to these files")
    p.add_argument("--fit-json", type=Path, default=None, help="with --fit: also write the fitted figures here")
    args = p.parse_args(argv)
    if args.fit:
        res = fit(args.fit)
        print_fit(res)
        if args.fit_json:
            args.fit_json.write_text(json.dumps(_jsonable(res), indent=1) + "\n")
        return 0
    if args.runs < 2:
        p.error(f"--runs {args.runs}: need at least 2 (the run-to-run spread)")
    doc = measure(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
        print(f"wrote {args.json} ({len(doc['records'])} records)")
    res = fit([args.json]) if args.json else None
    if res:
        print_fit(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
