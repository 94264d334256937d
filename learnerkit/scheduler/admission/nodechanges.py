"""The nodes admission works with while the cluster changes under a running scheduler (pure).

Nodes the backend lists are used as listed, so a node added is used at once. A node no longer listed (cordoned,
not ready, deleted) that still holds admitted or running learners stays, shrunk to exactly what they hold: they
keep their reservation, and no new learner fits there. Once they are gone, the node goes too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from learnerkit.scheduler.admission.admit import JobRecord
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.stage import Stage


def working_nodes(listed: Sequence[Node], known: Mapping[str, Node], records: Iterable[JobRecord]) -> list[Node]:
    """``listed``, plus each node of ``known`` not listed that holds learners of ``records``, shrunk to them."""
    names = {node.name for node in listed}
    held: dict[str, tuple[int, int, int]] = {}
    for record in records:
        if record.stage not in (Stage.DEPLOYED, Stage.RUNNING):
            continue
        for request, name in zip(record.job.learners, record.nodes, strict=True):
            if name in names:
                continue
            millicpus, memory, gpus = held.get(name, (0, 0, 0))
            held[name] = (millicpus + request.millicpus, memory + request.memory_bytes, gpus + request.gpus)
    shrunk = [
        Node(name, millicpus / 1000, memory, gpus, known[name].gpu_type if gpus else None)
        for name, (millicpus, memory, gpus) in sorted(held.items())
    ]
    return [*listed, *shrunk]


def changed(nodes: Iterable[Node], current: Iterable[Node]) -> bool:
    return sorted(nodes, key=lambda n: n.name) != sorted(current, key=lambda n: n.name)
