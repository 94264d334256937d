"""pip's failures read into one line, for the shapes the real-pip tests cannot make quickly (a read timeout takes
pip minutes of retries; an unknown error). The shapes real pip makes are in test_requirements.py and the HTTPS
index test."""

from __future__ import annotations

from controller_sidecar.pipfailure import failure_reason

TIMED_OUT = """\
WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by \
'ReadTimeoutError("HTTPSConnectionPool(host='idx.local', port=443): Read timed out. (read timeout=15)")': \
/simple/tabulate/
ERROR: Could not find a version that satisfies the requirement tabulate==0.9.0 (from versions: none)
ERROR: No matching distribution found for tabulate==0.9.0
"""


def test_a_read_timeout_names_the_requirement_and_the_index_page() -> None:
    reason = failure_reason(TIMED_OUT, ["tabulate==0.9.0"], ["https://idx.local/simple"])
    assert reason == "tabulate==0.9.0: cannot reach https://idx.local/simple/tabulate/ (timed out)"


def test_an_unknown_failure_gives_pips_last_error_line_on_one_line() -> None:
    output = "Collecting x\nERROR: first\nERROR: Wheel 'x' located at /tmp/x.whl is invalid.\n"
    assert failure_reason(output) == "Wheel 'x' located at /tmp/x.whl is invalid."
    assert failure_reason("") == "pip failed without a word"


def test_a_requirement_pip_names_by_its_line_is_named_by_its_text() -> None:
    output = (
        "ERROR: Cannot install -r /job/model/requirements.txt (line 2) because these package versions have "
        "conflicting dependencies.\n\nThe conflict is caused by:\n    lkclash 1.0 depends on numpy<2\n"
        "    The user requested (constraint) numpy==2.4.6\n\nTo fix this you could try to:\n"
    )
    lines = ["# tools", "lkclash==1.0  # the clash"]
    assert failure_reason(output, lines) == (
        "lkclash==1.0: conflicting requirements (lkclash 1.0 depends on numpy<2; the image's locked numpy==2.4.6)"
    )
