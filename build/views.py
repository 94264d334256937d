"""Tables and listings the build tool shows to people."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from learnerkit.common import engineimages
from learnerkit.common.output import console, keep_whole
from learnerkit_build.builds.images import HASH_LABEL, BuildResult, base_ref_for
from learnerkit_build.builds.schedule import DEFAULT_BUILD_S, estimate_text, expected_seconds
from learnerkit_build.recipes.pipconfig import Setting
from learnerkit_build.recipes.spec import ImageSpec

if TYPE_CHECKING:  # `image ls`, `image build` and the others need not load the scanner's code or the fetchers
    from learnerkit_build.builds.locking import LockResult
    from learnerkit_build.builds.prefetch import FillReport
    from learnerkit_build.scan.lint import LintReport
    from learnerkit_build.scan.outdated import OutdatedImage


def image_rows(images: Sequence[ImageSpec]) -> list[dict[str, Any]]:
    """One row per image; `built` and `inputs_hash` only when an engine answers; `publish`, this host's publish
    record of it (`learnerkit_build.publish.records`; no registry is asked)."""
    from learnerkit_build.publish.records import publish_state  # `image build` loads no room above it

    try:
        engineimages.ping()
        have_engine = True
    except engineimages.EngineError:
        have_engine = False
    rows = []
    for image in images:
        reference = f"{image.repository()}:{image.tag}"
        row: dict[str, Any] = {
            "spec": image.name,
            "reference": reference,
            "accelerator": image.variant.accelerator,
            "python": image.python,
            "base": base_ref_for(image),
            "cuda": _cuda_row(image),
            "built": None,
            "inputs_hash": None,
        }
        image_id = engineimages.image_id(reference) if have_engine else None
        if have_engine:
            row["built"] = image_id is not None
            row["inputs_hash"] = engineimages.image_labels(reference).get(HASH_LABEL) if image_id else None
        publish = publish_state(reference, image_id)
        row["publish"] = asdict(publish) | {"pinned": publish.record.pinned if publish.record else None}
        rows.append(row)
    return rows


def _cuda_row(image: ImageSpec) -> dict[str, Any] | None:
    cuda = image.variant.cuda
    if cuda is None:
        return None
    return {
        "version": cuda.version,
        "cudnn": cuda.cudnn,
        "capabilities": list(cuda.capabilities),
        "note": cuda.note,
    }


def image_table(rows: list[dict[str, Any]]) -> RenderableType:
    """Spec and reference whole (both are copied: one into `learnerkit image ...`, one into `docker run`) in 80
    columns; the accelerator is in the spec's variant. The CUDA build of each cuda variant follows in a table of
    its own (spec whole, the capabilities fold), then the notes and the bases, shared by many images."""
    table = Table("spec", "reference", "python", "built", title="learner images", box=box.SIMPLE_HEAD, pad_edge=False)
    for row in rows:
        built = {True: "[green]yes[/]", False: "no", None: "?"}[row["built"]]
        table.add_row(row["spec"], row["reference"], row["python"], built)
    parts: list[RenderableType] = [keep_whole(table, "spec", "reference", "python", "built")]
    cuda_rows = [row for row in rows if row["cuda"]]
    if cuda_rows:
        cuda = Table(
            "spec", "CUDA", "cuDNN", "compute capabilities", title="CUDA builds", box=box.SIMPLE_HEAD, pad_edge=False
        )
        for row in cuda_rows:
            info = row["cuda"]
            cuda.add_row(row["spec"], info["version"], info["cudnn"] or "none", " ".join(info["capabilities"]))
        parts.append(keep_whole(cuda, "spec", "CUDA", "cuDNN"))
        parts += [Text(f"{row['spec']}: {row['cuda']['note']}") for row in cuda_rows if row["cuda"]["note"]]
    bases = sorted({str(row["base"]) for row in rows})
    parts.append(Text("bases: " + ", ".join(bases)))
    parts += publish_lines(rows)
    return Group(*parts)


def publish_lines(rows: list[dict[str, Any]]) -> list[Text]:
    """Each published image's pushed reference, digest and signing key on lines of their own (the digest and
    key, 71 and 64 characters, whole within 80 columns); the images never published counted in one line."""
    lines: list[Text] = []
    for row in rows:
        state, record = row.get("publish", {}).get("state"), row.get("publish", {}).get("record")
        if record is None:
            continue
        if state == "published":
            lines.append(Text(f"{row['spec']}: published {record['published_at']}"))
        else:
            lines.append(Text(f"{row['spec']}: published, but the image was rebuilt since"))
            lines.append(Text(f"    published {record['published_at']}"))
        lines += [
            Text(f"    {record['pushed']}"),
            Text(f"    @{record['digest']}"),
            Text(f"    key {record['key_id']}"),
        ]
    unpublished = [row["spec"] for row in rows if row.get("publish", {}).get("state") == "not published"]
    if unpublished:
        lines.append(Text(f"not published: {len(unpublished)} of {len(rows)} images"))
    return lines


def settings_table(settings: Sequence[Setting]) -> RenderableType:
    """Where pip inside the builds looks and where each setting came from, values whole; a setting that is
    not used is marked under its value (beside it, the mark widened the column past 80 and broke the sources'
    names), and why follows the table."""
    table = Table("build input", "value", "from", title="pip inside builds", box=box.SIMPLE_HEAD, pad_edge=False)
    for setting in settings:
        value = setting.value if setting.unused is None else f"[dim]{setting.value}[/]\n[yellow](not used)[/]"
        table.add_row(setting.name, value, setting.source)
    unused = [Text(f"{setting.value}: not used: {setting.unused}") for setting in settings if setting.unused]
    return Group(keep_whole(table, "build input", "value"), *unused)


def build_table(results: list[BuildResult]) -> RenderableType:
    """What each build did, in 80 columns: the spec over its reference in one cell (side by side, the longest of
    each leave the status and the seconds no room); why an image was skipped follows the table."""
    table = Table(
        "spec, reference", "status", "seconds", title="build", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )
    colours = {"built": "green", "cached": "cyan", "skipped": "yellow"}
    for result in results:
        status = f"[{colours[result.status]}]{result.status}[/]"
        table.add_row(f"{result.spec}\n  {result.reference}", status, f"{result.seconds:.1f}")
    reasons = [Text(f"{result.spec}: {result.reason}") for result in results if result.reason]
    return Group(keep_whole(table, "spec, reference", "status", "seconds"), *reasons)


def base_table(results: list[dict[str, str]]) -> Table:
    """Each local base and Docker's short ID of its image (what `docker run` takes; `--output json` has the full
    one): the full ID, 71 characters, leaves the rest no room at 80 columns."""
    rows = [{**row, "image_id": row["image_id"].removeprefix("sha256:")[:12]} for row in results]
    return simple_table(rows, "base", "image_id", "status")


def outdated_table(found: Sequence[OutdatedImage]) -> RenderableType:
    """One row per built image, each version of a framework on its own, spec and image ID whole (Docker's short
    ID, which `docker run` takes; `--output json` has the full one) in 80 columns; the reasons follow the table,
    one line each, so a base reference in one is never split."""
    table = Table("spec", "image ID", "outdated", title="built images", box=box.SIMPLE_HEAD, pad_edge=False)
    for image in found:
        outdated = "[red]yes[/]" if image.outdated else "[green]no[/]"
        table.add_row(image.spec, image.image_id.removeprefix("sha256:")[:12], outdated)
    reasons = [Text(f"{image.spec}: {reason}") for image in found for reason in image.reasons]
    return Group(keep_whole(table, "spec", "image ID", "outdated"), *reasons)


def simple_table(rows: list[dict[str, Any]], *whole: str) -> Table:
    """One column per key; the columns named in `whole` (what a user copies) are never shortened."""
    table = Table(*(rows[0].keys() if rows else ()), box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    return keep_whole(table, *whole)


def lock_table(results: Sequence[LockResult]) -> Table:
    """Each image's name over its lock file's path (relative to the project) in one cell, both whole: the two side
    by side leave the counts and the status no room at 80 columns; a refusal's reason wraps between words."""
    table = Table("image, lock file", "debian", "python", "status", box=box.SIMPLE_HEAD, show_edge=False)
    table.pad_edge = False
    for result in results:
        where = f"{escape(result.name)}\n  {escape(result.path)}" if result.path else escape(result.name)
        table.add_row(where, str(result.debian), str(result.python), escape(result.status))
    return keep_whole(table, "image, lock file")


