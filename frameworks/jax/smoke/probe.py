"""What this image's JAX was built with, for `learnerkit image test`: one JSON line.

JAX's CUDA support is a plug-in (jax_cuda12_plugin): `cuda` and `cudnn` are the versions it was built
against (its _versions module, which needs no driver), None when no CUDA plug-in is installed; `gpus` counts
the GPU devices JAX has.
"""

import importlib
import json


def cudnn_dotted(version):
    """cuDNN's integer version: major*10000+minor*100+patch from cuDNN 9, major*1000+minor*100+patch before."""
    major, rest = divmod(version, 10000) if version >= 90000 else divmod(version, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def plugin_versions():
    for name in ("jax_cuda13_plugin", "jax_cuda12_plugin"):
        try:
            versions = importlib.import_module(f"{name}._versions")
        except ImportError:
            continue
        cuda = versions.cuda_runtime_build_version()  # major*1000 + minor*10
        return name, f"{cuda // 1000}.{cuda % 1000 // 10}", cudnn_dotted(versions.cudnn_build_version())
    return None, None, None


import jax  # noqa: E402

plugin, cuda, cudnn = plugin_versions()
try:
    gpus = len(jax.devices("gpu"))
except RuntimeError:  # no GPU backend: no driver, or no GPU
    gpus = 0
print(json.dumps({"cuda": cuda, "cudnn": cudnn, "gpus": gpus, "detail": f"jax {jax.__version__}, {plugin}"}))
