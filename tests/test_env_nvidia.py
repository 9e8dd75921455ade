"""env/nvidia.py: the GPUs' and links' state from NVML, else from nvidia-smi's XML (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_gpucomm.env.nvidia import cpu_list, from_nvidia_smi, link_findings, read_nvidia
from pytest_gpucomm.env.sources import SourceUnavailable

SMI_XML = Path(__file__).parent / "data" / "nvidia" / "nvidia_smi_q_x_h200.xml"
BUS = "00000000:00:06.0"


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's name
    pass


class FakeNvml:
    """pynvml's API as far as env/nvidia.py calls it, answering what NVML answered on the one-H200 machine;
    ``links`` gives NVLink states (link -> up) for a GPU that has them."""

    NVMLError_NotSupported = NVMLError_NotSupported
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, gpus=1, links=None, init_error=None, width=16, remote="switch"):
        self.gpus, self.links, self.init_error, self.width, self.remote = gpus, links or {}, init_error, width, remote
        self.calls = []

    def nvmlInit(self):
        self.calls.append("init")
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return {BUS: 0}.get(bus, 1)

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlSystemGetNVMLVersion(self):
        return "13.580.159.04"

    def nvmlDeviceGetPciInfo(self, h):
        class Pci:
            busId = BUS.encode() if h == 0 else b"00000000:00:07.0"
        return Pci()

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetVbiosVersion(self, h):
        return "96.00.A5.00.1A"

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self.width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link not in self.links:
            raise NVMLError_NotSupported("Not Supported")
        return int(self.links[link])

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return 4

    def nvmlDeviceGetNvLinkErrorCounter(self, h, link, counter):
        return 7 if counter == 0 else 0

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return {"gpu": 0, "switch": 2}[self.remote]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        class Pci:  # a direct link leads to the other GPU; a switch has a bus of its own
            busId = (f"00000000:00:0{7 - h}.0" if self.remote == "gpu" else "00000000:c0:00.0").encode()
        return Pci()

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 50  # NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        raise NVMLError_NotSupported("Not Supported")  # Hopper remaps rows instead

    def nvmlDeviceGetRemappedRows(self, h):
        return [0, 0, 0, 0]

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetComputeMode(self, h):
        return 0

    def nvmlDeviceGetMigMode(self, h):
        return [0, 0]

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700000

    def nvmlDeviceGetApplicationsClock(self, h, clock):
        return {1: 1980, 2: 3201}[clock]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return {1: 1980, 2: 3201}[clock]

    def nvmlDeviceGetNumaNodeId(self, h):
        raise NVMLError_NotSupported("Not Supported")

    def nvmlDeviceGetCpuAffinity(self, h, words):
        return [0xFFFF] + [0] * (words - 1)


def _smi_runner(argv):
    assert argv == ["nvidia-smi", "-q", "-x"]
    return 0, SMI_XML.read_text(), ""


def _no_nvml():
    raise SourceUnavailable("pynvml does not import")


def test_nvml_gives_every_field_of_the_one_h200_and_leaves_out_what_the_gpu_does_not_have_without_a_note():
    nvml = FakeNvml()
    r = read_nvidia(bus_ids=[BUS], load_nvml=lambda: nvml)
    assert r["source"] == "nvml" and r["sources"] == {"nvml": "used", "nvidia-smi": "not tried"}
    assert (r["driver"], r["cuda_driver"], r["nvml_library"]) == ("580.159.04", "13.0", "13.580.159.04")
    (g,) = r["gpus"]
    assert g == {"device": "cuda:0", "bus_id": BUS, "name": "NVIDIA H200", "vbios": "96.00.A5.00.1A",
                 "pcie": {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16}, "nvlink": {},
                 "ecc": {"current": "on", "pending": "on"}, "retired_pages_pending": None,
                 "row_remap": {"pending": False, "failed": False}, "persistence": "on", "compute_mode": "default",
                 "mig": "off", "power_limit_w": 700.0, "power_default_w": 700.0,
                 "application_clocks_mhz": {"sm": 1980, "mem": 3201}, "max_clocks_mhz": {"sm": 1980, "mem": 3201},
                 "numa_node": None, "cpu_affinity": "0-15"}
    assert r["notes"] == [] and nvml.calls == ["init", "shutdown"]


def test_nvidia_smi_xml_gives_the_same_reading_as_nvml_on_the_same_machine_but_for_what_it_does_not_hold():
    smi = read_nvidia(bus_ids=[BUS], load_nvml=_no_nvml, run=_smi_runner)
    nvml = read_nvidia(bus_ids=[BUS], load_nvml=lambda: FakeNvml())
    assert smi["source"] == "nvidia-smi" and smi["sources"]["nvml"] == "unavailable: pynvml does not import"
    assert (smi["driver"], smi["cuda_driver"]) == ("580.159.04", "13.0")
    a, b = smi["gpus"][0], nvml["gpus"][0]
    assert {k: v for k, v in a.items() if k != "cpu_affinity"} == {k: v for k, v in b.items() if k != "cpu_affinity"}
    assert a["cpu_affinity"] is None  # the XML has no affinity


def test_nvlink_states_and_error_counts_are_read_per_link():
    r = read_nvidia(load_nvml=lambda: FakeNvml(gpus=2, links={0: True, 1: True, 2: False}))
    links = r["gpus"][1]["nvlink"]
    counts = {"replay": 7, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    up = {"up": True, "version": 4, "remote": "00000000:c0:00.0", "remote_type": "switch", "error_counts": counts}
    assert links == {"0": up, "1": up, "2": {"up": False, "version": 4, "remote": None, "remote_type": None,
                                              "error_counts": counts}}


def test_the_topology_is_read_from_nvml_not_from_nvidia_smis_text():
    switched = read_nvidia(load_nvml=lambda: FakeNvml(gpus=2, links={k: True for k in range(18)}))
    direct = read_nvidia(load_nvml=lambda: FakeNvml(gpus=2, links={0: True, 1: True, 2: False}, remote="gpu"))
    pcie = read_nvidia(load_nvml=lambda: FakeNvml(gpus=2))
    assert (switched["topology"], direct["topology"], pcie["topology"]) == ({"0-1": "NV18"}, {"0-1": "NV2"},
                                                                             {"0-1": "SYS"})
    assert read_nvidia(load_nvml=_no_nvml, run=_smi_runner)["topology"] is None  # the XML has no links


def test_a_failing_nvml_init_is_named_and_nvidia_smi_is_tried_and_nothing_raises():
    r = read_nvidia(load_nvml=lambda: FakeNvml(init_error=NVMLError("Driver Not Loaded")), run=_smi_runner)
    assert r["source"] == "nvidia-smi"
    assert r["sources"]["nvml"] == "failed: nvmlInit: NVMLError: Driver Not Loaded"

    def missing(argv):
        raise FileNotFoundError("nvidia-smi: not found on PATH")

    r = read_nvidia(load_nvml=_no_nvml, run=missing)
    assert r["source"] is None and r["gpus"] == []
    assert r["sources"] == {"nvml": "unavailable: pynvml does not import",
                            "nvidia-smi": "unavailable: nvidia-smi: not found on PATH"}


def test_a_link_down_or_narrower_than_it_can_be_is_a_finding_whatever_the_baseline():
    r = read_nvidia(load_nvml=lambda: FakeNvml(gpus=2, links={0: True, 1: False, 2: False}, width=8))
    assert link_findings(r) == ["cuda:0: NVLink 1, 2 down (1 of 3 up)", "cuda:0: PCIe link at Gen5 x8 (capable of "
                                "Gen5 x16)", "cuda:1: NVLink 1, 2 down (1 of 3 up)",
                                "cuda:1: PCIe link at Gen5 x8 (capable of Gen5 x16)"]


def test_on_one_gpu_links_that_are_all_down_are_no_finding_on_several_they_are():
    r = read_nvidia(load_nvml=lambda: FakeNvml(gpus=1, links={0: False, 1: False}))
    assert link_findings(r) == []  # one GPU of a board passed through alone: its links lead nowhere
    assert link_findings(r, gpu_count=2) == ["cuda:0: every NVLink down (0 of 2 up)"]


def test_the_one_h200s_reading_has_no_finding():
    assert link_findings(read_nvidia(bus_ids=[BUS], load_nvml=_no_nvml, run=_smi_runner)) == []


@pytest.mark.parametrize("words, text", [([0xFFFF], "0-15"), ([0b1011], "0-1,3"), ([0, 1], "64"), ([], "")])
def test_a_cpu_affinity_mask_reads_as_ranges(words, text):
    assert cpu_list(words) == text


def test_nvidia_smi_xml_of_another_gpu_order_is_matched_by_bus_id():
    r = from_nvidia_smi(_smi_runner, bus_ids=["0000:00:06.0"])
    assert [g["bus_id"] for g in r["gpus"]] == [BUS]
