"""``skuferry sync``'s own part: which keys a named run takes, and what a finished run
prints where (the quiet cron run prints only when something is wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skuferry import errors
from skuferry.actions.sync import finish, named_keys
from skuferry.models import RunSummary


def test_named_keys_from_the_line_and_a_file_in_their_first_order_once(tmp_path: Path) -> None:
    listed = tmp_path / "keys.txt"
    listed.write_text("# the urgent ones\nB-2\n\nCafe\u0301\nA-1\n", encoding="utf-8")
    found = named_keys(only=False, keys=("A-1",), keys_from=listed)
    assert found == ("A-1", "B-2", "Caf\u00e9"), "NFC, as skuferry stores keys"
    assert named_keys(only=True, keys=("A-1", "A-1"), keys_from=None) == ("A-1",)
    assert named_keys(only=False, keys=(), keys_from=None) is None, "every key"


@pytest.mark.parametrize(
    ("only", "keys", "message"),
    [
        (False, ("A-1", "B-2", "C-3", "D-4"), "keys given without --only: A-1 B-2 C-3"),
        (True, (), "--only needs at least one KEY (or --keys-from FILE)"),
    ],
)
def test_named_keys_refuse_what_names_no_run(
    only: bool, keys: tuple[str, ...], message: str
) -> None:
    with pytest.raises(errors.UsageError) as raised:
        named_keys(only=only, keys=keys, keys_from=None)
    assert str(raised.value) == message


def test_finish_prints_the_json_line_and_returns_the_run_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    summary = RunSummary(created=2, rejected=1)
    assert finish(summary, as_json=True, quiet=True) == errors.EXIT_PARTIAL
    out, err = capsys.readouterr()
    assert json.loads(out) == summary.as_json() and err == ""


def test_a_quiet_run_prints_nothing_when_all_went_well(capsys: pytest.CaptureFixture[str]) -> None:
    assert finish(RunSummary(created=2), as_json=False, quiet=True) == errors.EXIT_OK
    assert capsys.readouterr() == ("", "")


def test_a_quiet_run_that_went_wrong_prints_its_summary_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    summary = RunSummary(rejected=1, problems=[{"key": "A-1", "reason": "HTTP 422"}])
    assert finish(summary, as_json=False, quiet=True) == errors.EXIT_PARTIAL
    out, err = capsys.readouterr()
    assert out == "" and "rejected" in err and "key A-1: HTTP 422" in err


def test_a_run_prints_its_summary_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert finish(RunSummary(created=2), as_json=False, quiet=False) == errors.EXIT_OK
    out, err = capsys.readouterr()
    assert "created" in out and err == ""
