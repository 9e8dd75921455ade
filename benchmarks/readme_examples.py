"""Regenerate the README's and ci/README.md's examples, and the README's pictures, from today's code.

    python benchmarks/readme_examples.py              # rewrite the marked blocks and docs/img's two pictures
    python benchmarks/readme_examples.py --check      # exit 1 naming each block that differs (no pictures)
    python benchmarks/readme_examples.py --no-pictures

Every example comes from the shipped data: the real run of the copy suite on one NVIDIA H200 that another
process slowed on purpose (``benchmarks/data/h200_1gpu_copies_slowed_report.json``), judged offline against the
shipped ``baselines/h200.json`` by ``gpucomm compare`` at 100 columns, and drawn by ``gpucomm plot``.  Nothing
here needs a GPU.  A block of a Markdown file lies between ``<!-- readme_examples.py: NAME -->`` and
``<!-- /readme_examples.py -->``; the script writes only there.  The pictures are drawn at the plots' own size
and scaled to 2/3 (matplotlib writes its version into a PNG, so they are not compared byte for byte).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
REPORT = "benchmarks/data/h200_1gpu_copies_slowed_report.json"
COMPARE = ["compare", "h200", REPORT]
COLUMNS = 100
#: the rows the README shows of each sweep (the first word of the group line: the op), by size
ROWS = {"h2d": ("4 KiB", "64 KiB", "1 MiB", "16 MiB", "1 GiB"), "d2h": ("4 KiB", "1 GiB")}
#: the one failure the examples quote in full
FAILURE = "FAILED suites/test_copies.py::test_host_to_device[1GiB-gpu0]:"
#: picture drawn by gpucomm plot -> the file of docs/img
PICTURES = {"sweep-test_host_to_device_gpu0.png": "h200-h2d-slowed-sweep.png",
            "matrix-all_one-way_copies-one-way.png": "h200-copies-slowed-matrix.png"}
BEGIN, END = "<!-- readme_examples.py: {} -->", "<!-- /readme_examples.py -->"


def gpucomm(args: Sequence[str]) -> str:
    """What ``gpucomm ARGS`` prints at COLUMNS columns, run from the checkout (its exit status is the verdict's)."""
    # the checkout first, the folders already on PYTHONPATH after it (a machine whose packages are found there,
    # as the GPU machine's wheels are, would otherwise lose them: gpucomm then fails to import, exit status 1)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "COLUMNS": str(COLUMNS), "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-m", "pytest_gpucomm", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise SystemExit(f"gpucomm {' '.join(args)} failed (exit status {done.returncode}):\n{done.stderr}")
    return done.stdout


def failure_block(lines: list[str]) -> list[str]:
    """The lines of FAILURE's message: its FAILED line and the indented lines below it."""
    start = lines.index(FAILURE)
    end = start + 1
    while end < len(lines) and lines[end].startswith(" "):
        end += 1
    return lines[start:end]


def compare_excerpt(out: str) -> list[str]:
    """The README's excerpt of the compare output: the baseline's machine and the environment, the table's
    header, ROWS of each sweep, FAILURE's message and the last line; ``...`` where lines are left out."""
    lines = out.rstrip("\n").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("gpucomm baseline machine:"))
    header = next(i for i, line in enumerate(lines) if re.match(r"\s+size\s+GB/s", line))
    kept = ["...", *lines[start:header + 2]]
    group: Optional[str] = None
    for line in lines[header + 2:]:
        if not line.startswith(" "):
            if line.split(",")[0] not in ROWS:
                break  # the legend below the table
            group = line.split(",")[0]
            kept.append(line)
        elif group is not None and line.split()[0] + " " + line.split()[1] in ROWS[group]:
            kept.append(line)
    return [*kept, "...", *failure_block(lines), "...", lines[-1]]


def blocks() -> dict[tuple[str, str], list[str]]:
    """(file, block name) -> the block's lines, from today's code."""
    out = gpucomm(COMPARE)
    command = f"$ gpucomm {' '.join(COMPARE)}"
    return {("README.md", "compare"): [command, *compare_excerpt(out)],
            ("ci/README.md", "regression"): [command, "...", *failure_block(out.rstrip("\n").splitlines()), "..."]}


def render(lines: list[str]) -> str:
    """A Markdown code block (indented by four spaces) between blank lines."""
    return "\n" + "\n".join(("    " + line).rstrip() for line in lines) + "\n\n"


def replace_block(text: str, name: str, lines: list[str], path: str) -> str:
    begin, end = BEGIN.format(name), END
    if begin not in text:
        raise SystemExit(f"{path}: no block {begin}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + render(lines) + end + tail


def draw_pictures(scale: float = 2 / 3) -> list[Path]:
    """docs/img's two pictures, drawn by gpucomm plot from REPORT against h200 and scaled."""
    from PIL import Image

    written = []
    with tempfile.TemporaryDirectory() as tmp:
        gpucomm(["plot", REPORT, "--baseline", "h200", "-o", tmp])
        for drawn, name in PICTURES.items():
            image = Image.open(Path(tmp) / drawn)
            size = (round(image.width * scale), round(image.height * scale))
            target = ROOT / "docs" / "img" / name
            image.resize(size, Image.LANCZOS).save(target, optimize=True)
            written.append(target)
    return written


def main(argv: Optional[Sequence[str]] = None, say: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a block differs from today's output")
    parser.add_argument("--no-pictures", action="store_true", help="leave docs/img alone")
    args = parser.parse_args(argv)
    stale = []
    for (path, name), lines in blocks().items():
        text = (ROOT / path).read_text()
        new = replace_block(text, name, lines, path)
        if new != text:
            stale.append(f"{path}: block {name}")
            if not args.check:
                (ROOT / path).write_text(new)
    if args.check:
        for line in stale:
            say(f"out of date: {line} (python benchmarks/readme_examples.py rewrites it)")
        return 1 if stale else 0
    for line in stale:
        say(f"rewrote {line}")
    if not args.no_pictures:
        for path in draw_pictures():
            say(f"drew {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