def write_rendered(dest: Path, images: list[ImageSpec], rendered: dict[str, str]) -> dict[str, str]:
    """Write each Dockerfile atomically to <dest>/<framework>/<tag>.Dockerfile; return spec -> path."""
    written = {}
    for image in images:
        path = dest / image.framework.name / f"{image.tag}.Dockerfile"
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(".tmp")
        temp.write_text(rendered[image.name], encoding="utf-8")
        temp.replace(path)
        written[image.name] = str(path)
    return written


def show_rendered(rendered: dict[str, str], written: dict[str, str]) -> None:
    for name, text in rendered.items():
        if name in written:
            console.print(f"{name} -> {written[name]}")
        else:
            if len(rendered) > 1:
                console.rule(name)
            console.out(text, highlight=False, end="")


def show_created(name: str, paths: list[str]) -> None:
    console.print(f"scaffolded framework [bold]{name}[/]:")
    for path in paths:
        console.print(f"  {path}")
    console.print(
        "next: edit framework.yaml, then `learnerkit image build " + name + "` and `learnerkit image test " + name + "`"
    )


def test_table(reports: list[Any]) -> Table:
    table = Table("image", "check", "result", "detail", title="image tests")
    for report in reports:
        for check in report.checks:
            colour = {"pass": "green", "fail": "red", "skip": "yellow"}[check.status]
            table.add_row(report.spec, check.name, f"[{colour}]{check.status}[/]", check.detail)
    return keep_whole(table, "image", "check", "result")


