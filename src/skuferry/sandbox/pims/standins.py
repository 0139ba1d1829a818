"""The connector stand-ins a user can start: ``skuferry sandbox --pim shopify``.

Each system's stand-in serves a generated catalog on loopback and says what its worked
example (``examples/connectors/<system>.toml``) needs from the environment to sync from
it: the addresses (``SKUFERRY_SOURCE__URL``, a token URL), the made-up credentials under
the names the example reads, and for WooCommerce (HTTPS only) the throwaway CA to trust.
The connector tests start the same stand-ins, so what the docs tell a user to run is
what is tested.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from skuferry.errors import UsageError
from skuferry.sandbox.pims import akeneo, business_central, magento, odoo, shopify, woocommerce
from skuferry.sandbox.pims.base import ApiServer, https_context

SYSTEMS = ("akeneo", "business-central", "shopify", "odoo", "woocommerce", "magento")
# The ports the docs' "try it locally" blocks use (as each module's own main() does).
PORTS = {
    "akeneo": 8781,
    "business-central": 8782,
    "shopify": 8783,
    "odoo": 8784,
    "woocommerce": 8785,
    "magento": 8786,
}


@dataclass
class StandIn:
    """One system's server(s), its catalog's keys, and what its example needs."""

    name: str
    server: ApiServer
    keys: list[str]
    secrets: dict[str, str]  # variable -> value: the credentials the example reads
    touch: Callable[[str, datetime], None]  # change one product now (an incremental pull)
    extra: dict[str, str] = field(default_factory=dict)  # more variables (CA, username)
    also: list[ApiServer] = field(default_factory=list)  # started with it (a token host)

    def environment(self) -> dict[str, str]:
        """The example's variables once the servers listen (their URLs are known)."""
        env = {**self.secrets, **self.extra}
        if isinstance(self.server, business_central.BusinessCentralServer):
            env["SKUFERRY_SOURCE__URL"] = self.server.items_url
            env["SKUFERRY_SOURCE__TOKEN_URL"] = self.server.token_url
        else:
            env["SKUFERRY_SOURCE__URL"] = self.server.url
        return env

    def servers(self) -> list[ApiServer]:
        return [self.server, *self.also]

    @contextlib.contextmanager
    def running(self) -> Iterator[StandIn]:
        with self.server:  # starts what it serves beside it
            yield self


def stand_in(
    name: str,
    *,
    products: int = 250,
    host: str = "127.0.0.1",
    port: int | None = 0,
    workdir: Path,
) -> StandIn:
    """The stand-in of ``name`` (one of ``SYSTEMS``), not started; port None: the docs' one.

    ``workdir`` receives what the user needs as a file (WooCommerce's CA certificate).
    """
    at = PORTS.get(name, 0) if port is None else port
    if name == "akeneo":
        ak = akeneo.AkeneoServer(akeneo.make_products(products), host=host, port=at)
        return StandIn(
            name,
            ak,
            [p["identifier"] for p in ak.products],
            {"AKENEO_CLIENT_SECRET": akeneo.SECRET, "AKENEO_PASSWORD": akeneo.PASSWORD},
            ak.touch,
            {
                "SKUFERRY_SOURCE__CLIENT_ID": akeneo.CLIENT_ID,
                "SKUFERRY_SOURCE__USERNAME": akeneo.USERNAME,
            },
        )
    if name == "business-central":
        identity_port = 0 if at == 0 else at + 10
        bc = business_central.BusinessCentralServer(
            business_central.make_items(products),
            identity_host=host,  # its own origin all the same: another port
            identity_port=identity_port,
            host=host,
            port=at,
        )
        return StandIn(
            name,
            bc,
            [i["number"] for i in bc.items],
            {"BC_CLIENT_SECRET": business_central.SECRET},
            bc.touch,
            also=[bc.identity],
        )
    if name == "shopify":
        sh = shopify.ShopifyServer(shopify.make_variants(products), host=host, port=at)
        return StandIn(
            name, sh, [v["sku"] for v in sh.variants], {"SHOPIFY_TOKEN": shopify.TOKEN}, sh.touch
        )
    if name == "odoo":
        od = odoo.OdooServer(odoo.make_records(products), host=host, port=at)
        return StandIn(
            name,
            od,
            [r["default_code"] for r in od.records if r["active"]],  # search_read: active only
            {"ODOO_API_KEY": odoo.API_KEY},
            od.touch,
            {"SKUFERRY_SOURCE__HEADERS": json.dumps({"X-Odoo-Database": odoo.DATABASE})},
        )
    if name == "woocommerce":
        ca_file, context = _throwaway_ca(workdir, host)
        items, variations = woocommerce.make_catalog(products)
        wc = woocommerce.WooCommerceServer(
            items, variations, ssl_context=context, host=host, port=at
        )
        return StandIn(
            name,
            wc,
            [p["sku"] for p in items],
            {"WOO_SECRET": woocommerce.CONSUMER_SECRET},
            wc.touch,
            {
                "SKUFERRY_SOURCE__USERNAME": woocommerce.CONSUMER_KEY,
                "SKUFERRY_SOURCE__CA_BUNDLE": str(ca_file),
            },
        )
    if name == "magento":
        mg = magento.MagentoServer(magento.make_products(products), host=host, port=at)
        return StandIn(
            name, mg, [p["sku"] for p in mg.products], {"MAGENTO_TOKEN": magento.TOKEN}, mg.touch
        )
    raise UsageError(f"no stand-in for {name!r}: one of {', '.join(SYSTEMS)}")


def _throwaway_ca(workdir: Path, host: str) -> tuple[Path, Any]:
    """A CA made for this start (trustme), its certificate written for ``ca_bundle``."""
    try:
        import trustme
    except ImportError:  # pragma: no cover - the dev install has it
        raise UsageError(
            "the WooCommerce stand-in serves HTTPS with a throwaway CA, made by trustme: "
            "pip install trustme (python3 dev.py demo installs it into .venv)"
        ) from None
    ca = trustme.CA()
    ca_file = workdir / "woocommerce-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return ca_file, https_context(ca, host)


def try_workdir() -> Path:
    """Where ``skuferry sandbox --pim`` keeps the try's state and CA: fixed, so docs can say it."""
    import tempfile

    return Path(tempfile.gettempdir()) / "skuferry-try"


def try_lines(standin: StandIn, *, api_url: str, api_key: str, workdir: Path) -> list[str]:
    """The shell lines that sync the system's worked example from its stand-in."""
    import shlex

    env = {
        "SKUFERRY_API__BASE_URL": api_url,
        "SKUFERRY_API_KEY": api_key,
        "SKUFERRY_STATE_PATH": str(workdir / f"{standin.name}.db"),
        **standin.environment(),
    }
    exports = [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
    return [*exports, f"skuferry sync -c examples/connectors/{standin.name}.toml"]
