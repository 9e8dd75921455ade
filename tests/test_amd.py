"""The AMD part of the fingerprint (pytest_gpucomm.env.amd), read from recorded answers of an 8 x MI300X node.

The answers are in tests/data/amd (their README says where each layout comes from: AMD SMI's Python API
reference and the amd-smi CLI documentation and sources).  They reach the reader through fakes at the library
boundary: a fake ``amdsmi`` module that serves the recorded return values (and raises where a test says), and
a fake command runner that answers ``amd-smi ... --json`` and ``rocm-smi`` with the recorded output.
"""

from __future__ import annotations

import copy
import json
import sys
from enum import IntEnum
from pathlib import Path
from typing import Any, Optional

import pytest

from pytest_gpucomm.env import amd, amd_commands, amd_sources, hardware
from pytest_gpucomm.env.fingerprint import VOLATILE_KEYS, diff_fingerprints

DATA = Path(__file__).resolve().parent / "data" / "amd"
N = 8
PAIRS = [f"{i}->{j}" for i in range(N) for j in range(N) if i != j]


def recorded(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


class AmdSmiLibraryException(Exception):
    """As amdsmi_exception.py words it: an error code and its text, over two lines."""

    def __init__(self, code: int, info: str) -> None:
        super().__init__(f"Error code:\n\t{code} | {info}")
        self.err_code, self.err_info = code, info


NOT_SUPPORTED = (2, "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported")

# amdsmi_link_type_t as amdsmi_wrapper.py of ROCm/amdsmi (2024-10) numbers it
LINK_TYPES_2024 = {"AMDSMI_LINK_TYPE_INTERNAL": 0, "AMDSMI_LINK_TYPE_XGMI": 1, "AMDSMI_LINK_TYPE_PCIE": 2,
                   "AMDSMI_LINK_TYPE_NOT_APPLICABLE": 3, "AMDSMI_LINK_TYPE_UNKNOWN": 4}


class Handle:
    def __init__(self, k: int) -> None:
        self.k = k

    def __repr__(self) -> str:
        return f"<processor handle {self.k}>"


class FakeAmdSmi:
    """The ``amdsmi`` module's API over the recorded answers.  ``raising`` maps a function name to the GPU
    (handle position) it raises for (None: every call); ``order`` is the handles' order (positions into the
    recorded GPUs); ``link_types`` numbers AmdSmiLinkType."""

    AmdSmiException = AmdSmiLibraryException

    def __init__(self, raising: Optional[dict[str, Optional[int]]] = None, order: Optional[list[int]] = None,
                 link_types: dict[str, int] = LINK_TYPES_2024) -> None:
        self.rec = json.loads(recorded("amdsmi_mi300x.json"))
        self.raising = raising or {}
        self.order = order if order is not None else list(range(N))
        self.calls: list[str] = []
        self.AmdSmiLinkType = IntEnum("AmdSmiLinkType", link_types)
        self.AmdSmiClkType = IntEnum("AmdSmiClkType", {"SYS": 0, "GFX": 0, "DF": 1, "DCEF": 2, "SOC": 3, "MEM": 4})
        names = sorted({e["fw_name"] for g in self.rec["gpus"] for e in g["fw_info"]["fw_list"]})
        self.AmdSmiFwBlock = IntEnum("AmdSmiFwBlock", {n: k + 1 for k, n in enumerate(names)})

    # every call goes through here: logged, and raising where the test says
    def _answer(self, name: str, handle: Optional[Handle] = None) -> None:
        self.calls.append(name)
        if name in self.raising and (self.raising[name] is None or (handle is not None
                                                                     and handle.k == self.raising[name])):
            raise AmdSmiLibraryException(*NOT_SUPPORTED)

    def _gpu(self, h: Handle) -> dict[str, Any]:
        return self.rec["gpus"][h.k]

    def amdsmi_init(self, flags: Any = None) -> None:
        self._answer("amdsmi_init")

    def amdsmi_shut_down(self) -> None:
        self._answer("amdsmi_shut_down")

    def amdsmi_get_processor_handles(self) -> list[Handle]:
        self._answer("amdsmi_get_processor_handles")
        return [Handle(k) for k in self.order]

    def amdsmi_get_gpu_device_bdf(self, h: Handle) -> str:
        self._answer("amdsmi_get_gpu_device_bdf", h)
        return self._gpu(h)["bdf"]

    def amdsmi_get_gpu_enumeration_info(self, h: Handle) -> dict:
        self._answer("amdsmi_get_gpu_enumeration_info", h)
        return dict(self._gpu(h)["enumeration_info"])

    def amdsmi_get_gpu_driver_info(self, h: Handle) -> dict:
        self._answer("amdsmi_get_gpu_driver_info", h)
        return dict(self._gpu(h)["driver_info"])

    def amdsmi_get_gpu_asic_info(self, h: Handle) -> dict:
        self._answer("amdsmi_get_gpu_asic_info", h)
        return dict(self._gpu(h)["asic_info"])

    def amdsmi_get_gpu_vbios_info(self, h: Handle) -> dict:
        self._answer("amdsmi_get_gpu_vbios_info", h)
        return dict(self._gpu(h)["vbios_info"])

    def amdsmi_get_fw_info(self, h: Handle) -> dict:
        self._answer("amdsmi_get_fw_info", h)
        # fw_name is an AmdSmiFwBlock member, as amdsmi_interface.py returns it
        return {"fw_list": [{"fw_name": self.AmdSmiFwBlock[e["fw_name"]], "fw_version": e["fw_version"]}
                            for e in self._gpu(h)["fw_info"]["fw_list"]]}

    def amdsmi_get_pcie_info(self, h: Handle) -> dict:
        self._answer("amdsmi_get_pcie_info", h)
        return copy.deepcopy(self._gpu(h)["pcie_info"])

    def amdsmi_get_clock_info(self, h: Handle, kind: Any) -> dict:
        self._answer("amdsmi_get_clock_info", h)
        domain = {self.AmdSmiClkType.GFX: "GFX", self.AmdSmiClkType.MEM: "MEM"}[kind]
        return dict(self._gpu(h)["clock_info"][domain])

    def amdsmi_get_gpu_xgmi_link_status(self, h: Handle) -> dict:
        self._answer("amdsmi_get_gpu_xgmi_link_status", h)
        return copy.deepcopy(self._gpu(h)["xgmi_link_status"])

    def amdsmi_get_link_metrics(self, h: Handle) -> dict:
        self._answer("amdsmi_get_link_metrics", h)
        lm = copy.deepcopy(self._gpu(h)["link_metrics"])
        for link in lm["links"]:  # the connection type as an int, as the reference says it comes
            link["link_type"] = int(self.AmdSmiLinkType[link["link_type"]])
        return lm

    def _pair(self, a: Handle, b: Handle) -> dict[str, Any]:
        return self.rec["pairs"][f"{a.k}->{b.k}"]

    def amdsmi_topo_get_link_type(self, a: Handle, b: Handle) -> dict:
        self._answer("amdsmi_topo_get_link_type", a)
        lt = self._pair(a, b)["link_type"]
        return {"hops": lt["hops"], "type": int(self.AmdSmiLinkType[lt["type"]])}

    def amdsmi_topo_get_link_weight(self, a: Handle, b: Handle) -> int:
        self._answer("amdsmi_topo_get_link_weight", a)
        return self._pair(a, b)["link_weight"]

    def amdsmi_is_P2P_accessible(self, a: Handle, b: Handle) -> bool:
        self._answer("amdsmi_is_P2P_accessible", a)
        return self._pair(a, b)["p2p_accessible"]

    def amdsmi_get_lib_version(self) -> dict:
        self._answer("amdsmi_get_lib_version")
        return dict(self.rec["lib_version"])

    def amdsmi_get_rocm_version(self) -> tuple:
        self._answer("amdsmi_get_rocm_version")
        return tuple(self.rec["rocm_version"])


AMD_SMI = {
    ("amd-smi", "static", "--json"): "amd-smi_static.json",
    ("amd-smi", "version", "--json"): "amd-smi_version.json",
    ("amd-smi", "firmware", "--json"): "amd-smi_firmware.json",
    ("amd-smi", "topology", "--json"): "amd-smi_topology.json",
    ("amd-smi", "xgmi", "--json"): "amd-smi_xgmi.json",
    ("amd-smi", "metric", "--clock", "--pcie", "--json"): "amd-smi_metric.json",
}
ROCM_SMI = {
    ("rocm-smi", "--showdriverversion"): "rocm-smi_showdriverversion.txt",
    ("rocm-smi", "--showtopotype"): "rocm-smi_showtopotype.txt",
}


class FakeRunner:
    """Answers the commands of ``present`` ("amd-smi", "rocm-smi") with the recorded output; ``answers``
    overrides one command's (status, stdout, stderr).  A command not present raises FileNotFoundError, as
    amd_sources.run_command does."""

    def __init__(self, present: tuple[str, ...] = ("amd-smi", "rocm-smi"),
                 answers: Optional[dict[tuple[str, ...], tuple[int, str, str]]] = None) -> None:
        self.present, self.answers, self.calls = present, answers or {}, []

    def __call__(self, argv) -> tuple[int, str, str]:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv[0] not in self.present:
            raise FileNotFoundError(f"{argv[0]}: not found on PATH")
        if argv in self.answers:
            return self.answers[argv]
        name = {**AMD_SMI, **ROCM_SMI}.get(argv)
        if name is None:
            return 2, "", f"unknown command {' '.join(argv)}"
        return 0, recorded(name), ""


def no_amdsmi():
    raise amd_sources.SourceUnavailable("not installed (ModuleNotFoundError: No module named 'amdsmi')")


def read(smi: Any = None, runner: Optional[FakeRunner] = None, rocm_file=lambda: "6.4.1-120") -> dict:
    return amd.read_amd(load_amdsmi=(lambda: smi) if smi is not None else no_amdsmi,
                        run=runner or FakeRunner(), rocm_file=rocm_file)


def mi300x_info(reading: dict) -> hardware.DeviceInfo:
    return hardware.DeviceInfo(kind="gpu", count=N, vendor="AMD", model="AMD Instinct MI300X",
                               runtime="ROCm/HIP 6.4.43482", driver=str(reading["driver"]), torch="2.7.0+rocm6.4",
                               comm_library="RCCL 2.22.3", memory_gib=191.98, cpu_cores=192,
                               peer_access={p: True for p in PAIRS})


# ----------------------------------------------------------------------------------- the library


def test_library_reading_holds_driver_rocm_links_pcie_firmware_and_clocks():
    smi = FakeAmdSmi()
    r = read(smi)
    assert r["source"] == "amdsmi"
    assert r["sources"] == {"amdsmi": "used", "amd-smi": "not tried", "rocm-smi": "not tried"}
    assert (r["driver"], r["rocm"], r["amdsmi_library"]) == ("6.12.12", "6.4.1", "25.4.2")
    assert r["notes"] == []
    # xGMI topology: every ordered pair, one hop over an xGMI link, peer access on
    assert list(r["links"]) == PAIRS and len(PAIRS) == 56
    assert all(link == {"type": "XGMI", "hops": 1, "weight": 15, "p2p": "ENABLED"} for link in r["links"].values())
    assert [g["index"] for g in r["gpus"]] == list(range(N))
    g3 = r["gpus"][3]
    assert (g3["bdf"], g3["name"], g3["vbios"]) == ("0000:65:00.0", "AMD Instinct MI300X", "022.040.003.043.000001")
    assert g3["pcie"] == {"max_width": 16, "max_speed_gts": 32, "version": 5, "slot_type": "OAM",
                          "width": 16, "speed_gts": 32}
    assert g3["firmware"]["PSP_SOSDRV"] == "00.36.02.59" and g3["firmware"]["PM"] == "00.85.121.00"
    assert len(g3["firmware"]) == 10
    assert g3["clocks"]["gfx"] == {"min_mhz": 500, "max_mhz": 2100, "locked": False, "current_mhz": 132,
                                   "deep_sleep": True}
    assert g3["clocks"]["mem"]["max_mhz"] == 1300
    # link state: 7 links up, each at the same rate; the traffic of each link keyed by the peer's GPU number
    assert g3["xgmi"]["status"] == ["U"] * 7
    assert (g3["xgmi"]["bit_rate"], g3["xgmi"]["max_bandwidth"]) == (32, 512)
    assert sorted(g3["xgmi"]["read_kb"]) == ["0", "1", "2", "4", "5", "6", "7"]
    assert g3["xgmi"]["write_kb"]["7"] == 2000 * 4 + 70
    # the library is always closed, and last
    assert smi.calls[0] == "amdsmi_init" and smi.calls[-1] == "amdsmi_shut_down"
    assert smi.calls.count("amdsmi_shut_down") == 1


def test_fingerprint_of_an_mi300x_node_holds_the_amd_reading(monkeypatch):
    reading = read(FakeAmdSmi())
    monkeypatch.setattr(hardware, "amd_reading", lambda: reading)
    fp = hardware.fingerprint(mi300x_info(reading))
    assert (fp["vendor"], fp["count"], fp["driver"]) == ("AMD", 8, "6.12.12")
    assert fp["comm_library"] == "RCCL 2.22.3"  # torch.cuda.nccl.version() on ROCm is RCCL's
    assert fp["amd"]["rocm"] == "6.4.1" and fp["amd"]["source"] == "amdsmi"
    assert len(fp["amd"]["links"]) == 56
    # the cross-vendor topology layout: each unordered pair once
    assert len(fp["topology"]) == 28 and set(fp["topology"].values()) == {"XGMI"}
    assert fp["topology"]["0-7"] == "XGMI"
    json.dumps(fp)  # plain JSON, as the baseline stores it


class Without:
    """``smi`` without some of its functions: an older release of the library."""

    def __init__(self, smi: Any, *names: str) -> None:
        self._smi, self._names = smi, names

    def __getattr__(self, name: str) -> Any:
        if name in self._names:
            raise AttributeError(name)
        return getattr(self._smi, name)


BDFS = [g["bdf"] for g in json.loads(recorded("amdsmi_mi300x.json"))["gpus"]]


def test_gpus_are_numbered_as_hip_numbers_them():
    """The handles come in another order than HIP's: hip_id gives the numbers of the GPUs and pairs."""
    r = read(FakeAmdSmi(order=[7, 6, 5, 4, 3, 2, 1, 0]))
    assert [g["bdf"] for g in r["gpus"]] == BDFS
    assert list(r["links"]) == PAIRS


def test_without_enumeration_info_the_handle_order_numbers_the_gpus():
    """A library before ROCm 6.4 has no amdsmi_get_gpu_enumeration_info: its handle order is used."""
    r = read(Without(FakeAmdSmi(order=[7, 6, 5, 4, 3, 2, 1, 0]), "amdsmi_get_gpu_enumeration_info",
                     "amdsmi_get_gpu_xgmi_link_status", "amdsmi_get_link_metrics", "amdsmi_get_rocm_version"))
    assert [g["bdf"] for g in r["gpus"]] == BDFS[::-1]
    assert r["gpus"][0]["xgmi"] == {} and r["notes"] == []
    assert r["rocm"] == "6.4.1-120"  # from the version file


def test_link_types_are_decoded_with_the_library_enum_not_fixed_numbers():
    """A release that numbers amdsmi_link_type_t otherwise (PCIE 1, XGMI 2) reads the same."""
    renumbered = {"AMDSMI_LINK_TYPE_INTERNAL": 0, "AMDSMI_LINK_TYPE_PCIE": 1, "AMDSMI_LINK_TYPE_XGMI": 2,
                  "AMDSMI_LINK_TYPE_NOT_APPLICABLE": 3, "AMDSMI_LINK_TYPE_UNKNOWN": 4}
    a, b = read(FakeAmdSmi()), read(FakeAmdSmi(link_types=renumbered))
    assert a["links"] == b["links"] and {link["type"] for link in b["links"].values()} == {"XGMI"}
    assert b["gpus"][0]["xgmi"]["bit_rate"] == 32  # the xGMI links of link metrics are recognised too


# ----------------------------------------------------------------------------------- the command


def test_library_and_command_give_the_same_reading_of_the_node():
    lib = read(FakeAmdSmi())
    cli = read(None, FakeRunner())
    assert cli["source"] == "amd-smi" and cli["notes"] == []
    for r in (lib, cli):
        for key in ("source", "sources", "notes"):
            r.pop(key)
        for g in r["gpus"]:
            g["xgmi"].pop("status", None)  # amd-smi xgmi --json does not carry the link status
    assert cli == lib


def test_without_the_library_the_command_is_used_and_rocm_smi_is_not_run():
    runner = FakeRunner()
    r = read(None, runner)
    assert r["source"] == "amd-smi"
    assert r["sources"]["amdsmi"].startswith("unavailable: not installed")
    assert r["sources"]["amd-smi"] == "used" and r["sources"]["rocm-smi"] == "not tried"
    assert runner.calls[0] == ("amd-smi", "static", "--json")
    assert all(c[0] == "amd-smi" for c in runner.calls)
    assert len(r["links"]) == 56 and r["links"]["3->5"]["p2p"] == "ENABLED"
    assert r["gpus"][5]["firmware"]["TA_XGMI"] == "20.00.00.14"
    assert r["gpus"][5]["clocks"]["gfx"]["max_mhz"] == 2100


def test_without_library_and_command_rocm_smi_text_gives_driver_and_links():
    runner = FakeRunner(present=("rocm-smi",))
    r = read(None, runner)
    assert r["source"] == "rocm-smi"
    assert r["sources"]["amd-smi"].startswith("unavailable: not found")
    assert [c[0] for c in runner.calls] == ["amd-smi", "rocm-smi", "rocm-smi"]  # in order, amd-smi first
    assert r["driver"] == "6.12.12" and r["rocm"] == "6.4.1-120"  # ROCm from the version file
    assert list(r["links"]) == PAIRS and {link["type"] for link in r["links"].values()} == {"XGMI"}
    assert r["gpus"] == []


def test_with_no_source_at_all_detection_still_gets_a_reading():
    r = read(None, FakeRunner(present=()), rocm_file=lambda: None)
    assert r["source"] is None
    assert all(v.startswith("unavailable: ") for v in r["sources"].values())
    assert (r["driver"], r["rocm"], r["links"], r["gpus"]) == (None, None, {}, [])


# ----------------------------------------------------------------------------------- failures


def test_a_library_that_fails_to_start_is_named_and_the_command_is_used():
    smi = FakeAmdSmi(raising={"amdsmi_init": None})
    r = read(smi)
    assert r["source"] == "amd-smi"
    assert r["sources"]["amdsmi"] == ("failed: amdsmi_init: AmdSmiLibraryException: Error code: 2 | "
                                      "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported")
    assert smi.calls == ["amdsmi_init", "amdsmi_shut_down"]  # shut down even after a failed init


def test_a_library_without_gpus_handles_fails_and_still_shuts_down():
    smi = FakeAmdSmi(raising={"amdsmi_get_processor_handles": None})
    r = read(smi)
    assert r["sources"]["amdsmi"].startswith("failed: amdsmi_get_processor_handles: AmdSmiLibraryException")
    assert smi.calls[-1] == "amdsmi_shut_down"
    empty = FakeAmdSmi(order=[])
    assert read(empty)["sources"]["amdsmi"] == "failed: amdsmi_get_processor_handles: no AMD GPU"


def test_one_failing_call_is_a_note_and_the_library_is_still_used():
    smi = FakeAmdSmi(raising={"amdsmi_get_fw_info": 3, "amdsmi_get_clock_info": 5})
    r = read(smi)
    assert r["source"] == "amdsmi"
    assert "firmware" not in r["gpus"][3] and "firmware" in r["gpus"][2]
    assert r["gpus"][5]["clocks"] == {}
    assert r["notes"][0] == ("amdsmi_get_fw_info(GPU 3): AmdSmiLibraryException: Error code: 2 | "
                             "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported")
    assert [n.split(":")[0] for n in r["notes"]] == ["amdsmi_get_fw_info(GPU 3)", "amdsmi_get_clock_info(GPU 5, GFX)",
                                                     "amdsmi_get_clock_info(GPU 5, MEM)"]
    assert smi.calls[-1] == "amdsmi_shut_down"


def test_a_failing_shut_down_is_a_note():
    r = read(FakeAmdSmi(raising={"amdsmi_shut_down": None}))
    assert r["source"] == "amdsmi" and r["notes"][-1].startswith("amdsmi_shut_down: AmdSmiLibraryException")


def test_a_library_bug_is_named_not_raised():
    class Broken(FakeAmdSmi):
        def amdsmi_get_processor_handles(self):
            raise TypeError("'NoneType' object is not iterable")

    r = read(Broken())
    assert r["sources"]["amdsmi"] == ("failed: amdsmi_get_processor_handles: TypeError: "
                                     "'NoneType' object is not iterable")
    assert r["source"] == "amd-smi"


def test_an_installed_library_that_cannot_load_is_failed_not_unavailable(monkeypatch):
    def import_module(name):
        raise OSError("libamd_smi.so: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(amd.importlib, "import_module", import_module)
    r = amd.read_amd(run=FakeRunner(), rocm_file=lambda: None)
    assert r["sources"]["amdsmi"] == ("failed: import amdsmi: OSError: libamd_smi.so: cannot open shared object "
                                      "file: No such file or directory")
    monkeypatch.setattr(amd.importlib, "import_module", lambda name: (_ for _ in ()).throw(ModuleNotFoundError(
        "No module named 'amdsmi'")))
    assert amd.read_amd(run=FakeRunner(), rocm_file=lambda: None)["sources"]["amdsmi"] == (
        "unavailable: not installed (ModuleNotFoundError: No module named 'amdsmi')")


def test_a_failing_amd_smi_is_named_and_rocm_smi_is_used():
    static = ("amd-smi", "static", "--json")
    for answer, named in [((1, "", "ERROR:root:Unable to detect any GPU devices, check amdgpu version\n"),
                           "failed: amd-smi static --json: exit status 1: ERROR:root:Unable to detect any GPU"),
                          ((0, "AMDSMI Tool: 25.4.2 | AMDSMI Library version: 25.4.2\n", ""),
                           "failed: amd-smi static --json: not JSON (Expecting value at line 1): 'AMDSMI Tool")]:
        r = read(None, FakeRunner(answers={static: answer}))
        assert r["sources"]["amd-smi"].startswith(named), r["sources"]["amd-smi"]
        assert r["source"] == "rocm-smi"


def test_a_failing_secondary_amd_smi_command_is_a_note():
    fw = ("amd-smi", "firmware", "--json")
    r = read(None, FakeRunner(answers={fw: (2, "", "amd-smi: error: unrecognized arguments\n")}))
    assert r["source"] == "amd-smi"
    assert r["notes"] == ["amd-smi firmware --json: exit status 2: amd-smi: error: unrecognized arguments"]
    assert "firmware" not in r["gpus"][0] and len(r["links"]) == 56


# ----------------------------------------------------------------------------------- the JSON and the gate


def test_amd_smi_json_in_its_other_wrappings():
    entries = json.loads(recorded("amd-smi_static.json"))
    for text in (json.dumps({"gpu_data": entries, "cpu_data": [{"cpu": 0}]}), json.dumps(entries[0])):
        got = amd_commands.parse_amd_smi_json(text, "amd-smi static --json")
        assert got[0]["bus"]["bdf"] == "0000:05:00.0"
    mixed = json.dumps([{"cpu": 0, "smu": {"fw_version": "85.90.0"}}] + entries)
    assert [e["gpu"] for e in amd_commands.parse_amd_smi_json(mixed, "x")] == list(range(N))
    with pytest.raises(amd_sources.SourceFailed,
                       match=r"amd-smi topology --json: expected a JSON list of objects, got int"):
        amd_commands.parse_amd_smi_json("3", "amd-smi topology --json")


def test_fingerprints_that_differ_only_in_volatile_readings_do_not_differ(monkeypatch):
    def fingerprint(mutate=None) -> dict:
        reading = read(FakeAmdSmi())
        if mutate:
            mutate(reading)
        monkeypatch.setattr(hardware, "amd_reading", lambda: reading)
        return hardware.fingerprint(mi300x_info(reading))

    def busy(r):  # another moment: clocks up, out of deep sleep, more traffic on the links
        for g in r["gpus"]:
            for c in g["clocks"].values():
                c["current_mhz"], c["deep_sleep"] = c["max_mhz"], False
            g["xgmi"]["read_kb"] = {k: v * 3 for k, v in g["xgmi"]["read_kb"].items()}
            g["xgmi"]["write_kb"] = {k: v * 5 for k, v in g["xgmi"]["write_kb"].items()}

    def capped(r):
        r["gpus"][2]["clocks"]["gfx"]["max_mhz"] = 1500

    def link_down(r):
        r["gpus"][4]["xgmi"]["status"][6] = "D"
        r["links"]["4->7"]["p2p"] = "DISABLED"

    ignore = VOLATILE_KEYS | {"host"}
    base = fingerprint()
    assert diff_fingerprints(base, fingerprint(busy), ignore=ignore) == []
    assert [d[0] for d in diff_fingerprints(base, fingerprint(capped), ignore=ignore)] == \
        ["amd.gpus.2.clocks.gfx.max_mhz"]
    assert [d[0] for d in diff_fingerprints(base, fingerprint(link_down), ignore=ignore)] == \
        ["amd.gpus.4.xgmi.status.6", "amd.links.4->7.p2p"]


# ----------------------------------------------------------------------------------- the helpers


def test_rocm_version_file_prefers_rocm_path(tmp_path):
    (tmp_path / ".info").mkdir()
    (tmp_path / ".info" / "version").write_text("6.4.1-120\n", encoding="utf-8")
    assert amd_sources.rocm_version_file({"ROCM_PATH": str(tmp_path)}) == "6.4.1-120"
    assert amd_sources.rocm_version_file({"ROCM_PATH": str(tmp_path / "none")}) in (None,
                                                                                   amd_sources.rocm_version_file({}))


def test_run_command_reports_a_missing_command_and_runs_a_present_one():
    with pytest.raises(FileNotFoundError):
        amd_sources.run_command(["no-such-command-gpucomm-test"])
    assert amd_sources.run_command([sys.executable, "-c", "print('x')"]) == (0, "x\n", "")
    rc, _, err = amd_sources.run_command([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)
    assert rc == 124 and "timed out after 0.2 s" in err


def test_detection_takes_the_driver_from_the_reading(monkeypatch):
    monkeypatch.setattr(hardware, "amd_reading", lambda: {"driver": "6.12.12"})
    assert hardware._amd_driver() == "6.12.12"
