"""The capacity model and its index: fits, reservations, best fit, gang placement."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from learnerkit.scheduler.admission.capacity import ANY_GPU, GIB, Cluster, Free, LearnerRequest, Node
from learnerkit.scheduler.admission.placement import NoRoom, Placed, place_gang
from learnerkit.scheduler.errors import CapacityError, InvalidRequestError

from ..helpers import A100, V100, cpu_node, gpu_node, learner


def test_gpu_learner_fits_only_on_nodes_of_its_gpu_type() -> None:
    cluster = Cluster([gpu_node("a"), gpu_node("v", gpu_type=V100), cpu_node("c")])
    request = learner(2, A100)
    assert [name for name in cluster.nodes if cluster.fits(name, request)] == ["a"]


def test_cpu_only_learner_fits_on_any_node() -> None:
    cluster = Cluster([gpu_node("a"), cpu_node("c")])
    assert all(cluster.fits(name, learner(0)) for name in cluster.nodes)


def test_reserve_and_unreserve_are_exact_with_fractional_cpus() -> None:
    cluster = Cluster([cpu_node("c", cpus=1)])
    tenth = LearnerRequest(0.1, GIB)
    for _ in range(10):
        cluster.reserve("c", tenth)
    assert cluster.free("c") == Free(0, 118 * GIB, 0)
    assert not cluster.fits("c", tenth)
    for _ in range(10):
        cluster.unreserve("c", tenth)
    assert cluster.free("c") == Free(1000, 128 * GIB, 0)


def test_reserving_beyond_capacity_or_releasing_more_than_reserved_raises() -> None:
    cluster = Cluster([gpu_node("a", gpus=2)])
    with pytest.raises(CapacityError, match="node 'a' has no room"):
        cluster.reserve("a", learner(3))
    with pytest.raises(CapacityError, match="frees more than was reserved"):
        cluster.unreserve("a", learner(1))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Node("n", 8, GIB, 2, None),
        lambda: Node("n", 8, GIB, 0, A100),
        lambda: Node("n", -1, GIB),
        lambda: LearnerRequest(1, GIB, 1, ANY_GPU),
        lambda: LearnerRequest(1, -GIB),
        lambda: Cluster([cpu_node("c"), cpu_node("c")]),
    ],
)
def test_invalid_nodes_and_requests_are_refused(make: object) -> None:
    with pytest.raises(InvalidRequestError):
        make()  # type: ignore[operator]


def test_a_gpu_type_with_no_gpus_is_ignored() -> None:
    assert LearnerRequest(1, GIB, 0, A100).pool is None


def test_gpus_of_no_type_fit_on_any_gpu_node_and_never_on_a_cpu_node() -> None:
    cluster = Cluster([cpu_node("c"), gpu_node("a", gpus=2), gpu_node("v", gpus=4, gpu_type=V100)])
    anyone = LearnerRequest(1, GIB, 3, None)
    assert anyone.pool == ANY_GPU
    assert [name for name in cluster.nodes if cluster.fits(name, anyone)] == ["v"]
    assert cluster.best_node(anyone) == "v"
    assert cluster.best_node(LearnerRequest(1, GIB, 2, None)) == "a"
    assert cluster.best_node(LearnerRequest(1, GIB, 2, None), open_pools=[V100]) == "v"
    assert (cluster.total_gpus(ANY_GPU), cluster.free_gpus(ANY_GPU)) == (6, 6)
    assert cluster.most_free_gpus(ANY_GPU) == (4, "v")
    assert cluster.fits_empty(LearnerRequest(1, GIB, 4, None))
    assert not cluster.fits_empty(LearnerRequest(1, GIB, 5, None))


def test_best_fit_prefers_fewest_free_gpus_then_least_free_memory() -> None:
    cluster = Cluster([gpu_node("big"), gpu_node("small", memory_gib=64), gpu_node("busy")])
    cluster.reserve("busy", learner(6))
    assert cluster.best_node(learner(2)) == "busy"
    assert cluster.best_node(learner(3)) == "small"
    assert cluster.best_node(learner(3, memory_gib=100)) == "big"


def test_best_fit_skips_nodes_short_of_cpus() -> None:
    cluster = Cluster([gpu_node("a", cpus=4), gpu_node("b", cpus=64)])
    assert cluster.best_node(learner(1, cpus=8)) == "b"


def test_cpu_only_learner_prefers_nodes_without_free_gpus() -> None:
    cluster = Cluster([gpu_node("a"), cpu_node("c", memory_gib=512)])
    assert cluster.best_node(learner(0)) == "c"
    assert cluster.best_node(learner(0), open_pools=[A100]) == "a"
    assert cluster.best_node(learner(0), open_pools=[]) is None


def test_most_free_gpus_names_the_node() -> None:
    cluster = Cluster([gpu_node("n1", gpus=4), gpu_node("n2", gpus=4)])
    cluster.reserve("n1", learner(3))
    cluster.reserve("n2", learner(3))
    cluster.reserve("n2", learner(1))
    assert cluster.most_free_gpus(A100) == (1, "n1")
    assert cluster.most_free_gpus(V100) == (0, None)
    assert cluster.free_gpus(A100) == 1


def test_gang_shares_a_node_when_learners_fit_together() -> None:
    cluster = Cluster([gpu_node("a", gpus=4), gpu_node("b", gpus=8)])
    assert place_gang(cluster, [learner(2), learner(2)]) == Placed(("a", "a"))
    assert cluster.free_gpus(A100) == 8


def test_gang_reserves_nothing_when_one_learner_has_no_room() -> None:
    cluster = Cluster([gpu_node("a", gpus=4), gpu_node("b", gpus=4)])
    cluster.reserve("b", learner(2))
    before = {name: cluster.free(name) for name in cluster.nodes}
    assert place_gang(cluster, [learner(4), learner(4)]) == NoRoom(1)
    assert {name: cluster.free(name) for name in cluster.nodes} == before


def _brute_force_best(cluster: Cluster, request: LearnerRequest) -> str | None:
    fitting = [name for name in cluster.nodes if cluster.fits(name, request)]
    if not fitting:
        return None
    return min(fitting, key=lambda n: (cluster.free(n).gpus, cluster.free(n).memory_bytes, n))


requests = st.builds(
    lambda gpus, gpu_type, cpus, memory: LearnerRequest(cpus, memory * GIB, gpus, gpu_type if gpus else None),
    st.integers(0, 4),
    st.sampled_from([A100, V100]),
    st.integers(0, 16),
    st.integers(0, 64),
)


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.sampled_from([None, A100, V100]), st.integers(1, 8), st.integers(8, 32), st.integers(32, 128)),
        min_size=1,
        max_size=8,
    ),
    operations=st.lists(requests, max_size=40),
)
def test_index_agrees_with_a_brute_force_scan(
    shapes: list[tuple[str | None, int, int, int]], operations: list[LearnerRequest]
) -> None:
    nodes = [
        Node(f"n{i}", cpus, memory * GIB, gpus if gpu_type else 0, gpu_type)
        for i, (gpu_type, gpus, cpus, memory) in enumerate(shapes)
    ]
    cluster = Cluster(nodes)
    for request in operations:
        best = cluster.best_node(request)
        assert best == _brute_force_best(cluster, request)
        if best is not None:
            cluster.reserve(best, request)
    for node in nodes:
        free = cluster.free(node.name)
        assert 0 <= free.gpus <= node.gpus
        assert 0 <= free.memory_bytes <= node.memory_bytes
        assert 0 <= free.millicpus <= node.millicpus
