"""launch.py: reading torchrun's, srun's and mpirun's variables, and Slurm's compressed lists."""

from __future__ import annotations

import pytest

from pytest_gpucomm.env.launch import (
    Launch,
    LaunchError,
    detect,
    expand_hostlist,
    expand_tasks_per_node,
    resolve,
)

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
            "MASTER_ADDR": "node01", "MASTER_PORT": "29500"}
SLURM = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4",
         "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "4242",
         "SLURM_STEP_ID": "0"}
OMPI = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "10.0.0.1"}
PMI = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}


def with_(base: dict[str, str], **changes: str | None) -> dict[str, str]:
    env = dict(base)
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


# -- Slurm's compressed lists ------------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("a1,b[2-3]", ["a1", "b2", "b3"]),
    ("localhost", ["localhost"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[098-101]", ["n098", "n099", "n100", "n101"]),
    ("r[1-2]-g[1,3]", ["r1-g1", "r1-g3", "r2-g1", "r2-g3"]),
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ("x[5],y", ["x5", "y"]),
])
def test_hostlist_expands_slurm_compressed_syntax_in_order(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, problem", [
    ("", "empty host list"),
    ("node[01-03", "unbalanced '['"),
    ("node01-03]", "unbalanced ']'"),
    ("node[a-b]", "bad range 'a-b'"),
    ("node[5-3]", "runs backwards"),
    ("n[[1-2]]", "nested brackets"),
    ("a,,b", "empty host name"),
])
def test_hostlist_rejects_malformed_lists_naming_the_problem(text, problem):
    with pytest.raises(ValueError, match=problem.replace("[", r"\[")):
        expand_hostlist(text)


def test_tasks_per_node_expands_repeats():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("8") == [8]
    with pytest.raises(ValueError, match="bad tasks-per-node entry"):
        expand_tasks_per_node("2(3)")


# -- torchrun ----------------------------------------------------------------------------------------

def test_torchrun_variables_give_rank_node_and_rendezvous():
    assert detect(TORCHRUN, host="h1") == Launch("torchrun", 3, 4, 1, 2, 1, 2, "node01", 29500, "h1")


def test_torchrun_node_rank_defaults_to_rank_over_local_world():
    la = detect(with_(TORCHRUN, GROUP_RANK=None, RANK="2"), host="h")
    assert la is not None and (la.node_rank, la.n_nodes) == (1, 2)


