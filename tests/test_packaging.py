"""The package as a user installs it: the wheel carries the suites and the shipped baselines (built from the
repository's top-level ``suites/`` and ``baselines/``), the shipped suites have the same test ids wherever they
are collected from, and an extra's install command fits how pytest-gpucomm was installed.

The slow test builds the wheel and runs the suites from it in a fresh virtual environment outside the checkout.
That environment holds the wheel alone (``pip install --no-deps``); its dependencies (torch, pytest, numpy...)
are this interpreter's, reached through a ``.pth`` file, so the test downloads nothing (a full ``pip install``
takes the CPU build of torch and about 35 s more; the README's install is checked by hand)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pytest_gpucomm
from pytest_gpucomm.gate.shipped import default_baseline_dir, install_command, package_folder, shipped_folder

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_gpucomm"
#: the two one-way peer copies at 4 KiB
K = "test_peer_copy and 4KiB and not 64KiB and not both_ways"


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _package_folders() -> set[str]:
    """Every folder with an ``__init__.py`` under pytest_gpucomm/, as a dotted name."""
    return {".".join(("pytest_gpucomm",) + p.parent.relative_to(PACKAGE).parts) for p in PACKAGE.rglob("__init__.py")}


def test_the_explicit_package_list_names_every_package_folder_and_the_shipped_parts():
    """packages.find cannot find a package mapped from another folder, so the list is explicit: it must name
    every package of pytest_gpucomm/ (a new folder left out would be missing from the wheel) and the two
    mapped from the top level, each once."""
    tool = _pyproject()["tool"]["setuptools"]
    packages = tool["packages"]
    assert len(packages) == len(set(packages))
    assert set(packages) == _package_folders() | {"pytest_gpucomm.suites", "pytest_gpucomm.baselines"}
    assert tool["package-dir"] == {"pytest_gpucomm.suites": "suites", "pytest_gpucomm.baselines": "baselines"}
    for folder in tool["package-dir"].values():
        assert (ROOT / folder / "__init__.py").is_file()
    assert tool["package-data"]["pytest_gpucomm.baselines"] == ["*.json"]
    # baselines/ is package data: the baseline files and no module (the generator of mi300x.json is in benchmarks/)
    assert sorted(p.name for p in (ROOT / "baselines").glob("*.py")) == ["__init__.py"]


def test_the_extras_are_named_as_the_messages_say():
    meta = _pyproject()["project"]
    assert set(meta["optional-dependencies"]) == {"plots", "test", "docs"}
    assert any(r.startswith("matplotlib") for r in meta["optional-dependencies"]["plots"])


def test_the_shipped_folders_of_a_checkout_are_its_top_level_suites_and_baselines():
    assert shipped_folder("suites") == ROOT / "suites"
    assert shipped_folder("baselines") == ROOT / "baselines"
    assert package_folder() == Path(pytest_gpucomm.__file__).resolve().parent
    with pytest.raises(ValueError, match="no shipped part 'tests'"):
        shipped_folder("tests")


def test_the_users_baseline_folder_is_never_inside_the_package(tmp_path):
    assert default_baseline_dir(tmp_path, Path("/elsewhere")) == tmp_path / "baselines"
    # pytest --pyargs pytest_gpucomm.suites with no pytest configuration: the suites' folder is the rootdir
    assert default_baseline_dir(shipped_folder("suites"), tmp_path) == tmp_path / "baselines"
    assert default_baseline_dir(package_folder() / "plugin", tmp_path) == tmp_path / "baselines"


class _Dist:
    """An importlib.metadata distribution as far as install_command reads it."""

    def __init__(self, direct_url: dict | None):
        self.direct_url = direct_url
        self.requires = ["pytest>=7.4", 'matplotlib>=3.7; extra == "plots"', 'ruff>=0.6; extra == "test"']

    def read_text(self, name: str) -> str | None:
        return json.dumps(self.direct_url) if name == "direct_url.json" and self.direct_url else None


@pytest.mark.parametrize("direct_url, command", [
    (None, "pip install 'pytest-gpucomm[plots]'"),
    ({"url": "file:///tmp/dist/pytest_gpucomm-0.1.0-py3-none-any.whl", "archive_info": {}},
     "pip install '/tmp/dist/pytest_gpucomm-0.1.0-py3-none-any.whl[plots]'"),
    ({"url": "file:///tmp/dist/pytest_gpucomm-0.1.0.tar.gz", "archive_info": {}},
     "pip install '/tmp/dist/pytest_gpucomm-0.1.0.tar.gz[plots]'"),
    ({"url": "file:///home/me/pytest-gpucomm", "dir_info": {"editable": True}},
     "pip install -e '/home/me/pytest-gpucomm[plots]'"),
    ({"url": "https://example.org/pytest_gpucomm-0.1.0-py3-none-any.whl", "archive_info": {}},
     "pip install 'pytest-gpucomm[plots]'"),
], ids=["index", "wheel", "sdist", "editable", "url"])
def test_an_extra_is_installed_from_what_pytest_gpucomm_was_installed_from(direct_url, command):
    assert install_command("plots", _Dist(direct_url)) == f"{command} (it adds matplotlib>=3.7)"


def test_the_shipped_suites_have_the_checkouts_test_ids_from_another_rootdir(pytester):
    """Collected from outside the rootdir (as the installed suites are), the suites keep their ``suites/...``
    ids, the keys of the shipped baselines' cases."""
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest(str(ROOT / "suites" / "test_copies.py"), "--collect-only", "-q", "-p",
                                "no:cacheprovider", "-k", K)
    assert result.ret == 0
    assert [ln for ln in result.outlines if "::" in ln] == ["suites/test_copies.py::test_peer_copy[4KiB-0->1]",
                                                             "suites/test_copies.py::test_peer_copy[4KiB-1->0]"]


