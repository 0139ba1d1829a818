"""``[source] type = "xml"``: one record per repeating element (BMEcat ``ARTICLE`` and the like).

The file is fed to expat in chunks and each record is built as its end tag
arrives, so memory stays flat whatever the file's size; nothing outside a
record is kept. A record becomes a JSON-like object the common way: child
elements by local name (namespaces ignored), attributes as ``@name``, text as
``#text`` when the element also has attributes or children (else the text
itself, stripped; an empty element is ``None``), repeated children as lists.

Hardened like defusedxml (``hardened_parser``): an entity declaration (the billion-laughs bomb, an
external entity such as ``file:///etc/passwd``) stops the read with a
``SourceError`` before anything is expanded, and no external DTD is ever
fetched. An internal DTD subset that declares only elements and attributes is
fine. A record larger than ``max_record_bytes`` is rejected alone; a file that
is not well-formed fails the whole pull (what follows cannot be trusted).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO
from xml.parsers import expat

from skuferry import logs
from skuferry.config.schema import XmlSourceSettings
from skuferry.errors import SourceError
from skuferry.models import BadRecord, RawRecord
from skuferry.sources.base import Source
from skuferry.sources.file import FileSource

log = logs.get(__name__)

MAX_RECORD_BYTES = 32 * 1024 * 1024  # one product; a bigger one is refused, not held in memory
_CHUNK = 1 << 20


class RefusedEntityError(Exception):
    """An entity declaration or external reference met while parsing (never expanded)."""


def _refuse_entity(
    name: str, _is_param: bool, _value: Any, _base: Any, sysid: Any, *_: Any
) -> None:
    target = f" pointing at {sysid!r}" if sysid else ""
    raise RefusedEntityError(f"declares the entity {name!r}{target}")


def _refuse_unparsed(name: str, _base: Any, sysid: Any, *_: Any) -> None:
    raise RefusedEntityError(f"declares the unparsed entity {name!r} pointing at {sysid!r}")


def _refuse_external(_context: Any, _base: Any, sysid: Any, _pubid: Any) -> bool:
    raise RefusedEntityError(f"refers to the external resource {sysid!r}")


def hardened_parser() -> Any:
    """An expat parser that refuses what defusedxml refuses (its ``forbid_entities``/``_external``).

    Entity declarations stop the parse at the declaration, before any expansion:
    the billion-laughs bomb and ``<!ENTITY x SYSTEM "file:///etc/passwd">`` alike.
    Parameter entities and the external DTD subset are never read. Element and
    attribute declarations in an internal DTD subset (BMEcat has one) are fine.
    Names arrive as ``namespace}local`` (the local name alone without a namespace).
    """
    parser = expat.ParserCreate(namespace_separator="}")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.EntityDeclHandler = _refuse_entity
    parser.UnparsedEntityDeclHandler = _refuse_unparsed
    parser.ExternalEntityRefHandler = _refuse_external
    parser.buffer_text = True  # text in one piece per run, not per line
    parser.buffer_size = 1 << 16
    parser.ordered_attributes = True  # [name, value, name, value, ...]
    return parser


def _local(name: str) -> str:
    return name.rpartition("}")[2]


class _Frame:
    """An element being built: its attributes, children and text so far."""

    __slots__ = ("children", "name", "texts")

    def __init__(self, name: str, attrs: list[str]) -> None:
        self.name = name
        self.children: dict[str, Any] = {
            "@" + _local(attrs[i]): attrs[i + 1] for i in range(0, len(attrs), 2)
        }
        self.texts: list[str] = []

    def add(self, name: str, value: Any) -> None:
        children = self.children
        if name not in children:
            children[name] = value
        elif type(children[name]) is _Repeated:
            children[name].append(value)
        else:
            children[name] = _Repeated((children[name], value))

    def value(self) -> Any:
        text = "".join(self.texts).strip()
        if not self.children:
            return text or None
        if text:
            self.children["#text"] = text
        return {k: list(v) if type(v) is _Repeated else v for k, v in self.children.items()}


class _Repeated(list[Any]):
    """A child seen more than once (a real list value from the file is never this type)."""


class _RecordBuilder:
    """expat callbacks that turn each ``record`` element into ``(line, dict)``."""

    def __init__(self, record: str, max_bytes: int) -> None:
        self.record = record
        self.max_bytes = max_bytes
        self.done: list[tuple[int, dict[str, Any] | None]] = []  # None: too large
        self.events = 0  # callbacks seen; a long run of bytes without one is refused
        self.line_of: Any = None  # set to the expat parser's CurrentLineNumber getter
        self._stack: list[_Frame] = []
        self._line = 0
        self._size = 0
        self._depth = 0  # > 0 while inside a record (counts also when too large)
        self._too_large = False
        self.records = 0
        self.names: set[str] = set()  # element names outside records, for a no-match hint

    def start(self, name: str, attrs: list[str]) -> None:
        self.events += 1
        local = _local(name)
        if self._depth == 0:
            if local != self.record:
                if len(self.names) < 20:
                    self.names.add(local)
                return
            self.records += 1
            self._line = self.line_of()
            self._size = 0
            self._too_large = False
        self._depth += 1
        if self._too_large:
            return
        self._size += len(local) + sum(len(a) for a in attrs)
        self._stack.append(_Frame(local, attrs))
        self._check_size()

    def data(self, text: str) -> None:
        self.events += 1
        if self._depth and not self._too_large:
            self._size += len(text)
            self._stack[-1].texts.append(text)
            self._check_size()

    def end(self, _name: str) -> None:
        self.events += 1
        if not self._depth:
            return
        self._depth -= 1
        if self._too_large:
            if not self._depth:
                self.done.append((self._line, None))
            return
        frame = self._stack.pop()
        value = frame.value()
        if self._stack:
            self._stack[-1].add(frame.name, value)
        else:
            self.done.append((self._line, value if isinstance(value, dict) else {"#text": value}))

    def _check_size(self) -> None:
        if self._size > self.max_bytes:
            self._too_large = True
            self._stack.clear()


class XmlSource(FileSource):
    """Streams the ``record`` elements of an XML file as ``RawRecord`` objects."""

    def __init__(
        self, path: Path | str, *, record: str, max_record_bytes: int = MAX_RECORD_BYTES
    ) -> None:
        super().__init__(path)
        self.record = record
        self.max_record_bytes = max_record_bytes

    def records(self) -> Iterator[RawRecord | BadRecord]:
        return self.read_bytes(self._parse)

    def _parse(self, handle: BinaryIO) -> Iterator[RawRecord | BadRecord]:
        builder = _RecordBuilder(self.record, self.max_record_bytes)
        parser = hardened_parser()
        parser.StartElementHandler = builder.start
        parser.EndElementHandler = builder.end
        parser.CharacterDataHandler = builder.data
        builder.line_of = lambda: parser.CurrentLineNumber
        quiet_since = 0  # bytes fed since the last callback
        while True:
            chunk = handle.read(_CHUNK)
            events = builder.events
            self._feed(parser, chunk)
            yield from self._drain(builder)
            if not chunk:
                break
            quiet_since = 0 if builder.events != events else quiet_since + len(chunk)
            if quiet_since > self.max_record_bytes:
                raise SourceError(
                    f"{self.path} line {parser.CurrentLineNumber}: no element ends within "
                    f"{self.max_record_bytes:,} bytes; refused (a huge tag or text)"
                )
        if not builder.records:
            log.warning(
                "source.xml.no_records",
                path=str(self.path),
                record=self.record,
                elements=sorted(builder.names),
            )

    def _feed(self, parser: Any, chunk: bytes) -> None:
        try:
            parser.Parse(chunk, not chunk)  # an empty chunk is the end of the file
        except RefusedEntityError as exc:
            raise SourceError(
                f"{self.path} line {parser.CurrentLineNumber}: {exc}; refused: entities are "
                "not expanded in a source file (they can grow without bound or read local files)"
            ) from None
        except expat.ExpatError as exc:
            reason = expat.ErrorString(exc.code)
            raise SourceError(
                f"{self.path} line {exc.lineno}, column {exc.offset + 1}: "
                f"not well-formed XML ({reason})"
            ) from None

    def _drain(self, builder: _RecordBuilder) -> Iterator[RawRecord | BadRecord]:
        done = builder.done
        if not done:
            return
        for line, record in done:
            if record is None:
                yield BadRecord(
                    line,
                    f"{self.name} line {line}: <{self.record}> is larger than "
                    f"{self.max_record_bytes:,} bytes; refused",
                )
            else:
                yield RawRecord(line, record)
        done.clear()


def open_xml(settings: XmlSourceSettings) -> Source:
    return XmlSource(settings.path, record=settings.record)
