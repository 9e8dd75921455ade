"""A straggler outside the timed sample (issue 46, item 4): launched jobs of simulated nodes on this host, healthy
or with one rank held up by a stop or a CPU hog, and what the ranks' figures say of each case.

    python benchmarks/stragglers.py [--mode none|stop|hog] [--jobs 3] [--nodes 2] [--ranks-per-node 1]
                                    [--file suites/test_collectives.py] [--pin] [--victim 1]
                                    [--stops 6] [--stop-s 0.2] [--stop-start 3] [--out DIR]
                                    [--save FILE] [-- PYTEST ARGS...]

Each job is ``--nodes`` x ``--ranks-per-node`` pytest processes given srun's variables by hand (the launched
mode, gloo on 127.0.0.1), running ``--file`` with its JSON report.  ``--pin`` pins rank k (its process and every
thread and child of it) to core k mod the host's cores with ``taskset -c`` at its start.  The injections, on
rank ``--victim``:

* ``stop``: ``--stops`` times, ``--stop-s`` seconds each, its process group is stopped (SIGSTOP) and continued
  (SIGCONT), 0.3 to 1.2 s apart (random), from ``--stop-start`` seconds (3) after the job starts;
* ``hog``: a busy loop, pinned with ``taskset -c`` to the victim's core (the victim is pinned too: ``--pin`` is
  implied), from the start of the job to its end.

Per job: the largest excess of any rank in any case, for the four figures the rule reads (the others' median
wait share minus its own, ``WAITED_FOR``; its late share minus the others' median, ``LATE_FOR``; each in the timed
samples and the single ops), with the rank and the case; per node the mean excess late share over the cases
(``LATE_ACROSS_FOR``); the cases naming a rank waited for, and how many name the victim.  Needs torch (gloo)
and Linux (``taskset``).  ``--save FILE`` adds each job to FILE (a JSON list, made if absent): its mode, whether
the ranks were pinned, the load average before and after it, and per case the ranks' nodes and late shares
(timed samples), what the rule across the cases reads (``benchmarks/data/stragglers_cpu.json``, read by
``tests/test_stragglers.py``).

    python benchmarks/stragglers.py --cost [--blocks 40] [--size 1024]

The cost of noting when each op began: two gloo ranks time an all_reduce of ``--size`` bytes through the timed
loop (:class:`~pytest_gpucomm.ops.timed_case.TimedLoop`, 20 samples of 32 ops a block), in blocks taken in turn
without and with the note, and print the median time of an op each way over the blocks, and the time the ranks
take afterwards to work out the late shares of a block's ops (:func:`~pytest_gpucomm.ops.across_ranks.late_total`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_gpucomm.analysis.stragglers import (LATE_ACROSS_FOR, LATE_FOR, WAITED_FOR, Z_LIMIT,  # noqa: E402
                                                case_ranks, excess_lates, excess_waits, late_across,
                                                late_across_named)
from pytest_gpucomm.measurement import Measurement  # noqa: E402

FIGURES = (("wait_share", excess_waits, WAITED_FOR), ("op_wait_share", excess_waits, WAITED_FOR),
           ("late_share", excess_lates, LATE_FOR), ("op_late_share", excess_lates, LATE_FOR))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, nodes: int, per_node: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=str(nodes * per_node), SLURM_LOCALID=str(rank % per_node),
               SLURM_NTASKS_PER_NODE=str(per_node), SLURM_NODEID=str(rank // per_node),
               SLURM_STEP_NODELIST=f"node[1-{nodes}]", SLURM_STEP_ID="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), OMP_NUM_THREADS="1", COLUMNS="120",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return env


def stopper(pgid: int, stops: int, seconds: float, start_s: float, done: threading.Event, log: list[float]) -> None:
    if done.wait(start_s):
        return
    for _ in range(stops):
        try:
            os.killpg(pgid, signal.SIGSTOP)
            log.append(time.monotonic())
            time.sleep(seconds)
            os.killpg(pgid, signal.SIGCONT)
        except ProcessLookupError:
            return
        if done.wait(random.uniform(0.3, 1.2)):
            return


def run_job(args: argparse.Namespace, out: Path, extra: list[str]) -> tuple[dict[str, Any], float, int]:
    world = args.nodes * args.ranks_per_node
    port, cores = free_port(), os.cpu_count() or 1
    pin = args.pin or args.mode == "hog"
    procs = []
    for r in range(world):
        cmd = [sys.executable, "-m", "pytest", args.file, "-p", "no:cacheprovider", "-q", f"--gpucomm-json={out}",
               "--gpucomm-timeout=600", *extra]
        if r:
            cmd = [c for c in cmd if not c.startswith("--gpucomm-json")]
        if pin:
            cmd = ["taskset", "-c", str(r % cores), *cmd]
        procs.append(subprocess.Popen(cmd, env=rank_env(r, args.nodes, args.ranks_per_node, port), cwd=ROOT,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    start = time.monotonic()
    done, log = threading.Event(), []
    hog: Optional[subprocess.Popen[bytes]] = None
    if args.mode == "stop":
        threading.Thread(target=stopper, daemon=True,
                         args=(procs[args.victim].pid, args.stops, args.stop_s, args.stop_start, done, log)).start()
    elif args.mode == "hog":
        hog = subprocess.Popen(["taskset", "-c", str(args.victim % cores), sys.executable, "-c", "while True: pass"])
    outputs = [p.communicate()[0] for p in procs]
    done.set()
    if hog is not None:
        hog.kill()
        hog.wait()
    codes = [p.returncode for p in procs]
    if codes[0] not in (0, 1) or not out.exists():
        raise SystemExit(f"the job failed (exit statuses {codes}); rank 0's output ends:\n{outputs[0][-3000:]}")
    return json.loads(out.read_text()), time.monotonic() - start, len(log)


def summary(doc: dict[str, Any], victim: int) -> dict[str, Any]:
    """The largest excess of each figure over the job's cases (with its rank and test), and the named cases."""
    largest: dict[str, tuple[float, int, str]] = {}
    named, named_victim, cases = 0, 0, 0
    for row in doc["rows"]:
        ranks = row.get("info", {}).get("ranks")
        if not ranks:
            continue
        cases += 1
        for key, fn, _ in FIGURES:
            shares = ranks.get(key)
            if not shares:
                continue
            for rank, x in zip(ranks["rank"], fn([float(v) for v in shares])):
                if key not in largest or x > largest[key][0]:
                    largest[key] = (x, rank, row["test"])
        waited = (row.get("stragglers") or {}).get("waited_for") or []
        if waited:
            named += 1
            named_victim += any(w["rank"] == victim for w in waited)
    across = late_across([case_ranks(Measurement.from_dict(row)) for row in doc["rows"]
                          if row.get("info", {}).get("ranks")])
    return {"cases": cases, "largest": largest, "named": named, "named_victim": named_victim, "across": across}


