"""The kinds of event in a session's log: the one vocabulary the store, the actors, the
protocol side (the recorder, replay, the transcript mapping) and the control plane share.

Here, at the bottom of the import graph, because ``protocol`` records event kinds and must
not import the store. A ``StrEnum``: a member equals its string, so stored kinds compare
with members directly, and stores written before this enum read the same.
"""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    SESSION_CREATED = "session_created"  # spawn: the agent (names of its env only) and cwd
    PROMPT = "prompt"  # a turn began: the prompt sent (one per send)
    SESSION_UPDATE = "session_update"  # an agent's session/update frame, verbatim
    TURN_ENDED = "turn_ended"  # the agent answered the prompt (stop reason, usage)
    TURN_FAILED = "turn_failed"  # the agent died or broke the protocol mid-turn
    TURN_INTERRUPTED = "turn_interrupted"  # a restored agent had the prompt: not sent again
    TURN_TIMEOUT_KILL = "turn_timeout_kill"  # a timed-out turn outlived its grace: killed
    INTERRUPTED = "interrupted"  # recovery found the turn cut short (requeued or failed)
    CANCEL_REQUESTED = "cancel_requested"  # a cancel reached the store (steer, interrupt, user)
    AGENT_STARTED = "agent_started"  # the agent runs (how: new, resumed, loaded, context_lost)
    AGENT_START_FAILED = "agent_start_failed"  # spawn, initialize or new/restore failed
    AGENT_EXITED = "agent_exited"  # the agent process ended on its own (code, stderr tail)
    AGENT_PROTOCOL_ERROR = "agent_protocol_error"  # garbage or an oversized frame on stdout
    CONTEXT_LOST = "context_lost"  # the agent could not restore the session: a new one
    ANNOUNCE = "announce"  # a child's finished run, in its parent's log
    CLOSED = "closed"  # the session closed for good (reason)
    BUDGET_WARNING = "budget_warning"  # a warn budget was reached (once per budget)
    BUDGET_EXCEEDED = "budget_exceeded"  # a stop budget stopped the session (budget, used)
    WORKSPACE_READY = "workspace_ready"  # its worktree made and set up (path, branch, base)
    CHECKPOINT = "checkpoint"  # a turn ended: the worktree's files committed (ref, tree)
    WORKSPACE_RESTORED = "workspace_restored"  # files put back before a cut-off turn reruns
    FORKED = "forked"  # this session began as a copy of another's conversation up to a turn
    FORK_SEED = "fork_seed"  # the forked conversation sent to a new agent with a prompt
    TRANSCRIPT_ENTRY = "transcript_entry"  # one entry of an imported JSONL transcript, verbatim
    # serve --listen put an agent's permission request to its clients (requestId, toolCallId,
    # title; toolCall and options, so any node can put it to its own clients): written with
    # the request's row, so webhooks and the other nodes learn of it from the log.
    PERMISSION_REQUESTED = "permission_requested"
    # that request was settled (requestId, state: answered with optionId and decidedBy, or
    # withdrawn): written with the row's compare-and-set, so the asking node and every node
    # that put it to its clients learn of it from the log.
    PERMISSION_SETTLED = "permission_settled"


# The ``sessionUpdate`` kinds a conversation is made of: what an agent sends only while it
# works on a prompt, and what its ``session/load`` replays. The others (slash commands,
# mode, config, session info) an agent may send at any time, prompted or not.
CONVERSATION_UPDATES = frozenset(
    {
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
    }
)
