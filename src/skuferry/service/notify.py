"""systemd's notify protocol without libsystemd: one datagram per message.

``$NOTIFY_SOCKET`` names an AF_UNIX datagram socket (a path, or an abstract
name written with a leading ``@``). When it is unset (a terminal, cron, a
test) every call is a no-op, so callers never need to ask.

The watchdog is fed by ``keepalive()``, which may be called as often as one
likes (from the engine's progress points, from the daemon's idle timer): it
sends ``WATCHDOG=1`` at most once per half ``WATCHDOG_USEC``, the interval
sd_watchdog_enabled(3) recommends.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

from skuferry import logs

log = logs.get(__name__)

SEND_TIMEOUT_S = 1.0


def _address(raw: str) -> str | bytes | None:
    """The socket address for ``$NOTIFY_SOCKET``, or None when it is not one we can reach."""
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()  # Linux abstract namespace
    if raw.startswith("/"):
        return raw
    return None  # vsock:... and other transports are not used by skuferry's units


class Notifier:
    """Sends sd_notify messages; thread-safe, never raises."""

    def __init__(
        self,
        socket_name: str | None,
        *,
        watchdog_usec: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._address = _address(socket_name) if socket_name else None
        if socket_name and self._address is None:
            log.warning("notify.socket.unsupported", notify_socket=socket_name)
        self._watchdog_interval_s = watchdog_usec / 1_000_000 if watchdog_usec else None
        self._clock = clock
        self._last_ping: float | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        """A notifier for this process, as systemd set up its environment."""
        env = os.environ if environ is None else environ
        usec: int | None = None
        # WATCHDOG_PID names the process systemd expects pings from; a child must not ping.
        pid = env.get("WATCHDOG_PID")
        if env.get("WATCHDOG_USEC") and (pid is None or pid == str(os.getpid())):
            try:
                usec = int(env["WATCHDOG_USEC"])
            except ValueError:
                log.warning("notify.watchdog.invalid", watchdog_usec=env["WATCHDOG_USEC"])
        return cls(env.get("NOTIFY_SOCKET") or None, watchdog_usec=usec or None)

    @property
    def enabled(self) -> bool:
        return self._address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often the watchdog wants a ping (half of WATCHDOG_USEC), or None if it is off."""
        if self._watchdog_interval_s is None or not self.enabled:
            return None
        return self._watchdog_interval_s / 2

    def send(self, *assignments: str) -> bool:
        """Send ``KEY=value`` lines in one datagram; True if it was sent."""
        if self._address is None:
            return False
        message = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # A full receive queue blocks sendto; a notification is not worth a stalled run.
                sock.settimeout(SEND_TIMEOUT_S)
                sock.sendto(message, self._address)
        except OSError as exc:
            # systemd gone or socket not ours: a lost notification must never stop a sync.
            log.warning("notify.send.failed", error=exc.strerror or str(exc))
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *([f"STATUS={_one_line(status)}"] if status else []))

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={_one_line(text)}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def watchdog(self) -> bool:
        """Ping the watchdog now, whatever the interval."""
        with self._lock:
            self._last_ping = self._clock()
        return self.send("WATCHDOG=1")

    def keepalive(self) -> bool:
        """Ping the watchdog if half its interval has passed since the last ping."""
        interval = self.watchdog_interval_s
        if interval is None:
            return False
        with self._lock:
            now = self._clock()
            if self._last_ping is not None and now - self._last_ping < interval:
                return False
            self._last_ping = now
        return self.send("WATCHDOG=1")


def _one_line(text: str) -> str:
    # A newline would start a new assignment in the datagram.
    return " ".join(text.split())
