"""What this image's MXNet was built with, for `learnerkit image test`: one JSON line.

With a driver: MXNet's own runtime features (CUDA, CUDNN) and num_gpus(). Without one, a CUDA build of
libmxnet.so cannot even be imported, since it links the driver (libcuda.so.1): that failure is the evidence
of a CUDA build. The versions are those of the CUDA runtime and cuDNN wheels libmxnet.so links (the CUDA 11
runtime and cuDNN 8 cannot report theirs without a driver).
"""

import json
from importlib import metadata


def loaded_versions():
    """The CUDA runtime (`major.minor`) and cuDNN (`major.minor.patch`) libmxnet.so links."""
    cuda = metadata.version("nvidia-cuda-runtime-cu11").split(".")
    cudnn = metadata.version("nvidia-cudnn-cu11").split(".")
    return ".".join(cuda[:2]), ".".join(cudnn[:3])


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
