"""The one exception tree of skuferry.

Every failure skuferry knows about is one of these; the CLI edge
turns each into a one-line message and an exit code, in one
place. Nothing below prints or exits.

    SkuferryError                       exit
    ├── ConfigError                     2   every config problem at once
    ├── UsageError                      2   bad command-line use
    ├── SafetyStop                      2   a guard refused the run, nothing written
    │   ├── EmptySourceRefused
    │   ├── ChangeGuardTripped
    │   ├── GoneGuardTripped            too many products would be archived or marked gone
    │   ├── UndoneFeedRefused           the source is a feed `skuferry undo` took back
    │   ├── ReplacementRefused          most of the catalog gone, as many new: a replacement
    │   ├── ShapeChanged                the source's shape broke the contract (a column, a
    │   │                               path, the key's format, the encoding); --force does
    │   │                               not pass it, accepting the shape does
    │   └── CmsMismatch                 the state mirrors another CMS workspace
    ├── LockHeld                        75  another run holds the state lock
    ├── Interrupted                     130 SIGTERM/SIGINT: in-flight work committed, run cut short
    ├── StateError                      3   the state file cannot be opened or is too new
    ├── SourceError                     3   the source cannot be opened or read to the end
    │   └── SourceNotReady              75  its ready_file did not come: nothing was read
    └── ApiError                        3 when it ends a run, else per product
        ├── TransportError                  no response: connect error, DNS, ...
        │   └── Unreachable                 provably never reached the server
        ├── BadResponse                     not JSON or not the envelope
        ├── OutcomeUnknown                  a write may have been applied (timeout, reset, 5xx)
        └── HttpError                       an error envelope with a status
            ├── AuthError                   401 / 403
            ├── NotFound                    404
            ├── MethodNotAllowed            405
            ├── RateLimited                 429 RATE_LIMITED (retry_after)
            ├── QuotaExceeded               429 QUOTA_EXCEEDED
            ├── Rejected                    other 4xx: the server refused this input
            └── ServerError                 5xx

Messages never contain the API key: no exception here is ever built from
the settings object or a request's headers.
"""

from __future__ import annotations

from collections.abc import Sequence

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_TEMPFAIL = 75
EXIT_INTERRUPTED = 130
EXIT_SOFTWARE = 70  # an unexpected exception (a bug), as sysexits.h names it


class SkuferryError(Exception):
    """Base of every error skuferry raises on purpose."""

    exit_code: int = EXIT_UNAVAILABLE


def exit_code_of(exc: BaseException) -> int:
    """The exit code of ``exc``: its own if skuferry raised it on purpose, else 70 (a bug)."""
    return exc.exit_code if isinstance(exc, SkuferryError) else EXIT_SOFTWARE


class ConfigError(SkuferryError):
    """One or more config problems, each already phrased as ``file: at 'a.b': message``."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class UsageError(SkuferryError):
    exit_code = EXIT_USAGE


class SafetyStop(SkuferryError):
    """A guard refused the run before anything was written."""

    exit_code = EXIT_USAGE


class EmptySourceRefused(SafetyStop):
    pass


class ChangeGuardTripped(SafetyStop):
    pass


class GoneGuardTripped(SafetyStop):
    """More than ``[safety] max_gone_ratio`` of the known products would be archived or
    marked gone."""


class ReplacementRefused(SafetyStop):
    """A run would mark most of the catalog gone and create as many new products."""


class ShapeChanged(SafetyStop):
    """The source's shape broke the contract the state learnt (``skuferry.shape``)."""


class CmsMismatch(SafetyStop):
    """The config points the state file at another CMS than the one it mirrors."""


class UndoneFeedRefused(SafetyStop):
    """The source is the very feed a run read that ``skuferry undo`` took back."""


class LockHeld(SkuferryError):
    exit_code = EXIT_TEMPFAIL


class Interrupted(SkuferryError):
    """A stop was requested (SIGTERM/SIGINT); whatever was in flight has been committed."""

    exit_code = EXIT_INTERRUPTED


class StateError(SkuferryError):
    exit_code = EXIT_UNAVAILABLE


class SourceError(SkuferryError):
    exit_code = EXIT_UNAVAILABLE


class SourceNotReady(SourceError):
    """The export's ``ready_file`` did not come in time: nothing was read, try again later."""

    exit_code = EXIT_TEMPFAIL


class ApiError(SkuferryError):
    exit_code = EXIT_UNAVAILABLE


class TransportError(ApiError):
    """No HTTP response came back."""


class Unreachable(TransportError):
    """The request provably never reached the server (connect failed), safe to retry."""


class BadResponse(ApiError):
    """A response that is not JSON or not the documented envelope."""

    def __init__(self, message: str, *, status: int, content_type: str, head: str) -> None:
        self.status = status
        self.content_type = content_type
        self.head = head
        super().__init__(
            f"{message} (HTTP {status}, content-type {content_type or 'none'!s}, "
            f"body starts {head!r})"
        )


class OutcomeUnknown(ApiError):
    """A write may or may not have been applied; resolve it by lookup, never by re-sending."""


class HttpError(ApiError):
    """The server answered with an error status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        self.message = message
        super().__init__(
            f"HTTP {status} {code}: {message}" if code else f"HTTP {status}: {message}"
        )


class AuthError(HttpError):
    pass


class NotFound(HttpError):
    pass


class MethodNotAllowed(HttpError):
    pass


class RateLimited(HttpError):
    def __init__(self, status: int, code: str, message: str, *, retry_after: float | None) -> None:
        super().__init__(status, code, message)
        self.retry_after = retry_after


class QuotaExceeded(HttpError):
    pass


class Rejected(HttpError):
    """The server refused this input (400, 409, 422, ...): do not resend the same data."""


class ServerError(HttpError):
    pass
