"""The sandbox admin's JSON bodies: revoking a key and setting the required fields.

A body that is not JSON, not an object, or whose value has the wrong shape gets a 400 that
says what the body must be; nothing changes.
"""

from __future__ import annotations

import pytest

from skuferry.sandbox.api import Api
from skuferry.sandbox.config import DEFAULT_KEY, SandboxConfig
from skuferry.sandbox.handler import _revoke_key, _set_required


def api() -> Api:
    return Api(SandboxConfig())


def test_required_fields_are_set_from_a_list_of_names() -> None:
    sandbox = api()
    reply = _set_required(sandbox, b'{"fields": ["sku", "name", "category"]}')
    assert (reply.status, reply.body["data"]) == (200, {"required": ["sku", "name", "category"]})
    assert sandbox.config.required_fields == ("sku", "name", "category")


@pytest.mark.parametrize(
    "body",
    [b'{"fields": ["sku", ""]}', b'{"fields": "sku"}', b'{"fields": [1]}', b"[]", b"{}", b""],
)
def test_required_fields_of_the_wrong_shape_are_a_400_that_shows_the_shape(body: bytes) -> None:
    sandbox = api()
    before = sandbox.config.required_fields
    reply = _set_required(sandbox, body)
    assert reply.status == 400
    assert reply.body["error"] == {
        "code": "BAD_REQUEST",
        "message": 'the body must be {"fields": ["sku", "name", ...]}',
    }
    assert sandbox.config.required_fields == before


def test_a_body_that_is_not_json_is_a_400_naming_the_json_problem() -> None:
    for handle in (_set_required, _revoke_key):
        reply = handle(api(), b"{not json")
        assert reply.status == 400
        assert reply.body["error"]["code"] == "BAD_REQUEST"
        assert "must be" not in reply.body["error"]["message"]


def test_a_key_is_revoked_once_then_unknown() -> None:
    sandbox = api()
    assert _revoke_key(sandbox, f'{{"key": "{DEFAULT_KEY}"}}'.encode()).status == 200
    gone = _revoke_key(sandbox, f'{{"key": "{DEFAULT_KEY}"}}'.encode())
    assert (gone.status, gone.body["error"]["code"]) == (404, "NOT_FOUND")


@pytest.mark.parametrize("body", [b'{"key": ""}', b'{"key": 7}', b'{"nope": 1}', b'["k"]'])
def test_a_revoke_without_a_key_is_a_400_that_shows_the_shape(body: bytes) -> None:
    sandbox = api()
    reply = _revoke_key(sandbox, body)
    assert reply.status == 400
    assert reply.body["error"]["message"] == 'the body must be {"key": "<the key to revoke>"}'
    assert DEFAULT_KEY in sandbox.keys
