"""The scheduler's control loop: each step monitors the running jobs, requeues those that did not start in time,
runs an admission pass and starts the deploys it admitted.

State changes happen under the shared lock; the backend's blocking calls (Docker, Kubernetes) run in threads
outside it. Every change is written to etcd before it is acted on, so a restarted scheduler rebuilds the same
queue and reservations (:meth:`ControlLoop.rebuild`), leaves running jobs undisturbed, and deploys nothing twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from typing import Any

from controller_sidecar.status import StatusRecord
from learnerkit.common.errors import LearnerkitError
from learnerkit.scheduler.admission.admit import AdmissionState, Requeued
from learnerkit.scheduler.admission.capacity import Node
from learnerkit.scheduler.admission.nodechanges import changed, working_nodes
from learnerkit.scheduler.admission.stage import Stage
from learnerkit.scheduler.backends.deployment import JobDeployment
from learnerkit.scheduler.backends.protocol import NodeHealth, SidecarStates
from learnerkit.scheduler.config.policy import SubmitPolicy, host_folder, store_folder
from learnerkit.scheduler.core.draining import Draining
from learnerkit.scheduler.core.endcheck import completions_to_confirm, confirmed_records
from learnerkit.scheduler.core.halting import HaltWatch, halting
from learnerkit.scheduler.core.holding import Holding
from learnerkit.scheduler.core.leaselapse import (
    MAX_LEASE_LAPSE_REQUEUES,
    lapse_requeue_reason,
    lapse_requeues,
    lapsed_leases,
    lapses_spent,
    lost_only_to_lapses,
)
from learnerkit.scheduler.core.liveness import (
    LivenessTimes,
    ended_without_exit_record,
    lost_learners,
    watching_for_exit,
)
from learnerkit.scheduler.core.nodeloss import NodeLoss, node_states
from learnerkit.scheduler.core.options import derive_instance
from learnerkit.scheduler.core.planning import plan_job
from learnerkit.scheduler.core.preempting import Preempting
from learnerkit.scheduler.core.provenancing import ran_digest
from learnerkit.scheduler.core.restore import restore
from learnerkit.scheduler.core.shared import Shared
from learnerkit.scheduler.core.sidecars import restart_ended_sidecars
from learnerkit.scheduler.core.sweepdriver import SweepDriver
from learnerkit.scheduler.core.tracking import Tracked
from learnerkit.scheduler.core.transitions import Transitions
from learnerkit.scheduler.errors import BackendError
from learnerkit.scheduler.jobs.aggregate import aggregate
from learnerkit.scheduler.jobs.attempts import AttemptEnd
from learnerkit.scheduler.jobs.state import JobStatus
from learnerkit.scheduler.manifest.model import JobManifest

LOGGER = logging.getLogger(__name__)


class ControlLoop:
    def __init__(self, shared: Shared, transitions: Transitions) -> None:
        self.shared = shared
        self.transitions = transitions
        self.preempting = Preempting(shared, transitions)
        self.holding = Holding(shared, transitions, lambda tracked, image: self._plan_for(tracked, image, held=True))
        self.draining = Draining(shared, transitions)
        self.node_loss = NodeLoss(shared, transitions)
        self.halt_watch = HaltWatch(shared.store, shared.wake)
        self.instance = shared.options.instance or ""
        """Set by :meth:`rebuild` (from etcd) before anything is deployed."""
        self._deploys: set[asyncio.Task[None]] = set()
        """Deploys (and teardowns of handed-over attempts) in flight: they run beside the loop, whose steps go on
        monitoring the other jobs."""
        self.driver: SweepDriver | None = None
        """The sweeps' driver: its trials' variables at deploy, its step after each of the loop's."""
        self._listed: list[Node] | None = None
        """The backend's nodes as last read (:meth:`_read_nodes`), and when (monotonic)."""
        self._nodes_read_at = 0.0
        self._drained: frozenset[str] = frozenset()
        """The nodes drained (etcd's marks), as read with the nodes: listed no more, their jobs moved off."""
        self._published: frozenset[str] | None = None
        self._published_states: dict[str, str] | None = None
        self._health: dict[str, NodeHealth] | None = None
        """Every node the cluster has, as read with the nodes; None until a read succeeded."""
        self._watching_since: float | None = None
        """Monotonic time since which every step succeeded; None after a failed one (etcd or the backend did not
        answer). Graces measured on what the steps saw start no earlier: an outage during which a sidecar could
        not deliver its status does not count against it."""
        self.stepped_at: float | None = None
        """Monotonic time of the last step that completed (or of the loop's start); read by :meth:`stalled`."""

    async def rebuild(self) -> None:
        """Claim this scheduler's instance id in etcd, then restore its jobs (:func:`restore`)."""
        shared, fixed = self.shared, self.shared.options.instance
        derived = derive_instance(shared.options.platform.etcd_endpoints, shared.store.root)
        self.instance = await shared.store.claim_instance(fixed or derived, fixed=fixed is not None)
        shared.evaluations.instance = self.instance
        self.transitions.provenancing.instance = self.instance
        await restore(shared, self.instance)
        self.transitions.figures.resume()
        await self.transitions.provenancing.resume()
        if self.driver is not None:
            await self.driver.rebuild()

    async def run(self, stop: asyncio.Event) -> None:
        wake = self.shared.wake
        self.stepped_at = self.shared.clock.monotonic()
        try:
            while not stop.is_set():
                await self.guarded_step()
                wake.clear()
                waits = [asyncio.create_task(wake.wait()), asyncio.create_task(stop.wait())]
                await asyncio.wait(waits, timeout=self.shared.options.interval_s, return_when=asyncio.FIRST_COMPLETED)
                for wait in waits:
                    wait.cancel()
        finally:
            await self.halt_watch.stop()
            await self.deploys_done()
            await self.transitions.figures.drain()
            await self.transitions.provenancing.drain()

    async def deploys_done(self) -> None:
        """Wait for the deploys in flight (a stopping scheduler leaves none half-made)."""
        while self._deploys:
            await asyncio.gather(*self._deploys, return_exceptions=True)

    async def guarded_step(self) -> None:
        """One step; an error of etcd or the backend is logged, and the next step starts over. No error stops the
        loop: one that is not expected is logged with its traceback, and `/healthz` tells once no step completes."""
        try:
            await self.step()
        except LearnerkitError as e:
            # etcd or the backend answered with an error (an outage, a container gone meanwhile): the next
            # step starts over from what is recorded; nothing of the failed one was half-applied.
            LOGGER.warning("scheduling step failed (retrying next step): %s", e)
            self._watching_since = None
        except Exception:
            LOGGER.exception("scheduling step failed on an unexpected error (retrying next step)")
            self._watching_since = None
        else:
            self.stepped_at = self.shared.clock.monotonic()

    def stalled(self) -> str | None:
        """Why the loop is unhealthy: no step completed for ``loop_stall_s``; None while it steps."""
        limit = self.shared.options.loop_stall_s
        if self.stepped_at is None:
            return None  # not started yet: the API is not served before the loop starts
        quiet = self.shared.clock.monotonic() - self.stepped_at
        if quiet <= limit:
            return None
        return f"the control loop has completed no step for {quiet:.0f}s (more than {limit:g}s)"

    async def step(self) -> None:
        shared = self.shared
        now = shared.clock.wall()
        if self._watching_since is None:
            self._watching_since = shared.clock.monotonic()
        if self._health is not None:  # before monitoring: a lost node's jobs end NODE_LOST, not as lost learners
            await self.node_loss.resume_elsewhere(self._health, now)
        # Jobs are monitored side by side; one whose deploy (or teardown) is in flight waits for the next step.
        active = [t for t in shared.jobs.values() if t.active and not t.backend_lock.locked()]
        outcomes = await asyncio.gather(*(self._monitor(t, now) for t in active), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # the others ran to their end: nothing is left half-applied
        await self.transitions.retry_teardowns()
        await shared.evaluations.step()
        await self._read_nodes()
        async with shared.lock:
            requeued = shared.admission.tick(now)
        for timed_out in requeued:
            await self._requeue_timed_out(shared.jobs[timed_out.job_id], timed_out)
        async with shared.lock:
            started = time.perf_counter()
            result = shared.admission.schedule(now)
            shared.metrics.scheduling_pass_seconds.observe(time.perf_counter() - started)
            for job_id, why in result.rejected.items():
                await self.transitions.end(shared.jobs[job_id], JobStatus.FAILED, why.message, release=True)
            preemptor = await self.preempting.consider(result.waiting, now)
            for job_id, reason in result.waiting.items():
                tracked = shared.jobs[job_id]
                said = self.preempting.waiting_reason(tracked, str(reason))
                if tracked.state.reason != said:
                    tracked.state = await shared.store.save(tracked.state.evolve(reason=said))
            if preemptor is not None and self.holding.wanted(shared.jobs[preemptor]):
                self._beside(self._guarded_hold(shared.jobs[preemptor]))
        # Deploys run side by side (the engine creates containers concurrently) and beside the next steps.
        for admitted in result.admitted:
            self._beside(self._guarded_deploy(shared.jobs[admitted.job_id], admitted.nodes, now))
        if self.driver is not None:
            await self.driver.step()
        self.halt_watch.follow(t.state.job_id for t in shared.jobs.values() if halting(t))
        self._observe()

    async def _read_nodes(self) -> None:
        """Every ``nodes_interval_s``, the backend's nodes and the drain marks again; every step, the admission state
        rebuilt on them where they changed (a restart's rebuild, without the restart): an unlisted node shrinks as
        its jobs end, a drained one is closed to new learners and its jobs are moved off."""
        shared, monotonic = self.shared, self.shared.clock.monotonic()
        if self._listed is None or monotonic - self._nodes_read_at >= shared.options.nodes_interval_s:
            self._nodes_read_at = monotonic
            try:
                self._listed = await asyncio.to_thread(shared.backend.nodes)
                self._health = await asyncio.to_thread(shared.backend.node_health)
            except BackendError as e:
                LOGGER.warning("reading the nodes failed (the nodes as last read are kept): %s", e)
            self._drained = await shared.marks.drained()
            names = frozenset([*(node.name for node in self._listed or ()), *shared.admission.cluster.nodes])
            if names != self._published:  # what a drain is checked against
                await shared.marks.publish_known(names)
                self._published = names
            if self._health is not None:  # what `scheduler nodes` shows
                states = node_states(self._health, names, shared.clock.wall(), shared.options.node_lost_grace_s)
                if states != self._published_states:
                    await shared.marks.publish_states(states)
                    self._published_states = states
        listed = self._listed if self._listed is not None else list(shared.admission.cluster.nodes.values())
        async with shared.lock:
            await self.draining.move_off(self._drained)
            admission = shared.admission
            known = admission.cluster.nodes
            records = admission.records()
            nodes = working_nodes(listed, known, records)
            closed = self._drained & {node.name for node in nodes}
            if not changed(nodes, known.values()) and closed == admission.cluster.closed:
                return
            rebuilt = AdmissionState.rebuild(records, nodes, admission.policy, closed)
            held = [r.job.job_id for r in records if r.stage in (Stage.DEPLOYED, Stage.RUNNING)]
            if any(rebuilt.record(job_id).stage is Stage.QUEUED for job_id in held):
                # A node now smaller than what runs on it: keep the old state rather than run a job twice.
                LOGGER.warning("the nodes changed but no longer hold what runs on them; capacity kept as it was")
                return
            LOGGER.info(
                "the nodes changed: %s (drained: %s)",
                ", ".join(sorted(n.name for n in nodes)),
                ", ".join(sorted(closed)) or "none",
            )
            shared.admission = rebuilt

    async def _guarded_deploy(self, tracked: Tracked, nodes: tuple[str, ...], now: float) -> None:
        """A deploy in its own task: an error of etcd is logged as a failed step's would be."""
        try:
            await self._deploy(tracked, nodes, now)
        except LearnerkitError as e:
            LOGGER.warning(
                "deploying job %s failed (the next steps go on from what is recorded): %s", tracked.state.job_id, e
            )
            self._watching_since = None

    async def _guarded_hold(self, tracked: Tracked) -> None:
        """A held deploy in its own task: an error of etcd is logged; the job deploys at its admission anyway."""
        try:
            await self.holding.hold(tracked)
        except LearnerkitError as e:
            LOGGER.warning("holding job %s failed (it deploys at its admission): %s", tracked.state.job_id, e)

    async def _requeue_timed_out(self, tracked: Tracked, requeued: Requeued) -> None:
        shared = self.shared
        async with tracked.backend_lock:
            await self.transitions.teardown(requeued.job_id)
            async with shared.lock:
                if tracked.state.stage is Stage.DONE:
                    return  # cancelled or halted meanwhile
                tracked.new_attempt()
                ready_timeout_s = shared.options.policy.ready_timeout_s
                tracked.state = await shared.store.save(
                    tracked.state.evolve(
                        status=JobStatus.QUEUED,
                        stage=Stage.QUEUED,
                        nodes=(),
                        admitted_at=None,
                        timeouts=requeued.timeouts,
                        not_before=requeued.not_before,
                        reason=f"learners did not start within {ready_timeout_s:.0f}s; requeued",
                    ),
                    clear_learners=True,
                )

    async def _deploy(self, tracked: Tracked, nodes: tuple[str, ...], now: float) -> None:
        """Deploy an admitted job; its backend lock keeps a cancel's teardown from meeting a half-made job."""
        shared = self.shared
        async with tracked.backend_lock:
            planned = await self._plan(tracked, nodes, now)
            if planned is None:
                return
            plan, held = planned
            try:
                if held:  # deployed held while its victims checkpointed: its learners start now
                    await shared.store.release(tracked.state.job_id, tracked.state.attempt)
                await self.transitions.settle(tracked.state.job_id)  # a handed-over attempt's leftovers go first
                await asyncio.to_thread(shared.backend.deploy, plan)
            except BackendError as e:
                shared.metrics.deploy_failures.inc()
                async with shared.lock:
                    if tracked.state.stage is not Stage.DONE:
                        await self.transitions.end(tracked, JobStatus.FAILED, f"deploy failed: {e}", release=True)
                return
            async with shared.lock:
                ended = tracked.state.stage is Stage.DONE
                if not ended:
                    tracked.state = await shared.store.save(tracked.state.evolve(reason=""))
            if ended:  # cancelled while the deploy ran: remove what it made
                await self.transitions.teardown(tracked.state.job_id)

    async def _plan(self, tracked: Tracked, nodes: tuple[str, ...], now: float) -> tuple[JobDeployment, bool] | None:
        """The admitted job's deployment, recorded as deploying, and whether its pairs were deployed held; None
        when it ended meanwhile or was refused."""
        shared, options = self.shared, self.shared.options
        try:
            image = await asyncio.to_thread(options.resolve_image, tracked.manifest)  # the image gate, again
            refused = ""
        except LearnerkitError as e:
            image, refused = "", str(e)
        async with shared.lock:
            state = tracked.state
            if state.stage is not Stage.QUEUED:
                return None  # cancelled or halted since the pass admitted it
            shared.metrics.admission_wait.observe(max(0.0, now - max(state.submitted_at, state.not_before)))
            plan: JobDeployment | None = None
            try:
                if not refused:
                    plan = self._plan_for(tracked, image)
            except LearnerkitError as e:
                refused = str(e)
            if plan is None:
                await self.transitions.end(tracked, JobStatus.FAILED, f"deploy refused: {refused}", release=True)
                return None
            # A held job's learners/ holds what its held sidecars reported of this attempt: kept.
            tracked.state = await shared.store.save(
                state.evolve(
                    status=JobStatus.PENDING,
                    stage=Stage.DEPLOYED,
                    nodes=nodes,
                    admitted_at=now,
                    reason="deploying",
                    held=False,
                ),
                clear_learners=not state.held,
            )
            tracked.deployed_image = image
            await self.transitions.open_attempt(tracked, nodes)
        return replace(plan, nodes=nodes), state.held

    def _plan_for(self, tracked: Tracked, image: str, *, held: bool = False) -> JobDeployment:
        """The job's deployment as its record says now (raises `LearnerkitError` when it cannot be planned)."""
        options, state = self.shared.options, tracked.state
        mount = _data_mount(tracked.manifest, options.submit_policy)
        python = options.python_of(image) if tracked.options.model else None
        locked = options.locked_of(image) if tracked.options.model else {}
        packages = replace(options.packages, python_version=python, locked=locked)
        trial_env = self.driver.trial_env(state.job_id) if self.driver is not None else {}
        plan = plan_job(
            tracked.manifest,
            state,
            options.platform,
            image,
            mount,
            tracked.options,
            packages,
            options.pids,
            trial_env,
            held=held,
        )
        return replace(plan, instance=self.instance)

    async def _monitor(self, tracked: Tracked, now: float) -> None:
        shared, state = self.shared, tracked.state
        # Which sidecars have exited, before their statuses are read: a sidecar writes its final status
        # before it exits, so one that exited without it in the records read after did fail.
        sidecars = await asyncio.to_thread(shared.backend.sidecars, state.job_id)
        records, alive, metrics = await shared.store.learner_records(state.job_id)
        tracked.records, tracked.alive, tracked.metrics = records, alive, metrics
        if sidecars.exited:
            async with tracked.backend_lock:
                if tracked.state.stage in (Stage.DEPLOYED, Stage.RUNNING):
                    sidecars = await restart_ended_sidecars(shared.backend, tracked, sidecars)
        learners = tracked.manifest.resources.learners
        if state.stage is Stage.DEPLOYED and await asyncio.to_thread(shared.backend.started, state.job_id, learners):
            async with shared.lock:
                if tracked.state.stage is Stage.DEPLOYED:
                    shared.admission.mark_running(state.job_id)
                    tracked.state = await shared.store.save(tracked.state.evolve(stage=Stage.RUNNING))
        if tracked.state.stage is Stage.RUNNING and not tracked.ran_digest:
            tracked.ran_digest = await ran_digest(shared.backend, state.job_id)
        watching = watching_for_exit(tracked)
        # Read only while some sidecar waits for an exit record: no API call for jobs downloading or storing.
        ended = await asyncio.to_thread(shared.backend.learners_ended, state.job_id) if watching else {}
        monotonic = shared.clock.monotonic()
        times = LivenessTimes(now, monotonic, self._watching_since if self._watching_since is not None else monotonic)
        options = shared.options
        lost = {
            **ended_without_exit_record(tracked, watching, ended, monotonic, self._watching_since),
            **lost_learners(tracked, sidecars, times, options.lease_ttl_s, options.lease_renewal_grace_s),
        }
        lapsed = lapsed_leases(sidecars, lost)
        if completions_to_confirm(tracked):  # the runtime confirms a learner's end before its COMPLETED counts
            running = await asyncio.to_thread(shared.backend.learners_running, state.job_id)
            ended = ended or await asyncio.to_thread(shared.backend.learners_ended, state.job_id)
            records = confirmed_records(tracked, running, ended)
        result = aggregate(learners, records, first_sequence=state.first_sequence, lost=lost)
        async with tracked.backend_lock:
            async with shared.lock:
                if tracked.state.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                    return  # cancelled meanwhile
                if not result.status.terminal:
                    if result.status is not tracked.state.status:
                        tracked.state = await shared.store.save(tracked.state.evolve(status=result.status))
                    return
                if result.status is JobStatus.HALTED and await self._hand_over(
                    tracked, records, result.reason, sidecars
                ):
                    return
            # Outside the lock: the API and the other jobs' steps go on while the engine removes it.
            await self.transitions.teardown(state.job_id)
            async with shared.lock:
                if tracked.state.stage not in (Stage.DEPLOYED, Stage.RUNNING):
                    return  # cancelled during the teardown
                extensions = tracked.manifest.extensions
                if (
                    result.status is JobStatus.FAILED
                    and lost_only_to_lapses(records, state.first_sequence, lost, lapsed)
                    and not await self._halt_asked(tracked)
                ):
                    if lapse_requeues(tracked.attempts) < MAX_LEASE_LAPSE_REQUEUES:
                        why = lapse_requeue_reason(result.reason)
                        await self.transitions.requeue(tracked, why, restart=False, ended_by=AttemptEnd.INTERRUPTED)
                        LOGGER.warning("job %s: %s", state.job_id, why)
                        return
                    result = replace(result, reason=lapses_spent(result.reason))
                if (
                    result.status is JobStatus.FAILED
                    and extensions.auto_resume
                    and tracked.state.restarts < extensions.max_restarts
                ):
                    reason = f"restarting after: {result.reason}"
                    await self.transitions.requeue(tracked, reason, restart=True, ended_by=AttemptEnd.RESTARTED)
                else:
                    await self.transitions.end(tracked, result.status, result.reason, release=True)

    async def _halt_asked(self, tracked: Tracked) -> bool:
        """Whether the job's user (``job halt``) or someone by hand (its halt key) asked it to halt."""
        return tracked.state.halted_by_user or await self.shared.store.halt_requested(tracked.state.job_id)

    async def _hand_over(
        self, tracked: Tracked, records: Mapping[int, StatusRecord], halted: str, sidecars: SidecarStates
    ) -> bool:
        """Under the shared lock, a job halted for a preemption, a drain, or by a stop from outside (nobody asked
        for its halt: a pod evicted or deleted, a container stopped): its learners have ended, so its room is free;
        it goes back to the queue at once, to resume from its checkpoint, and its teardown runs beside the deploys
        this step's admission starts (the preemptor's) rather than before them. False for a halt asked by its user
        or by hand (``sidecar halt``, ``dev down``: the halt key)."""
        if self.preempting.preempted(tracked):
            await self.preempting.finish(tracked, records)
        elif self.draining.drained(tracked):
            await self.draining.finish(tracked, records)
        elif not await self._halt_asked(tracked):
            said = "; ".join(sorted(set(sidecars.ended_by.values()))) or halted
            why = f"stopped from outside the scheduler ({said}); resumes from its last checkpoint"
            await self.transitions.requeue(tracked, why, restart=False, ended_by=AttemptEnd.INTERRUPTED)
            LOGGER.warning("job %s: %s", tracked.state.job_id, why)
        else:
            return False
        self.transitions.owe_teardown(tracked.state.job_id)
        self._beside(self._settle(tracked))
        return True

    async def _settle(self, tracked: Tracked) -> None:
        async with tracked.backend_lock:
            try:
                await self.transitions.settle(tracked.state.job_id)
            except BackendError as e:
                LOGGER.warning("tearing down job %s failed (retried by the next steps): %s", tracked.state.job_id, e)

    def _beside(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the loop's steps; a stopping scheduler waits for it (:meth:`deploys_done`)."""
        task = asyncio.create_task(work)
        self._deploys.add(task)
        task.add_done_callback(self._deploys.discard)

    def _observe(self) -> None:
        jobs = self.shared.jobs.values()
        queued = sum(1 for t in jobs if t.state.stage is Stage.QUEUED)
        gpus = sum(t.manifest.resources.gpus * t.manifest.resources.learners for t in jobs if t.active)
        self.shared.metrics.observe_jobs((t.state.status for t in jobs), queued, gpus)


def _data_mount(manifest: JobManifest, policy: SubmitPolicy) -> str | None:
    """The host folder of a ``mount_volume`` training data store, checked again (its links may have changed)."""
    store = manifest.training_data_store
    if store.type != "mount_volume":
        return None
    return host_folder(store_folder(store), policy)
