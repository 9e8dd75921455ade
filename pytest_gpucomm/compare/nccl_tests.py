"""Compare pytest-gpucomm collective results with NVIDIA nccl-tests on the same machine.

Usage::

    python -m pytest_gpucomm.compare.nccl_tests --nccl-tests-bin DIR \
        [--ours-json PATH | --run-ours] [--gpus 2] [--min-size 1K --max-size 1G] \
        [--graph] [--out results.json]

What it does:

1. Runs the nccl-tests perf binary of each op (``all_reduce_perf``, ``all_gather_perf``, ...: the
   ``nccl_tests`` of each op in ``pytest_gpucomm.ops.collectives.OPS``) in
   single-process mode (``-g <gpus>``) over ``--min-size..--max-size`` with ``-f 4`` (the step of
   our collective suite; ``--factor``),
   ``-n/-w`` iterations and optionally ``-G <launches>`` (CUDA graph).  The raw text of
   every run is saved beside ``--out`` (``<out stem>.nccl-tests/<binary>.txt``).
   Alternatively ``--theirs-raw DIR`` re-parses text captured earlier.
2. Loads our JSON report (``{"rows": [...]}``) either from ``--ours-json`` or by running
   the pytest suite with ``--run-ours``.
3. Matches rows by (op, size_bytes, dtype), each of our rows against the nccl-tests column of the same
   placement, or only one placement with ``--in-place`` / ``--out-of-place``; prints a table and evaluates the targets:

   * busbw ratio ours/theirs >= 0.97 at 256 MiB and 1 GiB;
   * time ratio ours/theirs <= 1.5 for 1 KiB .. 64 KiB.

Exit status: 0 all target rows pass, 1 at least one target row fails, 2 usage error or
nothing could be compared.

nccl-tests' output is read by :mod:`.nccl_output` (its conventions: what its size, time and bandwidth
columns are).

Only the standard library and ``pytest_gpucomm`` (units and the op definitions, which import no torch,
pytest or numpy) are required; ``tabulate`` is used for the table when present.  Sizes are read and
printed as everywhere in pytest-gpucomm (README "Sizes").
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Collection

from .. import units  # pure Python: imports no torch, pytest or numpy
from .nccl_output import (NCCL_TESTS_BINARIES, normalize_dtype, normalize_op, parse_nccl_tests_output,
                          parse_nccl_tests_summary)

# --------------------------------------------------------------------------------------
# Constants (edit here when the plugin or the targets change)
# --------------------------------------------------------------------------------------

#: pytest option of our plugin that writes the JSON report (may be renamed).
PYTEST_JSON_FLAG = "--gpucomm-json"
#: Suite run by --run-ours, relative to the repository root.
OURS_SUITE = "suites/test_collectives.py"
REPO_ROOT = Path(__file__).resolve().parents[2]

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

#: busbw target: ours/theirs >= BUSBW_RATIO_MIN at these sizes.
BUSBW_TARGET_SIZES = (256 * MIB, 1 * GIB)
BUSBW_RATIO_MIN = 0.97
#: latency target: ours/theirs <= TIME_RATIO_MAX for sizes in this inclusive range.
TIME_TARGET_RANGE = (1 * KIB, 64 * KIB)
TIME_RATIO_MAX = 1.5


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------

def parse_size(text: str | int, where: str = "a size") -> int:
    """A size as everywhere in pytest-gpucomm: '1K' and '1KiB' -> 1024, '1MB' -> 1,000,000, '4096' -> 4096."""
    return text if isinstance(text, int) else units.parse_size(text, where)


def _size_arg(option: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            return parse_size(text, option)
        except ValueError as e:  # argparse would print only "invalid value"
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _positive_int(option: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: expected a whole number of 1 or more")
        return value
    return parse


#: "1 GiB", "1.5 KiB", "4096 B"
human_size = units.format_size


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    try:
        if b == 0 or math.isnan(a) or math.isnan(b):
            return None
    except TypeError:
        return None
    return a / b


# --------------------------------------------------------------------------------------
# Our report (pure helpers)
# --------------------------------------------------------------------------------------

def normalize_ours(report: dict | list, *, world_size: int | None = None) -> list[dict]:
    """Turn the plugin's ``{"rows": [...]}`` (or a bare list) into rows with the same keys
    as the nccl-tests rows: op, size_bytes, dtype, in_place, time_us, algbw, busbw."""
    raw = report.get("rows", []) if isinstance(report, dict) else list(report)
    out = []
    for r in raw:
        if r.get("kind", "collective") != "collective":
            continue
        if world_size is not None and r.get("world_size") not in (None, world_size):
            continue
        try:
            size = int(r["size_bytes"])
        except (KeyError, TypeError, ValueError):
            continue
        info = r.get("info") or {}
        out.append({
            "op": normalize_op(r.get("op")),
            "size_bytes": size,
            "dtype": normalize_dtype(r.get("dtype")),
            "in_place": bool(info.get("in_place", r.get("in_place", False))),
            "world_size": r.get("world_size"),
            "time_us": r.get("median_us"),
            "algbw": r.get("algbw_gbps"),
            "busbw": r.get("busbw_gbps"),
        })
    return out


def target_for_size(size_bytes: int) -> str | None:
    """Which target applies to a size: 'busbw', 'time' or None."""
    if size_bytes in BUSBW_TARGET_SIZES:
        return "busbw"
    lo, hi = TIME_TARGET_RANGE
    if lo <= size_bytes <= hi:
        return "time"
    return None


def evaluate_target(size_bytes: int, busbw_ratio: float | None, time_ratio: float | None) -> str:
    """'PASS' / 'FAIL' for target rows, '-' when no target applies to the size."""
    target = target_for_size(size_bytes)
    if target == "busbw":
        return "PASS" if busbw_ratio is not None and busbw_ratio >= BUSBW_RATIO_MIN else "FAIL"
    if target == "time":
        return "PASS" if time_ratio is not None and time_ratio <= TIME_RATIO_MAX else "FAIL"
    return "-"


def _index(rows: list[dict], in_place: bool | None) -> dict:
    """Rows by (op, size, dtype, placement); only one placement when ``in_place`` is given."""
    idx: dict = {}
    for r in rows:
        if in_place is not None and bool(r.get("in_place")) != in_place:
            continue
        key = (r["op"], int(r["size_bytes"]), normalize_dtype(r.get("dtype") or r.get("type")),
               bool(r.get("in_place")))
        idx.setdefault(key, r)  # first occurrence wins (e.g. -N cycles, several roots)
    return idx


def match_rows(ours: list[dict], theirs: list[dict], *, in_place: bool | None = None) -> list[dict]:
    """Match by (op, size_bytes, dtype, placement): with ``in_place=None`` each of our rows is compared
    with the nccl-tests column its form compares with (the same placement: torch's all_reduce, broadcast
    and reduce exist only in place, so they meet nccl-tests' in-place column); True/False restricts both
    sides to one placement.

    Returns one dict per key present on either side, sorted by op then size, with
    ours/theirs busbw and time, ratios ours/theirs, ``target`` ('busbw'/'time'/None) and
    ``status``: PASS / FAIL / '-' (no target at this size) / 'MISSING ours' /
    'MISSING theirs'.
    """
    a, b = _index(ours, in_place), _index(theirs, in_place)
    op_order = {op: i for i, op in enumerate(NCCL_TESTS_BINARIES.values())}
    keys = sorted(set(a) | set(b), key=lambda k: (op_order.get(k[0], 99), str(k[0]), k[1], k[2]))
    out = []
    for key in keys:
        op, size, dtype, placement = key
        o = a.get(key)
        if in_place is None and o is None:
            continue  # nccl-tests reports both placements; we compare the ones we measured
        t = b.get(key)  # the same placement: nccl-tests measures both
        row = {
            "op": op, "size_bytes": size, "size": human_size(size), "dtype": dtype,
            "in_place": placement,
            "ours_busbw": o.get("busbw") if o else None,
            "theirs_busbw": t.get("busbw") if t else None,
            "ours_time_us": o.get("time_us") if o else None,
            "theirs_time_us": t.get("time_us") if t else None,
            "target": target_for_size(size),
        }
        row["busbw_ratio"] = _ratio(row["ours_busbw"], row["theirs_busbw"])
        if o and t and row["ours_busbw"] == 0 == row["theirs_busbw"]:
            # one rank: busbw is 0 on both sides (nothing crosses a bus, factor (n-1)/n = 0); busbw is algbw
            # times the same factor on both sides, so for the same op and ranks algbw's ratio is busbw's
            row["busbw_ratio"] = _ratio(o.get("algbw"), t.get("algbw"))
            row["ratio_of"] = "algbw"
        row["time_ratio"] = _ratio(row["ours_time_us"], row["theirs_time_us"])
        if o is None:
            row["status"] = "MISSING ours"
        elif t is None:
            row["status"] = "MISSING theirs"
        else:
            row["status"] = evaluate_target(size, row["busbw_ratio"], row["time_ratio"])
        out.append(row)
    return out


def summarize(matched: list[dict]) -> dict:
    """Counts of the statuses of matched rows."""
    statuses = [r["status"] for r in matched]
    return {
        "compared": sum(1 for s in statuses if not s.startswith("MISSING")),
        "pass": statuses.count("PASS"),
        "fail": statuses.count("FAIL"),
        "missing_ours": statuses.count("MISSING ours"),
        "missing_theirs": statuses.count("MISSING theirs"),
        "missing_target_rows": sum(1 for r in matched
                                   if r["status"].startswith("MISSING") and r["target"]),
    }


def exit_code(matched: list[dict], *, fail_on_missing: bool = False) -> int:
    """0 every target row passes, 1 a target row fails (or is missing, with ``fail_on_missing``), 2 nothing
    compared."""
    s = summarize(matched)
    if s["compared"] == 0:
        return 2
    if s["fail"] or (fail_on_missing and s["missing_target_rows"]):
        return 1
    return 0


ALGBW_NOTE = "* one rank: both busbw are 0 (nothing crosses a bus); the ratio is algbw's, the same ratio"


def format_table(matched: list[dict]) -> str:
    """The comparison table; with a footnote where a ratio is algbw's (one rank)."""
    table = _table(matched)
    return table + ("\n" + ALGBW_NOTE if any(r.get("ratio_of") == "algbw" for r in matched) else "")


def _table(matched: list[dict]) -> str:
    def f(v: object, fmt: str) -> str:
        return "" if v is None else format(v, fmt)

    headers = ["op", "form", "size_bytes", "size", "ours busbw", "theirs busbw", "busbw ratio",
               "ours us", "theirs us", "time ratio", "target", "result"]
    body = [[r["op"], "in" if r.get("in_place") else "out", r["size_bytes"], r["size"], f(r["ours_busbw"], ".2f"),
             f(r["theirs_busbw"], ".2f"), f(r["busbw_ratio"], ".3f") + ("*" if r.get("ratio_of") == "algbw" else ""),
             f(r["ours_time_us"], ".2f"), f(r["theirs_time_us"], ".2f"),
             f(r["time_ratio"], ".3f"), r["target"] or "", r["status"]] for r in matched]
    try:
        from tabulate import tabulate  # optional
        return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True,
                        colalign=("left", "left") + ("right",) * 9 + ("left",))
    except ImportError:
        cols = [headers] + [[str(c) for c in row] for row in body]
        widths = [max(len(row[i]) for row in cols) for i in range(len(headers))]
        lines = ["  ".join(c.ljust(w) if i in (0, 1, 11) else c.rjust(w)
                           for i, (c, w) in enumerate(zip(row, widths))) for row in cols]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Running things (impure)
