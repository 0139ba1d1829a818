"""TLS against a private CA on loopback: ``ca_bundle`` and ``SSL_CERT_FILE`` are honoured.

A throwaway CA (trustme) signs a certificate for 127.0.0.1; the test PIM serves
HTTPS with it. Nothing verifies without that CA, and there is no switch to stop
verifying: the only way in is to trust the CA.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skuferry import errors
from skuferry.config.load import settings_from_dict
from skuferry.config.schema import HttpSourceSettings
from skuferry.errors import SourceError
from skuferry.models import RawRecord
from skuferry.remote.client import RemoteClient
from skuferry.sandbox.pim import GeneratedCatalog, PimServer
from skuferry.sources.http import HttpSource
from skuferry.sources.wiring import Wiring

trustme = pytest.importorskip("trustme")

pytestmark = pytest.mark.integration

TOKEN = "pim-tls-Rb8cV2mK4"
PRODUCTS_PAGE = b'{"data": [], "meta": {"pages": 0}}'


@pytest.fixture(scope="module")
def ca() -> Any:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: Any, tmp_path: Path) -> Path:
    path = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


@pytest.fixture
def https_pim(ca: Any) -> Iterator[PimServer]:
    """The test PIM behind TLS with a certificate for 127.0.0.1 signed by the private CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    pim = PimServer(GeneratedCatalog(7), token=TOKEN)
    pim._httpd.socket = context.wrap_socket(pim._httpd.socket, server_side=True)
    for query in ("page=1&limit=1", "limit=1&page=1"):  # the CMS client's probe
        pim.raw_pages[f"/api/v1/products?{query}"] = PRODUCTS_PAGE
    with pim:
        yield pim


def https_url(pim: PimServer, path: str = "/page/products") -> str:
    return pim.base_url.replace("http://", "https://") + path


def pull(pim: PimServer, **options: Any) -> list[str]:
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": https_url(pim),
            "auth": "bearer",
            "token": TOKEN,
            "pagination": "page",
            "items_path": "items",
            "total_pages_path": "meta.pages",
            "max_retries": 0,
            **options,
        }
    )
    records = list(HttpSource(settings, Wiring(sleep=lambda _s: None)).records())
    return [str(r.fields["sku"]) for r in records if isinstance(r, RawRecord)]


def test_the_source_trusts_its_ca_bundle(https_pim: PimServer, ca_file: Path) -> None:
    assert len(pull(https_pim, ca_bundle=str(ca_file))) == 7


def test_without_the_ca_nothing_is_sent(
    https_pim: PimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with pytest.raises(SourceError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        pull(https_pim)
    assert https_pim.requests == [], "the token never left: the handshake failed first"


def test_an_untrusted_certificate_fails_at_once_and_names_ca_bundle(
    https_pim: PimServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trying again meets the same certificate: no retries, and the fix in the message."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    waits: list[float] = []
    settings = HttpSourceSettings.model_validate(
        {
            "type": "http",
            "url": https_url(https_pim),
            "pagination": "page",
            "items_path": "items",
            "max_retries": 4,
        }
    )
    with pytest.raises(SourceError) as caught:
        list(HttpSource(settings, Wiring(sleep=waits.append)).records())
    message = str(caught.value)
    assert "not trusted" in message and "[source] ca_bundle" in message
    assert waits == [], "a certificate the client does not trust is not retried"


def test_ssl_cert_file_is_honoured(
    https_pim: PimServer, ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    assert len(pull(https_pim)) == 7


def test_the_cms_client_trusts_api_ca_bundle(https_pim: PimServer, ca_file: Path) -> None:
    def client(**api: Any) -> RemoteClient:
        settings = settings_from_dict(
            {
                # the test PIM stands in for the CMS (and wants its token)
                "api": {"base_url": https_url(https_pim, ""), "api_key": TOKEN, **api},
                "source": {"type": "csv", "path": "c.csv"},
                "state": {"path": "s.db"},
            }
        )
        return RemoteClient.from_settings(settings, stop=None, max_retries=0)

    with client(ca_bundle=str(ca_file)) as trusted:
        assert trusted.probe() == 0
    with client() as untrusted, pytest.raises(errors.TransportError):
        untrusted.probe()
