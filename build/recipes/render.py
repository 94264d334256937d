"""Render a framework's Dockerfile.j2 (which extends learner_base's) for one image of the matrix."""

from __future__ import annotations

import os
import shlex
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import jinja2

from learnerkit_build.errors import TemplateError
from learnerkit_build.recipes.spec import CUDA_DISTRIBUTION_NAMES, CUDA_DISTRIBUTION_PREFIXES, ImageSpec

BASE_TEMPLATE = "learner_base/Dockerfile.j2"
RUNTIME_APT = ["ca-certificates", "python3", "python3-venv", "tini"]
"""What the learner and sidecar images apt-install: Python and its venv, tini as PID 1, CA certificates."""
SOURCE_DATE_EPOCH = 1767225600
"""2026-01-01T00:00:00Z: the one date of locked builds (.pyc files hash-checked, /etc/shadow's change day)."""


@dataclass(frozen=True)
class BuildInputs:
    """Where pip inside a build finds packages: they change how an image is fetched, not what the templates say.

    `learnerkit_build.recipes.pipconfig` fills them from options, `LEARNERKIT_*` variables and the host's pip
    configuration. They reach pip only through the generated pip.conf secret and bind mounts."""

    wheelhouses: tuple[Path, ...] = ()
    """Folders of wheels on this machine (pip's find-links): their files are bind-mounted into pip's RUN."""
    find_links: tuple[str, ...] = ()
    """find-links pages pip reads over the network."""
    ca_bundle: Path | None = None
    """A CA bundle for TLS-intercepting proxies (a BuildKit secret, never in a layer)."""
    index_url: str | None = None
    """A pip index replacing PyPI; may carry credentials, so it travels in the pip.conf secret."""
    extra_index_urls: tuple[str, ...] = ()
    """Indexes pip searches besides the index (credentials too travel in the secret)."""

    def describe(self) -> str:
        """Where pip looks, for messages (credentials left out)."""
        parts = [f"index {without_credentials(self.index_url) if self.index_url else PYPI_INDEX}"]
        parts += [f"extra index {without_credentials(url)}" for url in self.extra_index_urls]
        parts += [f"find-links {link}" for link in [*map(str, self.wheelhouses), *self.find_links]]
        return ", ".join(parts)


PYPI_INDEX_URL = "https://pypi.org/simple"
PYPI_INDEX = f"{PYPI_INDEX_URL} (pip's default)"
CUDA_DISTRIBUTIONS = {"prefixes": list(CUDA_DISTRIBUTION_PREFIXES), "names": list(CUDA_DISTRIBUTION_NAMES)}


def without_credentials(url: str) -> str:
    """`url` without user and password: for hashes and messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def template_path(image: ImageSpec) -> str:
    return f"frameworks/{image.framework.name}/Dockerfile.j2"


TEMPLATE_CACHE = Path(".learnerkit") / "cache" / "templates"
"""Under the project root: the templates compiled, so a render need not compile them again (0.1 s a command)."""


def make_environment(root: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        bytecode_cache=_bytecode_cache(root),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - renders Dockerfiles, not HTML
    )
    env.filters["shell_quote"] = shlex.quote
    return env


def _bytecode_cache(root: Path) -> jinja2.BytecodeCache | None:
    """jinja2's own cache of compiled templates, each checked against its source's checksum when loaded and
    written atomically; none where the project's `.learnerkit/` cannot be written (templates compile each time)."""
    folder = root / TEMPLATE_CACHE
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder)) if os.access(folder, os.W_OK) else None


def render_dockerfile(root: Path, image: ImageSpec, base_ref: str, inputs: BuildInputs, *, locked: bool = False) -> str:
    """The Dockerfile text for `image` FROM `base_ref`; `TemplateError` names template, line and image.
    `locked`: the image's install steps take exactly its lock's files (learnerkit_build.lock)."""
    env = make_environment(root)
    name = template_path(image)
    context = {
        "image": image,
        "base_ref": base_ref,
        "build": build_context(inputs),
        "cuda_distributions": CUDA_DISTRIBUTIONS,
        **lock_context(locked),
    }
    try:
        text = env.get_template(name).render(context)
    except jinja2.TemplateNotFound as e:
        raise TemplateError(f"{image.name}: template {e.name} not found under {root}") from e
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"{e.filename or name}:{e.lineno}: {e.message} (rendering {image.name})") from e
    except jinja2.TemplateError as e:
        raise TemplateError(f"{_template_location(name)}: {e.message} (rendering {image.name})") from e
    if not _extends_base(env, name):
        raise TemplateError(f'{name}: must start with {{% extends "{BASE_TEMPLATE}" %}} (rendering {image.name})')
    return _squeeze_blank_lines(text)


def build_context(inputs: BuildInputs) -> dict[str, bool]:
    """What templates may know of the build inputs: whether each is there, never its value."""
    return {
        "wheelhouse": bool(inputs.wheelhouses),
        "ca": inputs.ca_bundle is not None,
        "index_url": inputs.index_url is not None,
    }


def lock_context(locked: bool) -> dict[str, object]:
    return {"locked": locked, "runtime_apt": RUNTIME_APT, "source_date_epoch": SOURCE_DATE_EPOCH}


def _template_location(fallback: str) -> str:
    """The innermost template frame of the exception being handled, as `file:line`."""
    tb = sys.exc_info()[2]
    found = fallback
    for frame in traceback.extract_tb(tb):
        if frame.filename.endswith(".j2"):
            found = f"{frame.filename}:{frame.lineno}"
    return found


def _extends_base(env: jinja2.Environment, name: str) -> bool:
    """Whether `name` is a `{% extends BASE_TEMPLATE %}` child: frameworks inherit, never copy the base."""
    source = env.loader.get_source(env, name)[0] if env.loader else ""
    return any(
        isinstance(node, jinja2.nodes.Extends)
        and isinstance(node.template, jinja2.nodes.Const)
        and node.template.value == BASE_TEMPLATE
        for node in env.parse(source).body
    )


def _squeeze_blank_lines(text: str) -> str:
    out: list[str] = []
    for line in text.splitlines():
        if line.strip() or (out and out[-1].strip()):
            out.append(line.rstrip())
    return "\n".join(out).strip() + "\n"
