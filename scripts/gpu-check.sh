#!/usr/bin/env bash
# `make gpu-check`: the learner side on a GPU machine, outside containers (docs/gpu.md). Runs each framework's
# smoke script that the chosen Python has installed through learner-run, halts it after its first checkpoint,
# resumes it on the GPU, and samples utilisation and memory per GPU as the sidecar does (NVML).
#   PYTHON=/path/to/python scripts/gpu-check.sh [FRAMEWORK...]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
exec "$python" scripts/gpu_check.py --python "$python" "$@"
