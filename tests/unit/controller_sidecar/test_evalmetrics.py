"""FfDL's evaluation_metrics section, accepted unchanged, and the learner helper's metrics.jsonl."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import learner
from controller_sidecar.errors import SidecarConfigError
from controller_sidecar.evalmetrics import MetricsParser, MetricUpdate, ValueType, parse_evaluation_metrics
from tests.fakeclock import FakeClock

pytestmark = pytest.mark.timeout(30)

# The layout of FfDL's etc/examples/*/manifest.yml files (a TensorBoard collector, as FfDL's tf-model example).
FFDL_TENSORBOARD_MANIFEST = """
name: tf_convolutional_network_tutorial
version: "1.0"
framework:
  name: tensorflow
  version: "1.5.0-py3"
  command: python3 convolutional_network.py
evaluation_metrics:
  type: tensorboard
  in: "$JOB_STATE_DIR/logs/tb"
  # (Eventual) Available event types: 'images', 'distributions', 'histograms', 'scalars', ...
  #  event_types: [scalars]
"""

# FfDL's regex_extractor (metrics/log_collectors/regex_extractor): groups of a regex with %{SYMBOL:name}
# references, and scalars/etimes entries of {type, value} where value "$name" is a named group.
FFDL_REGEX_MANIFEST = r"""
evaluation_metrics:
  type: regex_extractor
  in: "$JOB_STATE_DIR/logs"
  line_lookahead: 4
  eventTypes:
    - scalars
  groups:
    train:
      regex: '%{GLOG_STAMP:time}\s+%{INT}\s+solver\.cpp:\d+\]\s+Iteration %{INT:iteration}[^\n]*?, loss = %{FLOAT:loss}'
      meta:
        time: "$time"
      scalars:
        loss: {type: FLOAT, value: "$loss"}
      etimes:
        iteration: {type: INT, value: "$iteration"}
        time: {type: STRING, value: "$time"}
    test:
      regex: >-
        %{GLOG_STAMP}[^\n]*?Iteration %{INT:iteration}, Testing net \(#0\)\n.*?accuracy =
        %{FLOAT:accuracy}\n.*?loss = %{FLOAT:loss}
      scalars:
        accuracy: {type: FLOAT, value: "$accuracy"}
        loss: {type: FLOAT, value: "$loss"}
      etimes:
        iteration: {type: INT, value: "$iteration"}
"""

CAFFE_LOG = b"""\
I0612 10:00:01.123456  1234 solver.cpp:218] Iteration 100 (12.3 iter/s, 8.1s/100 iters), loss = 0.2345
I0612 10:00:01.123460  1234 solver.cpp:237]     Train net output #0: loss = 0.2345 (* 1 = 0.2345 loss)
I0612 10:00:02.000000  1234 solver.cpp:330] Iteration 500, Testing net (#0)
I0612 10:00:03.000000  1234 solver.cpp:397]     Test net output #0: accuracy = 0.9712
I0612 10:00:03.000001  1234 solver.cpp:397]     Test net output #1: loss = 0.0891 (* 1 = 0.0891 loss)
I0612 10:00:04.000000  1234 solver.cpp:218] Iteration 600 (12.1 iter/s, 8.2s/100 iters), loss = 0.1875
"""


def section(text: str) -> object:
    return yaml.safe_load(text)["evaluation_metrics"]


def test_ffdl_tensorboard_section_is_accepted_unchanged() -> None:
    rules = parse_evaluation_metrics(section(FFDL_TENSORBOARD_MANIFEST))
    assert rules is not None
    assert (rules.type, rules.location, rules.groups) == ("tensorboard", "$JOB_STATE_DIR/logs/tb", ())
    assert parse_evaluation_metrics(None) is None


def test_ffdl_regex_rules_parse_into_frozen_dataclasses() -> None:
    rules = parse_evaluation_metrics(section(FFDL_REGEX_MANIFEST))
    assert rules is not None
    assert (rules.type, rules.line_lookahead, rules.event_types) == ("regex_extractor", 4, ("scalars",))
    train = rules.groups[0]
    assert train.name == "train"
    assert train.meta == (("time", "$time"),)
    assert [(rule.key, rule.type, rule.value) for rule in train.etimes] == [
        ("iteration", ValueType.INT, "$iteration"),
        ("time", ValueType.STRING, "$time"),
    ]
    with pytest.raises(AttributeError):
        train.name = "other"  # type: ignore[misc]


def test_regex_rules_extract_single_and_multi_line_metrics() -> None:
    clock = FakeClock()
    parser = MetricsParser(parse_evaluation_metrics(section(FFDL_REGEX_MANIFEST)), clock=clock)
    updates: list[MetricUpdate] = []
    for line in CAFFE_LOG.splitlines(keepends=True):
        updates += parser.feed_log_line(line)
    updates += parser.flush_log()
    assert [(u.name, u.value, u.step) for u in updates] == [
        ("train/loss", 0.2345, 100),
        ("test/accuracy", 0.9712, 500),
        ("test/loss", 0.0891, 500),
        ("train/loss", 0.1875, 600),
    ]
    assert {u.time for u in updates} == {clock.wall()}
    assert parser.latest() == {"train/loss": 0.1875, "test/accuracy": 0.9712, "test/loss": 0.0891}


def test_shorthand_values_and_linelookahead_spelling() -> None:
    raw = {"linelookahead": 2, "groups": {"g": {"regex": r"acc=%{FLOAT:acc}", "values": {"acc": "$acc"}}}}
    rules = parse_evaluation_metrics(raw)
    assert rules is not None and rules.line_lookahead == 2
    parser = MetricsParser(rules)
    assert [u.value for u in parser.feed_log_line(b"acc=0.5\n")] == [0.5]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda em: em["groups"]["train"].update(regex="Iteration (%{INT:it}"),
            r"evaluation_metrics\.groups\.train\.regex: missing \) .*Iteration \(%\{INT:it\}",
        ),
        (
            lambda em: em["groups"]["train"].update(regex="%{NOPE:x}"),
            r"evaluation_metrics\.groups\.train\.regex: unknown pattern %\{NOPE\}",
        ),
        (
            lambda em: em["groups"]["train"]["scalars"]["loss"].update(value="$lost"),
            r"evaluation_metrics\.groups\.train\.scalars\.loss\.value: '\$lost' names no group",
        ),
        (
            lambda em: em["groups"]["test"]["etimes"]["iteration"].update(type="DATE"),
            r"evaluation_metrics\.groups\.test\.etimes\.iteration\.type: must be one of",
        ),
        (lambda em: em.update(line_lookahead=0), r"evaluation_metrics\.line_lookahead: must be a positive integer"),
        (lambda em: em.update(type="optimizer"), r"evaluation_metrics\.type: must be one of"),
        (lambda em: em.update(groups=["train"]), r"evaluation_metrics\.groups: must be a mapping"),
        (
            lambda em: em["groups"]["train"].pop("regex"),
            r"evaluation_metrics\.groups\.train\.regex: must be a non-empty string",
        ),
        (lambda em: em["groups"]["train"].pop("scalars"), r"evaluation_metrics\.groups\.train\.scalars: a group needs"),
    ],
)
def test_bad_rules_name_the_field(change: object, message: str) -> None:
    raw = section(FFDL_REGEX_MANIFEST)
    change(raw)  # type: ignore[operator]
    with pytest.raises(SidecarConfigError, match=message):
        parse_evaluation_metrics(raw)


def test_jsonl_from_the_learner_helper_with_malformed_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOG_DIR", str(tmp_path))
    learner.log_metrics(40, loss=0.25, accuracy=0.75)
    learner.log_metrics(41, loss=0.125)
    lines = (tmp_path / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    malformed = [b"{not json\n", b'{"values": 3}\n', b'{"step": true, "values": {"loss": 1}}\n', b"[]\n", b"\xff\n"]
    parser = MetricsParser(None)
    updates = []
    for line in [lines[0], *malformed, b"\n", lines[1]]:
        updates += parser.feed_jsonl_line(line)
    assert [(u.name, u.value, u.step) for u in updates] == [
        ("loss", 0.25, 40),
        ("accuracy", 0.75, 40),
        ("loss", 0.125, 41),
    ]
    assert all(u.time > 1_600_000_000 for u in updates)
    assert parser.malformed == len(malformed)
    assert parser.latest() == {"loss": 0.125, "accuracy": 0.75}
    assert parser.feed_log_line(b"loss = 3\n") == []  # no regex rules: log lines carry no metrics


def test_a_catastrophic_rule_is_disabled_and_the_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    rules = parse_evaluation_metrics(
        {
            "type": "regex_extractor",
            "groups": {
                "evil": {"regex": r"(a+)+$", "scalars": {"n": "1"}},
                "loss": {"regex": r"loss = %{FLOAT:loss}", "scalars": {"loss": "$loss"}},
            },
        }
    )
    parser = MetricsParser(rules, clock=FakeClock())
    caplog.set_level("WARNING", logger="controller_sidecar.evalmetrics")
    parser.feed_log_line(b"a" * 100_000 + b"b\n")
    for _ in range(5):
        parser.feed_log_line(b"a" * 100_000 + b"b\n")
        parser.feed_log_line(b"loss = 0.5\n")
    parser.flush_log()
    assert parser.disabled == ["evil"]
    assert parser.latest() == {"loss/loss": 0.5}
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "evaluation_metrics.groups.evil" in warnings[0] and "disabled" in warnings[0]
