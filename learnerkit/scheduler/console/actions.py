"""What a person can do to a job from its page: halt, resume, cancel, evaluate again, delete. Each is a POST form
with the session's CSRF token, asked twice: the first post shows a confirmation page holding the same form with
``confirmed=yes``, the second does it. Each calls the facade's operation the REST API calls, so the rules of
which state allows what live there alone: a refusal shows the facade's words, the ones the CLI prints."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from learnerkit.common.yamlfile import YamlError
from learnerkit.scheduler.console.access import PREFIX, Current, PageError, changing_form, not_found
from learnerkit.scheduler.console.rendering import Renderer
from learnerkit.scheduler.console.sessions import Session
from learnerkit.scheduler.errors import JobStateError, ManifestTooLargeError, UnknownJobError
from learnerkit.scheduler.facade import JobView, SchedulerFacade

EVALUATIONS_SOURCE = "evaluations.yml"
"""The name problems of the evaluations typed in the page are reported under (`job evaluate`'s usual file)."""


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    question: str
    """What the confirmation page asks."""
    done: str
    """What the job page says once it is asked for."""
    call: Callable[[SchedulerFacade, str, str], Awaitable[JobView]] | None
    """The facade's operation (tenant, job id); None for evaluate, which takes a file of evaluations too."""


ACTIONS = {
    action.name: action
    for action in (
        Action(
            "halt",
            "Halt",
            "Checkpoint and stop this job? Resume starts it again from the checkpoint.",
            "Halt asked for: the job checkpoints and stops.",
            lambda facade, tenant, job_id: facade.halt(tenant, job_id),
        ),
        Action(
            "resume",
            "Resume",
            "Queue this job again from its latest checkpoint?",
            "Resumed: the job is queued again from its latest checkpoint.",
            lambda facade, tenant, job_id: facade.resume(tenant, job_id),
        ),
        Action(
            "cancel",
            "Cancel",
            "Stop this job without a checkpoint? It ends CANCELLED and cannot be resumed.",
            "Cancelled.",
            lambda facade, tenant, job_id: facade.cancel(tenant, job_id),
        ),
        Action(
            "evaluate",
            "Evaluate again",
            "Evaluate this job's model again, without retraining, with these evaluations?",
            "A new round of evaluations has started.",
            None,
        ),
        Action(
            "delete",
            "Delete",
            "Forget this job? Its record and its stores' keys leave the scheduler; the files it stored stay.",
            "",
            lambda facade, tenant, job_id: facade.delete(tenant, job_id),
        ),
    )
}


def done_notice(name: str) -> str:
    """The job page's line after an action (``?done=halt``); empty for any other text."""
    action = ACTIONS.get(name)
    return action.done if action else ""


def evaluations_of(manifest_text: str) -> str:
    """The ``evaluations:`` section of the job's manifest as a file of its own, what `job evaluate` takes; empty
    when the manifest has none."""
    doc = yaml.safe_load(manifest_text)
    if not isinstance(doc, dict) or not doc.get("evaluations"):
        return ""
    return yaml.safe_dump({"evaluations": doc["evaluations"]}, sort_keys=False, allow_unicode=True)


def add_action_routes(router: APIRouter, facade: SchedulerFacade, render: Renderer) -> None:
    @router.post("/jobs/{job_id}/actions/{name}")
    async def act(job_id: str, name: str, request: Request, session: Current) -> Response:
        form = await changing_form(request, session)
        action = ACTIONS.get(name)
        if action is None:
            raise PageError(404, "Not found", f"There is no action {name!r}: {', '.join(ACTIONS)}.")
        try:
            job = await facade.get(session.tenant, job_id)
            evaluations = form.get("evaluations")
            if evaluations is None and action.call is None:
                evaluations = evaluations_of(await facade.manifest(session.tenant, job_id))
            if form.get("confirmed") != "yes":
                return _confirm(render, session, job, action, evaluations)
            if action.call is not None:
                await action.call(facade, session.tenant, job_id)
            else:
                text = (evaluations or "").replace("\r\n", "\n")
                await facade.evaluate(session.tenant, job_id, text, source=EVALUATIONS_SOURCE)
        except UnknownJobError as e:
            raise not_found(job_id) from e
        except JobStateError as e:
            raise PageError(409, f"{action.label}: refused", str(e)) from e
        except YamlError as e:
            problems = [str(p) for p in e.problems]
            return _confirm(render, session, job, action, evaluations, problems=problems, status=422)
        except ManifestTooLargeError as e:
            return _confirm(render, session, job, action, evaluations, problems=[str(e)], status=413)
        if action.name == "delete":
            return RedirectResponse(f"{PREFIX}/jobs", status_code=303)
        return RedirectResponse(f"{PREFIX}/jobs/{quote(job_id)}?done={action.name}", status_code=303)


def _confirm(
    render: Renderer,
    session: Session,
    job: JobView,
    action: Action,
    evaluations: str | None,
    *,
    problems: list[str] | None = None,
    status: int = 200,
) -> Response:
    return render.page(
        "confirm.html.j2",
        status=status,
        session=session,
        title=f"{action.label}: {job.name} ({job.job_id})",
        job=job,
        action=action,
        evaluations=evaluations,
        problems=problems or [],
    )
