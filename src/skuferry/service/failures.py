"""What a failure says to a person: the one wording, for the command line and the fleet.

``cli.guarded`` prints it (``skuferry: <headline>``, a config's problems one a line
below) and exits with the error's code; ``sync --workspaces`` and ``run --workspaces``
put it on one line under the workspace's name. Both ask ``describe``, so a workspace's
line says what the same error says from ``sync --config``.
"""

from __future__ import annotations

from dataclasses import dataclass

from skuferry import errors, logs


@dataclass(frozen=True, slots=True)
class Said:
    """A failure in words: its headline and, for a config, each problem."""

    headline: str
    details: tuple[str, ...] = ()
    internal: bool = False  # a bug: the command line offers --debug for its traceback

    def one_line(self) -> str:
        """The headline and the details on one line (a workspace's line, a log field)."""
        return f"{self.headline}: {'; '.join(self.details)}" if self.details else self.headline


def describe(exc: BaseException) -> Said:
    """The words for ``exc``; an unexpected one is an internal error, secrets masked."""
    if isinstance(exc, errors.ConfigError):
        return Said("the configuration has problems", tuple(exc.problems))
    if isinstance(exc, errors.AuthError):
        return Said(f"the API key was refused ({exc}); check [api] api_key / SKUFERRY_API_KEY")
    if isinstance(exc, errors.Unreachable):
        return Said(
            f"the API could not be reached: {exc}; check [api] base_url "
            "(SKUFERRY_API__BASE_URL) and that the CMS is up"
        )
    if isinstance(exc, errors.SkuferryError):
        return Said(str(exc))
    if isinstance(exc, KeyboardInterrupt):
        return Said("interrupted")
    masked = logs.redact_text(f"{type(exc).__name__}: {exc}")
    return Said(f"internal error: {masked}", internal=True)


def exit_code(exc: BaseException) -> int:
    """The contract's exit code for ``exc``: its own, 130 for Ctrl-C, else 70 (a bug)."""
    if isinstance(exc, KeyboardInterrupt):
        return errors.EXIT_INTERRUPTED
    return errors.exit_code_of(exc)
