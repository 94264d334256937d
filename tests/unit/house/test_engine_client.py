"""The docker-py client: one per thread, since concurrent builds (image build --jobs N) use the engine at once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from learnerkit.common import engine


class FakeClient:
    def ping(self) -> bool:
        return True


def test_each_thread_gets_a_client_of_its_own_and_keeps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeClient] = []

    def from_env(**kwargs: Any) -> FakeClient:
        made.append(FakeClient())
        return made[-1]

    monkeypatch.setattr(engine.docker, "from_env", from_env)
    monkeypatch.setattr(engine, "_clients", threading.local())
    seen: dict[str, list[Any]] = {}

    def use(name: str) -> None:
        seen[name] = [engine.engine(), engine.engine()]

    threads = [threading.Thread(target=use, args=(f"build-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    use("main")
    assert all(first is second for first, second in seen.values())  # kept within a thread
    assert len({id(first) for first, _ in seen.values()}) == 3 == len(made)  # never shared across threads
