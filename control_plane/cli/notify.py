"""``acpctl notify test``: one test notification to every ``[[notify]]`` hook, each answer
reported (docs/notify.md). No store is opened: it checks the hooks, not the log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from control_plane.cli.common import Context, errors_as_exit, fail, out, print_json

if TYPE_CHECKING:
    from actors.delivery.hooks import HookSpec
    from actors.delivery.webhook_post import Answer

app = typer.Typer(help="Webhooks ([[notify]] in the configuration).", no_args_is_help=True)

EXIT_FAILED = 1


def send_tests(hooks: tuple[HookSpec, ...]) -> list[tuple[HookSpec, Answer]]:
    """One POST of a test notification to each hook, all at once (no retries: the answer
    is what is asked for), in the configuration's order."""
    from concurrent.futures import ThreadPoolExecutor

    from actors.delivery.notifications import test_notification
    from actors.delivery.webhook_post import post

    with ThreadPoolExecutor(max(1, min(8, len(hooks))), "notify-test") as pool:
        answers = list(pool.map(lambda h: post(h, test_notification(h.console_url)), hooks))
    return list(zip(hooks, answers, strict=True))


def answer_json(hook: HookSpec, answer: Answer) -> dict[str, Any]:
    return {
        "hook": hook.label,
        "url": hook.masked_url,
        "format": hook.format.value,
        "signed": hook.secret_env is not None,
        "outcome": answer.outcome,
        "reason": answer.reason,
        "status": answer.status,
        "elapsedMs": round(answer.elapsed_s * 1000, 1),
        "detail": answer.detail,
    }


@app.command("test")
def test_command(
    typer_ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per hook.")] = False,
) -> None:
    """Send one test notification (type "test") to every configured hook and report what
    each answered. Exit 0 when every hook accepted it, 1 when one did not, 2 when none is
    configured.

    Example: ACPCTL_WEBHOOK_SECRET=... acpctl notify test --json
    """
    ctx: Context = typer_ctx.obj
    with errors_as_exit():
        hooks = ctx.config().notify_hooks()
    if not hooks:
        fail(r"no \[\[notify]] hooks are configured (docs/notify.md)")  # rich markup escaped
    results = send_tests(hooks)
    if json_out:
        print_json([answer_json(h, a) for h, a in results])
    else:
        for hook, answer in results:
            mark = "ok" if answer.outcome == "accepted" else answer.outcome
            out.print(
                f"{hook.label}\t{hook.masked_url}\t{hook.format.value}\t{mark}\t"
                f"{answer.detail or answer.reason}\t{answer.elapsed_s * 1000:.0f} ms",
                highlight=False,
            )
    if any(answer.outcome != "accepted" for _, answer in results):
        raise typer.Exit(EXIT_FAILED)
