"""`learnerkit image test`: run the checks against built images and record what passed, per image ID."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from learnerkit.common import engine
from learnerkit.common.output import console
from learnerkit_build.errors import ImageTestError
from learnerkit_build.imagetest import checks, contentchecks
from learnerkit_build.imagetest.checks import CheckContext, CheckFailure, CheckSkipped
from learnerkit_build.imagetest.smoke import check_smoke
from learnerkit_build.recipes.spec import ImageSpec
from learnerkit_build.state import id_file_name, state_home, write_json

CheckStatus = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    description: str
    run: Callable[[CheckContext], str]


CHECKS: dict[str, Check] = {
    "non-root": Check("USER is not root; the command runs as uid 1000", checks.check_non_root),
    "arbitrary-uid": Check("an arbitrary UID in group 0 can write /job and /tmp", checks.check_arbitrary_uid),
    "tini-pid1": Check("tini is PID 1", checks.check_tini_pid1),
    "no-setuid": Check("no setuid/setgid files", checks.check_no_setuid),
    "read-only-root": Check("runs with a read-only root file system", checks.check_read_only_root),
    "clean-image": Check("no compilers, apt lists, archives or caches", checks.check_clean_image),
    "waits-for-start": Check("learner-run waits for control/start", checks.check_waits_for_start),
    "tee-and-exit": Check("output teed to learner.log; learner.exit records failures", checks.check_tee_and_exit_code),
    "halt": Check("control/halt signals the command; reason halted", checks.check_halt),
    "halt-timeout": Check("a command ignoring the halt is killed after the grace", checks.check_halt_timeout),
    "scrubbed-env": Check("platform credentials never reach the command", checks.check_scrubbed_env),
    "cuda-content": Check(
        "cpu: no nvidia-*/cuda-*/triton packages; cuda: the framework's CUDA build as framework.yaml says",
        contentchecks.check_variant_content,
    ),
    "shared-libraries": Check(
        "every shared library of the framework resolves in the image, but the host driver's libcuda.so.1",
        contentchecks.check_shared_libraries,
    ),
    "smoke": Check("real training (on the GPU for cuda images), halted mid-run and resumed to the end", check_smoke),
}


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: CheckStatus
    detail: str
    seconds: float


@dataclass(frozen=True)
class ImageTestReport:
    spec: str
    reference: str
    image_id: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.status != "fail" for check in self.checks)


def run_image_tests(
    root: Path, images: list[ImageSpec], only: list[str], *, verbose: bool, gpus: bool = False
) -> list[ImageTestReport]:
    """Run the checks (all, or `only`) on each image; `gpus`: cuda images get the engine's GPUs."""
    unknown = [name for name in only if name not in CHECKS]
    if unknown:
        raise ImageTestError(f"unknown check(s) {', '.join(unknown)}; valid: {', '.join(CHECKS)}")
    names = only or list(CHECKS)
    return [_test_image(image, names, verbose, gpus) for image in images]


def _test_image(image: ImageSpec, names: list[str], verbose: bool, gpus: bool) -> ImageTestReport:
    reference = f"{image.repository()}:{image.tag}"
    image_id = engine.image_id(reference)
    if image_id is None and image.local_base is None and engine.image_id(image.variant.base) is None:
        reason = f"not built: its base {image.variant.base} is not on this engine"
        return ImageTestReport(image.name, reference, "", [CheckResult("all", "skip", reason, 0.0)])
    if image_id is None:
        raise ImageTestError(f"{reference} is not built: run `learnerkit image build {image.name}` first")
    results = []

    def say(line: str) -> None:
        if verbose:
            console.print(f"[dim]{image.name} |[/] {line}", highlight=False, markup=True)

    with tempfile.TemporaryDirectory(prefix="learnerkit-test-") as scratch:
        ctx = CheckContext(image=image, reference=image_id, scratch=Path(scratch), say=say, gpus=gpus)
        for name in names:
            started = time.monotonic()
            try:
                detail = CHECKS[name].run(ctx)
                status: CheckStatus = "pass"
            except CheckSkipped as e:
                detail, status = str(e), "skip"
            except (CheckFailure, TimeoutError, engine.EngineError) as e:
                detail, status = str(e), "fail"
            results.append(CheckResult(name, status, detail, round(time.monotonic() - started, 2)))
            shown = {"pass": "[green]pass[/]", "skip": "[yellow]skip[/]", "fail": "[red]FAIL[/]"}[status]
            say(f"{shown} {name}: {detail}")
    report = ImageTestReport(spec=image.name, reference=reference, image_id=image_id, checks=results)
    _record(report)
    return report


def _record(report: ImageTestReport) -> None:
    """Keep the result by image ID (atomically), so later gates know what exactly was tested."""
    payload = {
        **asdict(report),
        "passed": report.passed,
        "tested_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_json(image_test_record(report.image_id), payload)


def image_test_record(image_id: str) -> Path:
    return state_home() / "image-tests" / f"{id_file_name(image_id)}.json"
