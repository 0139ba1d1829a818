"""What a column's name means: the product fields' names in English, German, French,
Spanish, Italian and Dutch, as exports write them.

A header is compared in a plain form (``plain``): accents dropped, camelCase and
punctuation split into lower-case words, so ``Art.-Nr.``, ``ItemNo``, ``Référence``,
``VK-Preis`` and ``SUPPLIER_AID`` read ``art nr``, ``item no``, ``reference``,
``vk preis`` and ``supplier aid``. ``name_score`` says how well a header names a
field: 3 the whole name is one of the field's words, 2 the name holds one of them
as whole words (or, for German and Dutch compounds, ends with a stem), 0 nothing;
a word that names something else (a purchase price, a compare-at price) scores -1.

Pure data and functions, no I/O.
"""

from __future__ import annotations

import re
import unicodedata

KEY = "key"

# The field names skuferry proposes: the CMS's API shows none, so these are the
# project's documented names (config.example.toml, docs/mapping.md).
FIELDS = (
    "name",
    "description",
    "price",
    "stock",
    "ean",
    "brand",
    "category",
    "weight",
    "status",
    "image_url",
)

WORDS: dict[str, tuple[str, ...]] = {
    KEY: (
        # en
        "sku", "article number", "article no", "article nr", "item no", "item number",
        "item code", "product code", "product number", "part number", "part no",
        "reference", "ref", "variant sku", "identifier", "supplier aid", "supplier pid",
        "default code", "model number", "style number", "product sku", "code",
        # de
        "artikelnummer", "artikel nr", "artikelnr", "art nr", "artnr", "artikel nummer",
        "art no", "bestellnummer", "materialnummer", "sachnummer", "teilenummer", "referenz",
        # fr
        "reference produit", "ref produit", "code article", "code produit",
        "numero article", "num article",
        # es
        "codigo", "codigo articulo", "codigo producto", "referencia", "cod articulo",
        # it
        "codice", "codice articolo", "codice prodotto", "cod articolo", "riferimento",
        # nl
        "artikelcode", "artikel code", "productcode", "bestelcode",
    ),
    "name": (
        "name", "title", "product name", "product title", "item name", "display name",
        "description short", "short name", "designation", "label", "product label",
        "bezeichnung", "artikelbezeichnung", "produktname", "artikelname", "benennung",
        "kurzbezeichnung", "titel",
        "nom", "nom produit", "nom du produit", "libelle", "designation produit", "titre",
        "nombre", "nombre producto", "titulo", "denominacion",
        "nome", "nome prodotto", "denominazione", "titolo",
        "naam", "productnaam", "artikelnaam", "benaming",
    ),
    "description": (
        "description", "long description", "description long", "body html", "body",
        "details", "product description", "text",
        "beschreibung", "langtext", "langbeschreibung", "artikelbeschreibung",
        "produktbeschreibung", "description longue", "descriptif", "description produit",
        "descripcion", "descripcion larga", "descrizione", "descrizione lunga",
        "beschrijving", "omschrijving", "productomschrijving",
    ),
    "price": (
        "price", "unit price", "sales price", "sale price", "retail price", "list price",
        "regular price", "variant price", "price amount", "selling price", "gross price",
        "net price", "price eur", "pricing",
        "preis", "vk", "vk preis", "verkaufspreis", "einzelpreis", "listenpreis",
        "bruttopreis", "nettopreis", "vk brutto", "vk netto",
        "prix", "prix ttc", "prix ht", "prix de vente", "prix unitaire", "tarif",
        "precio", "pvp", "precio venta", "precio unitario",
        "prezzo", "prezzo vendita", "prezzo unitario", "prezzo listino",
        "prijs", "verkoopprijs", "stukprijs",
    ),
    "stock": (
        "stock", "qty", "quantity", "inventory", "on hand", "available", "in stock qty",
        "inventory quantity", "stock quantity", "qty available", "variant inventory qty",
        "stock level", "quantity on hand",
        "bestand", "lagerbestand", "menge", "lagermenge", "verfugbar", "verfuegbar",
        "quantite", "qte", "quantite en stock", "stock disponible",
        "existencias", "cantidad", "inventario", "stock disponible",
        "giacenza", "quantita", "disponibilita", "magazzino",
        "voorraad", "aantal", "hoeveelheid",
    ),
    "ean": (
        "ean", "gtin", "ean13", "ean 13", "gtin13", "gtin 13", "barcode", "upc", "ean code",
        "code ean", "variant barcode", "global unique id", "international pid", "ean upc",
        "ean nummer", "ean nr", "strichcode",
        "code barre", "code barres", "codigo de barras", "codigo ean", "codice a barre",
        "codice ean", "streepjescode",
    ),
    "brand": (
        "brand", "manufacturer", "vendor", "make", "manufacturer name", "brand name",
        "marke", "hersteller", "herstellername", "fabrikat",
        "marque", "fabricant", "marca", "fabricante", "produttore", "merk", "fabrikant",
    ),
    "category": (
        "category", "categories", "product type", "product group", "group", "collection",
        "category name",
        "kategorie", "warengruppe", "artikelgruppe", "produktgruppe", "kategorien",
        "categorie", "famille", "rayon", "categoria", "familia", "gruppo",
        "productgroep", "groep",
    ),
    "weight": (
        "weight", "weight kg", "net weight", "gross weight", "shipping weight",
        "gewicht", "nettogewicht", "bruttogewicht", "gewicht kg",
        "poids", "poids kg", "peso", "peso kg", "peso netto",
    ),
    "status": (
        "status", "active", "enabled", "published", "online", "product online", "state",
        "aktiv", "freigegeben", "statut", "actif", "estado", "activo", "stato", "attivo",
        "actief",
    ),
    "image_url": (
        "image", "image url", "image src", "images", "picture", "photo", "image link",
        "main image", "thumbnail", "bild", "bild url", "bildurl", "bilder", "url bild",
        "image principale", "url image", "imagen", "url imagen", "immagine",
        "url immagine", "afbeelding", "foto", "mime source",
    ),
}  # fmt: skip

