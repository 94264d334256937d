"""A normal client's latency while 500 slow connections come from one other address (loopback only).

Three processes: the scheduler's API as `serve` runs it (the FastAPI app under uvicorn, the `serve` protocol with
its default limits; no scheduler behind it, since `/healthz` needs none), an attacker, and this one, the normal
client. The attacker keeps trying to hold ``--slow`` connections from 127.0.0.2, a third each sending a request
head a byte a second, a submit's body (the tenant's token is valid) a byte a second, or nothing; a refused or
closed one tries again after the refusal's Retry-After. The normal client, from 127.0.0.1, sends ``--requests``
`GET /healthz` one after another, each on a new connection, alone and under the attack (alternated, in three
rounds), and prints the p99 latency of each and their ratio against the target (<= 2).

Usage: python bench/slow_clients.py [--slow 500] [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import uvicorn

from learnerkit.scheduler.api.app import create_app
from learnerkit.scheduler.api.auth import add_token
from learnerkit.scheduler.api.server import uvicorn_config
from learnerkit.scheduler.config.settings import DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
from learnerkit.scheduler.facade import SchedulerFacade

ATTACKER = "127.0.0.2"
CLIENT = "127.0.0.1"
TARGET_RATIO = 2.0
KINDS = ("head", "body", "idle")
RETRY_AFTER_S = 5
"""What the server's refusal asks for; an attacker that ignores it floods connections, which is another attack
(a connection-rate limit belongs in front of the scheduler, e.g. in the firewall)."""
ROUNDS = 3


def serve(listening: int, tokens: Path) -> None:
    """Serve on the socket the parent bound (its descriptor ``listening``), so no other process can take the port."""
    sock = socket.socket(fileno=listening)
    app = create_app(cast(SchedulerFacade, object()), tokens)  # /healthz reaches no facade
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", sock.getsockname()[1], "critical")).run(sockets=[sock])


async def slow_connection(port: int, kind: str, token: str, held: list[int], refused: list[int]) -> None:
    """Hold one connection as slowly as ``kind`` allows; when it is refused or closed, open another after the
    refusal's Retry-After."""
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))
        except OSError:
            refused[0] += 1
            await asyncio.sleep(RETRY_AFTER_S)
            continue
        if kind == "head":
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        elif kind == "body":
            writer.write(
                b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\n"
                b"Authorization: Bearer %s\r\nContent-Length: 200000\r\n\r\n" % token.encode()
            )
        holding = False
        try:
            while True:
                if kind != "idle":
                    writer.write(b"a")
                    await writer.drain()
                try:
                    await asyncio.wait_for(reader.read(65536), timeout=1.0)
                    break  # answered (refused, or timed out) or closed
                except TimeoutError:
                    if not holding:
                        holding = True
                        held[0] += 1
        except OSError:
            pass
        finally:
            if holding:
                held[0] -= 1
            refused[0] += 1
            writer.close()
        await asyncio.sleep(RETRY_AFTER_S)


async def attack(port: int, slow: int, token: str) -> None:
    held, refused = [0], [0]
    tasks = [asyncio.create_task(slow_connection(port, KINDS[n % 3], token, held, refused)) for n in range(slow)]
    while True:
        print(f"{held[0]} {refused[0]}", flush=True)
        await asyncio.sleep(1)
    await asyncio.gather(*tasks)


def latencies(port: int, requests: int) -> list[float]:
    taken = []
    for _ in range(requests):
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(CLIENT, 0))
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        response.read()
        conn.close()
        if response.status != 200:
            raise SystemExit(f"the normal client got {response.status}")
        taken.append(time.perf_counter() - started)
    return taken


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def wait_healthy(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            latencies(port, 1)
        except OSError:
            time.sleep(0.1)
        else:
            return
    raise SystemExit("the API did not start within 30 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slow", type=int, default=500, help="slow connections the attacker tries to hold")
    parser.add_argument("--requests", type=int, default=2000, help="the normal client's requests per phase")
    parser.add_argument("--serve", nargs=2, metavar=("FD", "TOKENS"), help=argparse.SUPPRESS)
    parser.add_argument("--attack", nargs=3, metavar=("PORT", "SLOW", "TOKEN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), Path(args.serve[1]))
        return 0
    if args.attack:
        asyncio.run(attack(int(args.attack[0]), int(args.attack[1]), args.attack[2]))
        return 0

    with tempfile.TemporaryDirectory(prefix="lk-bench-slow-") as scratch:
        tokens = Path(scratch) / "tokens.json"
        token = add_token(tokens, "bench")
        listening = socket.socket()
        listening.bind(("127.0.0.1", 0))
        listening.listen(2048)
        port = listening.getsockname()[1]
        me = [sys.executable, __file__]
        fd = listening.fileno()
        server = subprocess.Popen([*me, "--serve", str(fd), str(tokens)], pass_fds=[fd])
        listening.close()
        attacker: subprocess.Popen[str] | None = None
        try:
            wait_healthy(port)
            latencies(port, 200)  # warm up
            alone: list[float] = []
            loaded: list[float] = []
            held = refused = 0
            for _ in range(ROUNDS):  # alternated, so that the machine's other load falls on both alike
                alone += latencies(port, args.requests // ROUNDS)
                attacker = subprocess.Popen(
                    [*me, "--attack", str(port), str(args.slow), token], stdout=subprocess.PIPE, text=True
                )
                assert attacker.stdout is not None
                # Every slow connection tried, and the ones admitted held a second.
                lines = [attacker.stdout.readline() for _ in range(3)]
                loaded += latencies(port, args.requests // ROUNDS)
                attacker.terminate()
                lines += attacker.communicate(timeout=10)[0].splitlines()
                counts = [[int(x) for x in line.split()] for line in lines]
                held = max(held, *(count[0] for count in counts))
                refused += counts[-1][1]
                attacker = None
        finally:
            if attacker is not None:
                attacker.terminate()
                attacker.wait(timeout=10)
            server.terminate()
            server.wait(timeout=10)
    ratio = p99(loaded) / p99(alone)
    print(f"attacker from {ATTACKER}: tries {args.slow} slow connections, held at most {held} at once, refused or")
    print(f"  closed {refused} times in {ROUNDS} rounds (the cap per address is {DEFAULT_MAX_CONNECTIONS_PER_ADDRESS})")
    print(f"normal client from {CLIENT}: {args.requests} requests alone, as many under attack, a connection each")
    print(f"p99 alone {p99(alone) * 1000:.2f} ms, under attack {p99(loaded) * 1000:.2f} ms")
    print(f"ratio {ratio:.2f} (target <= {TARGET_RATIO:g}): {'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())