@pytest.mark.parametrize("env, message", [
    (with_(TORCHRUN, RANK="three"), "torchrun: RANK='three' is not a whole number"),
    (with_(TORCHRUN, RANK="4"), "torchrun: RANK=4 is not below WORLD_SIZE=4"),
    (with_(TORCHRUN, RANK="-1"), "torchrun: RANK='-1' must be at least 0"),
    (with_(TORCHRUN, WORLD_SIZE="0"), "torchrun: WORLD_SIZE='0' must be at least 1"),
    (with_(TORCHRUN, LOCAL_RANK="2"), "torchrun: LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
    (with_(TORCHRUN, LOCAL_WORLD_SIZE="8"), "torchrun: LOCAL_WORLD_SIZE=8 is above WORLD_SIZE=4"),
    (with_(TORCHRUN, LOCAL_WORLD_SIZE=None), "torchrun: LOCAL_WORLD_SIZE is not set"),
    (with_(TORCHRUN, MASTER_ADDR=None), "torchrun: MASTER_ADDR is not set"),
    (with_(TORCHRUN, MASTER_PORT="http"), "torchrun: MASTER_PORT='http' is not a whole number"),
    (with_(TORCHRUN, MASTER_PORT="70000"), "torchrun: MASTER_PORT='70000' is not a TCP port"),
    (with_(TORCHRUN, GROUP_RANK="5"), "torchrun: node 5 is not below the number of nodes 2"),
])
def test_torchrun_bad_values_name_the_variable_and_its_value(env, message):
    with pytest.raises(LaunchError) as e:
        detect(env, host="h")
    assert message in str(e.value)


# -- srun ----------------------------------------------------------------------------------------------

def test_slurm_variables_with_ntasks_per_node():
    la = detect(with_(SLURM, MASTER_ADDR="10.1.1.1", MASTER_PORT="1234"), host="gpu08")
    assert la == Launch("slurm", 5, 8, 1, 4, 1, 2, "10.1.1.1", 1234, "gpu08")


def test_slurm_rendezvous_is_the_first_host_of_the_node_list_and_a_port_from_the_job_id():
    la = detect(SLURM, host="gpu08")
    assert la is not None and (la.master_addr, la.master_port) == ("gpu07", 20000 + 4242)


def test_slurm_tasks_per_node_from_the_step_list_of_the_node():
    env = with_(SLURM, SLURM_NTASKS_PER_NODE=None, SLURM_STEP_TASKS_PER_NODE="5,3", SLURM_NTASKS="8",
                SLURM_PROCID="6", SLURM_NODEID="1", SLURM_LOCALID="1")
    la = detect(env, host="gpu08")
    assert la is not None and (la.local_world_size, la.node_rank, la.n_nodes) == (3, 1, 2)


def test_slurm_step_task_count_wins_over_the_job_task_count():
    la = detect(with_(SLURM, SLURM_STEP_NUM_TASKS="6", SLURM_NTASKS="8", SLURM_NTASKS_PER_NODE="3",
                      SLURM_PROCID="5", SLURM_LOCALID="2"), host="h")
    assert la is not None and la.world_size == 6


@pytest.mark.parametrize("env, message", [
    (with_(SLURM, SLURM_PROCID="8"), "slurm: SLURM_PROCID=8 is not below SLURM_NTASKS=8"),
    (with_(SLURM, SLURM_LOCALID="x"), "slurm: SLURM_LOCALID='x' is not a whole number"),
    (with_(SLURM, SLURM_STEP_NODELIST="gpu[07-"), "slurm: SLURM_STEP_NODELIST='gpu[07-': unbalanced '['"),
    (with_(SLURM, SLURM_STEP_NODELIST="gpu[07-09]", SLURM_NNODES="2"), "names 3 hosts, but the step has 2 nodes"),
    (with_(SLURM, SLURM_STEP_NODELIST=None), "neither MASTER_ADDR nor SLURM_STEP_NODELIST"),
    (with_(SLURM, SLURM_NTASKS_PER_NODE=None), "none of SLURM_NTASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE"),
    (with_(SLURM, SLURM_NTASKS_PER_NODE=None, SLURM_STEP_TASKS_PER_NODE="4(x2"),
     "slurm: SLURM_STEP_TASKS_PER_NODE='4(x2': bad tasks-per-node entry"),
])
def test_slurm_bad_values_name_the_variable_and_its_value(env, message):
    with pytest.raises(LaunchError) as e:
        detect(env, host="h")
    assert message in str(e.value)


# -- mpirun ----------------------------------------------------------------------------------------------

def test_open_mpi_variables():
    assert detect(OMPI, host="h") == Launch("mpi", 2, 4, 0, 2, 1, 2, "10.0.0.1", 29500, "h")


def test_open_mpi_on_one_node_rendezvous_on_loopback():
    env = with_(OMPI, MASTER_ADDR=None, OMPI_COMM_WORLD_LOCAL_SIZE="4", OMPI_COMM_WORLD_LOCAL_RANK="2")
    la = detect(env, host="h")
    assert la is not None and la.master_addr == "127.0.0.1" and la.loopback and la.n_nodes == 1


def test_open_mpi_across_nodes_needs_master_addr():
    with pytest.raises(LaunchError, match="MASTER_ADDR is not set and the 4 ranks span 2 nodes"):
        detect(with_(OMPI, MASTER_ADDR=None), host="h")


def test_mpich_pmi_variables():
    assert detect(PMI, host="h") == Launch("mpi", 1, 2, 1, 2, 0, 1, "127.0.0.1", 29500, "h")


@pytest.mark.parametrize("env, message", [
    (with_(PMI, MPI_LOCALRANKID=None), "mpi: MPI_LOCALRANKID is not set"),
    (with_(PMI, PMI_RANK="2"), "mpi: PMI_RANK=2 is not below PMI_SIZE=2"),
    (with_(OMPI, OMPI_COMM_WORLD_SIZE="four"), "mpi: OMPI_COMM_WORLD_SIZE='four' is not a whole number"),
])
def test_mpi_bad_values_name_the_variable_and_its_value(env, message):
    with pytest.raises(LaunchError) as e:
        detect(env, host="h")
    assert message in str(e.value)


# -- which launcher ----------------------------------------------------------------------------------

def test_no_launcher_variables_detect_nothing():
    assert detect({"HOME": "/root", "SLURM_JOB_ID": "7"}, host="h") is None


def test_a_launcher_started_inside_another_wins():
    env = {**SLURM, **OMPI}  # mpirun inside a Slurm allocation
    assert detect(env, host="h").launcher == "mpi"  # type: ignore[union-attr]
    env = {**SLURM, **OMPI, **TORCHRUN}  # torchrun started by srun or mpirun
    assert detect(env, host="h").launcher == "torchrun"  # type: ignore[union-attr]


def test_resolve_pool_ignores_the_launcher_and_a_named_launcher_must_be_there():
    assert resolve("pool", TORCHRUN, host="h") is None
    assert resolve("auto", {}, host="h") is None
    assert resolve("slurm", {**TORCHRUN, **SLURM}, host="h").launcher == "slurm"  # type: ignore[union-attr]
    with pytest.raises(LaunchError, match="torchrun: RANK is not set"):
        resolve("torchrun", {}, host="h")


def test_launch_describes_itself():
    la = detect(TORCHRUN, host="h1")
    assert la is not None and not la.is_first and not la.loopback
    assert la.describe() == ("torchrun rank 3 of 4 (local rank 1 of 2, node 1 of 2) on h1, rendezvous node01:29500")
    assert la.to_dict()["world_size"] == 4


# -- Slurm: a task of an srun step, not the batch script of sbatch ---------------------------------------

#: what the batch script of `sbatch -N 2 --ntasks-per-node=4` sees: the allocation, no step of srun's
SBATCH = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
          "SLURM_NTASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]",
          "SLURM_NODELIST": "gpu[07-08]", "SLURM_NNODES": "2", "SLURM_JOB_ID": "4242"}


