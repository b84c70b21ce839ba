"""What a batch shows while it runs (a bar on a terminal, else a line per change), and what
Ctrl-C says the same command will do next."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.live import Live
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from control_plane.cli.common import err

if TYPE_CHECKING:
    from control_plane.batch.run import BatchRun, Counts


def _progress_line(counts: Counts, total: int) -> str:
    return (
        f"done {counts.done}  running {counts.running}  failed {counts.failed}  "
        f"queued {counts.queued}  of {total}"
    )


def run_with_progress(batch: BatchRun, total: int, json_out: bool) -> Counts:
    """``batch.run`` with a progress bar on a terminal, else a line per change."""
    if sys.stderr.isatty() and not json_out:
        progress = Progress(
            TextColumn("[bold]batch[/]"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[line]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=err,
        )
        bar = progress.add_task("batch", total=total, line="")
        with Live(progress, console=err, refresh_per_second=8):
            return batch.run(
                lambda c: progress.update(bar, completed=c.finished, line=_progress_line(c, total))
            )
    last = [""]

    def report(c: Counts) -> None:
        line = _progress_line(c, total)
        if line != last[0] and not json_out:
            err.print(line, highlight=False)
            last[0] = line

    return batch.run(report)


def next_run_after_interrupt(counts: Counts, total: int, policy: str) -> str:
    """What Ctrl-C prints: what running the same command again will do, task by task."""
    lines = ["interrupted; nothing is lost. The same command again:"]
    if counts.done:
        lines.append(f"  keeps the {counts.done} task(s) done (never run twice);")
    if counts.failed:
        lines.append(
            f"  keeps the {counts.failed} failed task(s) as they are (--retry-failed runs "
            "them again);"
        )
    if counts.running:
        if policy == "continue":
            what = (
                "continues them: where the agent restores its conversation it is sent the "
                "continuation prompt (continuation_prompt), where it lost the conversation "
                "or never got the prompt, the prompt again"
            )
        else:
            what = (
                "reports those whose agent restores its conversation 'interrupted' (exit 1; "
                "--interrupted continue would continue them) and sends the prompt again to "
                "an agent that lost it"
            )
        lines.append(f"  {counts.running} task(s) cut off mid-turn: {what};")
    if counts.queued:
        lines.append(f"  runs the {counts.queued} task(s) not started yet;")
    lines.append(f"  and writes one result line for each of the {total} tasks.")
    return "\n".join(lines)
