"""The cluster's API server as its admin calls it, and the kubeconfigs its clients read."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AdminApi:
    """``server`` (``https://127.0.0.1:<port>``: this cluster's own API server) called with the admin's token."""

    server: str
    token: str

    def get(self, path: str) -> dict[str, object]:
        """GET an API path (JSON)."""
        return self.request("GET", path)

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, object] | None = None,
        content_type: str = "application/merge-patch+json",
    ) -> dict[str, object]:
        """A body goes as a JSON merge patch unless ``content_type`` says otherwise."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        data = json.dumps(body).encode() if body is not None else None
        url = self.server + path  # https://127.0.0.1:<port>: this cluster's own API server
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - https only
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:  # noqa: S310 - https only
            text = answer.read()
        try:
            loaded = json.loads(text)
        except ValueError:
            return {"text": text.decode()}
        return loaded if isinstance(loaded, dict) else {"value": loaded}


def write_kubeconfig(path: Path, token: str, server: str, ca: Path) -> None:
    """A kubeconfig with ``token`` for ``server``; once the API server has made its self-signed certificate
    ``ca`` (the file holds its CA too), clients verify the server against it."""
    trust: dict[str, object] = {"certificate-authority": str(ca)} if ca.exists() else {"insecure-skip-tls-verify": True}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "lk", "cluster": {"server": server, **trust}}],
        "users": [{"name": "lk", "user": {"token": token}}],
        "contexts": [{"name": "lk", "context": {"cluster": "lk", "user": "lk"}}],
        "current-context": "lk",
    }
    path.write_text(json.dumps(config))
