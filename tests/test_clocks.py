"""ops/clocks.py: clocks and throttle reasons read during a measurement (issue 29)."""

from __future__ import annotations

import time

from pytest_gpucomm.env.clocks import ClockSummary, Reading, reason_names, summarize
from pytest_gpucomm.ops.clocks import CpuFreqReader, Sampler


class Script:
    """A reader that answers a script of (sm_mhz, reasons), the last repeated."""

    def __init__(self, device, script):
        self.device, self.script, self.n = device, list(script), 0

    def read(self):
        sm, reasons = self.script[min(self.n, len(self.script) - 1)]
        self.n += 1
        return Reading(t=time.perf_counter(), sm_mhz=sm, mem_mhz=3201.0, reasons=reasons, pcie_gen=5, pcie_width=16)


def test_reason_bits_read_as_words_and_an_unknown_bit_by_its_value():
    assert reason_names(0x4 | 0x40) == ["power cap", "thermal (hardware)"]
    assert reason_names(0x1) == ["idle"]
    assert reason_names(0x200) == ["reason 0x200"]
    assert reason_names(0x2000 | 0x80000) == ["package power (PPT)", "reason 0x80000"]  # AMD's, then unknown


def test_idle_is_no_throttle_and_a_power_cap_is_with_its_share_and_the_clock_range():
    readings = [Reading(0, 345.0, 3201.0, 0x1)] + [Reading(0, 1980.0, 3201.0, 0)] * 2 \
        + [Reading(0, 1305.0, 3201.0, 0x4)] * 5
    s = summarize("cuda:0", readings)
    assert s.throttled and s.throttled_share == 5 / 8 and s.reasons == (("power cap", 5 / 8),)
    assert s.text() == "cuda:0 throttled (power cap) in 62% of 8 clock readings: SM 345-1980 MHz, memory 3201 MHz"
    calm = summarize("cuda:0", readings[:3])
    assert not calm.throttled and calm.text() == "cuda:0 clocks: SM 345-1980 MHz, memory 3201 MHz (3 readings)"


def test_a_summary_survives_json():
    s = summarize("cuda:1", [Reading(0, 1300.0, 3201.0, 0x4, 5, 16), Reading(0, 1980.0, 3201.0, 0, 4, 16)])
    assert ClockSummary.from_dict(s.to_dict()) == ClockSummary(
        device="cuda:1", readings=2, sm_mhz=(1300.0, 1980.0), mem_mhz=(3201.0, 3201.0), reasons=(("power cap", 0.5),),
        throttled_share=0.5, pcie="Gen5 x16")


def test_the_sampler_reads_at_its_start_and_stop_and_in_between_from_its_thread():
    r = Script("cuda:0", [(1980.0, 0)] * 3 + [(1300.0, 0x4)])
    with Sampler([r], interval_s=0.005) as s:
        time.sleep(0.1)
    (summary,) = s.summaries()
    assert summary.readings >= 5 and summary.readings == r.n
    assert summary.throttled and summary.sm_mhz == (1300.0, 1980.0) and summary.pcie == "Gen5 x16"


def test_a_reader_that_fails_or_reads_nothing_stops_and_the_measurement_goes_on():
    class Broken:
        device = "cuda:0"

        def read(self):
            raise RuntimeError("NVML gone")

    with Sampler([Broken(), Script("cuda:1", [(1980.0, 0)])], interval_s=0.005) as s:
        time.sleep(0.03)
    broken, fine = s.summaries()
    assert broken.readings == 0 and broken.text() == "cuda:0 clocks: not read (0 readings)"
    assert fine.readings >= 2


def _cpu_tree(tmp_path, freqs_khz, throttles):
    for c, f in enumerate(freqs_khz):
        (tmp_path / f"cpu{c}" / "cpufreq").mkdir(parents=True)
        (tmp_path / f"cpu{c}" / "cpufreq" / "scaling_cur_freq").write_text(f"{f}\n")
        (tmp_path / f"cpu{c}" / "thermal_throttle").mkdir()
        (tmp_path / f"cpu{c}" / "thermal_throttle" / "core_throttle_count").write_text(f"{throttles[c]}\n")


def test_the_cpu_reader_reads_the_mean_frequency_and_a_grown_thermal_counter_is_a_throttle(tmp_path):
    _cpu_tree(tmp_path, [2000000, 3000000], [4, 0])
    r = CpuFreqReader("cpu:0", root=str(tmp_path), cpus=[0, 1])
    first = r.read()
    assert first.sm_mhz == 2500.0 and first.reasons == 0
    (tmp_path / "cpu1" / "thermal_throttle" / "core_throttle_count").write_text("3\n")
    again = r.read()
    assert again.reasons == CpuFreqReader.THERMAL
    assert summarize("cpu:0", [first, again]).text().startswith("cpu:0 throttled (thermal (software)) in 50% of 2")


