"""Typed reads of a located YAML document that collect a `Problem` per bad field instead of stopping.

Each read returns the value, or None when the field is absent or wrong; the caller goes on reading the
rest of the document, so one run reports every problem at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from typing import Any

from learnerkit.common.yamlfile import FieldPath, LocatedYaml, Problem

QUOTE_HINT = "quote it (YAML reads 1.10 as the number 1.1)"


def describe(value: Any, *, shown: bool = True) -> str:
    """A YAML-flavoured name of what was found, for `expected X, got Y` messages; with ``shown`` false (a
    credential's value), its kind alone."""
    if not shown and value is not None:
        kind = "a boolean" if isinstance(value, bool) else "a number" if isinstance(value, int | float) else "a value"
        return f"{kind} (not repeated here: it is a credential)"
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__} ({value!s})"


class FieldReader:
    """Reads fields out of `doc`, appending to `problems` for each one that is missing or wrong."""

    def __init__(self, doc: LocatedYaml) -> None:
        self.doc = doc
        self.problems: list[Problem] = []

    def fail(self, loc: FieldPath, message: str) -> None:
        self.problems.append(self.doc.problem(loc, message))

    def mapping(self, value: Any, loc: FieldPath, keys: Collection[str]) -> dict[str, Any] | None:
        """`value` if it is a mapping; each key outside `keys` is a problem (and is ignored)."""
        if not isinstance(value, dict):
            self.fail(loc, f"expected a mapping with keys {', '.join(keys)}; got {describe(value)}")
            return None
        for key in value:
            if key not in keys:
                self.fail((*loc, key), f"unknown key {key!r}; valid keys: {', '.join(keys)}")
        return value

    def _present(self, parent: Mapping[str, Any], loc: FieldPath, key: str, required: bool) -> bool:
        if parent.get(key) is not None:
            return True
        if required:
            self.fail((*loc, key), "required" if key not in parent else "required: got an empty value")
        return False

    def string(
        self,
        parent: Mapping[str, Any],
        loc: FieldPath,
        key: str,
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
        pattern_help: str = "",
        secret: bool = False,
    ) -> str | None:
        """A non-blank string, stripped of surrounding whitespace (FfDL's `command: >` ends in a newline); a
        ``secret`` one's value is never quoted in a problem."""
        if not self._present(parent, loc, key, required):
            return None
        value = parent[key]
        if not isinstance(value, str):
            hint = f"; {QUOTE_HINT}" if isinstance(value, int | float) and not isinstance(value, bool) else ""
            self.fail((*loc, key), f"expected a string; got {describe(value, shown=not secret)}{hint}")
            return None
        text = value.strip()
        if not text:
            self.fail((*loc, key), "must not be empty")
            return None
        if pattern is not None and not pattern.fullmatch(text):
            self.fail((*loc, key), f"{'the value' if secret else repr(text)} is not valid: {pattern_help}")
            return None
        return text

    def integer(
        self,
        parent: Mapping[str, Any],
        loc: FieldPath,
        key: str,
        *,
        minimum: int,
        maximum: int | None = None,
        whole_floats: bool = False,
    ) -> int | None:
        """An int in [minimum, maximum]; `whole_floats` also takes 2.0 (FfDL declared gpus as a float)."""
        if not self._present(parent, loc, key, False):
            return None
        value = parent[key]
        if whole_floats and isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail((*loc, key), f"expected a whole number; got {describe(value)}")
            return None
        return self._in_range(value, loc, key, minimum, maximum)

    def _in_range(self, value: int, loc: FieldPath, key: str, minimum: int, maximum: int | None) -> int | None:
        if value < minimum:
            self.fail((*loc, key), f"must be at least {minimum}; got {value}")
            return None
        if maximum is not None and value > maximum:
            self.fail((*loc, key), f"must be at most {maximum}; got {value}")
            return None
        return value

    def positive_number(self, parent: Mapping[str, Any], loc: FieldPath, key: str, *, required: bool) -> float | None:
        """A finite number above zero."""
        if not self._present(parent, loc, key, required):
            return None
        value = parent[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.fail((*loc, key), f"expected a number; got {describe(value)}")
            return None
        if value <= 0:
            self.fail((*loc, key), f"must be more than 0; got {value}")
            return None
        return float(value)

    def boolean(self, parent: Mapping[str, Any], loc: FieldPath, key: str) -> bool | None:
        if not self._present(parent, loc, key, False):
            return None
        value = parent[key]
        if not isinstance(value, bool):
            self.fail((*loc, key), f"expected true or false; got {describe(value)}")
            return None
        return value

    def choice(self, parent: Mapping[str, Any], loc: FieldPath, key: str, choices: Collection[str]) -> str | None:
        value = self.string(parent, loc, key)
        if value is not None and value not in choices:
            self.fail((*loc, key), f"unknown value {value!r}; valid: {', '.join(choices)}")
            return None
        return value

    def json_value(self, value: Any, loc: FieldPath) -> bool:
        """True when `value` is plain JSON data (etcd stores the spec as JSON); else a problem per bad leaf."""
        if isinstance(value, dict):
            return all([self.json_value(item, (*loc, key)) for key, item in value.items()])
        if isinstance(value, list):
            return all([self.json_value(item, (*loc, i)) for i, item in enumerate(value)])
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(loc, f"{value!r} has no JSON form; quote it")
            return False
        if value is None or isinstance(value, str | int | float | bool):
            return True
        self.fail(loc, f"{describe(value)} has no JSON form; quote it")
        return False
