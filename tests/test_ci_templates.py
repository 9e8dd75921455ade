"""The CI templates in ci/ (issue 28): what keeps a GPU runner and a baseline safe, read from the files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

CI = Path(__file__).resolve().parents[1] / "ci"


def _load(name):
    return yaml.safe_load((CI / name).read_text())


def _scripts(job):
    steps = job.get("steps") or [{"run": "\n".join(job.get("script") or [])}]
    return "\n".join(s.get("run", "") for s in steps)


def _pytest_lines(text):
    """Each pytest command of a script, its continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if re.search(r"\bpytest\b", line) and "--pyargs" in line]


GITHUB = _load("github-actions.yml")
GITLAB = _load("gitlab-ci.yml")


def test_github_a_fork_pull_request_never_reaches_the_gpu_runner():
    gate = GITHUB["jobs"]["gate"]
    assert "github.event.pull_request.head.repo.full_name == github.repository" in gate["if"]
    assert "self-hosted" in gate["runs-on"] and "pull_request_target" not in GITHUB[True]  # 'on' reads as True


def test_github_records_nightly_on_the_default_branch_and_pushes_only_the_baselines_branch():
    record = GITHUB["jobs"]["record"]
    assert GITHUB[True]["schedule"] and "schedule" in record["if"] and "default_branch" in record["if"]
    text = _scripts(record)
    assert 'git push origin "HEAD:refs/heads/$BASELINES_BRANCH"' in text
    assert "GITHUB_REF_NAME" not in text  # a push to the protected branch fails


def test_gitlab_runs_no_job_for_a_fork_merge_request_and_records_only_on_a_schedule():
    rules = GITLAB["gpucomm"]["rules"]
    assert {"if": '$CI_PIPELINE_SOURCE == "merge_request_event" && $CI_MERGE_REQUEST_SOURCE_PROJECT_ID != '
                  "$CI_PROJECT_ID", "when": "never"} in rules
    (record,) = GITLAB["gpucomm-record-baseline"]["rules"]
    assert record["if"].startswith('$CI_PIPELINE_SOURCE == "schedule"') and "$CI_DEFAULT_BRANCH" in record["if"]
    assert '"HEAD:refs/heads/$GPUCOMM_BASELINES_BRANCH"' in _scripts(GITLAB["gpucomm-record-baseline"])


@pytest.mark.parametrize("job", [GITHUB["jobs"]["gate"], GITLAB["gpucomm"]], ids=["github", "gitlab"])
def test_the_gate_reads_its_baseline_from_the_baselines_branch_not_from_the_change(job):
    text = _scripts(job)
    assert "checkout FETCH_HEAD -- baselines" in text
    (line,) = _pytest_lines(text)
    assert "--gpu-baseline-dir=.gpucomm/baselines" in line and "--gpu-baseline-save" not in line


def _every_pytest_line():
    for name, doc in (("github", GITHUB), ("gitlab", GITLAB)):
        jobs = doc["jobs"].values() if name == "github" else [v for k, v in doc.items() if k.startswith("gpucomm")]
        for job in jobs:
            yield from _pytest_lines(_scripts(job))


def test_every_run_asks_for_the_gpu_and_uses_only_options_the_plugin_has():
    lines = list(_every_pytest_line())
    assert len(lines) == 4
    known = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "pytest_gpucomm.plugin"],
                           capture_output=True, text=True, check=True).stdout
    for line in lines:
        assert "--gpucomm-device=gpu" in line and "--pyargs pytest_gpucomm.suites" in line
        for option in re.findall(r"(--gpu[a-z-]*)", line):
            assert re.search(rf"\s{re.escape(option)}\b", known), option


@pytest.mark.parametrize("job", [GITHUB["jobs"]["gate"], GITLAB["gpucomm"]], ids=["github", "gitlab"])
def test_the_gate_fails_where_fewer_than_half_the_cases_could_be_judged(job):
    # a baseline that judges nothing must not let the job pass (issue 43): the gate asks for half the cases
    (line,) = _pytest_lines(_scripts(job))
    assert "--gpu-min-judged=0.5" in line


# -- the fleet templates (issue 46): a Slurm job array, one Slurm job, torchrun per node; then gpucomm fleet ----

FLEET_SCRIPTS = ("slurm-array.sh", "slurm-job.sh", "torchrun-fleet.sh")


def _commands(text, module):
    """Each ``-m <module> ...`` command of a shell script, its continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line[line.index(f"-m {module} "):] for line in joined.splitlines() if f"-m {module} " in line]


@pytest.mark.parametrize("name", FLEET_SCRIPTS)
def test_each_fleet_template_is_valid_bash_writes_one_report_per_host_and_judges_the_shared_folder(name):
    text = (CI / name).read_text()
    subprocess.run(["bash", "-n", str(CI / name)], check=True)
    (node,) = _commands(text, "pytest")
    assert '--gpucomm-json="$SHARED/$(hostname -s).json"' in node and "--pyargs pytest_gpucomm.suites" in node
    # under srun every task would count as a rank of one launched job: each node is a pool of its own GPUs
    assert ("--gpucomm-launch=torchrun" if "torchrun" in name else "--gpucomm-launch=pool") in node
    (judge,) = _commands(text, "pytest_gpucomm")
    assert judge.startswith('-m pytest_gpucomm fleet "$SHARED"') and '--drain "$SHARED/drain.json"' in judge


def test_the_fleet_templates_use_only_options_that_pytest_and_gpucomm_fleet_have():
    texts = [(CI / n).read_text() for n in FLEET_SCRIPTS]
    plugin = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "pytest_gpucomm.plugin"],
                            capture_output=True, text=True, check=True).stdout
    fleet = subprocess.run([sys.executable, "-m", "pytest_gpucomm", "fleet", "--help"], capture_output=True,
                           text=True, check=True).stdout
    for text in texts:
        for option in re.findall(r"(--gpu[a-z-]*)", " ".join(_commands(text, "pytest"))):
            assert re.search(rf"\s{re.escape(option)}\b", plugin), option
        for option in re.findall(r"\s(--[a-z-]+)", " ".join(_commands(text, "pytest_gpucomm"))):
            assert re.search(rf"\s{re.escape(option)}\b", fleet), option


def test_the_array_templates_judge_step_runs_gpucomm_fleet_on_the_shared_folder_and_exits_with_its_status(tmp_path):
    import os

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "gpu-a1.json").write_text('{"format": "pytest-gpucomm-report", "rows": [')  # a damaged report
    p = subprocess.run(["bash", str(CI / "slurm-array.sh"), "judge"], capture_output=True, text=True,
                       env={**os.environ, "SHARED": str(shared), "PYTHON": sys.executable})
    # one damaged report of one node: left out, named, and with no usable report left a usage error
    assert p.returncode == 2 and "gpu-a1" in p.stderr and "cut short" in p.stderr, p.stdout + p.stderr
    assert not (shared / "drain.json").exists()
    p = subprocess.run(["bash", str(CI / "slurm-array.sh")], capture_output=True, text=True,
                       env={**os.environ, "SHARED": str(shared)})
    assert p.returncode == 2 and p.stderr.startswith("usage: SHARED=DIR ci/slurm-array.sh submit NODES")
