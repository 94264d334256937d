"""Fill `${NAME}` references in a YAML document's values from an environment, on the client, keeping its lines.

Each reference is expanded inside a scalar value as YAML reads it, never in the raw text, and the value is
written back in place of the scalar as one safely quoted scalar: a value holding `: `, `#` or a line break
cannot change the document's structure. The line breaks a multi-line scalar spanned stay in the text, so every
later line keeps its number and errors still point at the user's file. The rules (docs/manifests.md):

- `${NAME}` is the variable's value; an unset one is an error naming the file, the line and the variable.
- `${NAME:-default}`: the default where NAME is unset or empty; `${NAME-default}`: only where it is unset.
- `$$` is a literal `$` (`$${NAME}` stays `${NAME}`); any other `$` (`$NAME` bare) is left as it is.
- A plain (unquoted) scalar takes the type its expanded text has in YAML (`cpus: ${CPUS}` is a number); a
  quoted or block scalar, or one with an explicit tag, stays what it was written as. Keys are never expanded.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from learnerkit.common.yamlfile import MAX_DEPTH, FieldPath, Problem, YamlBudget, YamlError, compose_yaml

_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|(\{))")
"""`$$`, a braced reference, or an unclosed `${`; any other `$` is text."""
_BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>.*))?", re.DOTALL)
_FORMS = "${NAME}, ${NAME:-default} or ${NAME-default}; $${ writes a literal ${"
_TYPED = frozenset(f"tag:yaml.org,2002:{name}" for name in ("bool", "int", "float", "null", "timestamp"))
"""The implicit types a plain scalar may resolve to; any other (`<<`, `=`) is kept as text."""
_SIMPLE = re.compile(r"[A-Za-z0-9._+-]+")
"""A typed value made only of these is written plain (`4`, `true`, `.inf`); others get an explicit tag."""
_BREAKS = re.compile(r"\r\n|[\r\n\x85\u2028\u2029]")
_STR = "tag:yaml.org,2002:str"
_RESOLVER = yaml.resolver.Resolver()


@dataclass(frozen=True)
class ExpandedYaml:
    """A document's text with its references filled in, line for line the same, and the values that are secret."""

    text: str
    secrets: frozenset[str]
    """The expanded values placed where ``secret`` said: never to be shown (`mask`)."""

    def mask(self, message: str) -> str:
        """``message`` with every secret replaced by `***`."""
        for value in sorted(self.secrets, key=len, reverse=True):
            message = message.replace(value, "***")
        return message

    def masked(self, error: YamlError) -> YamlError:
        """``error``'s problems (of the same class) with their secrets masked."""
        problems = [Problem(p.path, p.line, p.loc, self.mask(p.message)) if self.secrets else p for p in error.problems]
        return type(error)(problems)


def expand_yaml(
    text: str,
    path: Path,
    environ: Mapping[str, str],
    budget: YamlBudget,
    *,
    verbatim: Collection[FieldPath] = (),
    secret: Callable[[FieldPath], bool] = lambda _loc: False,
) -> ExpandedYaml:
    """``text`` (the document at ``path``) with each `${NAME}` in its values filled from ``environ``. Values
    under a field path in ``verbatim`` are left as written (another program expands them later); values at a
    path where ``secret`` is true are listed as secrets. Raises `YamlError` listing every bad or unset reference,
    with its line and field, or the document's syntax errors, as the parser words them."""
    root = compose_yaml(text, path, budget)
    if root is None:
        return ExpandedYaml(text, frozenset())
    tokens = _scalar_tokens(text)
    edits: dict[int, tuple[int, str]] = {}
    problems: list[Problem] = []
    secrets: set[str] = set()
    places: dict[int, tuple[yaml.ScalarNode, list[FieldPath]]] = {}
    for node, loc in _scalars(root, path, budget.max_nodes):
        places.setdefault(id(node), (node, []))[1].append(loc)  # an anchored value is one node at each alias
    for node, locs in places.values():
        if "$" not in node.value or any(loc[: len(prefix)] == prefix for loc in locs for prefix in verbatim):
            continue
        value, wrong = _expand(node.value, environ)
        problems += [Problem(path, node.start_mark.line + 1, locs[0], message) for message in wrong]
        if wrong or value == node.value:
            continue
        end = node.end_mark.index
        start, tagged = tokens[end]
        edits[start] = (end, _rendered(value, node.style is None and not tagged, text[start:end]))
        if value and any(secret(loc) for loc in locs):
            secrets.add(value)
    if problems:
        raise YamlError(problems)
    out, at = [], 0
    for start in sorted(edits):
        end, replacement = edits[start]
        out += [text[at:start], replacement]
        at = end
    return ExpandedYaml("".join([*out, text[at:]]), frozenset(secrets))


