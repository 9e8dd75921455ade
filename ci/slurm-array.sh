#!/usr/bin/env bash
#SBATCH --job-name=gpucomm-node
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --time=00:40:00
# pytest-gpucomm on a fleet with Slurm: a job array of one node each, every node writing its report to a shared
# folder, then a dependent job judging them together (gpucomm fleet; docs/fleet.md).  No scheduler of ours.
#
#   SHARED=/shared/gpucomm/after-upgrade ci/slurm-array.sh submit 64      # on the login node: 64 nodes
#
# Environment: SHARED (required: a folder every node can write, one per rollout), PYTHON (default: python, the
# interpreter that has pytest-gpucomm), GPUCOMM_BASELINE (a baseline NAME or file for each node and the fleet
# to be judged against; default: none, every node against its peers only), SBATCH_ARGS (more sbatch options:
# partition, account, --nodelist).  The judge's exit status is the fleet's: 0 healthy, 1 nodes to drain or a
# slower fleet, 2 a usage error; $SHARED/drain.json lists the nodes to drain with their reasons.
set -euo pipefail
: "${SHARED:?set SHARED to a folder every node can write}"
PYTHON="${PYTHON:-python}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script="$here/$(basename "${BASH_SOURCE[0]}")"

case "${1:-}" in
  submit)
    nodes="${2:?usage: ci/slurm-array.sh submit NODES}"
    mkdir -p "$SHARED"
    # shellcheck disable=SC2086  # SBATCH_ARGS is a list of options
    array=$(sbatch --parsable ${SBATCH_ARGS:-} --array="0-$((nodes - 1))" --output="$SHARED/%x-%a.out" \
      --export=ALL "$script" node)
    # afterany: the judge runs when every node ended, also where one failed or wrote no report (named there)
    # shellcheck disable=SC2086
    sbatch ${SBATCH_ARGS:-} --job-name=gpucomm-fleet --dependency="afterany:$array" --nodes=1 \
      --output="$SHARED/fleet.out" --export=ALL "$script" judge
    ;;
  node)  # one node's suites on its own GPUs: a pool of local ranks (srun's variables are not a launched job)
    "$PYTHON" -m pytest --pyargs pytest_gpucomm.suites --gpucomm-device=gpu --gpucomm-launch=pool \
      --gpucomm-json="$SHARED/$(hostname -s).json"
    ;;
  judge)
    "$PYTHON" -m pytest_gpucomm fleet "$SHARED" ${GPUCOMM_BASELINE:+--baseline "$GPUCOMM_BASELINE"} \
      --drain "$SHARED/drain.json" --junitxml "$SHARED/fleet-junit.xml" --json "$SHARED/fleet.json" --force
    ;;
  *)
    echo "usage: SHARED=DIR ci/slurm-array.sh submit NODES   (node and judge: what the jobs run)" >&2
    exit 2
    ;;
esac
