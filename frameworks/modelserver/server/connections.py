"""The server's client connections, each idle (waiting for its next request) or busy (a request read, not yet
answered): what a stopping server needs to end kept-alive connections without dropping a request.

On `stop` (SIGTERM), every idle connection's reading side is shut down: its handler's wait for a request line
ends with nothing, and the connection closes (the client sees it end between requests, as HTTP/1.1 allows; a
request that had already arrived is still read, answered and the connection closed after it, since shutting the
reading side down on Linux leaves the bytes received before it readable). A busy connection finishes its request,
whose answer says `Connection: close`. `drain` waits until every connection has closed. Standard library only.
"""

from __future__ import annotations

import socket
import threading


class Connections:
    def __init__(self) -> None:
        self.idle: set[socket.socket] = set()
        self.busy: set[socket.socket] = set()
        self.stopping = False
        self.changed = threading.Condition()

    def opened(self, connection: socket.socket) -> None:
        """Accepted: idle until its first request line is read."""
        with self.changed:
            self.idle.add(connection)

    def waiting(self, connection: socket.socket) -> None:
        """Before a connection's next request line is read. Once the server stops, a connection that comes to wait
        (one accepted just before) has its reading side shut down at once: what it was sent already is answered."""
        with self.changed:
            self.busy.discard(connection)
            self.idle.add(connection)
            if self.stopping:
                _shut_reading(connection)

    def taken(self, connection: socket.socket) -> None:
        """A request line was read: the request is answered, even when the server stops meanwhile."""
        with self.changed:
            self.idle.discard(connection)
            self.busy.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self.changed:
            self.idle.discard(connection)
            self.busy.discard(connection)
            self.changed.notify_all()

    def stop(self) -> int:
        """From now on every answer closes its connection; the idle ones end now. How many were idle."""
        with self.changed:
            self.stopping = True
            for connection in self.idle:
                _shut_reading(connection)
            return len(self.idle)

    def drain(self, seconds: float) -> bool:
        """Wait until every connection has closed, at most ``seconds``; whether they all did."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.idle and not self.busy, timeout=seconds)


def _shut_reading(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RD)
    except OSError:  # the client closed it first
        return
