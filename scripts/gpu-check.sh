#!/usr/bin/env bash
# `make gpu-check`: the learner side on a GPU machine, outside containers (docs/gpu.md). For each framework the
# chosen Python has installed, through learner-run on the GPU: the smoke run (halted after its first checkpoint,
# resumed), the job-sized run (3,000 steps, halted in the middle, resumed; halt latency, checkpoint size and write
# time) and the overhead of learner-run and of the NVML sampler as ratios to direct runs, alternated; meanwhile
# it samples utilisation and memory per GPU as the sidecar does (NVML). A few minutes per framework.
#   PYTHON=/path/to/python scripts/gpu-check.sh [--rounds N] [FRAMEWORK...]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
exec "$python" scripts/gpu_check.py --python "$python" "$@"
