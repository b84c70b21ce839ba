"""Putting a control plane together (``ControlPlane.open``): the store, delivery, the
protocol loop, the supervisor of the session actors and the subagent bridge, in the order
their dependencies need, and taken apart again if any step fails."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from actors.delivery.service import DeliveryService
from actors.settings import RuntimeSettings
from actors.supervisor import Supervisor
from control_plane.config import default_db_path
from control_plane.subagents.http_tools import HttpTools
from control_plane.subagents.offer import ToolsOffer
from control_plane.subagents.rules import socket_path
from control_plane.subagents.server import SubagentBridge
from protocol.loop import ProtocolLoop
from store import Store, StoreOptions

if TYPE_CHECKING:
    from control_plane.api import ControlPlane


def assemble(
    cls: type[ControlPlane],
    path: str | os.PathLike[str],
    options: StoreOptions | None,
    settings: RuntimeSettings | None,
    delivery_workers: int,
    delivery_batch: int,
    run_sessions: bool,
    subagent_tools: bool,
) -> ControlPlane:
    settings = settings or RuntimeSettings()
    options = options or StoreOptions()
    if run_sessions:
        # A node's write transaction left idle past its lease is ended by the server: its
        # row locks would otherwise hold up the nodes taking its sessions over.
        stalled = min(options.stalled_write_s, settings.lease_s)
        options = replace(options, stalled_write_s=stalled)
    store = Store.open(path, options)
    if settings.log_dir == RuntimeSettings().log_dir:
        # Agent stderr logs live next to the store file unless configured otherwise (with
        # PostgreSQL: in this machine's data directory, where a local store would be).
        base = store.path if store.location.is_file else default_db_path()
        log_dir = os.path.join(os.path.dirname(base), "agent-logs")
        settings = replace(settings, log_dir=log_dir)
    if settings.workspace_root is None:  # worktrees next to the store too
        base = store.path if store.location.is_file else default_db_path()
        root = os.path.join(os.path.dirname(base), "workspaces")
        settings = replace(settings, workspace_root=root)
    loop: ProtocolLoop | None = None
    try:
        delivery = DeliveryService(store, workers=delivery_workers, batch_size=delivery_batch)
        delivery.start()
        loop = ProtocolLoop()
        offer: ToolsOffer | None = None
        if run_sessions and subagent_tools:
            # Before the supervisor: every agent launch asks for its MCP entry.
            offer = ToolsOffer(socket_path(store.path))
            settings = replace(settings, mcp_servers=offer.mcp_servers_for)
        supervisor = Supervisor(store, loop, settings)
        delivery.on_parent_work = supervisor.notify  # an announce queued a follow-up
        cp = cls(store, delivery, loop, supervisor)
        if offer is not None:
            bridge = SubagentBridge(cp, offer.trees, offer.socket_path)
            loop.call(bridge.start(), 10)
            cp._bridge = bridge
            offer.http = bridge.http = HttpTools(bridge, offer.trees, loop.submit)
        if run_sessions:
            supervisor.start()
        if run_sessions and settings.notify_hooks:
            # [[notify]] webhooks, each on a thread of its own (docs/notify.md).
            from actors.delivery.notifier import Notifier

            first, most = settings.notify_backoff_s
            cp._notifier = Notifier(
                store,
                settings.notify_hooks,
                first_backoff_s=first,
                max_backoff_s=most,
                poll_s=settings.notify_poll_s,
            )
            cp._notifier.start()
        if run_sessions and settings.retention is not None:
            # serve and batch: the [retention] section's gc, in the background.
            from control_plane.retention.schedule import RetentionSchedule

            cp._retention = RetentionSchedule(store, settings.retention)
            cp._retention.start()
    except BaseException:
        if loop is not None:
            loop.stop()
        store.close()
        raise
    return cp
