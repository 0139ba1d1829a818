"""The hook routes' authentication and payloads (service/hooks_http.py), without a server."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from skuferry.service.hooks_http import (
    MAX_AGE_S,
    BadHookError,
    Desk,
    keys_from,
    refusal,
    sign,
    sign_akeneo,
)

SECRET = b"s3cret"
NOW = 1_800_000_000.0


def test_the_skuferry_signature_is_the_hex_hmac_sha256_of_the_body() -> None:
    body = b'{"keys": ["A"]}'
    expected = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert sign(SECRET, body) == f"sha256={expected}"
    assert refusal({"x-skuferry-signature": f"sha256={expected}"}, body, SECRET, now=NOW) is None
    assert refusal({"x-skuferry-signature": f"sha256={expected}"}, body + b" ", SECRET, now=NOW)
    assert refusal({"x-skuferry-signature": expected}, body, SECRET, now=NOW) == "bad signature"
    assert refusal({}, body, SECRET, now=NOW) == "no signature header"


@pytest.mark.parametrize(
    ("age_s", "accepted"), [(0, True), (MAX_AGE_S - 1, True), (MAX_AGE_S + 1, False)]
)
def test_akeneos_signature_signs_timestamp_dot_body_and_ages_out(
    age_s: float, accepted: bool
) -> None:
    body = b'{"events": []}'
    stamp = str(int(NOW - age_s))
    expected = hmac.new(SECRET, f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert sign_akeneo(SECRET, body, stamp) == expected
    headers = {"x-akeneo-request-signature": expected, "x-akeneo-request-timestamp": stamp}
    assert (refusal(headers, body, SECRET, now=NOW) is None) is accepted
    headers["x-akeneo-request-timestamp"] = "yesterday"
    assert refusal(headers, body, SECRET, now=NOW) == "no valid timestamp"


def test_keys_from_both_payload_shapes() -> None:
    assert keys_from(b'{"keys": ["A", "B", "A"]}') == ["A", "B"]
    events = {
        "events": [
            {"action": "product.updated", "data": {"resource": {"identifier": "P-1"}}},
            {"action": "product_model.updated", "data": {"resource": {"code": "M"}}},
            {"action": "product.created", "data": {"resource": {"identifier": "P-2"}}},
        ]
    }
    assert keys_from(json.dumps(events).encode()) == ["P-1", "P-2"]
    for bad in (b"not json", b"[]", b'{"keys": "A"}', b'{"keys": [1]}', b'{"keys": [""]}'):
        with pytest.raises(BadHookError):
            keys_from(bad)


def test_the_desk_triggers_nothing_without_a_valid_signature() -> None:
    pushed: list[list[str]] = []
    runs: list[bool] = []

    def on_keys(keys: list[str]) -> int:
        pushed.append(keys)
        return len(keys)

    desk = Desk(
        SECRET,
        on_keys=on_keys,
        on_run=lambda: runs.append(True),
        clock=lambda: NOW,
    )
    body = b'{"keys": ["A"]}'
    assert desk.handle("/hooks/sync", {}, body)[0] == 401
    assert desk.handle("/hooks/run", {"x-skuferry-signature": "sha256=00"}, b"")[0] == 401
    assert (pushed, runs) == ([], [])
    signed = {"x-skuferry-signature": sign(SECRET, body)}
    assert desk.handle("/hooks/sync", signed, body) == (202, {"queued": 1, "waiting": 1})
    assert desk.handle("/hooks/sync", {"x-skuferry-signature": sign(SECRET, b"{")}, b"{")[0] == 400
    assert desk.handle("/hooks/run", {"x-skuferry-signature": sign(SECRET, b"")}, b"")[0] == 202
    assert (pushed, runs) == ([["A"]], [True])
