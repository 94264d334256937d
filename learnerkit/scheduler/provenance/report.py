"""What `job verify` found, item by item, and whether that verifies the job."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class State(StrEnum):
    OK = "ok"
    CHANGED = "changed"
    MISSING = "missing"
    """A signed subject the folder does not hold."""
    INCOMPLETE = "incomplete"
    """The statement names learners whose records the platform does not hold."""
    NOT_CHECKED = "not checked"
    UNSIGNED = "unsigned"
    """A file in the folder that no statement names."""


@dataclass(frozen=True)
class Check:
    item: str
    """What was checked: ``result attempt-1/learner-1/results/model.bin``, ``manifest``, ``learner image``, ..."""
    state: State
    detail: str = ""


@dataclass
class VerifyReport:
    folder: str
    key_id: str
    checks: list[Check] = field(default_factory=list)
    partial: bool = False
    """Verify what is there: missing subjects and an incomplete statement are reported, not failed."""

    def _in(self, *states: State) -> list[Check]:
        return [check for check in self.checks if check.state in states]

    @property
    def changed(self) -> list[Check]:
        return self._in(State.CHANGED)

    @property
    def failed(self) -> list[Check]:
        """What makes the verification fail."""
        return self._in(State.CHANGED) if self.partial else self._in(State.CHANGED, State.MISSING, State.INCOMPLETE)

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "folder": self.folder,
            "key_id": self.key_id,
            "verified": self.ok,
            "partial": self.partial,
            "complete": not self._in(State.INCOMPLETE),
            "changed": [c.item for c in self.changed],
            "missing": [c.item for c in self._in(State.MISSING)],
            "unsigned": [c.item for c in self._in(State.UNSIGNED)],
            "checks": [{"item": c.item, "state": c.state.value, "detail": c.detail} for c in self.checks],
        }


def folded_unsigned(checks: Sequence[Check]) -> list[tuple[str, str, str]]:
    """(state, item, detail) lines of a report for people: the unsigned files of one folder (a learner's
    checkpoints) as one line with their count, where there are several; `--output json` names every file."""
    unsigned: dict[str, list[Check]] = {}
    for check in checks:
        if check.state is State.UNSIGNED:
            unsigned.setdefault(posixpath.dirname(check.item.removeprefix("file ")), []).append(check)
    lines = []
    for check in checks:
        if check.state is not State.UNSIGNED:
            lines.append((check.state.value, check.item, check.detail))
            continue
        folder = posixpath.dirname(check.item.removeprefix("file "))
        group = unsigned[folder]
        if len(group) == 1:
            lines.append((check.state.value, check.item, check.detail))
        elif group[0] is check:
            where = f"{folder}/" if folder else "the folder"
            lines.append(
                (check.state.value, f"{len(group)} files in {where}", "no statement names them (not verified)")
            )
    return lines
