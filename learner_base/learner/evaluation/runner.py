"""The evaluator's command line, shared by the evaluator images: read the spec, the data and the model, judge,
write the report. The image's own module supplies only the measurement (``Evaluate``).

``python /opt/learner/evaluator/evaluate.py [--spec FILE]``: the spec is the JSON of one evaluation
(``spec_to_dict``), from ``--spec`` or the variable ``EVALUATION_SPEC``; the data CSV is read below
``$DATA_DIR``, the saved model from ``$MODEL_DIR`` (``learner.save_model``'s folder), and the report goes to
``$RESULT_DIR/evaluations/``. Exit 0 whatever the verdict (a missed threshold is an outcome, not a crash); 2 for
a spec, data file or model that cannot be read, naming it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from learner.evaluation.report import Report, summary_text, write_report
from learner.evaluation.spec import EvaluationSpec, SpecError, spec_from_dict
from learner.paths import data_dir, model_dir, result_dir

SPEC_VARIABLE = "EVALUATION_SPEC"
MAX_ROWS = 1_000_000


class InputError(ValueError):
    """The evaluation data or model cannot be read; the message names the file, line or column."""


@dataclass(frozen=True)
class Table:
    """A CSV file's columns as text, in file order."""

    path: Path
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def column(self, name: str) -> list[str]:
        if name not in self.header:
            raise InputError(f"{self.path}: no column {name!r}; columns: {', '.join(self.header)}")
        index = self.header.index(name)
        return [row[index] for row in self.rows]

    def numbers(self, names: Sequence[str]) -> list[list[float]]:
        """The rows of ``names`` as floats; an unreadable cell names its line and column."""
        indexes = [self.header.index(name) for name in names if name in self.header]
        missing = [name for name in names if name not in self.header]
        if missing:
            raise InputError(f"{self.path}: no column {', '.join(map(repr, missing))}")
        out = []
        for line, row in enumerate(self.rows, start=2):
            try:
                out.append([float(row[i]) for i in indexes])
            except ValueError as e:
                raise InputError(f"{self.path}:{line}: not a number ({e})") from e
        return out


@dataclass(frozen=True)
class Inputs:
    table: Table
    model: Path
    """The saved model's folder (``learner.save_model``)."""


Evaluate = Callable[[EvaluationSpec, Inputs], Report]


def read_table(path: Path) -> Table:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.reader(handle)
            header = tuple(cell.strip() for cell in next(reader, ()))
            rows: list[tuple[str, ...]] = []
            for line, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise InputError(f"{path}:{line}: {len(row)} cells, the header has {len(header)}")
                if len(rows) >= MAX_ROWS:
                    raise InputError(f"{path}: more than {MAX_ROWS} rows")
                rows.append(tuple(cell.strip() for cell in row))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot read the evaluation data ({e})") from e
    if not header or not rows:
        raise InputError(f"{path}: expected a header row and at least one data row")
    return Table(path, header, tuple(rows))


def load_spec(argument: str | None, kind: str | None = None) -> EvaluationSpec:
    try:
        text = Path(argument).read_text(encoding="utf-8") if argument else os.environ.get(SPEC_VARIABLE, "")
        if not text:
            raise SpecError(f"no evaluation spec: give --spec FILE or set {SPEC_VARIABLE}")
        return spec_from_dict(json.loads(text), () if kind is None else (kind,))
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"evaluation spec {argument or SPEC_VARIABLE}: {e}") from e


def main(evaluate: Evaluate, argv: Sequence[str] | None = None, kind: str | None = None) -> int:
    """``kind``: the kind an evaluator without a typed spec runs (its folder's ``evaluation.yaml``)."""
    parser = argparse.ArgumentParser(description="Run one evaluation on the job's saved model (docs/evaluations.md)")
    parser.add_argument("--spec", help=f"the evaluation's JSON (default: ${SPEC_VARIABLE})")
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec, kind)
        table = read_table(data_dir() / spec.data.file)
        report = evaluate(spec, Inputs(table=table, model=model_dir()))
    except ValueError as e:  # SpecError, InputError, a model description that cannot be read
        print(f"evaluation: {e}", file=sys.stderr)
        return 2
    write_report(result_dir(), report)
    sys.stdout.write(summary_text(report))
    return 0
