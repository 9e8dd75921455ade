"""env/device_state.py: the GPUs' changes since the baseline, per device, and the cases each can slow (issue 29)."""

from __future__ import annotations

import copy

from pytest_gpucomm.env.device_state import DeviceChange, affects, device_changes


def _gpu(i, **over):
    g = {"device": f"cuda:{i}", "vbios": "96.00.A5.00.1A",
         "pcie": {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16},
         "nvlink": {str(k): {"up": True} for k in range(18)}, "ecc": {"current": "on", "pending": "on"},
         "mig": "off", "compute_mode": "default", "persistence": "on", "power_limit_w": 700.0,
         "application_clocks_mhz": {"sm": 1980, "mem": 3201}, "row_remap": {"pending": False, "failed": False},
         "numa_node": 0, "cpu_affinity": "0-15"}
    g.update(over)
    return g


BASELINE = {"driver": "580.159.04", "nvidia": {"gpus": [_gpu(0), _gpu(1)]}}


def test_an_unchanged_machine_has_no_change():
    assert device_changes(BASELINE, copy.deepcopy(BASELINE)) == []


def test_each_changed_field_is_said_per_device_with_the_baselines_value():
    now = copy.deepcopy(BASELINE)
    g0, g1 = now["nvidia"]["gpus"]
    g0["pcie"].update(gen=4, width=8)
    g1["nvlink"]["3"]["up"] = False
    g1["power_limit_w"] = 500.0
    g1["application_clocks_mhz"] = {"sm": 1500, "mem": 3201}
    assert device_changes(BASELINE, now) == [
        DeviceChange("cuda:0", "pcie", "cuda:0 PCIe link at Gen4 x8 (baseline: Gen5 x16)"),
        DeviceChange("cuda:1", "links", "cuda:1 NVLinks 17 of 18 up (baseline: 18 of 18 up)"),
        DeviceChange("cuda:1", "gpu", "cuda:1 power limit 500 W (baseline: 700 W)"),
        DeviceChange("cuda:1", "gpu", "cuda:1 application clocks SM 1500 MHz, memory 3201 MHz (baseline: SM 1980 MHz, "
                                      "memory 3201 MHz)"),
    ]


def test_a_baseline_without_the_reading_or_a_gpu_read_on_one_side_only_is_no_change():
    assert device_changes({"driver": "1"}, BASELINE) == []
    one = {"nvidia": {"gpus": [_gpu(0, power_limit_w=300.0)]}}
    assert [c.device for c in device_changes(BASELINE, one)] == ["cuda:0"]


def test_amd_links_and_pcie_are_compared_too():
    old = {"amd": {"gpus": [{"index": 0, "pcie": {"width": 16, "speed_gts": 32}, "xgmi": {"status": ["U"] * 7}}]}}
    new = copy.deepcopy(old)
    new["amd"]["gpus"][0]["pcie"]["width"] = 8
    new["amd"]["gpus"][0]["xgmi"]["status"][2] = "D"
    assert [c.text for c in device_changes(old, new)] == ["cuda:0 PCIe link x8 at 32 GT/s (baseline: x16 at 32 GT/s)",
                                                          "cuda:0 xGMI links 6 of 7 up (baseline: 7 of 7 up)"]


def test_a_pcie_change_touches_that_gpus_host_copies_a_link_change_its_peer_copies_and_every_collective():
    pcie = DeviceChange("cuda:0", "pcie", "")
    links = DeviceChange("cuda:0", "links", "")
    gpu = DeviceChange("cuda:1", "gpu", "")
    assert affects(pcie, "h2d", ("host", "cuda:0"), "copy") and not affects(pcie, "h2d", ("host", "cuda:1"), "copy")
    assert not affects(pcie, "copy", ("cuda:0", "cuda:1"), "copy") and not affects(pcie, "all_reduce", ("rank0",),
                                                                                     "collective")
    assert affects(links, "copy", ("cuda:0", "cuda:1"), "copy") and not affects(links, "d2h", ("cuda:0", "host"),
                                                                                 "copy")
    assert affects(links, "all_reduce", ("rank0", "rank1"), "collective")
    assert affects(gpu, "d2h", ("cuda:1", "host"), "copy") and not affects(gpu, "d2h", ("cuda:0", "host"), "copy")
    assert affects(gpu, "broadcast", ("rank0", "rank1"), "collective")


