"""The capacity model: nodes, what is reserved on each, ``fits`` checks and an index of free capacity.

Every node belongs to one *pool*, keyed by its GPU type (``None`` for CPU-only nodes). A learner that asks
for GPUs of a type fits only on nodes of that type, one that asks for GPUs of no type on any GPU node
(pool :data:`ANY_GPU`); a CPU-only learner fits on any node. CPUs are kept in
millicores so that reserving and releasing never accumulates float error.

The index answers "the best node for this learner" without scanning the cluster: per pool, nodes are
bucketed by their free GPU count, and each bucket is a list sorted by (free memory, name). Best fit is
the fewest free GPUs first, then the least free memory, then the node name (so results are
deterministic), skipping nodes short of CPUs.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from learnerkit.scheduler.errors import CapacityError, InvalidRequestError

GIB = 1 << 30

PoolKey = str | None
"""A pool of nodes: their GPU type, or None for CPU-only nodes (and for the work of CPU-only learners)."""
ANY_GPU = "*"
"""The pool of learners that ask for GPUs of any type: every GPU pool at once (no GPU type is spelled so)."""


def millicores(cpus: float) -> int:
    return round(cpus * 1000)


def describe_cpus_memory(millicpus: int, memory_bytes: int) -> str:
    return f"{millicpus / 1000:g} CPUs and {memory_bytes / GIB:.1f} GiB memory"


@dataclass(frozen=True)
class Node:
    name: str
    cpus: float
    """Allocatable CPUs (what the kubelet or engine leaves to workloads)."""
    memory_bytes: int
    gpus: int = 0
    gpu_type: str | None = None
    """None exactly when the node has no GPUs."""
    millicpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cpus < 0 or self.memory_bytes < 0 or self.gpus < 0:
            raise InvalidRequestError(f"node {self.name!r}: negative capacity")
        if (self.gpus > 0) != (self.gpu_type is not None):
            raise InvalidRequestError(f"node {self.name!r}: a GPU type exactly when it has GPUs")
        object.__setattr__(self, "millicpus", millicores(self.cpus))


@dataclass(frozen=True)
class LearnerRequest:
    """What one learner of a job asks for."""

    cpus: float
    memory_bytes: int
    gpus: int = 0
    gpu_type: str | None = None
    """With ``gpus`` > 0: the GPU type, None for any; ignored otherwise (FfDL manifests may name a type with 0 GPUs)."""
    millicpus: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cpus < 0 or self.memory_bytes < 0 or self.gpus < 0:
            raise InvalidRequestError(f"learner request {self}: negative resources")
        if self.gpu_type == ANY_GPU:
            raise InvalidRequestError(f"learner request {self}: ask for any GPU type with gpu_type None")
        object.__setattr__(self, "millicpus", millicores(self.cpus))

    @property
    def pool(self) -> PoolKey:
        """The pool whose GPUs this learner needs: its GPU type, :data:`ANY_GPU`, or None for a CPU-only learner."""
        if not self.gpus:
            return None
        return self.gpu_type or ANY_GPU

    def describe(self) -> str:
        what = describe_cpus_memory(self.millicpus, self.memory_bytes)
        return f"{what} beside {self.gpus} {gpu_kind(self.pool)}" if self.gpus else what


def gpu_kind(pool: PoolKey) -> str:
    """``nvidia-a100 GPUs``, ``GPUs of any type``: the GPUs of a pool, in words."""
    return "GPUs of any type" if pool == ANY_GPU else f"{pool} GPUs"


@dataclass(frozen=True)
class Free:
    """What is left unreserved on a node."""

    millicpus: int
    memory_bytes: int
    gpus: int


@dataclass(slots=True)
class _Free:
    millicpus: int
    memory_bytes: int
    gpus: int


class Cluster:
    """The nodes and their reservations. Reservations never exceed a node's capacity.

    A ``closed`` node (drained) keeps what is reserved on it but is never chosen for a new learner; it still
    counts for whether a job could fit at all, so a job waits for it rather than fail."""

    def __init__(self, nodes: Iterable[Node], closed: Collection[str] = ()) -> None:
        self.closed = frozenset(closed)
        self._nodes: dict[str, Node] = {}
        self._free: dict[str, _Free] = {}
        self._levels: dict[PoolKey, list[list[tuple[int, str]]]] = {}
        self._free_gpus: dict[PoolKey, int] = {}
        self._total_gpus: dict[PoolKey, int] = {}
        self._shapes: dict[PoolKey, set[tuple[int, int, int]]] = {}
        for node in nodes:
            if node.name in self._nodes:
                raise InvalidRequestError(f"node {node.name!r} is listed twice")
            self._nodes[node.name] = node
            self._free[node.name] = _Free(node.millicpus, node.memory_bytes, node.gpus)
            key = node.gpu_type
            self._total_gpus[key] = self._total_gpus.get(key, 0) + node.gpus
            self._free_gpus[key] = self._total_gpus[key]
            self._shapes.setdefault(key, set()).add((node.millicpus, node.memory_bytes, node.gpus))
        for key, shapes in self._shapes.items():
            self._levels[key] = [[] for _ in range(max(gpus for _, _, gpus in shapes) + 1)]
        for node in sorted(self._nodes.values(), key=lambda n: (n.memory_bytes, n.name)):
            self._levels[node.gpu_type][node.gpus].append((node.memory_bytes, node.name))

    @property
    def nodes(self) -> Mapping[str, Node]:
        return self._nodes

    @property
    def pools(self) -> Collection[PoolKey]:
        return self._levels.keys()

    def free(self, name: str) -> Free:
        f = self._free[name]
        return Free(f.millicpus, f.memory_bytes, f.gpus)

    def gpu_pools(self, pool: PoolKey) -> tuple[PoolKey, ...]:
        """The node pools that serve a learner pool: every GPU pool for :data:`ANY_GPU`, else the pool itself."""
        if pool == ANY_GPU:
            return tuple(key for key in self._levels if key is not None)
        return (pool,)

    def free_gpus(self, pool: PoolKey) -> int:
        return sum(self._free_gpus.get(key, 0) for key in self.gpu_pools(pool))

    def total_gpus(self, pool: PoolKey) -> int:
        return sum(self._total_gpus.get(key, 0) for key in self.gpu_pools(pool))

    def most_free_gpus(self, pool: PoolKey) -> tuple[int, str | None]:
        """The most GPUs free on one node of the pool, and that node (the first by name among equals)."""
        found: list[tuple[int, str]] = []
        for key in self.gpu_pools(pool):
            levels = self._levels.get(key, [])
            level = next((n for n in range(len(levels) - 1, 0, -1) if self._open(levels[n])), 0)
            if level:
                found.append((level, min(self._open(levels[level]))))
        if not found:
            return 0, None
        most = max(level for level, _ in found)
        return most, min(name for level, name in found if level == most)

    def fits(self, name: str, request: LearnerRequest) -> bool:
        node = self._nodes[name]
        if request.gpus and node.gpu_type not in self.gpu_pools(request.pool):
            return False
        f = self._free[name]
        return request.gpus <= f.gpus and request.memory_bytes <= f.memory_bytes and request.millicpus <= f.millicpus

    def fits_empty(self, request: LearnerRequest) -> bool:
        """Whether some node could hold the learner with nothing else reserved on it."""
        pools = self.gpu_pools(request.pool) if request.gpus else self._shapes.keys()
        return any(
            request.millicpus <= cpus and request.memory_bytes <= memory and request.gpus <= gpus
            for pool in pools
            for cpus, memory, gpus in self._shapes.get(pool, ())
        )

    def reserve(self, name: str, request: LearnerRequest) -> None:
        if not self.fits(name, request):
            raise CapacityError(f"node {name!r} has no room for a learner of {request.describe()}")
        self._shift(name, -request.millicpus, -request.memory_bytes, -request.gpus)

    def unreserve(self, name: str, request: LearnerRequest) -> None:
        node, f = self._nodes[name], self._free[name]
        if (
            f.millicpus + request.millicpus > node.millicpus
            or f.memory_bytes + request.memory_bytes > node.memory_bytes
            or f.gpus + request.gpus > node.gpus
        ):
            raise CapacityError(f"node {name!r}: releasing {request.describe()} frees more than was reserved")
        self._shift(name, request.millicpus, request.memory_bytes, request.gpus)

    def best_node(self, request: LearnerRequest, *, open_pools: Iterable[PoolKey] | None = None) -> str | None:
        """The best-fit node for the learner now, or None.

        A GPU learner looks only in its GPU type's pool; a CPU-only learner looks in ``open_pools`` (default:
        every pool), where the fewest-free-GPUs-first order keeps it off idle GPUs when it can, and a learner
        of any GPU type in the GPU pools among ``open_pools``.
        """
        pools: Iterable[PoolKey] = self.gpu_pools(request.pool)
        if not request.gpus:
            pools = self._levels.keys() if open_pools is None else open_pools
        elif request.pool == ANY_GPU and open_pools is not None:
            pools = [pool for pool in pools if pool in open_pools]
        need_memory, need_cpus = request.memory_bytes, request.millicpus
        best: tuple[int, int, str] | None = None
        for pool in pools:
            levels = self._levels.get(pool)
            if levels is None:
                continue
            for level in range(request.gpus, len(levels)):
                if best is not None and level > best[0]:
                    break
                entries = self._levels[pool][level]
                for index in range(bisect_left(entries, (need_memory, "")), len(entries)):
                    memory, name = entries[index]
                    if best is not None and (level, memory, name) >= best:
                        break
                    if self._free[name].millicpus >= need_cpus and name not in self.closed:
                        best = (level, memory, name)
                        break
                if best is not None and best[0] == level:
                    break
        return None if best is None else best[2]

    def _open(self, entries: list[tuple[int, str]]) -> list[str]:
        return [name for _, name in entries if name not in self.closed]

    def _shift(self, name: str, millicpus: int, memory_bytes: int, gpus: int) -> None:
        f = self._free[name]
        levels = self._levels[self._nodes[name].gpu_type]
        old = levels[f.gpus]
        del old[bisect_left(old, (f.memory_bytes, name))]
        f.millicpus += millicpus
        f.memory_bytes += memory_bytes
        f.gpus += gpus
        self._free_gpus[self._nodes[name].gpu_type] += gpus
        insort(levels[f.gpus], (f.memory_bytes, name))
