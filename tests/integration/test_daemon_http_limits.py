"""``skuferry run`` as a real process, crowded by stalled clients past its open-file limit.

The daemon runs under ``ulimit -n 256`` (the shipped unit had 1,024; this is the same
failure, smaller): 300 local clients connect and stall, half of them after half a
request. Before the limits, one thread and one descriptor per client exhausted the
limit, and ``/healthz`` and the hooks went unanswered for as long as the clients
stayed; their leaving printed a traceback each. Now ``/healthz`` answers and a signed
hook is accepted and synced, and stderr holds structlog events only.

The client timeouts are generous and nothing asserts a speed: the figures go to the
session's summary.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from skuferry.sandbox import Sandbox
from skuferry.service.hooks_http import sign
from tests.fakes import log_events as events
from tests.fakes import wait_until
from tests.integration.conftest import catalog_rows, clean_env, closed_port_url

pytestmark = pytest.mark.integration

SECRET = b"hook-secret-under-a-crowd"
OPEN_FILES = 256
STALLED = 300
READ_TIMEOUT_S = 2


def stall(host: str, port: int, n: int) -> list[socket.socket]:
    clients = []
    for i in range(n):
        client = socket.create_connection((host, port), timeout=30)
        if i % 2:  # half a request: the headers never end
            client.sendall(b"POST /hooks/sync HTTP/1.1\r\nHost: skuferry\r\nContent-Len")
        clients.append(client)
    return clients


def leave_abruptly(clients: list[socket.socket]) -> None:
    for client in clients:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()


class FdSampler:
    """The most descriptors ``pid`` held, sampled in the background."""

    def __init__(self, pid: int) -> None:
        self.most = 0
        self._pid = pid
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(OSError):
                self.most = max(self.most, len(list(Path(f"/proc/{self._pid}/fd").iterdir())))
            time.sleep(0.05)

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.most


@dataclass(frozen=True)
class Daemon:
    listen: str
    log: Path
    proc: subprocess.Popen[bytes]


@pytest.fixture
def crowded(
    tmp_path: Path,
    sandbox: Sandbox,
    write_catalog: Callable[..., Path],
    write_config: Callable[..., Path],
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> Iterator[Daemon]:
    """``skuferry run`` under ``ulimit -n 256``, synced once; the source has changed since."""
    write_catalog(catalog_rows(5))
    secret_file = tmp_path / "hook_secret"
    secret_file.write_bytes(SECRET)
    secret_file.chmod(0o600)
    listen = closed_port_url().removeprefix("http://")
    extra = (
        "[schedule]\ninterval_minutes = 600\nrun_at_start = false\n"
        f'[daemon]\nlisten = "{listen}"\nhook_secret_file = "{secret_file}"\n'
        f"http_read_timeout_s = {READ_TIMEOUT_S}\n"
    )
    config = write_config(sandbox.url, extra=extra)
    assert run_cli("sync", "--config", str(config)).returncode == 0
    write_catalog(catalog_rows(5, version=1))

    err = tmp_path / "daemon.log"
    command = [sys.executable, "-m", "skuferry", "--log-format", "json", "run", "-c", str(config)]
    with err.open("wb") as err_f:
        proc = subprocess.Popen(
            ["sh", "-c", f'ulimit -n {OPEN_FILES} && exec "$@"', "sh", *command],
            cwd=tmp_path,
            env=clean_env(),
            stderr=err_f,
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_until(
                lambda: any(e.get("event") == "daemon.started" for e in events(err)),
                "the daemon to start",
            )
            yield Daemon(listen, err, proc)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


def price(sandbox: Sandbox, sku: str) -> float:
    return next(float(p["price"]) for p in sandbox.products() if p["sku"] == sku)


def test_healthz_and_a_signed_hook_get_through_hundreds_of_stalled_clients(
    crowded: Daemon, sandbox: Sandbox, figures: Callable[[str], None]
) -> None:
    host, port = crowded.listen.split(":")
    url = f"http://{crowded.listen}"
    new_price = float(catalog_rows(5, version=1)[1]["Price"])
    sampler = FdSampler(crowded.proc.pid)
    clients = stall(host, int(port), STALLED)
    try:
        started = time.monotonic()
        health = httpx.get(f"{url}/healthz", timeout=120)
        health_s = time.monotonic() - started
        assert health.status_code == 200, health.text

        body = json.dumps({"keys": ["SKU-00002"]}).encode()
        signature = {"X-Skuferry-Signature": sign(SECRET, body)}
        hook = httpx.post(f"{url}/hooks/sync", content=body, headers=signature, timeout=120)
        assert hook.status_code == 202 and hook.json()["queued"] == 1
        wait_until(lambda: price(sandbox, "SKU-00002") == new_price, "SKU-00002 synced")

        leave_abruptly(clients)
        clients = []
        assert httpx.get(f"{url}/healthz", timeout=120).status_code == 200
    finally:
        leave_abruptly(clients)
        most_fds = sampler.stop()
        crowded.proc.terminate()
        crowded.proc.wait(timeout=30)
    assert crowded.proc.returncode == 0

    text = crowded.log.read_text()
    lines = text.splitlines()
    assert lines and all(line.startswith("{") for line in lines), "only structlog events"
    assert "Traceback" not in text
    found = [json.loads(line) for line in lines]
    names = [e["event"] for e in found]
    (capped,) = [e for e in found if e["event"] == "daemon.listen.capped"]
    assert capped["capped_to"] == OPEN_FILES - 128
    assert "daemon.http.connection_limit" in names  # the cap held the crowd back ...
    assert "daemon.http.accept_failed" not in names  # ... before the descriptors ran out
    assert not [e for e in found if e["level"] in ("error", "critical")]
    figures(
        f"daemon under `ulimit -n {OPEN_FILES}`, {STALLED} stalled clients, read timeout "
        f"{READ_TIMEOUT_S} s, cap {capped['capped_to']}: /healthz 200 after {health_s:.1f} s; "
        f"at most {most_fds} descriptors open"
    )
