"""An in-memory object store for LogShipper tests, and a throughput helper (not a benchmark: see bench/)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from controller_sidecar.logship import LogShipper, assemble_log


class MemorySink:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.puts: list[str] = []

    async def __call__(self, name: str, data: bytes) -> None:
        self.objects[name] = data
        self.puts.append(name)

    def assembled(self) -> bytes:
        return assemble_log(self.objects.items())


def measure_lines_per_second(folder: Path, lines: int = 1_000_000, line_bytes: int = 64) -> float:
    """Lines per second through LogShipper (LineSplitter and an on_lines hook) for a log written beforehand."""
    line = b"x" * (line_bytes - 1) + b"\n"
    log = folder / "learner.log"
    log.write_bytes(line * lines)
    seen = 0

    def count(batch: list[bytes]) -> None:
        nonlocal seen
        seen += len(batch)

    sink = MemorySink()
    shipper = LogShipper(log, folder / "ship.json", sink, interval_s=5.0, on_lines=count)
    started = time.perf_counter()
    asyncio.run(shipper.flush())
    elapsed = time.perf_counter() - started
    assert seen == lines
    assert len(sink.assembled()) == len(line) * lines
    return lines / elapsed