def _scalar_tokens(text: str) -> dict[int, tuple[int, bool]]:
    """Where each scalar token ends -> where it starts (a node's start mark would include its anchor and tag),
    and whether it has an explicit tag."""
    found: dict[int, tuple[int, bool]] = {}
    tagged = False
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, yaml.ScalarToken):
            found[token.end_mark.index] = (token.start_mark.index, tagged)
        tagged = isinstance(token, yaml.TagToken) or (tagged and isinstance(token, yaml.AnchorToken))
    return found


def _scalars(root: yaml.Node, path: Path, max_nodes: int) -> list[tuple[yaml.ScalarNode, FieldPath]]:
    """Each value scalar with its field path, an aliased one once per place; keys are not values. Like the
    parser, it stops after ``max_nodes`` places: a few aliases can stand for billions of them."""
    found: list[tuple[yaml.ScalarNode, FieldPath]] = []
    active: set[int] = set()
    count = 0

    def walk(node: yaml.Node, loc: FieldPath) -> None:
        nonlocal count
        count += 1
        if count > max_nodes:
            raise YamlError([Problem(path, None, (), f"more than {max_nodes} values (alias expansion?)")])
        if isinstance(node, yaml.ScalarNode):
            found.append((node, loc))
            return
        if id(node) in active or len(loc) > MAX_DEPTH:
            return  # the parser reports the recursive alias or the depth
        active.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, (*loc, key.value if isinstance(key, yaml.ScalarNode) else "?"))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*loc, index))
        active.discard(id(node))

    walk(root, ())
    return found


def _expand(value: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """``value`` with its references filled in, and what is wrong with each reference that cannot be."""
    wrong: list[str] = []

    def one(match: re.Match[str]) -> str:
        dollar, body, unclosed = match.groups()
        if dollar:
            return "$"
        form = None if unclosed else _BRACED.fullmatch(body)
        if form is None:
            shown = "'${' is not closed by '}'" if unclosed else f"'${{{body}}}' is not a reference"
            wrong.append(f"{shown}; expected {_FORMS}")
            return ""
        name, op, default = form.group("name", "op", "default")
        found = environ.get(name)
        if (op == ":-" and not found) or (op == "-" and found is None):
            return str(default)
        if found is None:
            wrong.append(
                f"${{{name}}}: the variable {name} is not set; set it, give a default (${{{name}:-default}}),"
                " or write $${ for a literal ${"
            )
            return ""
        return found

    return _REFERENCE.sub(one, value), wrong


def _rendered(value: str, plain: bool, written: str) -> str:
    """``value`` as one scalar in place of ``written``: typed as YAML types it written plain where ``plain``,
    else a double-quoted string; followed by the line breaks ``written`` spanned and the indentation it ended
    with, so that the next line keeps its number and its place."""
    breaks = _BREAKS.findall(written)
    last = _BREAKS.split(written)[-1]
    tail = "".join(breaks) + (last if breaks and not last.strip() else "")
    implicit = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))  # type: ignore[no-untyped-call]  # unannotated
    tag = implicit if plain else _STR
    if tag not in _TYPED:
        return _double_quoted(value) + tail
    if tag.endswith(":null"):
        return "null" + tail
    if _SIMPLE.fullmatch(value):
        return value + tail
    return f"!!{tag.rsplit(':', 1)[1]} {_double_quoted(value)}{tail}"


def _double_quoted(value: str) -> str:
    """PyYAML's own emitter: escapes what must be escaped, on one line."""
    return yaml.safe_dump(value, default_style='"', allow_unicode=True, width=sys.maxsize).rstrip("\n")