def _run(cmd: list, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return out


def _isolation() -> list[str]:
    """``--no-build-isolation`` where this interpreter has what the build requires (pyproject: setuptools>=68,
    wheel): the build then needs no package index, which the GPU machine has none of; else pip's own isolated
    build environment, from the index."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major = int(version("setuptools").split(".")[0])
        version("wheel")
    except (PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if major >= 68 else []


def _dependency_folders() -> list[str]:
    """Where this interpreter finds the package's dependencies, for the fresh venv's .pth: torch's folder, and
    every PYTHONPATH folder but the checkout (on the GPU machine the wheels of jsonschema and its needs are
    installed into a folder on PYTHONPATH, which the test takes out of the environment: without it the fresh
    venv's pytest stopped with an internal error on ``import jsonschema``, exit 3, issue 49 item 8)."""
    import torch

    folders = [str(Path(torch.__file__).resolve().parent.parent)]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and Path(entry).resolve() != ROOT.resolve() and entry not in folders:
            folders.append(entry)
    return folders


# the slow tier: a pip build, then pytest and python runs in a fresh venv (20 CPU-s on the 2-core CI machine), which
# the slow tier's waits overlap; the mark once sat on _dependency_folders above, which left this test in the fast tier
@pytest.mark.slow
def test_the_wheel_carries_the_suites_and_baselines_and_runs_them_from_a_fresh_venv(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # what the build reads, copied (setuptools writes build/ and an egg-info into the tree it builds)
    source = tmp_path / "source"
    for part in ("pytest_gpucomm", "suites", "baselines"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__", "*.lock"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q", *_isolation(), "-w", dist,
                  source], tmp_path, env, timeout=240)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = dist.glob("pytest_gpucomm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n for n in names if n.startswith(("pytest_gpucomm/suites/", "pytest_gpucomm/baselines/"))} == {
        *(f"pytest_gpucomm/suites/{p.name}" for p in (ROOT / "suites").glob("*.py")),
        "pytest_gpucomm/baselines/__init__.py", "pytest_gpucomm/baselines/h100.json",
        "pytest_gpucomm/baselines/h200.json", "pytest_gpucomm/baselines/mi300x.json"}
    assert "pytest_gpucomm/gate/spread_prior.json" in names  # the corpus prior the gate reads (issue 43)
    # the wheel's packages are the folders of the package and the two shipped parts
    assert {".".join(Path(n).parent.parts) for n in names if n.endswith("/__init__.py")} == \
        _package_folders() | {"pytest_gpucomm.suites", "pytest_gpucomm.baselines"}
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Provides-Extra: plots" in metadata and 'Requires-Dist: matplotlib>=3.7; extra == "plots"' in metadata

    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path, env).returncode == 0
    python = venv / "bin" / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path,
                     env).stdout.strip())
    installed = _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-compile", "-q",
                      wheel], tmp_path, env, timeout=120)
    if installed.returncode != 0 and "no such option: --python" in installed.stderr:  # pip < 22.3
        installed = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target",
                          site, wheel], tmp_path, env, timeout=120)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    (site / "zz_dependencies.pth").write_text("".join(f"{folder}\n" for folder in _dependency_folders()))

    user = tmp_path / "somewhere"  # a user's folder, outside the checkout
    user.mkdir()
    where = _run([python, "-c", "import pytest_gpucomm, pytest_gpucomm.suites as s; print(pytest_gpucomm.__file__); "
                                "print(s.__file__)"], user, env)
    assert where.returncode == 0 and all(line.startswith(str(site)) for line in where.stdout.split()), where
    run = [python, "-m", "pytest", "--pyargs", "pytest_gpucomm.suites", "-p", "no:cacheprovider",
           "--gpucomm-min-time=0.01", "-k", K]
    env["GPUCOMM_DEVICE"] = "cpu"
    # the shipped baseline is found after the user's folder (which has none) -- and refused for the CPU variants
    shipped = _run(run + ["--gpu-baseline=h200"], user, env)
    assert shipped.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--gpu-baseline=h200: h200.json holds GPU figures" in shipped.stderr, shipped.stdout + shipped.stderr
    # a recording goes to the user's folder, not into the package, and the next run is gated against it; the
    # tests have the checkout's ids (the shipped baselines' keys)
    saved = _run(run + ["--gpu-baseline=cpu", "--gpu-baseline-save", "-v"], user, env)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert [ln.split()[0] for ln in saved.stdout.splitlines() if "::" in ln and "PASSED" in ln] == [
        "suites/test_copies.py::test_peer_copy[4KiB-0->1]", "suites/test_copies.py::test_peer_copy[4KiB-1->0]"]
    assert (user / "baselines" / "cpu.json").is_file() and not list((site / "pytest_gpucomm").rglob("cpu.json"))
    gated = _run(run + ["--gpu-baseline=cpu"], user, env)
    assert gated.returncode == 0 and "2 passed" in gated.stdout, gated.stdout + gated.stderr
    assert f"gpucomm baseline: {user / 'baselines' / 'cpu.json'} (measured, 1 run" in gated.stdout
    listed = _run([python, "-m", "pytest_gpucomm", "baselines", "list"], user, env)
    assert listed.returncode == 0 and "baselines shipped with pytest-gpucomm" in listed.stdout, listed.stderr
    assert any(ln.startswith("h200 ") for ln in listed.stdout.splitlines())
    plots = _run([python, "-c", "from pytest_gpucomm.report.plots import EXTRA; print(EXTRA)"], user, env)
    assert plots.stdout.strip() == f"pip install '{wheel}[plots]' (it adds matplotlib>=3.7)", plots


def test_a_bare_pytest_in_the_checkout_runs_the_shipped_suites_not_the_projects_tests():
    """Issue 28: a new user's `pytest` in the checkout ran the project's whole test suite; it runs the suites,
    the project's tests are `python -m pytest tests`."""
    assert _pyproject()["tool"]["pytest"]["ini_options"]["testpaths"] == ["suites"]
