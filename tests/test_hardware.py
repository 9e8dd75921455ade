"""Parsers of the vendor tools' topology output, on text as the tools print it."""

from pytest_gpucomm.env.hardware import parse_nvidia_topo, parse_rocm_topo

# nvidia-smi topo -m on 2 x H200 (the measurement machine), tabs as nvidia-smi prints them
NVIDIA_2GPU = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)

# a 4-GPU node with two NICs: NIC columns after the GPU columns, NIC rows at the end, colour codes on the header
NVIDIA_4GPU_NICS = (
    "\x1b[4m\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV12\tSYS\tPIX\tPIX\tSYS\t0-23\t0\t\tN/A\n"
    "GPU1\tNV12\t X \tSYS\tSYS\tSYS\tSYS\t0-23\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV4\tSYS\tPIX\t24-47\t1\t\tN/A\n"
    "GPU3\tPIX\tSYS\tNV4\t X \tSYS\tPIX\t24-47\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\tSYS\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tSYS\tPIX\tPIX\tSYS\t X \n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
)

# rocm-smi --showtopotype on 8 x MI300X, as rocm_smi.py prints its matrix
ROCM_8GPU = (
    "\n\n============================ ROCm System Management Interface ============================\n"
    "=============================== Link Type between two GPUs ===============================\n"
    "      " + "".join(f"GPU{j:<9d}" for j in range(8)) + "\n"
    + "".join(f"GPU{i:<3d}" + "".join(f"{'0' if i == j else 'XGMI':<12s}" for j in range(8)) + "\n" for i in range(8))
    + "================================== End of ROCm SMI Log ===================================\n"
)


def test_nvidia_topo_gives_the_link_of_each_gpu_pair():
    assert parse_nvidia_topo(NVIDIA_2GPU) == {"0-1": "NV18"}


def test_nvidia_topo_skips_nic_columns_nic_rows_and_colour_codes():
    assert parse_nvidia_topo(NVIDIA_4GPU_NICS) == {
        "0-1": "NV12", "0-2": "SYS", "0-3": "PIX", "1-2": "SYS", "1-3": "SYS", "2-3": "NV4",
    }


def test_rocm_topo_reads_the_matrix_and_not_its_header():
    links = parse_rocm_topo(ROCM_8GPU)
    assert len(links) == 28  # every unordered pair of 8 GPUs once
    assert set(links.values()) == {"XGMI"}
    assert links["0-7"] == "XGMI"


def test_rocm_topo_keeps_mixed_link_types():
    text = ("       GPU0        GPU1        GPU2\nGPU0   0           XGMI        PCIE\n"
            "GPU1   XGMI        0           PCIE\nGPU2   PCIE        PCIE        0\n")
    assert parse_rocm_topo(text) == {"0-1": "XGMI", "0-2": "PCIE", "1-2": "PCIE"}


def test_topology_parsers_give_nothing_for_tool_errors_or_empty_output():
    for text in ("", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
                 "ERROR: No AMD GPUs found\n"):
        assert parse_nvidia_topo(text) == {}
        assert parse_rocm_topo(text) == {}
