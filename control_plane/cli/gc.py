"""``acpctl gc``: delete old session trees, archived first when asked
(control_plane/retention/; docs/store.md, "Retention and archive")."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from control_plane.cli.common import (
    EXIT_FAILED,
    Context,
    errors_as_exit,
    fail,
    opened_store,
    out,
    print_json,
)

if TYPE_CHECKING:  # the store and the retention runner load once the input is known good
    from control_plane.config import Config
    from control_plane.retention.policy import RetentionPolicy
    from control_plane.retention.report import GcReport


def gc_command(
    typer_ctx: typer.Context,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="Delete trees whose every session was last updated longer ago than this: "
            "30d, 12h, 90m, 45s. Default: \\[retention] older_than, else 30d.",
        ),
    ] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state",
            help="States a tree's sessions may be in, comma-separated: closed, idle, error. "
            "Default: \\[retention] states, else closed,error (idle only when asked).",
        ),
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            "--archive",
            help="Archive each tree into DIR/<root>.tar.gz (+ .sha256) before deleting it. "
            "Default: \\[retention] archive_dir, else no archive.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would go; change nothing.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Also delete trees whose output a sink has not received yet."),
    ] = False,
    include_imported: Annotated[
        bool,
        typer.Option(
            "--include-imported",
            help="Also delete imported transcripts (acpctl sessions import), kept by default. "
            "Default: \\[retention] include_imported.",
        ),
    ] = False,
    compact: Annotated[
        bool,
        typer.Option(
            "--compact",
            help="SQLite: then rewrite the store once (VACUUM) so it can return freed space "
            "to the file system; needs the store to itself.",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
) -> None:
    """Delete session trees (a root and all its subagents) whose every session is in one of
    the chosen states and was last updated before the cutoff. A tree with output not yet
    delivered to a sink is kept unless --force; sessions being created, in a turn or owned
    by a live process are never deleted. Deletion runs in short transactions, so a serve
    or batch on the same store goes on meanwhile; a gc stopped half-way is finished by the
    next one.

    Example: acpctl gc --older-than 90d --archive ~/acpctl-archive --dry-run
    """
    ctx: Context = typer_ctx.obj
    with errors_as_exit():
        config = ctx.config()
        policy = _policy(config, older_than, state, archive, force, dry_run, include_imported)
        if compact and config.db_is_url:
            fail("--compact is for SQLite stores; PostgreSQL reclaims space by autovacuum")
        from control_plane.retention.run import run_gc

        with opened_store(ctx) as store:
            report = run_gc(store, policy)
            target = store.location.target
        if compact and not dry_run:
            _compact(ctx, target, report)
    if json_out:
        print_json(report.to_json())
    else:
        _print(report)
    if report.failed:
        raise typer.Exit(EXIT_FAILED)


def _policy(
    config: Config,
    older_than: str | None,
    state: str | None,
    archive: Path | None,
    force: bool,
    dry_run: bool,
    include_imported: bool = False,
) -> RetentionPolicy:
    """The flags over the ``[retention]`` section; every mistake exits 2 before the store
    is opened."""
    from control_plane.retention.policy import (
        RetentionPolicy,
        RetentionRefused,
        checked_archive_dir,
        parse_duration,
        parse_states,
    )

    section = config.retention
    chosen = archive if archive is not None else section.archive_dir
    try:
        # The flags checked first, so that a message names the flag it is about.
        if older_than is not None:
            parse_duration(older_than, "--older-than")
        if state is not None:
            parse_states([state], "--state")
        return RetentionPolicy(
            older_than=older_than if older_than is not None else section.older_than,
            states=(state,) if state is not None else tuple(section.states),
            archive_dir=(
                None if chosen is None else checked_archive_dir(chosen, create=not dry_run)
            ),
            force=force,
            include_imported=include_imported or section.include_imported,
            dry_run=dry_run,
        )
    except RetentionRefused as exc:
        fail(str(exc))


def _compact(ctx: Context, target: str, report: GcReport) -> None:
    """The one-time VACUUM, then the figures again (the store closed meanwhile: the
    compaction needs it to itself, this process's connections included)."""
    from control_plane.retention import space
    from store.space import compact

    compact(target)
    report.compacted = True
    with opened_store(ctx) as store:
        after = space.measure(store)
    if report.space is not None and after is not None:
        report.space.after = after.to_json()
        report.space.reclaim = "incremental-vacuum"
        report.space.note = (
            "compacted: the store now gives freed pages back (auto_vacuum INCREMENTAL)"
        )


def _print(report: GcReport) -> None:
    verb = "would delete" if report.dry_run else "deleted"
    out.print(
        f"{verb} {len(report.deleted)} trees ({report.sessions_deleted} sessions, "
        f"{report.events_deleted} events); states {','.join(report.states)}, "
        f"updated before {report.cutoff}",
        highlight=False,
        soft_wrap=True,
    )
    for tree in report.deleted:
        notes = []
        if tree.archive:
            notes.append(f"archive {tree.archive['path']}")
        if tree.resumed:
            notes.append("finishing an earlier gc")
        if tree.forced:
            notes.append("forced: undelivered output")
        if not tree.finished:
            notes.append("stopped half-way: the next gc finishes it")
        suffix = f"  ({'; '.join(notes)})" if notes else ""
        out.print(
            f"  {tree.root}  {len(tree.sessions)} sessions  {tree.events} events{suffix}",
            highlight=False,
            soft_wrap=True,
        )
    if report.kept:
        out.print(f"kept {len(report.kept)} trees:", highlight=False, soft_wrap=True)
        for kept in report.kept:
            out.print(
                f"  {kept.root}  {kept.reason}: {kept.detail}", highlight=False, soft_wrap=True
            )
    for failed in report.failed:
        out.print(
            f"[red]not deleted[/] {failed.root}: {failed.error}", highlight=False, soft_wrap=True
        )
    locks = report.locks.to_json()
    if locks["count"]:
        out.print(
            f"{locks['count']} transactions; write lock held at most {locks['maxMs']} ms "
            f"(p99 {locks['p99Ms']} ms)",
            highlight=False,
            soft_wrap=True,
        )
    if report.space is not None:
        _print_space(report)


def _print_space(report: GcReport) -> None:
    assert report.space is not None
    space = report.space
    before, after = space.before, space.after
    if before is not None and after is not None:
        out.print(
            f"space: file {_mb(before['fileBytes'])} -> {_mb(after['fileBytes'])}, "
            f"free inside {_mb(before['freeBytes'])} -> {_mb(after['freeBytes'])}, "
            f"WAL {_mb(after['walBytes'])}",
            highlight=False,
            soft_wrap=True,
        )
    if space.note and (report.deleted or report.compacted):
        out.print(space.note, highlight=False, soft_wrap=True)


def _mb(value: int) -> str:
    return f"{value / 1_000_000:.1f} MB"
