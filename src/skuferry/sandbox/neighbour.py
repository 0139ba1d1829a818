"""Another tenant of the workspace: a second key spending writes while skuferry syncs.

Tests and benchmarks use it to show contention: it first spends its own key's
burst (until its first 429), then writes content items at a steady pace, so the
workspace's budget left to skuferry is smaller than skuferry was told.
"""

from __future__ import annotations

import threading

import httpx


class Neighbour:
    """POSTs ``/api/v1/content`` with ``key`` at ``per_second`` after a first sprint."""

    def __init__(self, url: str, key: str, *, per_second: float, sprint: bool = True) -> None:
        self._url, self._key = url, key
        self._pause = 1.0 / per_second
        self._sprint = sprint
        self._stop = threading.Event()
        self._sprinted = threading.Event()
        self._thread = threading.Thread(target=self._run, name="neighbour", daemon=True)
        self.sent = 0
        self.refused = 0

    def start(self, *, timeout_s: float = 30.0) -> None:
        """Start; return once the sprint is over (its key's burst is spent)."""
        self._thread.start()
        if not self._sprinted.wait(timeout_s):
            raise RuntimeError("the neighbour never spent its burst")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def __enter__(self) -> Neighbour:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self._key}"}
        with httpx.Client(base_url=self._url, timeout=5.0, headers=headers) as client:
            if not self._sprint:
                self._sprinted.set()
            while not self._stop.is_set():
                try:
                    reply = client.post("/api/v1/content", json={"title": "campaign copy"})
                except httpx.HTTPError:
                    self._stop.wait(self._pause)
                    continue
                if reply.status_code == 429:
                    self.refused += 1
                    self._sprinted.set()
                else:
                    self.sent += 1
                if self._sprinted.is_set():
                    self._stop.wait(self._pause)
