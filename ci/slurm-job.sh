#!/usr/bin/env bash
#SBATCH --job-name=gpucomm-fleet
#SBATCH --nodes=16
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --time=00:50:00
# pytest-gpucomm on a fleet with Slurm, in one job: one srun step runs the suites on every node at once (one task
# per node, each measuring its own GPUs and writing its own report to a shared folder), then the batch script
# judges the reports together (gpucomm fleet; docs/fleet.md).
#
#   SHARED=/shared/gpucomm/after-upgrade sbatch --nodes=64 ci/slurm-job.sh
#
# Environment: SHARED (required), PYTHON (default: python), GPUCOMM_BASELINE (a baseline NAME or file; default:
# none, every node against its peers only).  Exit status: the fleet's (0 healthy, 1 nodes to drain or a slower
# fleet, 2 a usage error); $SHARED/drain.json lists the nodes to drain with their reasons.
#
# Each node is judged as itself: the nodes do not measure together here (a job across nodes, whose collectives
# span them, is a launched job: docs/launched-jobs.md).
set -euo pipefail
: "${SHARED:?set SHARED to a folder every node can write}"
PYTHON="${PYTHON:-python}"
export PYTHON SHARED
mkdir -p "$SHARED"
# a node whose run fails still writes its report where it measured; one that wrote none is named by the judge
srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c \
  '"$PYTHON" -m pytest --pyargs pytest_gpucomm.suites --gpucomm-device=gpu --gpucomm-launch=pool \
     --gpucomm-json="$SHARED/$(hostname -s).json"' || true
"$PYTHON" -m pytest_gpucomm fleet "$SHARED" ${GPUCOMM_BASELINE:+--baseline "$GPUCOMM_BASELINE"} \
  --drain "$SHARED/drain.json" --junitxml "$SHARED/fleet-junit.xml" --json "$SHARED/fleet.json" --force
