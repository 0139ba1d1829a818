"""Builders for catalog files shaped like real exports (our own data, never a third party's).

- ``write_xlsx``: a workbook with several sheets, written by openpyxl; formula cells
  get the cached value Excel would have stored (openpyxl cannot compute one).
- ``bmecat``: a BMEcat 1.2 document (namespaced, internal DTD subset, leading-zero
  ``SUPPLIER_AID``, features, typed prices).
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from openpyxl import Workbook
from openpyxl.utils.cell import get_column_letter

Rows = Sequence[Sequence[Any]]


def write_xlsx(
    path: Path, sheets: Mapping[str, Rows], *, cached: Mapping[str, Any] | None = None
) -> Path:
    """Write ``sheets`` (name -> rows, in tab order); ``cached`` maps "Sheet!B4" to a value.

    A cell value starting with ``=`` is a formula; give its cached value in ``cached``
    (a file saved by Excel holds both), else it reads as empty, as in a file never opened
    in Excel.
    """
    book = Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    book.save(path)
    if cached:
        _store_cached_values(path, list(sheets), cached)
    return path


def _store_cached_values(path: Path, names: list[str], cached: Mapping[str, Any]) -> None:
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    for ref, value in cached.items():
        sheet, _, cell = ref.partition("!")
        member = f"xl/worksheets/sheet{names.index(sheet) + 1}.xml"
        xml = members[member].decode()
        kind = ' t="str"' if isinstance(value, str) else ""
        text = escape(str(value).lower() if isinstance(value, bool) else str(value))
        pattern = re.compile(rf'<c r="{cell}"([^>]*)><f>(.*?)</f><v ?/>')
        xml, count = pattern.subn(rf'<c r="{cell}"\1{kind}><f>\2</f><v>{text}</v>', xml)
        if count != 1:
            raise ValueError(f"no formula cell {ref}")
        members[member] = xml.encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


BMECAT_NS = "http://www.bmecat.org/bmecat/1.2/bmecat_new_catalog"


def bmecat_article(
    aid: str,
    name: str,
    *,
    ean: str = "",
    price: str = "9.99",
    features: Sequence[tuple[str, str]] = (),
    long: str = "",
) -> str:
    feats = "".join(
        f"<FEATURE><FNAME>{escape(n)}</FNAME><FVALUE>{escape(v)}</FVALUE></FEATURE>"
        for n, v in features
    )
    return f"""\
    <ARTICLE mode="new">
      <SUPPLIER_AID>{escape(aid)}</SUPPLIER_AID>
      <ARTICLE_DETAILS>
        <DESCRIPTION_SHORT>{escape(name)}</DESCRIPTION_SHORT>
        <DESCRIPTION_LONG>{escape(long)}</DESCRIPTION_LONG>
        <EAN>{ean}</EAN>
        <MANUFACTURER_NAME>Werkzeugbau Muster GmbH</MANUFACTURER_NAME>
      </ARTICLE_DETAILS>
      <ARTICLE_FEATURES>{feats}</ARTICLE_FEATURES>
      <ARTICLE_ORDER_DETAILS><ORDER_UNIT>C62</ORDER_UNIT></ARTICLE_ORDER_DETAILS>
      <ARTICLE_PRICE_DETAILS>
        <ARTICLE_PRICE price_type="net_list"><PRICE_AMOUNT>{price}</PRICE_AMOUNT>
          <PRICE_CURRENCY>EUR</PRICE_CURRENCY><TAX>0.19</TAX></ARTICLE_PRICE>
        <ARTICLE_PRICE price_type="net_customer"><PRICE_AMOUNT>1.00</PRICE_AMOUNT>
        </ARTICLE_PRICE>
      </ARTICLE_PRICE_DETAILS>
    </ARTICLE>
"""


def bmecat(articles: Sequence[str], *, encoding: str = "UTF-8") -> str:
    """A BMEcat 1.2 T_NEW_CATALOG document around ``articles`` (see ``bmecat_article``)."""
    return f"""\