def lint_table(reports: list[LintReport]) -> Table:
    table = Table("image", "result", "findings", title="hadolint")
    for report in reports:
        findings = "\n".join(f"line {f.line}: {f.code} {f.level}: {f.message}" for f in report.findings)
        table.add_row(report.spec, "[green]pass[/]" if report.passed else "[red]FAIL[/]", findings)
    return keep_whole(table, "image", "result")


def estimate_line(names: Sequence[str], durations: Mapping[str, float], jobs: int) -> str:
    """What will build and about how long, from each image's last build here (`~` where it never built here:
    DEFAULT_BUILD_S, about a cold cuda build)."""
    parts = [
        f"{name} {estimate_text(durations[name])}" if name in durations else f"{name} ~{estimate_text(DEFAULT_BUILD_S)}"
        for name in names
    ]
    total = expected_seconds(names, durations, jobs)
    recorded = sum(1 for name in names if name in durations)
    if recorded == len(names):
        basis = "each image's last build here"
    elif recorded == 0:
        basis = f"none built here before: {estimate_text(DEFAULT_BUILD_S)} each assumed"
    else:
        basis = f"each image's last build here; ~: never built here, {estimate_text(DEFAULT_BUILD_S)} assumed"
    return f"to build: {', '.join(parts)}; about {estimate_text(total)} in all ({basis})"


def fill_line(report: FillReport) -> str:
    """One line on how the lock cache was filled for the builds."""
    parts = [f"lock cache: {report.needed} files locked, {report.present} already here"]
    if report.fetched:
        parts.append(f"{report.fetched} fetched ({report.bytes_fetched / 1e6:.0f} MB)")
    if report.retried:
        parts.append(f"{report.retried} downloads broken and fetched again")
    if report.corrupted:
        parts.append(f"{report.corrupted} corrupted entries replaced")
    if report.by_image_path:
        parts.append(f"{report.by_image_path} by the images' own apt or pip")
    if report.pruned:
        parts.append(f"{report.pruned} unused entries pruned")
    return ", ".join(parts) + f" in {report.seconds:.1f} s"