def saved_job(doc: dict[str, Any], mode: str, pinned: bool, loads: tuple[float, float]) -> dict[str, Any]:
    """What ``--save`` keeps of a job: the late shares of each case that has them, by rank, with the ranks' nodes."""
    cases = [{"test": row["test"], "node": row["info"]["ranks"]["node"],
              "late_share": row["info"]["ranks"]["late_share"]}
             for row in doc["rows"] if (row.get("info", {}).get("ranks") or {}).get("late_share")]
    return {"mode": mode, "pinned": pinned, "load_before": round(loads[0], 2), "load_after": round(loads[1], 2),
            "date": time.strftime("%Y-%m-%d"), "cases": cases}


def save_jobs(path: Path, jobs: list[dict[str, Any]]) -> None:
    """Add the jobs to the list in ``path`` (made when absent), written whole to a temporary file first."""
    before = json.loads(path.read_text()) if path.exists() else []
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(before + jobs, indent=None, separators=(",", ":")) + "\n")
    os.replace(tmp, path)


def cost_rank(rank: int, port: int, blocks: int, size: int) -> None:
    """One rank of ``--cost`` (see the module's docstring); rank 0 prints."""
    import statistics

    import torch
    import torch.distributed as dist

    from pytest_gpucomm.ops.across_ranks import late_total
    from pytest_gpucomm.ops.collectives import OPS
    from pytest_gpucomm.ops.timed_case import CollectiveCase, TimedLoop

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    case = CollectiveCase(torch, dist, OPS["all_reduce"], size // 4, rank, 2, "cpu", torch.float32, in_place=True)
    loop = TimedLoop(torch, case, gpu=False, use_graph=False, eager_calls=0)
    batch, samples = 32, 20
    for _ in range(20):
        loop.sample(batch)
    per_op: dict[bool, list[float]] = {False: [], True: []}
    after: list[float] = []
    for b in range(blocks):
        noted = b % 2 == 1
        dist.barrier()
        if noted:
            loop.record()
        times = [loop.sample(batch)() / batch for _ in range(samples)]
        per_op[noted].append(statistics.median(times))
        if noted:
            entries = loop.entry_times() or []
            t0 = time.perf_counter()
            late_total(torch, dist, entries, rank, "cpu")
            after.append(time.perf_counter() - t0)
    if rank == 0:
        off, on = statistics.median(per_op[False]), statistics.median(per_op[True])
        print(f"all_reduce {size} B on 2 gloo ranks, {blocks} blocks of {samples} x {batch} ops, in turn:\n"
              f"  median op {off * 1e6:.2f} us without the note, {on * 1e6:.2f} us with it ({(on / off - 1):+.2%})\n"
              f"  working out the late shares of {samples * batch} ops: {statistics.median(after) * 1e3:.2f} ms")
    dist.destroy_process_group()


def cost(blocks: int, size: int) -> int:
    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--cost-rank", str(r), "--port", str(port),
                               "--blocks", str(blocks), "--size", str(size)],
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for r in range(2)]
    return max(p.wait() for p in procs)


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("none", "stop", "hog"), default="none")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=1)
    ap.add_argument("--file", default="suites/test_collectives.py")
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--victim", type=int, default=1)
    ap.add_argument("--stops", type=int, default=6)
    ap.add_argument("--stop-s", type=float, default=0.2)
    ap.add_argument("--stop-start", type=float, default=3.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--save", type=Path, default=None)
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--cost-rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args(argv)
    if args.cost_rank is not None:
        cost_rank(args.cost_rank, args.port, args.blocks, args.size)
        return 0
    if args.cost:
        return cost(args.blocks, args.size)
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="stragglers-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{args.jobs} job(s) of {args.nodes} x {args.ranks_per_node} ranks, {args.file}, mode {args.mode}"
          f"{' (victim rank %d)' % args.victim if args.mode != 'none' else ''}; thresholds: wait {WAITED_FOR}, "
          f"late {LATE_FOR}\nreports in {out_dir}")
    overall: dict[str, float] = {}
    for j in range(args.jobs):
        out = out_dir / f"{args.mode}-{j}.json"
        load_before = os.getloadavg()[0]
        doc, took, stops = run_job(args, out, extra)
        if args.save:  # after each job: a later job that fails loses nothing saved
            save_jobs(args.save, [saved_job(doc, args.mode, args.pin or args.mode == "hog",
                                            (load_before, os.getloadavg()[0]))])
        s = summary(doc, args.victim)
        print(f"job {j}: {took:.0f} s, {s['cases']} cases"
              + (f", {stops} stops" if args.mode == "stop" else "")
              + f"; cases naming a rank: {s['named']} (the victim: {s['named_victim']})")
        for key, _, limit in FIGURES:
            if key in s["largest"]:
                x, rank, test = s["largest"][key]
                overall[key] = max(overall.get(key, x), x)
                print(f"  largest excess {key:<14} {x:7.3f} (limit {limit}) rank {rank} in\n    {test}")
        for (node, _), (mean, k, se) in sorted(s["across"].items()):
            overall["across"] = max(overall.get("across", mean), mean)
            named = late_across_named(mean, k, se)
            print(f"  node {node}: mean excess late share over {k} cases {mean:6.3f} (standard error {se:.3f};\n"
                  f"    limit {LATE_ACROSS_FOR}, and {Z_LIMIT} standard errors){': named' if named else ''}")
    print("largest over the jobs:\n  " + ", ".join(f"{k} {v:.3f}" for k, v in overall.items()))
    if args.save:
        print(f"{args.jobs} job(s) added to {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