# German and Dutch glue words together: "Verkaufspreis", "Lagerbestand", "Produktname".
STEMS: dict[str, tuple[str, ...]] = {
    KEY: ("artikelnummer", "nummer"),
    "name": ("bezeichnung", "name", "naam"),
    "description": ("beschreibung", "omschrijving", "beschrijving"),
    "price": ("preis", "prijs"),
    "stock": ("bestand", "voorraad"),
    "ean": ("barcode",),
    "category": ("gruppe", "groep", "kategorie"),
    "weight": ("gewicht",),
}

# Words that make a name mean something else than the field: a purchase price is no
# price to sell at, a compare-at price is the struck-through one, a minimum stock no stock.
NOT: dict[str, tuple[str, ...]] = {
    KEY: ("parent", "category", "tax", "image", "supplier name", "ean", "gtin", "barcode"),
    "name": ("file", "user", "attribute", "attributes", "option", "meta", "seo", "supplier",
             "manufacturer", "brand", "vendor", "category", "url", "image", "slug", "key",
             "handle"),
    "description": ("short", "meta", "seo", "kurz", "courte", "corta", "breve", "kort"),
    "price": ("ek", "einkauf", "einkaufspreis", "purchase", "cost", "achat", "compra",
              "acquisto", "inkoop", "compare", "uvp", "msrp", "currency", "wahrung",
              "devise", "moneda", "valuta", "special", "type", "rule", "group"),
    "stock": ("min", "max", "minimum", "maximum", "reorder", "order", "bestell",
              "backorder", "notify", "status", "location", "lagerort", "mindest"),
    "ean": ("type",),
    "brand": ("id",),
    "category": ("id", "ids", "code", "position", "attribute set"),
    "weight": ("unit", "einheit"),
    "status": ("stock", "tax", "lager", "backorder", "order", "visibility"),
    "image_url": ("alt", "position", "count", "label", "title"),
}  # fmt: skip

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")


def plain(name: str) -> str:
    """``name`` as compared: accents dropped, camelCase split, lower-case words.

    >>> plain("Art.-Nr."), plain("ItemNo"), plain("Référence"), plain("SUPPLIER_AID")
    ('art nr', 'item no', 'reference', 'supplier aid')
    """
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = text.replace("ß", "ss")
    text = _CAMEL.sub(" ", text).lower()
    return " ".join(_NOT_WORD.sub(" ", text).split())


def _holds(words: list[str], phrase: str) -> bool:
    """``phrase`` (one or more words) appears in ``words`` as whole words."""
    parts = phrase.split()
    width = len(parts)
    return any(words[i : i + width] == parts for i in range(len(words) - width + 1))


def name_score(target: str, name: str) -> int:
    """How well the header ``name`` names ``target`` (``KEY`` or a field): 3, 2, 0 or -1."""
    text = plain(name)
    if not text:
        return 0
    words = text.split()
    others = NOT.get(target, ())
    if any(_holds(words, other) for other in others):
        return -1
    # German compounds: "Mindestbestand", "Einkaufspreis", "Kurzbeschreibung"
    if any(w.startswith(o) and len(w) > len(o) for w in words for o in others if len(o) >= 4):
        return -1
    vocabulary = WORDS[target]
    if text in vocabulary or text.replace(" ", "") in vocabulary:
        return 3
    if any(_holds(words, phrase) for phrase in vocabulary):
        return 2
    stems = STEMS.get(target, ())
    if any(word.endswith(stem) and len(word) > len(stem) for word in words for stem in stems):
        return 2
    return 0
