"""Published schemas the tests validate against (copies: tests may not fetch; README.md names each source)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

OPENVEX_SCHEMA = Path(__file__).parent / "openvex_json_schema_0.2.0.json"


def assert_valid_openvex(document: dict[str, Any]) -> None:
    """The document is valid OpenVEX 0.2.0 by the spec's JSON schema; the failure lists every error by path."""
    validator = Draft202012Validator(json.loads(OPENVEX_SCHEMA.read_text(encoding="utf-8")))
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]
    assert not errors, "not valid OpenVEX 0.2.0: " + "; ".join(errors)