# --------------------------------------------------------------------------------------

def find_wheel_nccl_lib() -> str | None:
    """lib dir of the nvidia-nccl-cu* wheel in this interpreter (nvidia / nvidia.nccl may
    be namespace packages, so use __path__ / find_spec, not __file__)."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        lib = os.path.join(loc, "lib")
        if os.path.exists(os.path.join(lib, "libnccl.so.2")):
            return lib
    return None


def nccl_tests_cmd(binary: Path, args: argparse.Namespace) -> list[str]:
    """The command line of one nccl-tests binary for the options in ``args``."""
    cmd = [str(binary), "-b", str(args.min_size), "-e", str(args.max_size), "-f", str(args.factor),
           "-g", str(args.gpus), "-n", str(args.iters), "-w", str(args.warmup),
           "-c", str(args.check), "-d", args.nccl_dtype]
    if args.graph:
        cmd += ["-G", str(args.graph_launches)]
    return cmd


def run_nccl_tests(args: argparse.Namespace, raw_dir: Path | None) -> tuple[list[dict], dict]:
    """Run the binary of each op in ``args.ops``; (parsed rows, per-binary facts).  The raw text of each
    run goes to ``raw_dir`` when given."""
    bindir = Path(args.nccl_tests_bin)
    env = os.environ.copy()
    lib = args.nccl_lib_dir or (None if args.no_auto_nccl_lib else find_wheel_nccl_lib())
    if lib:
        env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        print(f"[nccl-tests] LD_LIBRARY_PATH starts with {lib}", file=sys.stderr)
    rows: list[dict] = []
    meta: dict = {}
    for binary, op in NCCL_TESTS_BINARIES.items():
        if op not in args.ops:
            continue
        path = bindir / binary
        if not path.exists():
            print(f"[nccl-tests] {path} not found, skipping", file=sys.stderr)
            meta[binary] = {"error": "not found"}
            continue
        cmd = nccl_tests_cmd(path, args)
        print(f"[nccl-tests] {' '.join(cmd)}", file=sys.stderr)
        rc: int | str
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
            text, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            def _s(x):
                return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
            text, err, rc = _s(e.stdout), _s(e.stderr), "timeout"
        if raw_dir is not None:
            raw_dir.mkdir(parents=True, exist_ok=True)
            (raw_dir / f"{binary}.txt").write_text(text + ("\n# --- stderr ---\n" + err if err else ""))
        parsed = parse_nccl_tests_output(text, op=op)
        info = parse_nccl_tests_summary(text)
        info.update(cmd=cmd, rc=rc, rows=len(parsed))
        if rc != 0:
            print(f"[nccl-tests] {binary} rc={rc}; stderr tail:\n{err[-2000:]}", file=sys.stderr)
        if info.get("nccl_headers") and info.get("nccl_library") and info["nccl_headers"] != info["nccl_library"]:
            print(f"[nccl-tests] warning: {binary} built against NCCL {info['nccl_headers']} "
                  f"but runs with {info['nccl_library']} (check LD_LIBRARY_PATH)", file=sys.stderr)
        meta[binary] = info
        rows += parsed
    return rows, meta


def load_theirs_raw(raw_dir: Path, ops: Collection[str]) -> tuple[list[dict], dict]:
    """(parsed rows, per-binary facts) of the ``<binary>.txt`` files in ``raw_dir`` for ``ops``."""
    rows, meta = [], {}
    for binary, op in NCCL_TESTS_BINARIES.items():
        f = raw_dir / f"{binary}.txt"
        if op in ops and f.exists():
            text = f.read_text()
            rows += parse_nccl_tests_output(text, op=op)
            meta[binary] = parse_nccl_tests_summary(text)
    return rows, meta


def ours_command(args: argparse.Namespace, out: Path, environ: dict) -> tuple[list[str], dict]:
    """The pytest command and environment of --run-ours: our suite on the first ``--gpus`` GPUs (its
    process group takes every visible GPU) in nccl-tests' dtype."""
    cmd = [sys.executable, "-m", "pytest", OURS_SUITE, "-q", "-p", "no:cacheprovider",
           PYTEST_JSON_FLAG, str(out), f"--gpucomm-dtype={normalize_dtype(args.nccl_dtype)}"]
    env = dict(environ)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",")] if visible else [str(i) for i in range(args.gpus)]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(ids[:args.gpus])
    return cmd, env