def test_the_findings_of_a_fingerprint_name_links_down_on_nvidia_and_amd_whatever_the_baseline():
    from pytest_gpucomm.env.device_state import link_findings

    nv = copy.deepcopy(BASELINE)
    nv["nvidia"]["gpus"][1]["nvlink"]["5"]["up"] = False
    amd = {"amd": {"gpus": [{"index": 0, "pcie": {"width": 8, "max_width": 16}, "xgmi": {"status": ["U", "D", "U"]}}]}}
    assert link_findings(nv) == ["cuda:1: NVLink 5 down (17 of 18 up)"]
    assert link_findings(amd, gpu_count=8) == ["cuda:0: xGMI link 1 down (2 of 3 up)",
                                               "cuda:0: PCIe link at x8 (capable of x16)"]
    assert link_findings(BASELINE) == [] and link_findings({"driver": "1"}) == []


def test_a_pcie_link_trained_down_while_idle_is_no_change_but_a_narrower_or_less_capable_one_is():
    """GPUs train their PCIe link down when idle: a reading at a session's start at a lower generation says
    nothing; a narrower link, or one that can do less, does."""
    idle = copy.deepcopy(BASELINE)
    idle["nvidia"]["gpus"][0]["pcie"]["gen"] = 1
    assert device_changes(BASELINE, idle) == []
    narrow = copy.deepcopy(BASELINE)
    narrow["nvidia"]["gpus"][0]["pcie"].update(gen=4, gen_max=4)
    assert [c.text for c in device_changes(BASELINE, narrow)] == ["cuda:0 PCIe link at Gen4 x16 (baseline: Gen5 x16)"]


def test_a_host_copys_link_read_under_load_below_what_it_can_do_is_a_likely_cause():
    from pytest_gpucomm.env.clocks import Reading, summarize
    from pytest_gpucomm.env.device_state import pcie_under_load
    from pytest_gpucomm.gate.cause import likely_causes
    from pytest_gpucomm.measurement import Measurement

    assert pcie_under_load(BASELINE, "cuda:0", "Gen5 x16") is None
    assert pcie_under_load(BASELINE, "cuda:0", "Gen4 x16") == ("cuda:0 PCIe link at Gen4 x16 while measured (capable "
                                                               "of Gen5 x16)")
    s = summarize("cuda:0", [Reading(0, 1980.0, 3201.0, 0, 3, 16)])
    m = Measurement(op="h2d", size_bytes=1 << 20, samples_s=[1e-4], devices=("host", "cuda:0"), kind="copy",
                    info={"clocks": [s.to_dict()]})
    assert likely_causes([], m, [m], BASELINE) == ["cuda:0 PCIe link at Gen3 x16 while measured (capable of Gen5 x16): "
                                                   "a likely cause"]


def test_an_amd_gpus_link_under_load_is_not_named_below_what_it_can_do():
    """AMD SMI's maximum is the GPU's own, not its slot's: a Gen5 GPU in a Gen4 slot is no likely cause."""
    from pytest_gpucomm.env.device_state import pcie_under_load

    fp = {"amd": {"gpus": [{"index": 0, "pcie": {"max_width": 16, "max_speed_gts": 32, "width": 16,
                                                  "speed_gts": 16}}]}}
    assert pcie_under_load(fp, "cuda:0", "Gen4 x16") is None and pcie_under_load(fp, "cuda:0", "Gen5 x8") is None
