"""Where sidecars fetch requirements: the scheduler's settings, else the host's pip configuration, and what of the
host reaches the sidecar (read-only mounts) or cannot (an index on this host's disk)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from controller_sidecar.requirements import PackageIndex
from learnerkit.scheduler.config.packageindex import sidecar_packages
from learnerkit.scheduler.config.settings import PackageSettings, SchedulerSettings
from learnerkit.scheduler.errors import SettingsError
from learnerkit_build.recipes.pipconfig import parse_pip_config

PEM = "-----BEGIN CERTIFICATE-----\nMIIBproxyCA\n-----END CERTIFICATE-----\n"


def _pip(tmp_path: Path) -> dict[str, str]:
    """A host's `pip config list` as this machine's: a CA bundle, a wheel folder, folder indexes, an env override."""
    (tmp_path / "wheels").mkdir()
    (tmp_path / "ca.pem").write_text(PEM)
    return parse_pip_config(
        f":env:.cert='{tmp_path / 'ca.pem'}'\n"
        f":env:.find-links='{tmp_path / 'wheels'} https://wheels.local/links/'\n"
        "global.cert='/no/such/ca.pem'\n"
        "global.extra-index-url='file:///opt/pypi/simple https://more.local/simple'\n"
        "global.index-url='https://proxy.local/pypi/simple'\n"
    )


def test_unset_settings_come_from_the_hosts_pip_configuration(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    made = sidecar_packages(PackageSettings(), _pip(tmp_path))
    assert made.index == PackageIndex(
        index_url="https://proxy.local/pypi/simple",
        extra_index_urls=("https://more.local/simple",),
        find_links=("/etc/learnerkit/pip/find-links/0", "https://wheels.local/links/"),
        ca_bundle="/etc/learnerkit/pip/ca.pem",
    )
    assert made.mounts == {
        "/etc/learnerkit/pip/find-links/0": str(tmp_path / "wheels"),
        "/etc/learnerkit/pip/ca.pem": str(tmp_path / "ca.pem"),
    }
    assert "file:///opt/pypi/simple: on this host's disk, which no sidecar reaches" in caplog.text


def test_the_schedulers_settings_win_over_pip(tmp_path: Path) -> None:
    (tmp_path / "mine.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    env = {
        "LEARNERKIT_PIP_INDEX_URL": "https://idx.local/simple",
        "LEARNERKIT_PIP_CA_BUNDLE": str(tmp_path / "mine.pem"),
    }
    env |= {"LEARNERKIT_PIP_FIND_LINKS": "https://a.local/,https://b.local/"}
    made = sidecar_packages(SchedulerSettings.from_env(env).packages, _pip(tmp_path))
    assert (made.index.index_url, made.index.find_links) == (
        "https://idx.local/simple",
        ("https://a.local/", "https://b.local/"),
    )
    assert made.mounts == {"/etc/learnerkit/pip/ca.pem": str(tmp_path / "mine.pem")}


def test_without_mounts_the_ca_bundle_travels_as_content_and_folders_are_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kubernetes: the scheduler's host files reach no node. The CA bundle's PEM goes with the job (its Secret) to
    the same path as on Docker; a find-links folder cannot, and the warning says to serve it over http(s)."""
    caplog.set_level(logging.WARNING)
    made = sidecar_packages(PackageSettings(), _pip(tmp_path), can_mount=False)
    assert (made.index.ca_bundle, made.index.find_links, made.mounts) == (
        "/etc/learnerkit/pip/ca.pem",
        ("https://wheels.local/links/",),
        {},
    )
    assert made.files == {"/etc/learnerkit/pip/ca.pem": PEM}
    assert f"find-links {tmp_path / 'wheels'}: a folder of this host" in caplog.text
    assert "serve it over http(s)" in caplog.text
    assert "CA bundle" not in caplog.text


def test_with_mounts_nothing_travels_as_content(tmp_path: Path) -> None:
    assert sidecar_packages(PackageSettings(), _pip(tmp_path)).files == {}


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\x00\x01 DER, not PEM", "not a PEM file"),
        (b"just text\n", "not a PEM file"),
        (PEM.encode() + b"x" * (1 << 20), "larger than a Kubernetes Secret"),
    ],
)
def test_a_ca_bundle_no_secret_can_carry_is_refused_naming_it(tmp_path: Path, content: bytes, says: str) -> None:
    (tmp_path / "bad.pem").write_bytes(content)
    settings = SchedulerSettings.from_env({"LEARNERKIT_PIP_CA_BUNDLE": str(tmp_path / "bad.pem")}).packages
    with pytest.raises(
        SettingsError, match=rf"CA bundle {re.escape(str(tmp_path / 'bad.pem'))} .*: .*{re.escape(says)}"
    ):
        sidecar_packages(settings, {}, can_mount=False)


def test_a_missing_ca_bundle_is_left_out_with_a_warning_on_kubernetes_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    settings = SchedulerSettings.from_env({"LEARNERKIT_PIP_CA_BUNDLE": str(tmp_path / "none.pem")}).packages
    made = sidecar_packages(settings, {}, can_mount=False)
    assert (made.index.ca_bundle, made.files) == (None, {})
    assert "no such file on this host" in caplog.text


def test_an_index_url_with_a_password_is_warned_of_without_showing_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    pip = parse_pip_config("global.index-url='https://me:s3cret@proxy.local/simple'\n")
    assert sidecar_packages(PackageSettings(), pip).index.index_url == "https://me:s3cret@proxy.local/simple"
    assert "https://proxy.local/simple holds a password" in caplog.text
    assert "s3cret" not in caplog.text
