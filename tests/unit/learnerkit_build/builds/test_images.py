"""What builds hand to pip (the pip.conf secret) and what a failed resolution says."""

from __future__ import annotations

from pathlib import Path

from learnerkit_build.builds.images import build_secrets, missing_distribution, missing_wheel_reason
from learnerkit_build.recipes.render import BuildInputs

PIP_FAILURE = """\
#9 2.811 ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from versions: 2.13.0)
#9 2.812 ERROR: No matching distribution found for torch==2.13.0+cpu
#9 ERROR: process "/bin/bash -o pipefail -c ..." did not complete successfully: exit code: 1
"""


def test_pip_conf_carries_every_source_and_the_ca_only_as_a_mount_path(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("ca\n")
    inputs = BuildInputs(
        wheelhouses=(tmp_path,),
        find_links=("https://links.example/",),
        ca_bundle=ca,
        index_url="https://u:p@idx.example/simple",
        extra_index_urls=("https://a.example/simple", "https://b.example/simple"),
    )
    secrets = build_secrets(tmp_path, inputs)
    assert secrets["ca"] == ca
    assert secrets["pip_conf"].read_text().splitlines() == [
        "[global]",
        "find-links = /run/wheelhouse https://links.example/",
        "cert = /run/secrets/ca.pem",
        "index-url = https://u:p@idx.example/simple",
        "extra-index-url = https://a.example/simple https://b.example/simple",
    ]
    assert oct(secrets["pip_conf"].stat().st_mode & 0o777) == "0o600"


def test_a_missing_wheel_is_named_with_where_pip_looked_and_how_to_supply_it(tmp_path: Path) -> None:
    requirement = missing_distribution(PIP_FAILURE)
    assert requirement == "torch==2.13.0+cpu"
    reason = missing_wheel_reason(
        requirement, BuildInputs(wheelhouses=(tmp_path,), index_url="https://u:p@i.example/s")
    )
    assert reason.startswith("no index or find-links offers torch==2.13.0+cpu")
    assert f"index https://i.example/s, find-links {tmp_path}" in reason and "u:p" not in reason
    assert "--find-links" in reason and "--extra-index-url" in reason and "pip config set" in reason
    assert missing_distribution("#9 ERROR: some other failure") is None
