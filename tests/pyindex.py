"""A tiny package index for tests: pure-Python wheels built here, served (PEP 503) on 127.0.0.1 only."""

from __future__ import annotations

import base64
import functools
import hashlib
import ssl
import threading
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(
    dest: Path, name: str, version: str, modules: Mapping[str, str], requires: tuple[str, ...] = ()
) -> Path:
    """A ``py3-none-any`` wheel of ``modules`` (file name -> source) with a valid RECORD; ``requires``: its
    dependencies (``Requires-Dist``)."""
    dist = f"{name.replace('-', '_')}-{version}"
    depends = "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {
        **{module: source.encode() for module, source in modules.items()},
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{depends}".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: learnerkit-tests\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{path},{_digest(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist}.dist-info/RECORD,,\n"
    wheel = dest / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{dist}.dist-info/RECORD", record)
    return wheel


def write_index(root: Path, wheels: list[Path]) -> None:
    """``root/simple/<project>/index.html`` linking each wheel (kept in ``root/files``)."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[str]] = {}
    for wheel in wheels:
        (files / wheel.name).write_bytes(wheel.read_bytes())
        project = wheel.name.split("-", 1)[0].replace("_", "-").lower()
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        projects.setdefault(project, []).append(f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
    for project, links in projects.items():
        page = root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def serve_index(root: Path, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 (a free port), over TLS with ``tls``; yields the index URL (``.../simple``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    scheme = "https" if tls is not None else "http"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
