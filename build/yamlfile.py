"""Load YAML while remembering the line of every key, so errors can name `file:line field.path`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from learnerkit_build.errors import SpecError

FieldPath = tuple[str | int, ...]


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


def load_located_yaml(path: Path) -> LocatedYaml:
    """Parse `path`; syntax errors and duplicate keys become `SpecError`s naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"{path}: cannot read: {e.strerror}") from e
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else "?"
        raise SpecError(f"{path}:{line}: YAML syntax error: {e.problem}") from e
    lines: dict[FieldPath, int] = {(): 1}
    loader = yaml.SafeLoader("")
    data = _construct(root, (), lines, loader, path) if root is not None else None
    return LocatedYaml(path=path, data=data, lines=lines)


def _construct(
    node: yaml.Node, loc: FieldPath, lines: dict[FieldPath, int], loader: yaml.SafeLoader, path: Path
) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise SpecError(
                    f"{path}:{key_node.start_mark.line + 1}: key {key!r} under "
                    f"{format_field_path(loc)} must be a string: quote it (YAML reads 2.10 as the number 2.1)"
                )
            if key in out:
                raise SpecError(
                    f"{path}:{key_node.start_mark.line + 1}: duplicate key {format_field_path((*loc, key))}"
                )
            lines[(*loc, key)] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, (*loc, key), lines, loader, path)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, (*loc, i), lines, loader, path) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)
