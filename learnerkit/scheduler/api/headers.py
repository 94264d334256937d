"""Bounded request heads: uvicorn's httptools protocol with a limit on the size and count of request headers.

httptools (llhttp) sets no limit of its own, and it gathers a header's value until the value ends: a 100 MB
header would be read in full before any route or token check. This protocol feeds the parser at most
:data:`MAX_HEAD_BYTES` of a request's head (its request line and headers) and counts the headers; past
either limit it answers 431 and closes the connection, before the application sees the request.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
"""The request line and every header together; browsers and proxies send well under 16 KiB."""
MAX_HEADERS = 100


class BoundedHeadProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that refuses an oversized request head with 431 before it is parsed in full."""

    max_head_bytes = MAX_HEAD_BYTES
    max_headers = MAX_HEADERS
    _head_bytes = 0
    _header_count = 0
    _reading_head = True
    _refused = False

    def data_received(self, data: bytes) -> None:
        while data and not self._refused:
            if not self._reading_head:
                super().data_received(data)
                return
            room = max(self.max_head_bytes - self._head_bytes, 0)
            if room == 0:
                self._refuse(f"the request head is over {self.max_head_bytes} bytes")
                return
            head, data = data[:room], data[room:]
            self._head_bytes += len(head)
            super().data_received(head)

    def on_message_begin(self) -> None:
        self._reading_head = True
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._header_count += 1
        if self._header_count > self.max_headers:
            self._refuse(f"the request has more than {self.max_headers} headers")
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._reading_head = False
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        super().on_message_complete()
        # The next request on this connection starts its own head.
        self._reading_head, self._head_bytes, self._header_count = True, 0, 0

    def _refuse(self, why: str, status: int = 431, *, retry_after_s: int | None = None, log: bool = True) -> None:
        """Answer ``status`` with ``why`` as its text and close the connection; nothing more is parsed."""
        self._refused = True
        if log:
            self.logger.warning("refused a request from %s: %s", self.client, why)
        body = why.encode("ascii")
        retry = b"" if retry_after_s is None else b"retry-after: %d\r\n" % retry_after_s
        head = b"content-type: text/plain; charset=utf-8\r\nconnection: close\r\n%scontent-length: %d\r\n\r\n"
        self.transport.write(STATUS_LINE[status] + head % (retry, len(body)) + body)
        self.transport.close()
