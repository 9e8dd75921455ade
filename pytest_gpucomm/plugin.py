"""pytest hooks of pytest-gpucomm: options, markers, header, sweeps and skips, checks, summary.

Importing this module imports neither torch nor anything that touches a GPU; that happens only when a
test uses a gpucomm fixture or marker.
"""

from __future__ import annotations

from typing import Any, Generator

import pytest

from .fixtures import comm, gpu, gpu_link, gpu_pair, gpucomm_state, gpus, process_group, size  # noqa: F401  (fixtures)
from .markers import (
    MARKER_LINES,
    MarkerError,
    read_bandwidth,
    read_gpus,
    read_latency,
    read_sizes,
    read_rank_timeout,
    read_world,
    size_id,
)
from .session import STATE_KEY, GpuPair, Record, State
from .settings import add_options, read_settings
from .units import describe_size

GPUCOMM_FIXTURES = {"gpus", "gpu", "gpu_pair", "gpu_link", "comm", "process_group"}
GPUCOMM_MARKERS = ("bandwidth", "latency", "sizes", "gpus", "world", "rank_timeout")



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


def _check_gate_options(state: State) -> None:  # not a hook: called from pytest_collection_finish
    s = state.settings
    if s.baseline_save and not s.baseline:
        raise pytest.UsageError("--gpu-baseline-save needs --gpu-baseline=NAME|PATH|auto to know where to save")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    state = _state(session.config)
    _check_gate_options(state)
    if state.gate.active and any(_uses_gpucomm(i) for i in session.items):
        state.gate.load(state.info.model if state.info.kind == "gpu" else None, state.fingerprint,
                        {i.nodeid for i in session.items})


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    state = _state(config)
    if not any(_uses_gpucomm(i) for i in items):
        return []
    from .hardware import device_summary_lines

    return device_summary_lines(state.info) + state.gate.header_lines()


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
        read_rank_timeout(item)
    except MarkerError as e:
        problem = str(e)
    else:
        problem = ""
    if problem:
        pytest.fail(problem, pytrace=False)  # outside the except block: no chained traceback
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


def _judge(state: State, item: pytest.Item, records: list[Record]) -> list[str]:
    """The baseline decision for each measurement of the test (re-measuring a flagged one once)."""
    bw = read_bandwidth(item)
    tolerance = bw.tolerance if bw is not None else None
    failures = []
    for r in records:
        def remeasure(r: Record = r) -> Any:
            assert r.redo is not None
            r.measurement = r.redo()
            return r.measurement

        v = state.gate.judge(r.nodeid, r.measurement, tolerance, remeasure if r.redo is not None else None)
        r.baseline = v.to_dict()
        if r.status != "FAIL":
            r.status = v.status
        if v.failed and not state.settings.baseline_save:
            failures.append(v.message)  # a recording run reports its verdicts but does not fail on them
        m = r.measurement
        key = f"gpucomm.{m.op}.{m.size_bytes}"
        item.user_properties.append((f"{key}.status", v.status))
        if v.ratio is not None:
            item.user_properties.append((f"{key}.ratio", f"{v.ratio:.4f}"))
        if v.baseline_gbps is not None:
            item.user_properties.append((f"{key}.baseline_gbps", f"{v.baseline_gbps:.4f}"))
    return failures


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    state = _state(item.config)
    before = len(state.records)
    result = yield
    records = [r for r in state.records[before:] if r.nodeid == item.nodeid]
    failures = _check_thresholds(item, records)
    if state.gate.loaded:
        failures += _judge(state, item, records)
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

    from .report import GATE_HEADERS, gate_columns

    tr = terminalreporter
    tr.write_sep("=", "gpucomm results")
    if state._info is not None:
        tr.write_line(f"hardware: {state.info.headline()}")
    gated = state.gate.loaded
    table = render_table(state.records, GATE_HEADERS if gated else None,
                         gate_columns(state.records) if gated else None)
    for line in table.splitlines():
        tr.write_line(line)
    tr.write_line(LEGEND)
    if gated:
        counts: dict[str, int] = {}
        for r in state.records:
            counts[r.status] = counts.get(r.status, 0) + 1
        tr.write_line("gpucomm verdicts: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        for line in state.gate.header_lines()[1:]:
            tr.write_line(line)
    for line in state.notes:
        tr.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Save the baseline and write the reports before the terminal summary is printed."""
    state = _state(session.config)
    s = state.settings
    state.close()
    if not state.records:
        return
    from .hardware import now_iso
    from .report import benchmark_document, json_document, write_json

    date = now_iso()
    if s.baseline_save and state.gate.loaded:
        path, n = state.gate.save(state.records, state.fingerprint, date)
        state.notes.append(f"gpucomm: saved {n} cases of this run (id {state.gate.run_id}) to {path}")
    extra: dict[str, Any] = {}
    if state.gate.loaded:
        from .gate import ABSENT

        extra["baseline"] = {
            "path": str(state.gate.path),
            "comparisons": state.gate.n_comparisons,
            "environment_diff": [[k, None if a is ABSENT else a, None if b is ABSENT else b]
                                 for k, a, b in state.gate.env_diff],
        }
    if s.json_path:
        doc = json_document(
            state.records,
            settings={"device": s.device, "min_time_s": s.min_time_s, "max_size": s.max_size,
                      "baseline": s.baseline, "timeout_s": s.timeout_s, "tolerance": s.tolerance,
                      "alpha": s.alpha, "dtypes": list(s.dtypes)},
            fingerprint=state.fingerprint,
            extra=extra,
        )
        write_json(s.json_path, doc)
        state.notes.append(f"gpucomm: wrote {len(state.records)} measurements to {s.json_path}")
    if s.benchmark_json:
        write_json(s.benchmark_json, benchmark_document(state.records, state.fingerprint, date))
        state.notes.append(f"gpucomm: wrote the pytest-benchmark export to {s.benchmark_json}")