def test_auto_does_not_take_an_sbatch_script_for_rank_0_of_its_allocation():
    assert detect(SBATCH, host="gpu07") is None
    assert resolve("auto", SBATCH, host="gpu07") is None


def test_slurm_named_explicitly_reads_an_environment_without_a_step():
    la = resolve("slurm", SBATCH, host="gpu07")
    assert la == Launch("slurm", 0, 8, 0, 4, 0, 2, "gpu07", 20000 + 4242, "gpu07")


@pytest.mark.parametrize("step_var", ["SLURM_STEP_ID", "SLURM_STEPID"])
def test_auto_detects_a_task_of_an_srun_step_by_either_step_variable(step_var):
    env = {**with_(SLURM, SLURM_STEP_ID=None), step_var: "3"}
    la = detect(env, host="gpu08")
    assert la is not None and la.launcher == "slurm" and (la.rank, la.world_size) == (5, 8)
    assert detect(with_(SLURM, SLURM_STEP_ID=None), host="gpu08") is None


def test_pmi_variables_set_by_srun_are_read_as_slurm_and_hydras_inside_a_step_as_mpi():
    srun_pmi2 = {**SLURM, "PMI_RANK": "5", "PMI_SIZE": "8"}  # srun --mpi=pmi2 sets PMI_RANK, PMI_SIZE
    assert detect(srun_pmi2, host="gpu08").launcher == "slurm"  # type: ignore[union-attr]
    hydra_in_a_step = {**SLURM, **PMI}  # mpiexec (Hydra) started inside an srun step: its own local ranks
    assert detect(hydra_in_a_step, host="h").launcher == "mpi"  # type: ignore[union-attr]
    assert detect(PMI, host="h").launcher == "mpi"  # type: ignore[union-attr]
