"""The life cycle every loopback stand-in server shares: served from a daemon thread.

``PimServer`` and the connector stand-ins (``ApiServer``) subclass it and
set ``_httpd`` in their ``__init__``; ``with`` starts the thread and stops it again.
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from typing import Any


class ThreadedServer:
    """``start``/``stop``/``with`` around ``self._httpd``, and ``serve_forever`` in front."""

    _httpd: ThreadingHTTPServer
    _thread: threading.Thread | None = None

    def start(self) -> Any:  # Any: a subclass's ``start()`` gives the subclass
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the command-line use)."""
        try:
            self._httpd.serve_forever()
        finally:
            self._httpd.server_close()

    def __enter__(self) -> Any:  # Any: a subclass's ``with`` gets the subclass
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
