"""What this image's PyTorch was built with, for `learnerkit image test`: one JSON line.

`cuda` is torch.version.cuda (None for a CPU build), `cudnn` the cuDNN torch loads, `gpus` the GPUs it sees.
"""

import json

import torch


def dotted(version):
    """cuDNN's integer version: major*10000+minor*100+patch from cuDNN 9, major*1000+minor*100+patch before."""
    if version is None:
        return None
    major, rest = divmod(version, 10000) if version >= 90000 else divmod(version, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


cuda = torch.version.cuda
print(
    json.dumps(
        {
            "cuda": cuda,
            "cudnn": dotted(torch.backends.cudnn.version()) if cuda else None,
            "gpus": torch.cuda.device_count() if cuda else 0,
            "detail": f"torch {torch.__version__}",
        }
    )
)
