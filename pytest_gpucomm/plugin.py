"""pytest hooks of pytest-gpucomm: options, markers, header, sweeps and skips, checks, summary.

Importing this module imports neither torch nor anything that touches a GPU; that happens only when a
test uses a gpucomm fixture or marker.
"""

from __future__ import annotations

from typing import Any, Generator

import pytest

from . import fixtures as _fixtures
from .fixtures import comm, gpu, gpu_link, gpu_pair, gpucomm_state, gpus, process_group, size  # noqa: F401  (fixtures)
from .markers import (
    MARKER_LINES,
    MarkerError,
    read_bandwidth,
    read_gpus,
    read_latency,
    read_sizes,
    read_world,
    size_id,
)
from .session import STATE_KEY, GpuPair, Record, State
from .settings import add_options, read_settings
from .units import describe_size

GPUCOMM_FIXTURES = {"gpus", "gpu", "gpu_pair", "gpu_link", "comm", "process_group"}
GPUCOMM_MARKERS = ("bandwidth", "latency", "sizes", "gpus", "world")

del _fixtures


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKER_LINES:
        config.addinivalue_line("markers", line)
    config.stash[STATE_KEY] = State(config, read_settings(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        state.close()


def _state(config: pytest.Config) -> State:
    return config.stash[STATE_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [_state(config).settings.describe()]


def _uses_gpucomm(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & GPUCOMM_FIXTURES) or any(item.get_closest_marker(m) for m in GPUCOMM_MARKERS)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    state = _state(config)
    if not any(_uses_gpucomm(i) for i in items):
        return []
    from .hardware import device_summary_lines

    return device_summary_lines(state.info)


# -- collection: sweeps and device parametrization ---------------------------------------------------

def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    state = _state(metafunc.config)
    where = metafunc.definition.nodeid
    mark = metafunc.definition.get_closest_marker("sizes")
    if mark is not None:
        try:
            sizes = read_sizes(mark, where)
        except MarkerError as e:
            raise pytest.Collector.CollectError(str(e)) from None
        if "size" not in metafunc.fixturenames:
            raise pytest.Collector.CollectError(f"{where}: @sizes needs the test to take a 'size' argument")
        cap = state.max_size
        kept = [s for s in sizes if s <= cap]
        if kept:
            metafunc.parametrize("size", kept, ids=[size_id(s) for s in kept], indirect=True)
        else:
            metafunc.parametrize(
                "size",
                [pytest.param(None, marks=pytest.mark.skip(
                    reason=f"every size of @sizes is above --gpucomm-max-size {describe_size(cap)}"))],
                ids=["no-size"],
                indirect=True,
            )
    for name in ("gpu_pair", "gpu_link"):
        if name not in metafunc.fixturenames:
            continue
        devs = state.devices()
        if name == "gpu_pair":
            pairs = [GpuPair(a, b) for a in devs for b in devs if a != b]
            ids = [p.id for p in pairs]
        else:
            pairs = [GpuPair(a, b) for i, a in enumerate(devs) for b in devs[i + 1 :]]
            ids = [p.id.replace("->", "<->") for p in pairs]
        if pairs:
            metafunc.parametrize(name, pairs, ids=ids, indirect=True)
        else:
            metafunc.parametrize(
                name,
                [pytest.param(None, marks=pytest.mark.skip(reason=_too_few(state, 2)))],
                ids=["no-pair"],
                indirect=True,
            )
    if "gpu" in metafunc.fixturenames:
        if state.info.kind == "gpu":
            devs = state.devices()
            metafunc.parametrize("gpu", devs, ids=[f"gpu{d.split(':')[-1]}" for d in devs], indirect=True)
        else:
            metafunc.parametrize(
                "gpu",
                [pytest.param(None, marks=pytest.mark.skip(
                    reason="needs a GPU (host<->device copies); none is used: running the CPU variants"))],
                ids=["no-gpu"],
                indirect=True,
            )


def _too_few(state: State, needed: int) -> str:
    info = state.info
    if info.kind == "gpu":
        return f"needs {needed} GPUs, found {info.count}"
    return f"needs {needed} devices, found {info.count} logical host devices (no GPU: CPU variant)"


# -- run: marker validation, requirements, checks ------------------------------------------------------

def pytest_runtest_setup(item: pytest.Item) -> None:
    try:
        read_bandwidth(item)
        read_latency(item)
        need = read_gpus(item)
        world = read_world(item)
    except MarkerError as e:
        pytest.fail(str(e), pytrace=False)
    state = _state(item.config)
    if need is not None and need > state.info.count:
        pytest.skip(_too_few(state, need))
    if world is not None and "process_group" in getattr(item, "fixturenames", ()) and world > state.max_world():
        pytest.skip(state.world_skip_reason(world))


def _check_thresholds(item: pytest.Item, records: list[Record]) -> list[str]:
    failures: list[str] = []
    bw = read_bandwidth(item)
    lat = read_latency(item)
    for r in records:
        m = r.measurement
        failed = False
        what = f"{m.op} on {m.where} at {describe_size(m.size_bytes)}"
        label = "busbw" if m.kind == "collective" else "algbw"
        if bw is not None and bw.min_gbps is not None:
            ok = m.gbps >= bw.min_gbps
            r.checks.append(f"bandwidth >= {bw.min_gbps:g} GB/s: {'ok' if ok else 'FAIL'} ({m.gbps:.2f} GB/s)")
            if not ok:
                failed = True
                failures.append(
                    f"bandwidth below threshold: {what}: measured {m.gbps:.2f} GB/s ({label}, median of {m.n} "
                    f"samples), required >= {bw.min_gbps:g} GB/s"
                )
        if lat is not None and lat.max_us is not None:
            got = m.latency_us(lat.percentile)
            ok = got <= lat.max_us
            r.checks.append(f"p{lat.percentile:g} latency <= {lat.max_us:g} us: {'ok' if ok else 'FAIL'} ({got:.2f} us)")
            if not ok:
                failed = True
                failures.append(
                    f"latency above threshold: {what}: measured p{lat.percentile:g} {got:.2f} us per iteration "
                    f"({m.n} samples), required <= {lat.max_us:g} us"
                )
        r.status = "FAIL" if failed else ("ok" if r.checks else "measured")
    return failures


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    state = _state(item.config)
    before = len(state.records)
    result = yield
    records = [r for r in state.records[before:] if r.nodeid == item.nodeid]
    failures = _check_thresholds(item, records)
    for r in records:
        m = r.measurement
        key = f"gpucomm.{m.op}.{m.size_bytes}"
        item.user_properties.append((f"{key}.gbps", f"{m.gbps:.4f}"))
        item.user_properties.append((f"{key}.p50_us", f"{m.p50_us:.3f}"))
        item.user_properties.append((f"{key}.p99_us", f"{m.p99_us:.3f}"))
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    return result


# -- reports ------------------------------------------------------------------------------------------

def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _state(config)
    if not state.records:
        return
    from .report import LEGEND, render_table

    tr = terminalreporter
    tr.write_sep("=", "gpucomm results")
    if state._info is not None:
        tr.write_line(f"hardware: {state.info.headline()}")
    for line in render_table(state.records).splitlines():
        tr.write_line(line)
    tr.write_line(LEGEND)
    if state.settings.json_path:
        tr.write_line(f"gpucomm: wrote {len(state.records)} measurements to {state.settings.json_path}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _state(session.config)
    if state.settings.json_path and state.records:
        from .hardware import fingerprint
        from .report import json_document, write_json

        s = state.settings
        doc = json_document(
            state.records,
            settings={"device": s.device, "min_time_s": s.min_time_s, "max_size": s.max_size,
                      "baseline": s.baseline, "timeout_s": s.timeout_s},
            fingerprint=fingerprint(state.info),
        )
        write_json(s.json_path, doc)
    state.close()
