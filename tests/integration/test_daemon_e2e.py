"""`skuferry run` as a real process against the local sandbox API, as systemd would run it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from tests.fakes import log_events as events
from tests.fakes import wait_until

sandbox_mod = pytest.importorskip("skuferry.sandbox")
pytest.importorskip("skuferry.sync.engine")

pytestmark = pytest.mark.integration


def test_daemon_syncs_on_schedule_reloads_and_stops_cleanly(tmp_path: Path) -> None:
    source = tmp_path / "products.csv"
    source.write_text("sku,name\nA-1,Alpha\nB-2,Beta\nC-3,Gamma\n")
    config, err, textfile = tmp_path / "config.toml", tmp_path / "stderr", tmp_path / "m.prom"

    with sandbox_mod.Sandbox() as sandbox:
        good = (
            f'[api]\nbase_url = "{sandbox.url}"\n'
            f'[source]\ntype = "csv"\npath = "{source}"\n'
            f'[state]\npath = "{tmp_path / "state.db"}"\n'
            f"[schedule]\ninterval_minutes = 0.02\n"  # 1.2 s
            f'[metrics]\ntextfile = "{textfile}"\n'
        )
        config.write_text(good)
        env = {**os.environ, "SKUFERRY_API_KEY": sandbox_mod.DEFAULT_KEY}

        def finished_runs() -> int:
            return sum(1 for e in events(err) if e.get("event") == "daemon.run.finished")

        with (
            tempfile.TemporaryDirectory(prefix="sdn") as short,
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
            err.open("wb") as err_f,
        ):
            address = str(Path(short) / "notify")
            sock.bind(address)
            sock.settimeout(0.05)
            messages: list[str] = []
            done = threading.Event()

            def drain() -> None:
                while not done.is_set():
                    try:
                        messages.append(sock.recv(4096).decode())
                    except TimeoutError:
                        continue

            reader = threading.Thread(target=drain)
            reader.start()
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "skuferry",
                    "--log-format",
                    "json",
                    "run",
                    "--config",
                    str(config),
                ],
                env={**env, "NOTIFY_SOCKET": address},
                stderr=err_f,
                stdout=subprocess.DEVNULL,
            )
            try:
                wait_until(lambda: finished_runs() >= 2, "two scheduled runs")
                assert messages[0].startswith("READY=1")
                wait_until(
                    lambda: any(m.startswith("STATUS=last run success") for m in messages),
                    "a STATUS line",
                )

                config.write_text("[api\nbroken")
                proc.send_signal(signal.SIGHUP)
                wait_until(
                    lambda: any(e.get("event") == "daemon.reload.failed" for e in events(err)),
                    "the failed reload",
                )
                count = finished_runs()
                wait_until(lambda: finished_runs() > count, "a run on the old config")

                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=10) == 0
                wait_until(lambda: "STOPPING=1" in messages, "STOPPING=1")
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                done.set()
                reader.join()

        skus = sorted(str(p.get("sku")) for p in sandbox.products())
        assert skus == ["A-1", "B-2", "C-3"]  # every product exactly once across all runs

    config.write_text(good)
    status = subprocess.run(
        [sys.executable, "-m", "skuferry", "status", "--json", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(status.stdout.splitlines()[-1])
    assert data["products"] == {"synced": 3}
    assert data["open_intents"] == []
    assert data["daemon"]["pid"] is None  # the daemon said goodbye
    assert 'skuferry_runs_total{result="success"}' in textfile.read_text()
