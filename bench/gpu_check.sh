#!/usr/bin/env bash
# Real-GPU check for the node agent (agents/): NVML inventory + health as the
# agent sees them, then one worker started by the process runtime with
# CUDA_VISIBLE_DEVICES set to a GPU UUID, checked through the CUDA driver API.
# Prints a JSON report; exits non-zero if anything failed.
#
# Needs only python3 + pip on the GPU machine. nvidia-ml-py is used if already
# importable, else installed into a private directory from wheels in .whl/
# (machines without network) or from PyPI.
#
#   bench/gpu_check.sh                 # uses python3
#   PYTHON=/path/to/python bench/gpu_check.sh
set -euo pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${BERTH_GPU_CHECK_SITE:-${TMPDIR:-/tmp}/berth-gpu-check-site}

if ! "$PY" -c 'import pynvml' 2>/dev/null; then
  echo "gpu check: installing nvidia-ml-py into $SITE" >&2
  shopt -s nullglob
  wheels=(.whl/nvidia_ml_py-*.whl)
  if ((${#wheels[@]})); then
    "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[0]}"
  elif ! "$PY" -m pip install -q --target "$SITE" nvidia-ml-py; then
    echo "gpu check: cannot install nvidia-ml-py (no wheel in .whl/ and PyPI unreachable)" >&2
    exit 2
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m agents.selfcheck "$@"
