"""A manifest, search file or evaluations file as the CLI reads it: its `${NAME}` references filled from the
caller's environment (docs/manifests.md#variables), the one text that `validate` checks and `submit` sends.

Only the client expands: the scheduler reads what it receives as it is, and never its own environment.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from learnerkit.common.errors import ConfigError, LearnerkitError
from learnerkit.common.yamlfile import FieldPath, Problem, YamlBudget, YamlError, read_yaml_text
from learnerkit.common.yamlvars import ExpandedYaml, expand_yaml
from learnerkit.scheduler.errors import ManifestRejectedError
from learnerkit.scheduler.manifest.model import CREDENTIAL_KEYS

MAX_NODES = 20_000
"""Values read while expanding: the larger of the manifest's and the search file's budgets (each parser then
applies its own); it bounds what an alias bomb costs before either parser sees it."""
RUN_TIME_FIELDS: tuple[FieldPath, ...] = (("framework", "command"), ("evaluation_metrics",))
"""Left as written: the learner's shell expands the command (`${DATA_DIR}`, a sweep's `${lr}`), the sidecar
`evaluation_metrics` (`$JOB_STATE_DIR`), each in the learner's world."""


def is_credential(loc: FieldPath) -> bool:
    """A data store's `user_name` or `password`: a value filled in there is never shown."""
    return len(loc) == 4 and loc[0] == "data_stores" and loc[2] == "connection" and loc[3] in CREDENTIAL_KEYS


def read_expanded(path: Path, environ: Mapping[str, str]) -> ExpandedYaml:
    """``path``'s text with its references filled from ``environ``; `YamlError` naming each bad or unset
    reference (or a syntax error) by line and field, or the file where it cannot be read."""
    try:
        text = read_yaml_text(path)
    except ConfigError as e:
        raise YamlError([Problem(path, None, (), str(e))]) from e
    budget = YamlBudget(max_nodes=MAX_NODES)
    return expand_yaml(text, path, environ, budget, verbatim=RUN_TIME_FIELDS, secret=is_credential)


@contextmanager
def secrets_hidden(expanded: ExpandedYaml) -> Iterator[None]:
    """Re-raise an error of the block (the parser's problems, the scheduler's refusal, any other) with the
    secrets ``expanded`` filled in masked, and without the original chained to it."""
    try:
        yield
    except ManifestRejectedError as e:
        problems = [{key: _masked(expanded, value) for key, value in p.items()} for p in e.problems]
        raise ManifestRejectedError(expanded.mask(str(e)), problems) from None
    except YamlError as e:
        raise expanded.masked(e) from None
    except LearnerkitError as e:
        if expanded.mask(str(e)) == str(e):
            raise
        raise LearnerkitError(expanded.mask(str(e))) from None


def _masked(expanded: ExpandedYaml, value: object) -> object:
    return expanded.mask(value) if isinstance(value, str) else value
