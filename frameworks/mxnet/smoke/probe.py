"""What this image's MXNet was built with, for `learnerkit image test`: one JSON line.

With a driver: MXNet's own runtime features (CUDA, CUDNN) and num_gpus(). Without one, a CUDA build of
libmxnet.so cannot even be imported, since it links the driver (libcuda.so.1): that failure is the evidence
of a CUDA build, and the versions come from the CUDA runtime and cuDNN it links, through ctypes.
"""

import ctypes
import json


def version_of(library, function):
    value = ctypes.c_int()
    status = getattr(ctypes.CDLL(library), function)(ctypes.byref(value))
    return value.value if status == 0 else None


def loaded_versions():
    """The CUDA runtime and cuDNN libmxnet.so links, as `major.minor` and `major.minor.patch`."""
    cuda = version_of("libcudart.so.11.0", "cudaRuntimeGetVersion")  # major*1000 + minor*10
    cudnn = ctypes.CDLL("libcudnn.so.8").cudnnGetVersion()  # major*1000 + minor*100 + patch
    return f"{cuda // 1000}.{cuda % 1000 // 10}", f"{cudnn // 1000}.{cudnn % 1000 // 100}.{cudnn % 100}"


try:
    import mxnet as mx
except OSError as e:
    if "libcuda.so.1" not in str(e):
        raise
    cuda, cudnn = loaded_versions()
    report = {"cuda": cuda, "cudnn": cudnn, "gpus": 0, "detail": "no driver: libmxnet.so links libcuda.so.1"}
else:
    features = mx.runtime.Features()
    built = features.is_enabled("CUDA")
    cuda, cudnn = loaded_versions() if built else (None, None)
    report = {
        "cuda": cuda,
        "cudnn": cudnn if built and features.is_enabled("CUDNN") else None,
        "gpus": mx.context.num_gpus() if built else 0,
        "detail": f"mxnet {mx.__version__}",
    }
print(json.dumps(report))