def test_the_cpu_reader_reads_nothing_where_the_kernel_exposes_neither(tmp_path):
    assert CpuFreqReader("cpu:0", root=str(tmp_path), cpus=[0]).read() is None


def test_a_host_copy_measured_while_a_reader_says_throttled_keeps_the_clocks_in_its_info(monkeypatch):
    """The CPU variant of the GPU path: the copy's measurement holds what its device's reader said during the
    timed samples (here a reader that reports a power cap from its second reading on: the sampler reads at the
    start and the end of the timed samples whatever the load, so two readings are sure where a third, from the
    sampling thread, may not come on a loaded 2-core host)."""
    from pytest_gpucomm.ops import clocks, copies
    from pytest_gpucomm.ops.timing import TimingSettings

    reader = Script("cpu", [(3000.0, 0), (2100.0, 0x4)])
    monkeypatch.setattr(clocks, "_READERS", {"cpu": reader})
    m = copies.measure_copy("cpu:0", "cpu:1", 1 << 20, TimingSettings(min_time_s=0.1, min_samples=5),
                            copies.BufferPool())
    (c,) = m.info["clocks"]
    s = ClockSummary.from_dict(c)
    assert s.device == "cpu" and s.readings == reader.n >= 2 and s.throttled and s.sm_mhz == (2100.0, 3000.0)


def test_the_timing_engine_reads_the_clocks_only_while_the_timed_samples_run():
    from pytest_gpucomm.ops.timing import TimingSettings, measure

    class Op:
        calls = []

        def sample(self, batch):
            Op.calls.append(("sample", s._thread is not None))
            return lambda: 1e-4 * batch

        def sync(self):
            time.sleep(0.001)

    s = Sampler([Script("cpu", [(3000.0, 0)])], interval_s=0.001)
    measure(Op(), TimingSettings(min_time_s=0.01, min_samples=3, warmup_iters=2, warmup_min_s=0.0), clocks=s)
    running = [on for _, on in Op.calls]
    assert running[0] is False and running[-1] is True and s._thread is None  # warm-up unsampled, then stopped
    assert s.summaries()[0].readings >= 2


def test_a_throttled_measurement_says_so_in_its_row_and_its_verdict_names_it_as_a_likely_cause():
    """The table marks the figure, the gate's message (``gate.cause.likely_causes``) names the throttle."""
    from pytest_gpucomm.gate.cause import likely_causes
    from pytest_gpucomm.measurement import Measurement, Record
    from pytest_gpucomm.report.table import compact_table

    s = summarize("cuda:0", [Reading(0, 1305.0, 3201.0, 0x4)] * 3)
    m = Measurement(op="h2d", size_bytes=4096, samples_s=[1e-5] * 5, devices=("host", "cuda:0"), kind="copy",
                    info={"clocks": [s.to_dict()]})
    lines = compact_table([Record(nodeid="t.py::test_h2d[4KiB]", measurement=m)], 120)
    assert any("*" in line and "4 KiB" in line for line in lines)
    assert any(line.startswith("* measured while its device throttled") for line in lines)
    assert likely_causes([], m, [m]) == ["measured while cuda:0 throttled (power cap) in 100% of 3 clock readings: "
                                         "SM 1305 MHz, memory 3201 MHz: a likely cause"]
    calm = Measurement(op="h2d", size_bytes=4096, samples_s=[1e-5] * 5, devices=("host", "cuda:0"), kind="copy")
    assert likely_causes([], calm, [calm]) == []


def test_a_device_change_is_a_likely_cause_of_the_cases_it_can_slow_only():
    from pytest_gpucomm.env.device_state import DeviceChange
    from pytest_gpucomm.gate.cause import likely_causes
    from pytest_gpucomm.measurement import Measurement

    pcie = DeviceChange("cuda:0", "pcie", "cuda:0 PCIe link at Gen4 x8 (baseline: Gen5 x16)")
    h2d = Measurement(op="h2d", size_bytes=4096, samples_s=[1e-5], devices=("host", "cuda:0"), kind="copy")
    peer = Measurement(op="copy", size_bytes=4096, samples_s=[1e-5], devices=("cuda:0", "cuda:1"), kind="copy")
    assert likely_causes([pcie], h2d, [h2d]) == ["cuda:0 PCIe link at Gen4 x8 (baseline: Gen5 x16): a likely cause"]
    assert likely_causes([pcie], peer, [peer]) == []


