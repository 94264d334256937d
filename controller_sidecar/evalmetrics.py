"""Training metrics from the learner: FfDL's ``evaluation_metrics`` regex rules, and ``metrics.jsonl``.

FfDL manifests declare how to find metrics in the learner's log (FfDL's ``regex_extractor`` log collector);
learnerkit accepts that section unchanged::

    evaluation_metrics:
      type: regex_extractor        # or tensorboard (controller_sidecar.tensorboard); FfDL also knew
                                   # emetrics_file and simple_log_collector, and aliases (COLLECTOR_ALIASES)
      in: "$JOB_STATE_DIR/logs"    # regex rules always read learner.log; tensorboard: the event folder
      line_lookahead: 4            # a rule's regex may span this many lines (FfDL's default: 4)
      eventTypes: [scalars]
      groups:
        train:                     # the group's name labels its metrics: train/loss
          regex: "%{GLOG_STAMP:time}.*Iteration %{INT:iteration}, loss = %{FLOAT:loss}"
          meta: {time: "$time"}
          scalars:                 # FfDL also accepted "values"
            loss: {type: FLOAT, value: "$loss"}
          etimes:
            iteration: {type: INT, value: "$iteration"}

``%{SYMBOL}`` and ``%{SYMBOL:name}`` expand to the pattern library below (``name`` becomes a named group);
``$name`` refers to a named group, anything else is a literal. As in FfDL, a regex is matched (``re.match``,
MULTILINE and DOTALL) at the start of a window of the last ``line_lookahead`` lines; unlike FfDL, a match
drops only the lines it covered, and lines nothing matched are dropped once the window is full, so no line
is skipped. Only INT and FLOAT values are metrics; the first INT ``etimes`` value is the step.

The rules come from the job's manifest and run on every log line inside the sidecar, so a pattern that
backtracks catastrophically (``(a+)+$`` on a long line) must not pin it: rules are compiled with the
``regex`` package (the syntax of ``re``) and every match gets :data:`MATCH_TIMEOUT_S`. A rule that runs
out of it is disabled for the rest of the job, with one warning; the other rules and the job go on.
"""

from __future__ import annotations

import logging
import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import regex

from controller_sidecar.clock import SYSTEM_CLOCK, Clock
from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.metricrecords import parse_record

LOGGER = logging.getLogger(__name__)

FIELD = "evaluation_metrics"
DEFAULT_LINE_LOOKAHEAD = 4
MATCH_TIMEOUT_S = 0.25
"""One match of one rule; a sane rule needs microseconds on a window of a few lines."""
COLLECTOR_TYPES = frozenset({"regex_extractor", "tensorboard", "emetrics_file", "simple_log_collector"})
"""FfDL's log collectors. ``regex_extractor`` has rules here, ``tensorboard`` is read by
:mod:`controller_sidecar.tensorboard`; the learner's metrics.jsonl is always read."""
COLLECTOR_ALIASES: Mapping[str, str] = {
    "logger": "simple_log_collector",
    "none": "simple_log_collector",
    "null": "simple_log_collector",
    "nil": "simple_log_collector",
    "tensorboard_extractor": "tensorboard",
    "optivist": "emetrics_file",
    "file": "emetrics_file",
}
"""The other names FfDL's collector selection read (its LCM's switch on ``type``), and the collector each meant."""


def collector_type(raw: object, has_groups: bool, field: str = FIELD) -> str:
    """The collector a section's ``type`` selects, FfDL's aliases mapped. Without a type (or YAML's null) FfDL
    collected logs only; a section that has regex ``groups`` keeps learnerkit's reading, ``regex_extractor``."""
    if raw is None:
        return "regex_extractor" if has_groups else "simple_log_collector"
    kind = _text(raw, f"{field}.type")
    kind = COLLECTOR_ALIASES.get(kind.lower(), kind)
    if kind not in COLLECTOR_TYPES:
        known = sorted(COLLECTOR_TYPES | COLLECTOR_ALIASES.keys())
        raise SidecarConfigError(f"{field}.type: must be one of {known}, got {kind!r}")
    return kind


