"""What this image's Caffe was built with, for `learnerkit image test`: one JSON line.

pycaffe cannot say whether it was built with CUDA, so its GPU mode is asked in a child process:
`caffe.set_device(0)` aborts with "Cannot use GPU in CPU-only Caffe" in a CPU build, and otherwise reaches
the CUDA runtime (which fails without a driver or a GPU). The CUDA version is the runtime's, the GPU count
the runtime's; this Caffe is built without cuDNN.
"""

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys

env = {**os.environ, "GLOG_minloglevel": "0", "GLOG_logtostderr": "1"}
gpu_mode = subprocess.run(
    [sys.executable, "-c", "import caffe; caffe.set_mode_gpu(); caffe.set_device(0); print('gpu mode')"],
    capture_output=True,
    text=True,
    env=env,
    check=False,
)
cpu_only = "CPU-only Caffe" in gpu_mode.stderr
said = (gpu_mode.stdout.strip() or gpu_mode.stderr.strip()).splitlines()
report = {"cuda": None, "cudnn": None, "gpus": 0, "detail": said[-1][:200] if said else ""}
cudart = ctypes.util.find_library("cudart")
if not cpu_only and cudart:
    runtime = ctypes.CDLL(cudart)
    version, count = ctypes.c_int(), ctypes.c_int()
    runtime.cudaRuntimeGetVersion(ctypes.byref(version))  # major*1000 + minor*10
    gpus = count.value if runtime.cudaGetDeviceCount(ctypes.byref(count)) == 0 else 0
    report.update(cuda=f"{version.value // 1000}.{version.value % 1000 // 10}", gpus=gpus)
print(json.dumps(report))
