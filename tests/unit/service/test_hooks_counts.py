"""The mirror's counts the metrics read after every run: best effort, read-only.

A state file that cannot be read gives None and one warning under the count's own event;
a readable one gives its counts and is never created nor migrated by the reading.
"""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from skuferry.service import hooks
from skuferry.state.mirror import Mirror


def test_counts_of_a_readable_mirror(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    Mirror(state).close()
    assert hooks.product_counts(state) == {}
    assert hooks.dead_letter_counts(state) == {"read": 0, "map": 0, "check": 0, "api": 0}


def test_an_unreadable_state_file_is_none_and_one_warning_per_count(tmp_path: Path) -> None:
    broken = tmp_path / "state.db"
    broken.write_bytes(b"not a database, " * 512)
    with capture_logs() as events:
        assert hooks.product_counts(broken) is None
        assert hooks.dead_letter_counts(broken) is None
    assert [(e["event"], e["log_level"]) for e in events if "error" in e] == [
        ("metrics.products.failed", "warning"),
        ("metrics.dead_letters.failed", "warning"),
    ]
    assert broken.read_bytes() == b"not a database, " * 512  # never migrated nor rewritten


def test_a_missing_state_file_is_not_created_by_the_reading(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "state.db"
    hooks.product_counts(missing)
    hooks.dead_letter_counts(missing)
    assert not missing.parent.exists()