PATTERNS: Mapping[str, str] = {
    "GLOG_STAMP": r"[EFIW]\d{4}\s+\d\d:\d\d:\d+\.\d+",
    "TIMESTAMP": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[-+]\d\d:\d\d)",
    "FLOAT": r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?",
    "INT": r"[-+]?\d+",
    "INT_ANY": r"[-+]?(?:0[xX][\dA-Fa-f]+|0[0-7]*|\d+)",
    "HEX": r"[-+]?(?:0[xX])?[\dA-Fa-f]+",
}
"""The symbols FfDL's regex extractor provided (its ``patterns/common-patterns``), written here afresh."""
_SYMBOL = re.compile(r"%\{(\w+)(?::(\w+))?\}")


class ValueType(StrEnum):
    INT = "INT"
    FLOAT = "FLOAT"
    STRING = "STRING"
    JSONSTRING = "JSONSTRING"


@dataclass(frozen=True)
class ValueRule:
    """One ``scalars``/``etimes`` entry: ``$group`` (a named group of the regex) or a literal."""

    key: str
    type: ValueType
    value: str

    def resolve(self, groups: Mapping[str, str | None]) -> str | None:
        return groups.get(self.value[1:]) if self.value.startswith("$") else self.value

    def number(self, groups: Mapping[str, str | None]) -> float | None:
        """The value as a finite number, or None (a STRING value, or text that is no number)."""
        if self.type not in (ValueType.INT, ValueType.FLOAT):
            return None
        text = self.resolve(groups) or ""
        try:
            number = float(text)
        except ValueError:
            try:
                number = float(int(text, 0))  # INT_ANY and HEX: 0x1f, 017
            except ValueError:
                return None
        return number if math.isfinite(number) else None


@dataclass(frozen=True)
class RegexGroup:
    name: str
    regex: regex.Pattern[str]
    meta: tuple[tuple[str, str], ...] = ()
    scalars: tuple[ValueRule, ...] = ()
    etimes: tuple[ValueRule, ...] = ()


@dataclass(frozen=True)
class EvaluationMetrics:
    type: str
    location: str | None = None
    """FfDL's ``in``."""
    line_lookahead: int = DEFAULT_LINE_LOOKAHEAD
    event_types: tuple[str, ...] = ()
    groups: tuple[RegexGroup, ...] = ()


@dataclass(frozen=True)
class MetricUpdate:
    name: str
    """``<group>/<scalar>`` from a regex rule; the key of ``values`` from metrics.jsonl."""
    value: float
    step: int | None
    time: float
    """Seconds since the epoch: the learner's own time from metrics.jsonl, else when the line was read."""


def parse_evaluation_metrics(raw: object, field: str = FIELD) -> EvaluationMetrics | None:
    """Check and compile an ``evaluation_metrics`` section; None when there is none.

    Raises SidecarConfigError whose message starts with the field path (``evaluation_metrics.groups.train.regex``).
    """
    if raw is None:
        return None
    section = _mapping(raw, field)
    kind = collector_type(section.get("type"), bool(section.get("groups")), field)
    location = section.get("in")
    lookahead = section.get("line_lookahead", section.get("linelookahead", DEFAULT_LINE_LOOKAHEAD))
    if isinstance(lookahead, bool) or not isinstance(lookahead, int | str) or not str(lookahead).isdigit():
        raise SidecarConfigError(f"{field}.line_lookahead: must be a positive integer, got {lookahead!r}")
    if int(lookahead) < 1:
        raise SidecarConfigError(f"{field}.line_lookahead: must be a positive integer, got {lookahead!r}")
    events_key = "eventTypes" if "eventTypes" in section else "event_types"
    events = section.get(events_key) or []
    if not isinstance(events, list) or not all(isinstance(event, str) for event in events):
        raise SidecarConfigError(f"{field}.{events_key}: must be a list of strings, got {events!r}")
    raw_groups = section.get("groups")
    if kind == "regex_extractor" and not raw_groups:
        raise SidecarConfigError(f"{field}.groups: a regex_extractor needs at least one group")
    groups = tuple(
        _group(str(name), body, f"{field}.groups.{name}")
        for name, body in _mapping(raw_groups or {}, f"{field}.groups").items()
    )
    return EvaluationMetrics(
        type=kind,
        location=None if location is None else _text(location, f"{field}.in"),
        line_lookahead=int(lookahead),
        event_types=tuple(events),
        groups=groups,
    )


