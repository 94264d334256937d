"""FfDL's framework names and version strings, mapped onto the frameworks and versions built here.

FfDL named images by its own deployment's learner config (`tensorflow 1.5.0-py3`, `caffe gpu`, `pytorch latest`,
`caffe2 0.8.1`, `horovod 0.13.10-tf1.9.0-torch0.4.0-py3.5`, `pytorchmpi 0925mpi`). None of those images is built
here, so a manifest is mapped as docs/migrating-from-ffdl.md describes:

- `caffe2` runs on the PyTorch image (Caffe2 was merged into PyTorch); `pytorchmpi` on PyTorch; `tensorflow-gpu`
  and `caffe-gpu` on TensorFlow and Caffe. `horovod` runs PyTorch or TensorFlow: the command decides
  (`pytorch_mnist.py` vs `tensorflow_mnist.py`, `import torch`...), else the version if it names one of them.
- `horovod` and `pytorchmpi` jobs are distributed jobs of the framework they run on (`learnerkit.distributed`
  `ddp` or `tf` unless the manifest sets it).
- A version made only of the words `latest`, `cpu`, `gpu` and `py3` (`latest`, `gpu`, `latest-gpu-py3`) means the
  newest version built; the variant (CPU or CUDA) follows `gpus`, as for every manifest. The versions of a
  framework that is not the one it runs on (caffe2's, horovod's, pytorchmpi's) mean the newest version too.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

RUNS_ON: dict[str, str] = {
    "caffe2": "pytorch",
    "pytorchmpi": "pytorch",
    "tensorflow-gpu": "tensorflow",
    "caffe-gpu": "caffe",
}
"""FfDL framework name -> the framework whose image runs it."""
CHOSEN = "horovod"
"""Runs PyTorch or TensorFlow, whichever the manifest uses (`horovod_target`)."""
FOREIGN_VERSIONS = frozenset({"caffe2", "pytorchmpi", CHOSEN})
DISTRIBUTED_NAMES = frozenset({"pytorchmpi", CHOSEN})
"""Names of distributed jobs: unless `learnerkit.distributed` says otherwise, their learners get the rendezvous
variables of the framework they run on (PyTorch's MASTER_ADDR... or TensorFlow's TF_CONFIG)."""
"""Names whose versions number another project's releases: any of them means the newest version here."""
VERSION_WORDS = frozenset({"latest", "cpu", "gpu", "py3"})

_TORCH = re.compile(r"torch", re.IGNORECASE)
_TENSORFLOW = re.compile(r"tensorflow|keras|\btf[0-9._-]|\btf_", re.IGNORECASE)


def horovod_target(version: str, command: str) -> str | None:
    """`pytorch` or `tensorflow` for a horovod job: from the command, else the version; None if both or neither."""
    for text in (command, version):
        torch, tensorflow = bool(_TORCH.search(text)), bool(_TENSORFLOW.search(text))
        if torch != tensorflow:
            return "pytorch" if torch else "tensorflow"
    return None


def runs_as(name: str, version: str, command: str) -> str | None:
    """The framework whose image runs this FfDL framework name; None for a horovod job that names neither."""
    if name == CHOSEN:
        return horovod_target(version, command)
    return RUNS_ON.get(name, name)


def means_newest(name: str, version: str) -> bool:
    """Whether the version asks for the newest build: only version words, or another project's numbering."""
    return name in FOREIGN_VERSIONS or set(version.lower().split("-")) <= VERSION_WORDS


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", version))


def newest(versions: Iterable[str]) -> str:
    """The highest plain version (`2.13` over `2.9`), ignoring variant-qualified names and tags."""
    plain = [v for v in versions if re.fullmatch(r"[0-9]+(\.[0-9]+)*", v)]
    return max(plain, key=version_key)


def known_names(catalog: Collection[str]) -> list[str]:
    """Every framework name a manifest may give: the catalog's, and FfDL's that map onto one of them."""
    mapped = [name for name, target in RUNS_ON.items() if target in catalog]
    if {"pytorch", "tensorflow"} & set(catalog):
        mapped.append(CHOSEN)
    return sorted({*catalog, *mapped})
