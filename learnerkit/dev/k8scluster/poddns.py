"""DNS on the gateway for what CoreDNS would answer here: ``<hostname>.<subdomain>.<namespace>.svc.cluster.local``
(a pod's record under its headless Service) from the pods' API objects; NXDOMAIN for everything else."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from learnerkit.dev.k8scluster.host import NOT_YET


class PodDns:
    """Answers on ``gateway``:53 from the pods that ``get`` (an API GET as the admin) lists."""

    def __init__(self, gateway: str, get: Callable[[str], dict[str, object]]) -> None:
        self.get = get
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((gateway, 53))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                query, peer = self.sock.recvfrom(512)
            except OSError:
                return
            with contextlib.suppress(*NOT_YET):
                self.sock.sendto(self._answer(query), peer)

    def _answer(self, query: bytes) -> bytes:
        ident = query[:2]
        labels, pos = [], 12
        while query[pos]:
            labels.append(query[pos + 1 : pos + 1 + query[pos]].decode().lower())
            pos += 1 + query[pos]
        qtype = int.from_bytes(query[pos + 1 : pos + 3], "big")
        question = query[12 : pos + 5]
        address = self._lookup(labels)
        if address is None:
            return ident + b"\x81\x83\x00\x01\x00\x00\x00\x00\x00\x00" + question
        if qtype != 1:
            return ident + b"\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00" + question
        record = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x05\x00\x04" + socket.inet_aton(address)
        return ident + b"\x81\x80\x00\x01\x00\x01\x00\x00\x00\x00" + question + record

    def _lookup(self, labels: list[str]) -> str | None:
        if len(labels) != 6 or labels[3:] != ["svc", "cluster", "local"]:
            return None
        hostname, subdomain, namespace = labels[:3]
        pods = self.get(f"/api/v1/namespaces/{namespace}/pods").get("items", [])
        assert isinstance(pods, list)
        for pod in pods:
            spec, status = pod.get("spec", {}), pod.get("status", {})
            if spec.get("hostname") == hostname and spec.get("subdomain") == subdomain and status.get("podIP"):
                return str(status["podIP"])
        return None

    def close(self) -> None:
        self.sock.close()
