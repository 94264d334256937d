"""pip's failure as one line: the requirement and the cause, for the job's reason (pip's whole output is logged).

pip says why it failed in a few known shapes (pip 23-25): a URL it could not fetch (a certificate it does not
trust, a connection refused or timed out), a requirement no index offers, and requirements that conflict (here
mostly with the image's locked packages, given as constraints). Anything else gives pip's last error line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

PYPI = "https://pypi.org/simple"

_NO_MATCH = re.compile(r"No matching distribution found for (?P<requirement>\S+)")
_COULD_NOT_FETCH = re.compile(r"Could not fetch URL (?P<url>\S+?): (?P<why>.*?)(?: - skipping)?$", re.MULTILINE)
_RETRYING = re.compile(r"Retrying \(Retry\(.*?\)\) after connection broken by '(?P<why>.*)': (?P<path>\S+)$", re.M)
_CERTIFICATE = re.compile(r"certificate verify failed: (?P<detail>[^(\]'\"]+)")
_ERRNO = re.compile(r"\[Errno -?\d+\] (?P<detail>[^'\")]+)")
_CANNOT_INSTALL = re.compile(r"Cannot install (?P<requirements>.+?) because these package versions have conflicting")
_CAUSED_BY = re.compile(r"The conflict is caused by:\s*\n(?P<lines>(?:[ \t]+\S.*\n?)+)")
_CONSTRAINT = re.compile(r"The user requested \(constraint\) (?P<pin>\S+)")
_LINE_OF_FILE = re.compile(r"-r \S+ \(line (?P<number>\d+)\)")
_ERROR = re.compile(r"^ERROR: (?P<line>.+)$", re.MULTILINE)


def failure_reason(
    output: str, lines: Sequence[str] = (), indexes: Sequence[str] = (PYPI,), ca_bundle: str | None = None
) -> str:
    """What went wrong in pip's ``output``, on one line (without the file's name): ``tabulate==0.9.0: cannot
    reach https://... (certificate verify failed: ...)``. ``lines``: the requirements file's lines (pip names a
    requirement by its line); ``indexes``: the index URLs pip was given; ``ca_bundle``: the CA bundle."""
    output = _LINE_OF_FILE.sub(lambda found: _line(lines, int(found["number"])), output)
    wanted = _NO_MATCH.search(output)
    requirement = wanted["requirement"] if wanted else None
    unreachable = _unreachable(output, indexes, ca_bundle)
    if unreachable is not None:
        return f"{requirement or 'the index'}: {unreachable}"
    conflict = _conflict(output)
    if conflict is not None:
        return conflict
    if requirement is not None:
        return f"{requirement}: no index or find-links offers a wheel of it for the learner's Python"
    errors = _ERROR.findall(output)
    last = errors[-1] if errors else (output.strip().splitlines() or ["pip failed without a word"])[-1]
    return " ".join(last.split())


def _line(lines: Sequence[str], number: int) -> str:
    return " ".join(lines[number - 1].split(" #", 1)[0].split()) if 0 < number <= len(lines) else f"line {number}"


def _unreachable(output: str, indexes: Sequence[str], ca_bundle: str | None) -> str | None:
    fetched = _COULD_NOT_FETCH.search(output)
    retried = _RETRYING.search(output)
    if fetched is None and retried is None:
        return None
    url = fetched["url"] if fetched else _url(retried["path"], indexes) if retried else ""
    text = (fetched["why"] if fetched else "") + (retried["why"] if retried else "")
    certificate = _CERTIFICATE.search(text)
    if certificate is not None:
        trust = (
            f"the platform's CA bundle {ca_bundle} does not trust it"
            if ca_bundle
            else "the sidecar's default CA certificates do not trust it; set the platform's CA bundle "
            "(LEARNERKIT_PIP_CA_BUNDLE)"
        )
        return f"cannot reach {url} (certificate verify failed: {certificate['detail'].strip()}: {trust})"
    errno = _ERRNO.search(text)
    if errno is not None:
        return f"cannot reach {url} ({errno['detail'].strip()})"
    if "timed out" in text.lower():
        return f"cannot reach {url} (timed out)"
    return f"cannot reach {url} ({' '.join(text.split())[:200]})"


def _url(path: str, indexes: Sequence[str]) -> str:
    """The URL of the index whose path ``path`` (all that pip's retry message gives) is under."""
    for index in indexes:
        parts = urlsplit(index)
        if path.startswith(parts.path.rstrip("/") + "/"):
            return f"{parts.scheme}://{parts.netloc}{path}"
    return path


def _conflict(output: str) -> str | None:
    cannot = _CANNOT_INSTALL.search(output)
    if cannot is None:
        return None
    caused = _CAUSED_BY.search(output)
    lines = [" ".join(line.split()) for line in caused["lines"].splitlines() if line.strip()] if caused else []
    causes = []
    for line in lines:
        pin = _CONSTRAINT.fullmatch(line)
        causes.append(f"the image's locked {pin['pin']}" if pin else line)
    return f"{cannot['requirements']}: conflicting requirements ({'; '.join(causes) or 'pip names none'})"
