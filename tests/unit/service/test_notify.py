"""sd_notify over a real AF_UNIX datagram socket: path and abstract names, watchdog pacing."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from skuferry.service.notify import Notifier


@pytest.fixture
def path_socket() -> Iterator[tuple[str, socket.socket]]:
    # A short directory: AF_UNIX paths are limited to 108 bytes, pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="sdn") as tmp:
        path = str(Path(tmp) / "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.setblocking(False)
        try:
            yield path, sock
        finally:
            sock.close()


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, socket.socket]]:
    name = f"skuferry-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.setblocking(False)
    try:
        yield "@" + name, sock
    finally:
        sock.close()


def received(sock: socket.socket) -> list[str]:
    """Every datagram queued on ``sock`` (delivery to a local socket is synchronous)."""
    out = []
    while True:
        try:
            out.append(sock.recv(4096).decode())
        except BlockingIOError:
            return out


def test_ready_status_stopping_reach_a_path_socket(path_socket: tuple[str, socket.socket]) -> None:
    name, sock = path_socket
    notifier = Notifier(name)
    assert notifier.ready("scheduled every 15 min")
    assert notifier.status("last run:\nsuccess")
    assert notifier.stopping()
    assert received(sock) == [
        "READY=1\nSTATUS=scheduled every 15 min",
        "STATUS=last run: success",  # a newline would start a new assignment
        "STOPPING=1",
    ]


def test_abstract_socket_name_starting_with_at(abstract_socket: tuple[str, socket.socket]) -> None:
    name, sock = abstract_socket
    assert Notifier.from_env({"NOTIFY_SOCKET": name}).ready()
    assert received(sock) == ["READY=1"]


def test_unset_socket_is_a_silent_no_op() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.keepalive()
    assert notifier.watchdog_interval_s is None


def test_unreachable_socket_does_not_raise(tmp_path: Path) -> None:
    assert not Notifier(str(tmp_path / "nobody-listens")).status("x")


def test_unsupported_transport_is_ignored() -> None:
    assert not Notifier("vsock:2:1234").ready()


def test_keepalive_pings_at_most_every_half_watchdog_interval(
    path_socket: tuple[str, socket.socket],
) -> None:
    name, sock = path_socket
    now = [100.0]
    notifier = Notifier(name, watchdog_usec=10_000_000, clock=lambda: now[0])
    assert notifier.watchdog_interval_s == 5.0
    assert notifier.keepalive()
    now[0] += 4.9
    assert not notifier.keepalive()
    now[0] += 0.1
    assert notifier.keepalive()
    assert received(sock) == ["WATCHDOG=1", "WATCHDOG=1"]


def test_explicit_watchdog_ping_resets_the_pace(path_socket: tuple[str, socket.socket]) -> None:
    name, sock = path_socket
    now = [0.0]
    notifier = Notifier(name, watchdog_usec=2_000_000, clock=lambda: now[0])
    assert notifier.watchdog()
    now[0] += 0.5
    assert not notifier.keepalive()
    assert received(sock) == ["WATCHDOG=1"]


def test_watchdog_is_off_for_another_pid(path_socket: tuple[str, socket.socket]) -> None:
    name, _sock = path_socket
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}
    assert Notifier.from_env(env).watchdog_interval_s is None
    env["WATCHDOG_PID"] = str(os.getpid())
    assert Notifier.from_env(env).watchdog_interval_s == 0.5


def test_a_full_queue_drops_the_message_instead_of_blocking(
    path_socket: tuple[str, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, sock = path_socket
    monkeypatch.setattr("skuferry.service.notify.SEND_TIMEOUT_S", 0.01)
    notifier = Notifier(name)
    sent = 0
    while notifier.status(f"message {sent}"):  # nobody reads: the queue fills up
        sent += 1
        assert sent < 100_000, "the queue never filled"
    assert sent > 0
    assert received(sock)[0] == "STATUS=message 0"
