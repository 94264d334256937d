"""Load YAML while remembering the line of every key, so errors can name `file:line: field.path`.

Shared by the build tool (framework.yaml) and the scheduler (manifest.yml); it lives in the root package
because the scheduler must not import the build tool. YAML-level problems (duplicate keys, non-string
keys, recursive aliases) are collected and raised together, like the schema problems of both callers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from learnerkit.common.errors import ConfigError

FieldPath = tuple[str | int, ...]

MAX_DEPTH = 64
"""Deeper nesting is refused: no manifest or framework.yaml needs it, and Python's stack would."""
MAX_NODES = 100_000
"""Aliases can expand a small text into a huge tree ("billion laughs"); stop well before memory does."""
_DEADLINE_EVERY = 256
"""The parser looks at the clock once per this many nodes."""


@dataclass(frozen=True)
class YamlBudget:
    """What reading one document may cost: values (counted while parsing and again while building), and time."""

    max_nodes: int = MAX_NODES
    seconds: float | None = None
    """None: no time limit."""


class _OverBudget(Exception):
    """Between the bounded loader and `parse_located_yaml`: the document costs more than its budget."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, counting nodes as they are composed and looking at the clock now and then."""

    def __init__(self, text: str, budget: YamlBudget) -> None:
        super().__init__(text)
        self._budget = budget
        self._deadline = None if budget.seconds is None else time.monotonic() + budget.seconds
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._nodes += 1
        if self._nodes > self._budget.max_nodes:
            raise _OverBudget(f"more than {self._budget.max_nodes} values")
        if self._deadline is not None and self._nodes % _DEADLINE_EVERY == 0 and time.monotonic() > self._deadline:
            raise _OverBudget(f"reading it took longer than {self._budget.seconds:g} s")
        node: yaml.Node | None = super().compose_node(parent, index)
        return node


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a YAML document: where it is and what is wrong."""

    path: Path
    line: int | None
    loc: FieldPath
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {format_field_path(self.loc)}: {self.message}"


class YamlError(ConfigError):
    """A YAML document cannot be read; `problems` lists every problem found, in line order."""

    def __init__(self, problems: list[Problem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.line or 0, format_field_path(p.loc)))
        super().__init__("\n".join(str(p) for p in ordered))
        self.problems = tuple(ordered)


@dataclass(frozen=True)
class LocatedYaml:
    """A parsed YAML document plus the 1-based line where each field path starts."""

    path: Path
    data: Any
    lines: dict[FieldPath, int] = field(default_factory=dict)

    def line_of(self, loc: FieldPath) -> int | None:
        """The line of the longest prefix of `loc` that the document has."""
        for end in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return None

    def where(self, loc: FieldPath) -> str:
        """`file:line` for a field path, for error messages."""
        line = self.line_of(loc)
        return f"{self.path}:{line}" if line else str(self.path)

    def problem(self, loc: FieldPath, message: str) -> Problem:
        return Problem(path=self.path, line=self.line_of(loc), loc=loc, message=message)


def format_field_path(loc: FieldPath) -> str:
    """`versions["2.13"].variants.cpu.pip` style, readable and unambiguous for keys with dots."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("_", "").replace("-", "").isalnum():
            out += f".{part}" if out else part
        else:
            out += f'["{part}"]'
    return out or "(document)"


def read_yaml_text(path: Path) -> str:
    """The text of `path`; `ConfigError` naming it where it cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})") from e


def load_located_yaml(path: Path, budget: YamlBudget | None = None) -> LocatedYaml:
    """Read and parse `path`; see `parse_located_yaml`."""
    return parse_located_yaml(read_yaml_text(path), path, budget)


def parse_located_yaml(text: str, path: Path, budget: YamlBudget | None = None) -> LocatedYaml:
    """Parse one YAML document; syntax errors and duplicate keys raise `YamlError` naming their lines, and so
    does a document over its ``budget`` (values or time; default: `MAX_NODES`, no time limit)."""
    budget = budget or YamlBudget()
    root = compose_yaml(text, path, budget)
    builder = _Builder(path, budget.max_nodes)
    data = builder.build(root, ()) if root is not None else None
    if builder.problems:
        raise YamlError(builder.problems)
    return LocatedYaml(path=path, data=data, lines=builder.lines)


def compose_yaml(text: str, path: Path, budget: YamlBudget) -> yaml.Node | None:
    """The node tree of one YAML document (None: empty), with the marks of each node's place in ``text``;
    syntax errors and a document over its ``budget`` raise `YamlError` naming their lines."""
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text, budget)
        root: yaml.Node | None = loader.get_single_node()
    except _OverBudget as e:
        raise YamlError([Problem(path, None, (), f"{e}: too large or too complex")]) from e
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise YamlError([Problem(path, line, (), f"YAML syntax error: {e.problem or e.context}")]) from e
    except yaml.YAMLError as e:
        raise YamlError([Problem(path, None, (), f"not YAML text: {e}")]) from e
    except RecursionError as e:
        raise YamlError([Problem(path, None, (), f"nested deeper than {MAX_DEPTH} levels")]) from e
    finally:
        if loader is not None:
            loader.dispose()
    return root


class _Builder:
    """Turns composed nodes into plain Python data, recording lines and collecting problems."""

    def __init__(self, path: Path, max_nodes: int) -> None:
        self.path = path
        self.max_nodes = max_nodes
        self.lines: dict[FieldPath, int] = {(): 1}
        self.problems: list[Problem] = []
        self.loader = yaml.SafeLoader("")
        self.active: set[int] = set()
        self.count = 0

    def _problem(self, node: yaml.Node, loc: FieldPath, message: str) -> None:
        self.problems.append(Problem(self.path, node.start_mark.line + 1, loc, message))

    def build(self, node: yaml.Node, loc: FieldPath) -> Any:
        self.lines.setdefault(loc, node.start_mark.line + 1)
        self.count += 1
        if self.count > self.max_nodes:
            raise YamlError([Problem(self.path, None, (), f"more than {self.max_nodes} values (alias expansion?)")])
        if len(loc) > MAX_DEPTH:
            self._problem(node, loc, f"nested deeper than {MAX_DEPTH} levels")
            return None
        if id(node) in self.active:
            self._problem(node, loc, "recursive alias: a value may not contain itself")
            return None
        if isinstance(node, yaml.MappingNode):
            self.active.add(id(node))
            out = self._mapping(node, loc)
            self.active.discard(id(node))
            return out
        if isinstance(node, yaml.SequenceNode):
            self.active.add(id(node))
            items = [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]
            self.active.discard(id(node))
            return items
        return self._scalar(node, loc)

    def _mapping(self, node: yaml.MappingNode, loc: FieldPath) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self._scalar(key_node, loc) if isinstance(key_node, yaml.ScalarNode) else key_node
            if not isinstance(key, str):
                shown = repr(key) if isinstance(key_node, yaml.ScalarNode) else "a collection"
                self._problem(
                    key_node,
                    loc,
                    f"key {shown} must be a string: quote it (YAML reads 2.10 as the number 2.1)",
                )
                continue
            if key in out:
                self._problem(key_node, (*loc, key), "duplicate key")
                continue
            self.lines[(*loc, key)] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, (*loc, key))
        return out

    def _scalar(self, node: yaml.Node, loc: FieldPath) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.MarkedYAMLError as e:
            self._problem(node, loc, f"cannot read value: {e.problem}")
        except (ValueError, OverflowError) as e:
            # PyYAML's own converters raise these, e.g. for the timestamp 2024-02-30 or `!!int x`.
            self._problem(node, loc, f"cannot read value {node.value!r}: {e}")
        return None
