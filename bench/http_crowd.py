"""The daemon's HTTP side under a crowd of stalled clients (issue 29 §5).

The endpoint runs in a child process (``python -m bench.http_crowd serve``) so that its
descriptors, threads and memory are its own; this process opens the crowd: half the
clients send half a request, the other half nothing. Measured: how long ``/healthz``
takes beside them, and what the server holds meanwhile.

- below the cap: every stalled client is held, and each probe is answered at once;
- past the default cap (512): the rest wait in the kernel's queue; the first probe
  waits for the read timeout to free slots.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import Result


def serve(read_timeout_s: int, max_connections: int) -> None:
    """The child: an Endpoint on a free loopback port until stdin closes."""
    from skuferry import logs
    from skuferry.service.http_endpoint import Endpoint
    from skuferry.service.http_server import Limits

    logs.configure(level="warning", json=True)

    class Board:
        def health(self) -> tuple[int, dict[str, Any]]:
            return 200, {"status": "ok", "problems": []}

        def metrics_text(self) -> str:
            return "skuferry_up 1\n"

    limits = Limits(read_timeout_s=read_timeout_s, max_connections=max_connections)
    endpoint = Endpoint("127.0.0.1:0", Board(), limits=limits).start()  # type: ignore[arg-type]
    print(endpoint.url, flush=True)
    sys.stdin.read()
    endpoint.stop()


def _status(pid: int) -> tuple[int, int, float]:
    """(open descriptors, threads, RSS in MiB) of ``pid``."""
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return fds, int(fields["Threads"]), int(fields["VmRSS"].split()[0]) / 1024


def _crowd(read_timeout_s: int, cap: int, stalled: int, probes: int) -> dict[str, Any]:
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.http_crowd", "serve", str(read_timeout_s), str(cap)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    clients: list[socket.socket] = []
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        host, port = url.removeprefix("http://").rsplit(":", 1)
        idle = _status(child.pid)
        for i in range(stalled):
            client = socket.create_connection((host, int(port)), timeout=30)
            if i % 2:
                client.sendall(b"GET /healthz HTTP/1.1\r\nHost: skuferry\r\nX-Half: ")
            clients.append(client)
        waits = []
        for _ in range(probes):
            began = time.monotonic()
            assert httpx.get(f"{url}/healthz", timeout=120).status_code == 200
            waits.append(time.monotonic() - began)
        crowded = _status(child.pid)  # after the probes: the crowd is in by then
        return {"idle": idle, "crowded": crowded, "waits": waits}
    finally:
        for client in clients:
            client.close()
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


def figure(quick: bool) -> Result:
    stalled = 300 if quick else 1000
    below = _crowd(read_timeout_s=60, cap=stalled + 100, stalled=stalled, probes=20)
    past = _crowd(read_timeout_s=10, cap=512, stalled=stalled, probes=1)
    median_ms = statistics.median(below["waits"]) * 1000
    fds_idle, threads_idle, rss_idle = below["idle"]
    fds, threads, rss = below["crowded"]
    past_fds, past_threads, _ = past["crowded"]
    notes = [
        f"{stalled} stalled clients (half sent half a request, half nothing), cap "
        f"{stalled + 100}: /healthz median {median_ms:.1f} ms over 20 probes (max "
        f"{max(below['waits']) * 1000:.1f} ms); the server held {fds} descriptors and "
        f"{threads} threads, RSS {rss:.1f} MiB (idle: {fds_idle} descriptors, {threads_idle} "
        f"threads, {rss_idle:.1f} MiB)",
        f"{stalled} stalled clients past the default cap 512, read timeout 10 s: the first "
        f"/healthz answered after {past['waits'][0]:.1f} s (queued behind the crowd until the "
        f"timeout freed slots); the server held {past_fds} descriptors, {past_threads} threads",
    ]
    return Result(
        figure="http crowd",
        measured=f"/healthz {median_ms:.1f} ms beside {stalled} stalled; {threads} threads",
        target="answered; threads do not grow with clients",
        ok=threads <= threads_idle + 1,
        notes=notes,
    )


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve(int(sys.argv[2]), int(sys.argv[3]))
