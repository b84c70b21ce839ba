"""What a turn a crash or Ctrl-C cut off gets when its session's agent is started again
and has kept the conversation (``store/ops/interrupted.py`` applies it):

- ``continue``: a continuation prompt is sent in its place (the default);
- ``report``: it ends ``interrupted`` and is not sent again.

Sessions may carry their own (``interruptedTurns`` in their metadata): ``report`` (serve's
sessions: recovery ends their cut-off prompts at once) and ``retry`` (the older name of
``report``'s behaviour, kept for stores written before ``continue``)."""

from __future__ import annotations

POLICIES = ("continue", "report")
STORED_POLICIES = (*POLICIES, "retry")

DEFAULT_CONTINUATION = (
    "Your previous turn was cut off before it finished: the control plane hosting this "
    "session stopped (a crash or an interrupt) and has restored this conversation. Continue "
    "the task from where you stopped. Do not repeat actions whose results are already in "
    "this conversation; if the task is complete, give your final answer."
)
