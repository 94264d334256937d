"""Where a locked wheel or source distribution can be fetched from: its URL on the build's indexes and folders.

The build's find-links folders are looked in by file name, then each index (`--index-url`, PyPI by default, then
the extra ones; `file://` indexes are read from disk) answers for each project once: PEP 691's JSON where the
index speaks it, else the PEP 503 page, whose links carry `#sha256=`. A file is taken only where the index names
the locked sha256 (a find-links folder names none: the download checks it). What no index offers is left to pip.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import requests

from learnerkit_build.lock.fetch import TIMEOUT_S, Download, session
from learnerkit_build.lock.model import LockedWheel
from learnerkit_build.recipes.render import BuildInputs

PYPI_SIMPLE = "https://pypi.org/simple/"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_ACCEPT = f"{JSON_TYPE}, text/html;q=0.1"
LOOKUP_JOBS = 8

Offer = tuple[str, str, int | None]
"""(url, sha256, size) of one file an index lists."""


def index_downloads(files: Sequence[LockedWheel], inputs: BuildInputs) -> tuple[list[Download], list[LockedWheel]]:
    """A Download for each of `files` some folder or index offers with its sha256, and the files none offers."""
    found: dict[str, Download] = {}
    for folder in inputs.wheelhouses:
        for f in files:
            path = folder / f.filename
            if f.sha256 not in found and path.is_file():
                found[f.sha256] = Download(f.filename, f.sha256, path.resolve().as_uri(), path.stat().st_size)
    for index in [inputs.index_url or PYPI_SIMPLE, *inputs.extra_index_urls]:
        wanted = [f for f in files if f.sha256 not in found]
        if not wanted:
            break
        names = sorted({f.name for f in wanted})
        look = partial(project_files, index, ca_bundle=inputs.ca_bundle)
        with ThreadPoolExecutor(max_workers=LOOKUP_JOBS, thread_name_prefix="index") as pool:
            pages = dict(zip(names, pool.map(look, names), strict=True))
        for f in wanted:
            offer = pages[f.name].get(f.filename)
            if offer is not None and offer[1] == f.sha256:
                found[f.sha256] = Download(f.filename, f.sha256, offer[0], offer[2])
    return list(found.values()), [f for f in files if f.sha256 not in found]


def project_files(index: str, project: str, ca_bundle: Path | None = None) -> dict[str, Offer]:
    """{filename: (url, sha256, size)} of `project` on `index`; empty where the index has no such project or
    cannot be read (pip then tries, and says why)."""
    page = urljoin(index.rstrip("/") + "/", f"{project}/")
    if urlparse(page).scheme == "file":
        path = Path(unquote(urlparse(page).path))
        html = path / "index.html"
        text = html.read_text(encoding="utf-8") if html.is_file() else None
        return parse_html(text, html.as_uri()) if text is not None else {}
    try:
        response = session(ca_bundle).get(page, headers={"Accept": _ACCEPT}, timeout=TIMEOUT_S)
    except requests.RequestException:
        return {}
    if response.status_code != 200:
        return {}
    if response.headers.get("Content-Type", "").startswith(JSON_TYPE):
        return parse_json(response.json(), response.url)
    return parse_html(response.text, response.url)


def parse_json(payload: object, base: str) -> dict[str, Offer]:
    files = payload.get("files", []) if isinstance(payload, dict) else []
    offers: dict[str, Offer] = {}
    for entry in files if isinstance(files, list) else []:
        sha = entry.get("hashes", {}).get("sha256") if isinstance(entry, dict) else None
        if isinstance(sha, str) and isinstance(entry.get("url"), str):
            size = entry.get("size")
            offers[entry["filename"]] = (urljoin(base, entry["url"]), sha, size if isinstance(size, int) else None)
    return offers


def parse_html(text: str, base: str) -> dict[str, Offer]:
    parser = _Links()
    parser.feed(text)
    offers: dict[str, Offer] = {}
    for href in parser.hrefs:
        url, _, fragment = urljoin(base, href).partition("#")
        if fragment.startswith("sha256="):
            offers[unquote(url.rsplit("/", 1)[-1])] = (url, fragment.removeprefix("sha256="), None)
    return offers


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [value for key, value in attrs if key == "href" and value]
