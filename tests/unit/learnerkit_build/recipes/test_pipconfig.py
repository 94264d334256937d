"""Build inputs: options beat variables beat the host's pip configuration, and every value says its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from learnerkit_build.recipes import pipconfig
from learnerkit_build.recipes.pipconfig import BuildOptions, Given, parse_pip_config, resolve_build_inputs

PIP_CONFIG_LIST = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='{wheels}'
global.cert='/nonexistent/ca.pem'
global.extra-index-url='file:///opt/pypi/simple https://extra.example/simple'
global.find-links='/somewhere/else'
install.index-url='https://user:secret@mirror.example/simple'
"""


@pytest.fixture
def config(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "wheels").mkdir()
    return parse_pip_config(PIP_CONFIG_LIST.format(wheels=tmp_path / "wheels"))


def by_name(settings: tuple[pipconfig.Setting, ...], name: str) -> list[pipconfig.Setting]:
    return [setting for setting in settings if setting.name == name]


def test_pip_config_list_is_parsed_as_python_literals() -> None:
    assert parse_pip_config("global.find-links='/opt/wheels'\nnot a setting\n:env:.cert='/a b.pem'\n") == {
        "global.find-links": "/opt/wheels",
        ":env:.cert": "/a b.pem",
    }


def test_without_options_the_host_pip_configuration_decides_in_pips_order(
    config: dict[str, str], tmp_path: Path
) -> None:
    resolved = resolve_build_inputs(BuildOptions(), config)
    inputs = resolved.inputs
    # pip's variables ($PIP_FIND_LINKS, $PIP_CERT) beat the files; the install section beats global.
    assert inputs.wheelhouses == (tmp_path / "wheels",)
    assert inputs.ca_bundle == Path("/etc/ssl/certs/ca-certificates.crt")
    assert inputs.index_url == "https://user:secret@mirror.example/simple"
    [index] = by_name(resolved.settings, "index-url")
    assert (index.value, index.source) == ("https://mirror.example/simple", "pip config install.index-url")
    assert by_name(resolved.settings, "find-links")[0].source == "pip config $PIP_FIND_LINKS"


def test_a_folder_index_is_reported_not_used_and_a_url_index_is_used(config: dict[str, str]) -> None:
    resolved = resolve_build_inputs(BuildOptions(), config)
    assert resolved.inputs.extra_index_urls == ("https://extra.example/simple",)
    local, remote = by_name(resolved.settings, "extra-index-url")
    assert local.value == "file:///opt/pypi/simple" and local.unused and "--find-links" in local.unused
    assert remote.unused is None and remote.source == "pip config global.extra-index-url"


def test_options_and_variables_beat_pip_and_say_so(config: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    options = BuildOptions(
        index_url=Given("https://idx.example/simple", "--index-url"),
        extra_index_urls=(Given("https://a.example/simple https://b.example/simple", "$LEARNERKIT_EXTRA_INDEX_URLS"),),
        find_links=(
            Given(f"file://{tmp_path / 'mine'}", "--find-links"),
            Given("https://links.example/", "--find-links"),
        ),
        no_ca_bundle=True,
    )
    resolved = resolve_build_inputs(options, config)
    inputs = resolved.inputs
    assert inputs.index_url == "https://idx.example/simple"
    assert inputs.extra_index_urls == ("https://a.example/simple", "https://b.example/simple")
    assert inputs.wheelhouses == (tmp_path / "mine",)
    assert inputs.find_links == ("https://links.example/",)
    assert inputs.ca_bundle is None
    assert {s.source for s in by_name(resolved.settings, "extra-index-url")} == {"$LEARNERKIT_EXTRA_INDEX_URLS"}
    assert by_name(resolved.settings, "ca-bundle")[0].source == "--no-ca-bundle"


def test_nothing_configured_means_pypi_and_the_system_ca_bundle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("ca\n")
    monkeypatch.setattr(pipconfig, "DEFAULT_CA_BUNDLE", bundle)
    resolved = resolve_build_inputs(BuildOptions(), {})
    assert resolved.inputs.index_url is None and resolved.inputs.wheelhouses == ()
    assert resolved.inputs.ca_bundle == bundle
    sources = {(s.name, s.source) for s in resolved.settings}
    assert sources == {("index-url", "default"), ("ca-bundle", "default")}


def test_a_missing_find_links_folder_or_ca_file_is_reported_not_used(tmp_path: Path) -> None:
    config = {"global.find-links": str(tmp_path / "gone"), "global.cert": str(tmp_path / "gone.pem")}
    resolved = resolve_build_inputs(BuildOptions(), config)
    assert resolved.inputs.wheelhouses == () and resolved.inputs.ca_bundle is None
    assert {s.unused for s in resolved.settings if s.name in ("find-links", "ca-bundle")} == {
        "no such folder on this host",
        "no such file on this host",
    }


class FakePip:
    """`pip config list|debug` as a pip that reads one configuration file, counting how often it is asked."""

    def __init__(self, conf: Path) -> None:
        self.conf = conf
        self.asked: list[str] = []

    def __call__(self, verb: str) -> str:
        self.asked.append(verb)
        if verb == "debug":
            files = f"  {self.conf}, exists: {self.conf.exists()}\n  /nowhere/pip.conf, exists: False\n"
            return f"env_var:\nenv:\nuser:\n{files}"
        return f"global.find-links='{self.conf.read_text(encoding='utf-8').strip()}'\n"


@pytest.fixture
def fake_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePip:
    conf = tmp_path / "pip.conf"
    conf.write_text("/opt/wheels\n", encoding="utf-8")
    pip = FakePip(conf)
    monkeypatch.setattr(pipconfig, "_ask_pip", pip)
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    return pip


def test_pips_answer_is_remembered_until_a_file_it_reads_changes(fake_pip: FakePip, tmp_path: Path) -> None:
    project = tmp_path / "project"
    assert pipconfig.pip_config(project) == {"global.find-links": "/opt/wheels"}
    assert fake_pip.asked == ["debug", "list"]
    assert pipconfig.pip_config(project) == {"global.find-links": "/opt/wheels"}
    assert fake_pip.asked == ["debug", "list"]
    assert (project / pipconfig.PIP_MEMORY_FILE).stat().st_mode & 0o777 == 0o600
    fake_pip.conf.write_text("/srv/wheels\n", encoding="utf-8")
    assert pipconfig.pip_config(project) == {"global.find-links": "/srv/wheels"}
    assert fake_pip.asked == ["debug", "list", "debug", "list"]


def test_a_changed_pip_variable_asks_pip_again(
    fake_pip: FakePip, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipconfig.pip_config(tmp_path)
    monkeypatch.setenv("PIP_INDEX_URL", "https://example.invalid/simple")
    pipconfig.pip_config(tmp_path)
    assert fake_pip.asked == ["debug", "list", "debug", "list"]


def test_without_a_project_pip_is_asked_each_time(fake_pip: FakePip) -> None:
    pipconfig.pip_config()
    pipconfig.pip_config()
    assert fake_pip.asked == ["list", "list"]
