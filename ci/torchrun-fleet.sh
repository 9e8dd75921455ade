#!/usr/bin/env bash
# pytest-gpucomm on a fleet with torchrun and no scheduler: on every node, one torchrun job of that node's GPUs
# (a job of one node: its ranks started by torchrun) writes the node's report to a shared folder; then one
# command judges the reports together (gpucomm fleet; docs/fleet.md).
#
#   SHARED=/shared/gpucomm/after-upgrade ci/torchrun-fleet.sh node     # on every node (pdsh, ssh, ansible ...)
#   SHARED=/shared/gpucomm/after-upgrade ci/torchrun-fleet.sh judge    # once, when every node is done
#
# Environment: SHARED (required), PYTHON (default: python), GPUS (ranks on this node; default: every GPU that
# nvidia-smi lists), GPUCOMM_BASELINE (a baseline NAME or file; default: none, the nodes against their peers).
# The judge's exit status is the fleet's: 0 healthy, 1 nodes to drain or a slower fleet, 2 a usage error.
set -euo pipefail
: "${SHARED:?set SHARED to a folder every node can write}"
PYTHON="${PYTHON:-python}"

case "${1:-}" in
  node)
    gpus="${GPUS:-$(nvidia-smi --list-gpus | wc -l)}"
    mkdir -p "$SHARED"
    "$PYTHON" -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node="$gpus" \
      -m pytest --pyargs pytest_gpucomm.suites --gpucomm-device=gpu --gpucomm-launch=torchrun \
      --gpucomm-json="$SHARED/$(hostname -s).json"
    ;;
  judge)
    "$PYTHON" -m pytest_gpucomm fleet "$SHARED" ${GPUCOMM_BASELINE:+--baseline "$GPUCOMM_BASELINE"} \
      --drain "$SHARED/drain.json" --junitxml "$SHARED/fleet-junit.xml" --json "$SHARED/fleet.json" --force
    ;;
  *)
    echo "usage: SHARED=DIR ci/torchrun-fleet.sh node|judge" >&2
    exit 2
    ;;
esac
