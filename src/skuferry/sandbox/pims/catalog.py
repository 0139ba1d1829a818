"""One neutral, generated catalog that every test server renders in its own shape.

The articles look like a small European shop's: SKUs that are text with leading zeros,
EAN-13s with a correct check digit (some missing, some starting with 0), decimal prices,
stock, an on/off status, names in German, French and Persian, and one change time per
article, a minute apart, so an incremental filter selects a predictable tail:
article ``i`` was last changed at ``BASE_TIME + i minutes``.

Nothing here is copied from a real catalog; names are assembled from word lists.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

BASE_TIME = datetime(2026, 11, 1, 8, 0, 0, tzinfo=UTC)
STEP = timedelta(minutes=1)

_NOUNS = (
    "Fahrradschloss",
    "Trinkflasche",
    "Crème solaire",
    "Schraubendreher-Satz",
    "Théière en fonte",
    "چای سبز",  # green tea
    "Gartenschlauch",
    "Lampe de chevet",
    "Küchenwaage",
    "دفترچه یادداشت",  # notebook
    "Wanderrucksack",
    "Bougie parfumée",
)
_QUALIFIERS = ("Größe M", "blau", "édition 2026", "500 ml", "aus Edelstahl", "6,5 cm", "classique")
_BRANDS = ("Nordhafen", "Atelier Léon", "Kavir", "Bergwerk", "Müller & Söhne")
_CATEGORIES = ("outdoor", "kitchen", "tools", "home", "tea")
_PRICES = (
    Decimal("899.00"),
    Decimal("12.50"),
    Decimal("0.99"),
    Decimal("1234.50"),
    Decimal("19.95"),
    Decimal("7.00"),
    Decimal("249.99"),
    Decimal("3.49"),
)


@dataclass(frozen=True)
class Article:
    """A product before any system's conventions are applied."""

    index: int  # 0-based position; also the base of each system's numeric id
    sku: str
    name: str
    ean: str | None
    price: Decimal
    stock: int
    enabled: bool
    category: str
    brand: str
    description: str
    updated: datetime  # timezone-aware, UTC

    def changed(self, when: datetime, *, suffix: str = " (überarbeitet)") -> Article:
        """The same article renamed and re-stamped, as an edit in the source system would."""
        return replace(self, name=self.name + suffix, updated=when)


def ean13(body: str) -> str:
    """``body`` (12 digits) with its GS1 check digit appended."""
    if len(body) != 12 or not body.isdigit():
        raise ValueError(f"an EAN-13 body has 12 digits, not {body!r}")
    odd = sum(int(d) for d in body[0::2])
    even = sum(int(d) for d in body[1::2])
    return body + str((10 - (odd + 3 * even) % 10) % 10)


def article(index: int, *, start: datetime = BASE_TIME, step: timedelta = STEP) -> Article:
    """The ``index``-th article; the same index always gives the same article."""
    number = index + 1
    noun = _NOUNS[index % len(_NOUNS)]
    qualifier = _QUALIFIERS[(index // len(_NOUNS)) % len(_QUALIFIERS)]
    # Every 7th article has no EAN; every 3rd EAN starts with 0 (a German "040..." prefix).
    ean = None if number % 7 == 0 else ean13(f"{'040' if number % 3 == 0 else '400'}{number:09d}")
    return Article(
        index=index,
        sku=f"{number:06d}" if number % 5 else f"AB-{number:05d}",  # "000001", "AB-00005"
        name=f"{noun} {qualifier}",
        ean=ean,
        price=_PRICES[index % len(_PRICES)],
        stock=(index * 7) % 53,
        enabled=number % 11 != 0,
        category=_CATEGORIES[index % len(_CATEGORIES)],
        brand=_BRANDS[index % len(_BRANDS)],
        description=f"<p>{noun}: {qualifier}.</p>\n<p>Lieferumfang: 1 Stück.</p>",
        updated=start + step * index,
    )


def articles(n: int, *, start: datetime = BASE_TIME, step: timedelta = STEP) -> list[Article]:
    """The first ``n`` articles."""
    return [article(i, start=start, step=step) for i in range(n)]
