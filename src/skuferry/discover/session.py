"""The conversation on a terminal: the open questions, then write, another key, drop a
field, or quit. Each answer is applied by ``propose``'s pure functions and the proposal
shown again (with its preview), so the user sees what an answer changes before writing.

The terminal is injected (``Terminal``): click's prompts on a real one, scripted
answers in tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import click

from skuferry.discover import propose as p
from skuferry.discover.model import Proposal, Question


class Terminal(Protocol):
    def echo(self, text: str) -> None: ...
    def choose(self, text: str, choices: list[str], default: str) -> str: ...


class ClickTerminal:
    """click's prompts (they read what a test's ``CliRunner`` gives as input too)."""

    def echo(self, text: str) -> None:
        click.echo(text)

    def choose(self, text: str, choices: list[str], default: str) -> str:
        answer: str = click.prompt(
            text, type=click.Choice(choices, case_sensitive=False), default=default
        )
        return answer


def _ask(term: Terminal, question: Question) -> int | None:
    """A question's option number as the user picks it (``skip``: leave it as proposed)."""
    term.echo("")
    term.echo(question.text)
    for number, (label, meaning) in enumerate(question.options, start=1):
        mark = " (proposed)" if question.chosen == number - 1 else ""
        term.echo(f"  {number}. {label}: {meaning}{mark}")
    choices = [str(n) for n in range(1, len(question.options) + 1)]
    default = str((question.chosen or 0) + 1) if question.chosen is not None else "skip"
    picked = term.choose("Your choice", [*choices, "skip"], default)
    return None if picked == "skip" else int(picked) - 1


def converse(
    proposal: Proposal, show: Callable[[Proposal], None], term: Terminal
) -> Proposal | None:
    """Ask until the user writes (the proposal to write) or quits (None)."""
    show(proposal)
    while True:
        asked = [q for q in proposal.questions if q.options]
        if asked:
            changed = proposal
            for question in asked:
                changed = p.answer(changed, question, _ask(term, question))
            if changed is not proposal:
                proposal = changed
                show(proposal)
                continue
        term.echo("")
        action = term.choose(
            "Write this config? w = write, k = pick another key, d = drop a field, q = quit",
            ["w", "k", "d", "q"],
            "w",
        )
        if action == "w":
            return proposal
        if action == "q":
            return None
        if action == "k":
            names = [c.column.name for c in proposal.candidates]
            if len(names) < 2:
                term.echo("no other column is unique and non-empty in the sample")
                continue
            for number, candidate in enumerate(proposal.candidates, start=1):
                term.echo(f"  {number}. {candidate.column.name!r}: {candidate.why}")
            picked = term.choose("The key", [str(n) for n in range(1, len(names) + 1)], "1")
            proposal = p.with_key(proposal, names[int(picked) - 1])
        else:
            targets = [c.target for c in proposal.fields]
            if not targets:
                term.echo("no field left to drop")
                continue
            dropped = term.choose("Drop which field", targets, targets[-1])
            proposal = p.without_field(proposal, dropped)
        show(proposal)