def expand_symbols(pattern: str, field: str) -> str:
    """Replace ``%{SYMBOL:name}`` by a named group and ``%{SYMBOL}`` by a plain group of the library pattern."""

    def substitute(match: re.Match[str]) -> str:
        symbol, name = match.group(1), match.group(2)
        if symbol not in PATTERNS:
            raise SidecarConfigError(f"{field}: unknown pattern %{{{symbol}}}; known: {', '.join(sorted(PATTERNS))}")
        return f"(?P<{name}>{PATTERNS[symbol]})" if name else f"(?:{PATTERNS[symbol]})"

    return _SYMBOL.sub(substitute, pattern)


def _group(name: str, raw: object, field: str) -> RegexGroup:
    body = _mapping(raw, field)
    source = _text(body.get("regex"), f"{field}.regex")
    try:
        pattern = regex.compile(expand_symbols(source, f"{field}.regex"), regex.MULTILINE | regex.DOTALL)
    except regex.error as error:
        raise SidecarConfigError(f"{field}.regex: {error} in {source!r}") from error
    scalars_key = "scalars" if "scalars" in body else "values"
    scalars = _values(body.get(scalars_key), f"{field}.{scalars_key}", pattern)
    if not scalars:
        raise SidecarConfigError(f"{field}.scalars: a group needs at least one scalar")
    meta = _mapping(body.get("meta") or {}, f"{field}.meta")
    return RegexGroup(
        name=name,
        regex=pattern,
        meta=tuple((str(key), _text(value, f"{field}.meta.{key}")) for key, value in meta.items()),
        scalars=scalars,
        etimes=_values(body.get("etimes"), f"{field}.etimes", pattern),
    )


def _values(raw: object, field: str, pattern: regex.Pattern[str]) -> tuple[ValueRule, ...]:
    rules: list[ValueRule] = []
    for key, item in _mapping(raw or {}, field).items():
        where = f"{field}.{key}"
        if isinstance(item, str):  # shorthand: `loss: $loss` is a FLOAT
            kind, value = ValueType.FLOAT.value, item
        else:
            entry = _mapping(item, where)
            kind = _text(entry.get("type", ValueType.FLOAT.value), f"{where}.type").upper()
            value = _text(entry.get("value"), f"{where}.value")
        if kind not in ValueType.__members__:
            raise SidecarConfigError(f"{where}.type: must be one of {', '.join(ValueType)}, got {kind!r}")
        if value.startswith("$") and value[1:] not in pattern.groupindex:
            known = ", ".join(sorted(pattern.groupindex)) or "none"
            raise SidecarConfigError(f"{where}.value: {value!r} names no group of the regex (groups: {known})")
        rules.append(ValueRule(str(key), ValueType(kind), value))
    return tuple(rules)


