"""CI's script (``.ci/run``) as the README and the development page give its two test commands, and the slow
tier's ``--dist`` keeping a file's module fixture (a recording job in tests/test_launched_gate.py) on one worker."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _slow_tier_args() -> list[str]:
    """The arguments of CI's slow-tier pytest command, after ``pytest``."""
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
             if not ln.lstrip().startswith("#") and "-m pytest tests -m slow" in ln]
    assert len(lines) == 1, lines
    args = shlex.split(lines[0].split(">")[0])
    return args[args.index("pytest") + 1:]


def test_the_readme_and_the_development_page_give_cis_slow_tier_command():
    args = _slow_tier_args()
    dist = args[args.index("--dist"):][:2]
    for page in (ROOT / "README.md", ROOT / "docs" / "development.md"):
        text = page.read_text(encoding="utf-8")
        assert f"-m pytest {' '.join(args)} " in text, (page.name, args)
        # every --dist the page names is CI's
        assert set(re.findall(r"--dist[ =](\w+)", text)) == {dist[1]}, page.name


MODULE_FIXTURE_FILE = """
import os

import pytest


@pytest.fixture(scope="module")
def recording():
    with open("setups.txt", "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")


@pytest.mark.parametrize("i", range(4))
def test_uses_the_recording(recording, i):
    pass
"""


@pytest.mark.slow  # an xdist run of two workers
def test_the_slow_tiers_dist_runs_a_files_module_fixture_once(pytester):
    """Under ``--dist loadgroup`` (CI's before) a module fixture ran on both workers: the xdist_group mark that
    should have kept the file together is written by pytest-xdist 3.8 into ``item._nodeid``, which pytest 9.2 no
    longer reads, so tests/test_launched_gate.py recorded its baselines twice."""
    args = _slow_tier_args()
    assert "--dist" in args, args
    dist = args[args.index("--dist"):][:2]
    pytester.makepyfile(test_shared=MODULE_FIXTURE_FILE)
    result = pytester.runpytest("-n", "2", *dist, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    assert len((pytester.path / "setups.txt").read_text().split()) == 1, dist
