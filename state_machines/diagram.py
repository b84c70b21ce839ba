"""Mermaid diagrams generated from the transition tables (``docs/state-machines.md``)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from state_machines.claim_offer import OFFER_MACHINE
from state_machines.command import COMMAND_MACHINE
from state_machines.recorder import RECORDER_MACHINE
from state_machines.session import SESSION_MACHINE
from state_machines.table import TransitionTable


def mermaid(table: TransitionTable[Any, Any]) -> str:
    """A ``stateDiagram-v2`` block: one edge per table entry, sorted for a stable diff."""
    edges: dict[tuple[str, str], list[str]] = {}
    for (src, event), dst in table.transitions.items():
        edges.setdefault((str(src), str(dst)), []).append(str(event))
    lines = ["stateDiagram-v2", f"    [*] --> {table.initial}"]
    for (src, dst), events in sorted(edges.items()):
        lines.append(f"    {src} --> {dst}: {', '.join(sorted(events))}")
    for state in sorted(str(s) for s in table.final):
        lines.append(f"    {state} --> [*]")
    return "\n".join(lines)


def _table_markdown(table: TransitionTable[Any, Any]) -> str:
    rows = ["| from | event | to |", "|---|---|---|"]
    for (src, event), dst in sorted(table.transitions.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        rows.append(f"| `{src}` | `{event}` | `{dst}` |")
    return "\n".join(rows)


def _section(title: str, table: TransitionTable[Any, Any], events: type[StrEnum]) -> str:
    return (
        f"## {title}\n\n```mermaid\n{mermaid(table)}\n```\n\n{_table_markdown(table)}\n\n"
        f"Final states: {', '.join(f'`{s}`' for s in sorted(str(s) for s in table.final))}. "
        f"Events: {', '.join(f'`{e}`' for e in events)}.\n"
    )


def state_machines_markdown() -> str:
    """The whole generated ``docs/state-machines.md``."""
    from state_machines.claim_offer import OfferEvent
    from state_machines.command import CommandEvent
    from state_machines.recorder import RecorderEvent
    from state_machines.session import SessionEvent

    header = (
        "# State machines\n\n"
        "Generated from the tables in `state_machines/` by "
        "`python -m state_machines.diagram > docs/state-machines.md`; a test fails when this "
        "file and the tables disagree. An event with no entry raises `IllegalTransition` and "
        "leaves the state unchanged. The store's SQL guards "
        "(`UPDATE ... WHERE state IN (...)`) take their allowed sets from the same tables.\n\n"
    )
    return (
        header
        + _section("Session", SESSION_MACHINE, SessionEvent)
        + "\n"
        + _section("Command (run)", COMMAND_MACHINE, CommandEvent)
        + "\n"
        + _section("Event recorder (write pipeline)", RECORDER_MACHINE, RecorderEvent)
        + "\n"
        + _section("Claim offer (a prompt claimed as it is queued)", OFFER_MACHINE, OfferEvent)
    )


if __name__ == "__main__":
    print(state_machines_markdown(), end="")