<?xml version="1.0" encoding="{encoding}"?>
<!DOCTYPE BMECAT SYSTEM "bmecat_new_catalog_1_2.dtd" [
  <!ELEMENT UDX.NOTE (#PCDATA)>
  <!ATTLIST ARTICLE mode CDATA #IMPLIED>
]>
<BMECAT version="1.2" xmlns="{BMECAT_NS}">
  <HEADER>
    <CATALOG><LANGUAGE>deu</LANGUAGE><CATALOG_ID>C-1</CATALOG_ID>
      <CATALOG_VERSION>1.0</CATALOG_VERSION></CATALOG>
    <SUPPLIER><SUPPLIER_NAME>Werkzeugbau Muster GmbH</SUPPLIER_NAME></SUPPLIER>
  </HEADER>
  <T_NEW_CATALOG>
{"".join(articles)}  </T_NEW_CATALOG>
</BMECAT>
"""


_OOXML = "http://schemas.openxmlformats.org"
_DOC_REL = f"{_OOXML}/officeDocument/2006/relationships"
_SHEET_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml"
_CONTENT_TYPES = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="{_OOXML}/package/2006/content-types">
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>
<Default Extension="xml" ContentType="application/xml"/>
<Override PartName="/xl/workbook.xml" ContentType="{_SHEET_TYPE}.sheet.main+xml"/>
<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{_SHEET_TYPE}.worksheet+xml"/>
<Override PartName="/xl/sharedStrings.xml" ContentType="{_SHEET_TYPE}.sharedStrings+xml"/>
</Types>"""
_RELS = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="{_OOXML}/package/2006/relationships">
<Relationship Id="rId1" Type="{_DOC_REL}/officeDocument" Target="xl/workbook.xml"/>
</Relationships>"""
_BOOK = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<workbook xmlns="{_OOXML}/spreadsheetml/2006/main" xmlns:r="{_DOC_REL}">
<sheets><sheet name="Products" sheetId="1" r:id="rId1"/></sheets></workbook>"""
_BOOK_RELS = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="{_OOXML}/package/2006/relationships">
<Relationship Id="rId1" Type="{_DOC_REL}/worksheet" Target="worksheets/sheet1.xml"/>
<Relationship Id="rId2" Type="{_DOC_REL}/sharedStrings" Target="sharedStrings.xml"/>
</Relationships>"""
_SHEET_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


def write_xlsx_rows(path: Path, rows: Iterable[Sequence[str | int | float]]) -> Path:
    """A one-sheet workbook written the way Excel writes one (shared strings, a dimension).

    Streams: rows are written as they come, so benchmarks can make 200k-row files
    in seconds (openpyxl itself takes minutes). Text goes to the shared-strings
    table, as Excel does; numbers stay numbers.
    """
    strings: dict[str, int] = {}
    count = width = 0
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("xl/worksheets/sheet1.xml", "w") as sheet:
            # Excel writes the used range first; readers stop scanning for it there.
            head = f'<worksheet xmlns="{_SHEET_NS}"><dimension ref="A1"/><sheetData>'
            sheet.write(head.encode())
            for count, row in enumerate(rows, start=1):
                cells = []
                for col, value in enumerate(row):
                    ref = f"{get_column_letter(col + 1)}{count}"
                    if isinstance(value, str):
                        index = strings.setdefault(value, len(strings))
                        cells.append(f'<c r="{ref}" t="s"><v>{index}</v></c>')
                    else:
                        cells.append(f'<c r="{ref}"><v>{value!r}</v></c>')
                width = max(width, len(row))
                sheet.write(f'<row r="{count}">{"".join(cells)}</row>'.encode())
            sheet.write(b"</sheetData></worksheet>")
        with archive.open("xl/sharedStrings.xml", "w") as table:
            table.write(f'<sst xmlns="{_SHEET_NS}" uniqueCount="{len(strings)}">'.encode())
            for text in strings:
                table.write(f"<si><t>{escape(text)}</t></si>".encode())
            table.write(b"</sst>")
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("xl/workbook.xml", _BOOK)
        archive.writestr("xl/_rels/workbook.xml.rels", _BOOK_RELS)
    return path
