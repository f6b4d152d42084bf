#!/usr/bin/env bash
# The accelerator check: on one GPU host with this repository and Python 3.11+,
#   bench/accelerator.sh OUTDIR             # venv, GPU install, parity, benchmarks
#   bench/accelerator.sh OUTDIR --dry-run   # the same path on the CPU, small shapes
# writes OUTDIR/{environment,parity,score_vs_torch,joint_step,summary}.json and
# the logs in under 8 minutes: the install has time limits, and the stages
# share what it leaves (bench/accelerator.py --seconds).
#
# The venv ($BEST_JAX_VENV, default /tmp/best_jax_accelerator_venv) sees the packages of the Python
# that creates it ($PYTHON, default python3), so a host whose python3 already
# has JAX with CUDA and PyTorch needs no download. When .whl/ exists at the
# repository root, the host is taken to be offline: only the packages the check
# needs are installed, from those wheels alone (launch/README.md).
set -uo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: $0 OUTDIR [--dry-run]" >&2
  exit 2
fi
OUT=$1
DRY=0
[[ "${2:-}" == "--dry-run" ]] && DRY=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
START=$(date +%s)
log() { echo "[accelerator.sh $(( $(date +%s) - START )) s] $*"; }

PY=${PYTHON:-python3}
VENV=${BEST_JAX_VENV:-${TMPDIR:-/tmp}/best_jax_accelerator_venv}
# A venv with a working pip that also sees the creating interpreter's
# packages (also when $PY is itself a venv's python, which
# --system-site-packages would skip). Without ensurepip, the parent's pip.
make_venv() {
  "$PY" -m venv "$VENV" > /dev/null 2>&1 \
    || "$PY" -m venv --without-pip "$VENV" || return 1
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # Every folder the parent imports installed packages from (Debian's system
  # Python keeps pip and apt's packages outside its purelib).
  "$PY" - > "$site/_best_jax_parent.pth" <<'EOF'
import site, sys, sysconfig
folders = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
print("\n".join(dict.fromkeys(f for f in folders if f in sys.path)))
EOF
  "$VENV/bin/python" -m pip --version > /dev/null 2>&1
}
if ! "$VENV/bin/python" -m pip --version > /dev/null 2>&1; then
  if [[ -e "$VENV" ]]; then
    log "$VENV exists but has no working pip: remove it, or set BEST_JAX_VENV"
    exit 2
  fi
  log "creating $VENV from $PY"
  if ! make_venv; then
    log "cannot create a venv with a working pip from $PY"
    rm -rf "$VENV"  # Made by this run.
    exit 2
  fi
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check
     --retries 1 --timeout 15)
if [[ -d "$ROOT/.whl" ]]; then
  # An offline host: nothing is fetched, so no time is lost waiting on an index.
  log "installing what the check needs from $ROOT/.whl only (pip log: $OUT/pip.log)"
  timeout 60 "${PIP[@]}" --no-index --find-links "$ROOT/.whl" \
    -r "$ROOT/bench/requirements-accelerator.txt" > "$OUT/pip.log" 2>&1 \
    || { log "that failed (see $OUT/pip.log); installing the wheels as they are"
         timeout 60 "${PIP[@]}" --no-index --no-deps "$ROOT"/.whl/*.whl \
           >> "$OUT/pip.log" 2>&1; }
else
  # bench/requirements-accelerator.txt adds PyTorch, the reference.
  REQUIREMENTS=(-r "$ROOT/requirements.txt" -r "$ROOT/requirements-dev.txt"
                -r "$ROOT/bench/requirements-accelerator.txt")
  [[ $DRY == 0 ]] && REQUIREMENTS+=(-r "$ROOT/requirements-gpu.txt")
  log "installing requirements (pip log: $OUT/pip.log)"
  if ! timeout 180 "${PIP[@]}" "${REQUIREMENTS[@]}" > "$OUT/pip.log" 2>&1; then
    log "the full install failed; installing what the check needs"
    timeout 60 "${PIP[@]}" -r "$ROOT/bench/requirements-accelerator.txt" \
      >> "$OUT/pip.log" 2>&1 || log "that failed too; see $OUT/pip.log"
  fi
fi
missing=$("$VENV/bin/python" - <<'EOF'
import importlib.util
need = ["jax", "flax", "optax", "ml_collections", "rax", "safetensors",
        "transformers", "torch", "pytest", "numpy"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
EOF
)
if [[ -n "$missing" ]]; then
  log "missing Python packages: $missing (on an offline host put their wheels in $ROOT/.whl)"
  echo "{\"error\": \"missing packages: $missing\"}" > "$OUT/summary.json"
  exit 2
fi

export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# Several processes share the GPU (the check itself, its stages, and PyTorch
# beside JAX in the benchmark): JAX allocates as it goes, no more than half of
# the memory per process. With JAX's default preallocation the check's own
# process held half of an H200 and the stages beside it ran out of memory.
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.5}
# The whole check within 8 minutes: the stages get what the install left.
ARGS=(--out "$OUT" --seconds $(( 480 - ($(date +%s) - START) )))
if [[ $DRY == 1 ]]; then
  export JAX_PLATFORMS=cpu
  ARGS+=(--dry-run)
elif [[ -n "${JAX_PLATFORMS:-}" && ",$JAX_PLATFORMS," != *,cpu,* ]]; then
  # The CPU client counts the programs' FLOPs (score_vs_torch.program_flops).
  export JAX_PLATFORMS="$JAX_PLATFORMS,cpu"
fi
log "running the checks"
"$VENV/bin/python" "$ROOT/bench/accelerator.py" "${ARGS[@]}"
status=$?
log "done (exit $status); figures in $OUT/summary.json"
exit $status