class FakeAmdsmi:
    """AMD SMI's Python API as its reference documents it, for one GPU: ``metrics`` is what each call of
    ``amdsmi_get_gpu_metrics_info`` answers in turn (the last repeated), ``clock_key`` the clock's key ("clk",
    or "cur_clk" before ROCm 6.2); ``raises``: the calls that raise (AMD SMI's NOT_SUPPORTED)."""

    class AmdSmiClkType:
        GFX, MEM = 0, 1

    def __init__(self, metrics=({"throttle_status": "N/A"},), clock_key="clk", bdf="0000:c1:00.0", raises=()):
        self.metrics, self.clock_key, self.bdf, self.raises = list(metrics), clock_key, bdf, set(raises)
        self.calls: dict[str, int] = {}

    def _call(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in self.raises:
            raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")

    def amdsmi_get_processor_handles(self):
        return ["h0"]

    def amdsmi_get_gpu_device_bdf(self, h):
        return self.bdf

    def amdsmi_get_clock_info(self, h, kind):
        self._call("GFX" if kind == self.AmdSmiClkType.GFX else "MEM")
        return {self.clock_key: 2100 if kind == self.AmdSmiClkType.GFX else 1300, "min_clk": 500, "max_clk": 2100}

    def amdsmi_get_violation_status(self, h):  # waits about 100 ms in AMD SMI: never to be called by a sampler
        raise AssertionError("amdsmi_get_violation_status called")

    def amdsmi_get_gpu_metrics_info(self, h):
        self._call("metrics")
        return self.metrics[min(self.calls["metrics"], len(self.metrics)) - 1]

    def amdsmi_get_pcie_info(self, h):
        self._call("pcie")
        return {"pcie_static": {"max_pcie_width": 16, "max_pcie_speed": 32000},
                "pcie_metric": {"pcie_width": 16, "pcie_speed": 16000}}


def residencies(ppt, socket=7, status="N/A"):
    return {"prochot_residency_acc": 0, "ppt_residency_acc": ppt, "socket_thm_residency_acc": socket,
            "vr_thm_residency_acc": 0, "hbm_thm_residency_acc": "N/A", "throttle_status": status}


def test_an_mi300_residency_that_grew_between_readings_is_a_throttle_named_with_the_clocks_and_the_link():
    from pytest_gpucomm.ops.clocks import AmdsmiReader

    smi = FakeAmdsmi(metrics=[residencies(100), residencies(150), residencies(150), residencies(150, socket=9)])
    r = AmdsmiReader(smi, "h0", "cuda:0")
    readings = [r.read() for _ in range(4)]
    assert [reason_names(x.reasons) for x in readings] == [[], ["package power (PPT)"], [], ["socket thermal"]]
    summary = summarize("cuda:0", readings[:2])
    assert summary.pcie == "Gen4 x16"  # 16000 MT/s: Gen4
    assert summary.text() == ("cuda:0 throttled (package power (PPT)) in 50% of 2 clock readings: SM 2100 MHz, "
                              "memory 1300 MHz")


def test_before_mi300_the_throttle_status_is_read_and_a_call_that_raises_is_not_asked_again():
    from pytest_gpucomm.ops.clocks import AmdsmiReader

    before = {**dict.fromkeys(residencies(0), "N/A"), "throttle_status": 1}  # no residency, a throttle status
    smi = FakeAmdsmi(metrics=[before], clock_key="cur_clk")
    r = AmdsmiReader(smi, "h0", "cuda:0")
    readings = [r.read() for _ in range(3)]
    assert [x.reasons for x in readings] == [AmdsmiReader.THROTTLE_STATUS] * 3
    assert reason_names(readings[0].reasons) == ["throttle status"] and readings[0].sm_mhz == 2100.0
    smi = FakeAmdsmi(raises={"MEM", "metrics", "pcie"})  # one clock, the metrics and the link not supported
    r = AmdsmiReader(smi, "h0", "cuda:0")
    readings = [r.read() for _ in range(3)]
    assert [(x.sm_mhz, x.mem_mhz, x.reasons, x.pcie_gen) for x in readings] == [(2100.0, None, 0, None)] * 3
    assert smi.calls == {"GFX": 3, "MEM": 1, "metrics": 1, "pcie": 1}
    smi = FakeAmdsmi(raises={"GFX", "MEM"})  # no clock at all: nothing read, the sampler stops asking
    assert AmdsmiReader(smi, "h0", "cuda:0").read() is None


def test_on_rocm_a_gpu_is_found_in_amd_smi_by_torchs_bus_id_whatever_the_width_of_its_domain():
    from pytest_gpucomm.ops.clocks import AmdsmiReader, reader_for

    smi = FakeAmdsmi()
    r = reader_for("cuda:0", "00000000:C1:00.0", amd=lambda: smi, rocm=lambda: True)
    assert isinstance(r, AmdsmiReader) and r.device == "cuda:0"
    assert reader_for("cuda:0", "00000000:c2:00.0", amd=lambda: smi, rocm=lambda: True) is None  # not this GPU
    assert isinstance(reader_for("cuda:0", None, amd=lambda: smi, rocm=lambda: True), AmdsmiReader)  # by number
    assert reader_for("cuda:1", None, amd=lambda: smi, rocm=lambda: True) is None
    assert reader_for("cuda:0", None, amd=lambda: None, rocm=lambda: True) is None  # no amdsmi: nothing read
    # a CUDA build asks NVML, never AMD SMI
    assert reader_for("cuda:0", None, nvml=lambda: None, amd=lambda: 1 / 0, rocm=lambda: False) is None