def _mapping(raw: object, field: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise SidecarConfigError(f"{field}: must be a mapping, got {type(raw).__name__}")
    return raw


def _text(raw: object, field: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise SidecarConfigError(f"{field}: must be a non-empty string, got {raw!r}")
    return raw


class MetricsParser:
    """Turns log lines (by the rules) and metrics.jsonl lines into metric updates; keeps the latest values."""

    def __init__(
        self, rules: EvaluationMetrics | None, *, clock: Clock = SYSTEM_CLOCK, match_timeout_s: float = MATCH_TIMEOUT_S
    ) -> None:
        self._groups = rules.groups if rules is not None else ()
        self._window: deque[str] = deque()
        self._lookahead = rules.line_lookahead if rules is not None else DEFAULT_LINE_LOOKAHEAD
        self._clock = clock
        self._match_timeout_s = match_timeout_s
        self._latest: dict[str, float] = {}
        self.malformed = 0
        """metrics.jsonl lines that were skipped."""
        self.disabled: list[str] = []
        """The rules (group names) that ran out of their time budget and match no more."""

    def latest(self) -> dict[str, float]:
        return dict(self._latest)

    def feed_log_line(self, line: bytes) -> list[MetricUpdate]:
        """One line of learner.log (a piece of a longer line works too: it joins the window as text)."""
        if not self._groups:
            return []
        text = line.decode("utf-8", errors="replace")
        if not text.endswith("\n"):
            text += "\n"
        self._window.append(text)
        updates = self._match_window()
        if len(self._window) >= self._lookahead:
            self._window.popleft()  # nothing starting at this line can match any more
            updates += self._match_window()
        return updates

    def flush_log(self) -> list[MetricUpdate]:
        """At the end of the log: try the lines still waiting for their lookahead."""
        updates: list[MetricUpdate] = []
        while self._window:
            updates += self._match_window()
            if self._window:
                self._window.popleft()
        return updates

    def _match_window(self) -> list[MetricUpdate]:
        updates: list[MetricUpdate] = []
        while self._window:
            window = "".join(self._window)
            for group in self._groups:
                match = self._match(group, window)
                if match is not None and match.end() > 0:
                    updates += self._updates(group, match.groupdict())
                    self._drop(match.end())
                    break
            else:
                return updates
        return updates

    def _match(self, group: RegexGroup, window: str) -> regex.Match[str] | None:
        try:
            return group.regex.match(window, timeout=self._match_timeout_s)
        except TimeoutError:
            LOGGER.warning(
                "%s.groups.%s: one match took longer than %gs on a window of %d characters; the rule is disabled",
                FIELD,
                group.name,
                self._match_timeout_s,
                len(window),
            )
            self.disabled.append(group.name)
            self._groups = tuple(other for other in self._groups if other is not group)
            return None

    def _drop(self, end: int) -> None:
        """Drop every line the match touched (``end`` > 0: at least the first)."""
        start = 0
        while self._window and start < end:
            start += len(self._window.popleft())

    def _updates(self, group: RegexGroup, values: Mapping[str, str | None]) -> list[MetricUpdate]:
        now = self._clock.wall()
        steps = (rule.number(values) for rule in group.etimes if rule.type is ValueType.INT)
        step = next((int(number) for number in steps if number is not None), None)
        updates = []
        for rule in group.scalars:
            number = rule.number(values)
            if number is not None:
                updates.append(MetricUpdate(f"{group.name}/{rule.key}", number, step, now))
        return self.remember(updates)

    def feed_jsonl_line(self, line: bytes) -> list[MetricUpdate]:
        """One line of metrics.jsonl: ``{"step": 40, "time": 1718000000.5, "values": {"loss": 0.25}}``.

        A bad line (:mod:`controller_sidecar.metricrecords`: too long, too deep, no record) is counted in
        ``malformed`` and skipped; the first one is logged.
        """
        if not line.strip():
            return []
        record = parse_record(line)
        if record is None:
            self.malformed += 1
            if self.malformed == 1:
                LOGGER.warning("skipping bad metrics.jsonl lines (this one starts %r); they are counted", line[:80])
            return []
        step, moment = record.get("step"), record.get("time", self._clock.wall())
        updates = [
            MetricUpdate(str(name), float(value), step, float(moment))
            for name, value in record["values"].items()
            if _is_number(value) and math.isfinite(value)
        ]
        return self.remember(updates)

    def remember(self, updates: list[MetricUpdate]) -> list[MetricUpdate]:
        """Keep the updates' values as the latest (every source: the log, metrics.jsonl, TensorBoard events)."""
        for update in updates:
            self._latest[update.name] = update.value
        return updates


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