def run_ours(args: argparse.Namespace) -> dict:
    """Our JSON report, from running the suite (``ours_command``)."""
    with tempfile.TemporaryDirectory(prefix="gpucomm-cmp-") as tmp:
        out = Path(tmp) / "ours.json"
        cmd, env = ours_command(args, out, dict(os.environ))
        print(f"[ours] CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} {' '.join(cmd)}", file=sys.stderr)
        p = subprocess.run(cmd, cwd=REPO_ROOT, env=env)
        if not out.exists():
            print(f"[ours] pytest exited {p.returncode} and wrote no {out} "
                  f"(is {PYTEST_JSON_FLAG} still the plugin's option?)", file=sys.stderr)
            raise SystemExit(2)
        if p.returncode != 0:
            print(f"[ours] warning: pytest exited {p.returncode}; using the report anyway", file=sys.stderr)
        from ..report.saved import load_report

        return load_report(out)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--nccl-tests-bin", metavar="DIR", help="nccl-tests build dir (holds *_perf)")
    src.add_argument("--theirs-raw", metavar="DIR", help="re-parse <binary>.txt files captured earlier")
    ours = ap.add_mutually_exclusive_group(required=True)
    ours.add_argument("--ours-json", metavar="PATH", help="JSON report written by the plugin")
    ours.add_argument("--run-ours", action="store_true", help=f"run pytest {OURS_SUITE} {PYTEST_JSON_FLAG} ...")
    ap.add_argument("--gpus", type=_positive_int("--gpus"), default=2,
                    help="GPUs (-g) and world_size to compare (default 2)")
    ap.add_argument("--min-size", type=_size_arg("--min-size"), default=parse_size("1K"))
    ap.add_argument("--max-size", type=_size_arg("--max-size"), default=parse_size("1G"))
    ap.add_argument("--factor", type=int, default=4,
                    help="nccl-tests -f size step factor (default 4, the step of suites/test_collectives.py)")
    ap.add_argument("--iters", type=int, default=20, help="nccl-tests -n (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="nccl-tests -w (default 5)")
    ap.add_argument("--check", type=int, default=1, help="nccl-tests -c (default 1; 0 = no validation)")
    ap.add_argument("--nccl-dtype", default="float", help="nccl-tests -d (default float)")
    ap.add_argument("--graph", action="store_true", help="CUDA graph mode (-G)")
    ap.add_argument("--graph-launches", type=int, default=10, help="-G value with --graph (default 10)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per nccl-tests binary")
    ap.add_argument("--ops", default=",".join(NCCL_TESTS_BINARIES.values()),
                    help="comma-separated ops to compare")
    ap.add_argument("--in-place", dest="in_place", action="store_const", const=True, default=None,
                    help="compare only in-place rows (default: each of our rows against nccl-tests' column of "
                         "the same placement)")
    ap.add_argument("--out-of-place", dest="in_place", action="store_const", const=False,
                    help="compare only out-of-place rows")
    ap.add_argument("--nccl-lib-dir", help="dir prepended to LD_LIBRARY_PATH for the binaries "
                                          "(default: lib dir of the nvidia-nccl wheel, if importable)")
    ap.add_argument("--no-auto-nccl-lib", action="store_true", help="do not prepend the wheel's NCCL lib dir")
    ap.add_argument("--fail-on-missing", action="store_true", help="missing target-size rows count as failures")
    ap.add_argument("--out", metavar="PATH", help="write the comparison JSON here; raw text goes beside it")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.ops = {normalize_op(o) for o in args.ops.split(",") if o.strip()}
    if args.min_size > args.max_size:
        print("--min-size > --max-size", file=sys.stderr)
        return 2

    out = Path(args.out) if args.out else None
    raw_dir = out.with_name(out.stem + ".nccl-tests") if out else None
    if args.theirs_raw:
        theirs, meta = load_theirs_raw(Path(args.theirs_raw), args.ops)
    else:
        theirs, meta = run_nccl_tests(args, raw_dir)
    theirs = [r for r in theirs if args.min_size <= r["size_bytes"] <= args.max_size]

    if args.run_ours:
        report = run_ours(args)
    else:
        try:
            from ..report.saved import load_report

            report = load_report(args.ours_json)
        except ValueError as e:  # ReportError: names the file and what is wrong with it
            print(f"[ours] {e}", file=sys.stderr)
            return 2
    ours = [r for r in normalize_ours(report, world_size=args.gpus)
            if r["op"] in args.ops and args.min_size <= r["size_bytes"] <= args.max_size]
    if not ours:
        worlds = sorted({r["world_size"] for r in normalize_ours(report) if r.get("world_size") is not None})
        if worlds and args.gpus not in worlds:
            print(f"[ours] {args.ours_json or 'the run'}: its collectives ran on {', '.join(map(str, worlds))} "
                  f"rank(s), and --gpus {args.gpus} compares {args.gpus}-rank rows; nothing to compare",
                  file=sys.stderr)
            return 2

    matched = match_rows(ours, theirs, in_place=args.in_place)
    print(format_table(matched))
    summary = summarize(matched)
    rc = exit_code(matched, fail_on_missing=args.fail_on_missing)
    print(f"\n{summary['pass']} pass, {summary['fail']} fail, {summary['compared']} compared, "
          f"{summary['missing_ours']} missing in ours, {summary['missing_theirs']} missing in nccl-tests "
          f"(targets: busbw ratio >= {BUSBW_RATIO_MIN} at "
          f"{', '.join(human_size(s) for s in BUSBW_TARGET_SIZES)}; time ratio <= {TIME_RATIO_MAX} for "
          f"{human_size(TIME_TARGET_RANGE[0])}..{human_size(TIME_TARGET_RANGE[1])}) -> exit {rc}")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "config": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()},
            "targets": {"busbw_sizes": list(BUSBW_TARGET_SIZES), "busbw_ratio_min": BUSBW_RATIO_MIN,
                        "time_range": list(TIME_TARGET_RANGE), "time_ratio_max": TIME_RATIO_MAX},
            "nccl_tests": meta, "theirs": theirs, "ours": ours, "comparison": matched,
            "summary": summary, "exit_code": rc,
        }
        out.write_text(json.dumps(payload, indent=2))
        print(f"wrote {out}" + (f" (raw nccl-tests output in {raw_dir})" if raw_dir and raw_dir.exists() else ""),
              file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
