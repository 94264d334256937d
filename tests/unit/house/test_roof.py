"""The roof: `learnerkit --help` lists every group from the table without importing it, and says what each
group's own help says."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from learnerkit.cli import GROUPS, cli, load_group


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_the_roof_lists_each_group_with_the_groups_own_help(name: str) -> None:
    group = load_group(name)
    assert isinstance(group, click.Group)
    assert group.name == name
    assert (group.help or "").strip().splitlines()[0] == GROUPS[name].help


def test_root_help_imports_no_group() -> None:
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from learnerkit.cli import GROUPS, cli\n"
        "result = CliRunner().invoke(cli, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(sorted(entry.module for entry in GROUPS.values() if entry.module in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_root_help_shows_every_group_and_an_unknown_group_is_an_error() -> None:
    runner = CliRunner()
    shown = runner.invoke(cli, ["--help"])
    assert shown.exit_code == 0
    for name, entry in GROUPS.items():
        assert name in shown.output and entry.help.split()[0] in shown.output
    unknown = runner.invoke(cli, ["jobs"])
    assert unknown.exit_code == 2 and "No such command 'jobs'" in unknown.output
