"""Every configured webhook of one control plane: a ``HookDeliverer`` each, woken by the
commits that append one of its kinds.

The commit listener runs on the store's writer thread, so it only looks at the kinds of
what the commit appended (no read, no I/O) and sets an event: a turn's commit costs a set
lookup per appended event, whatever the receivers do.

A process delivers a hook once however many control planes it opens on one store (the
store's checkpoint row names the process, not the control plane): the first of them to
open delivers it, the others leave it to that one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from actors.delivery.hooks import HookSpec
from actors.delivery.webhook import HookDeliverer
from store import BindingRecord, Store
from store.write_context import Appended

_RUNNING: set[tuple[str, str]] = set()  # (store identity, hook key) delivered in this process
_RUNNING_LOCK = threading.Lock()


class Notifier:
    def __init__(self, store: Store, hooks: Sequence[HookSpec], **options: Any) -> None:
        self._store = store
        self._claimed: list[tuple[str, str]] = []
        self.deliverers: list[HookDeliverer] = []
        with _RUNNING_LOCK:
            for hook in hooks:
                claim = (store.identity, hook.key)
                if claim in _RUNNING:
                    continue
                _RUNNING.add(claim)
                self._claimed.append(claim)
                self.deliverers.append(HookDeliverer(store, hook, **options))
        self._kinds = frozenset().union(*(d.hook.kinds for d in self.deliverers))
        self._unsubscribe = store.watch.appends(self._on_appends) if self.deliverers else None

    def start(self) -> None:
        for deliverer in self.deliverers:
            deliverer.start()

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        for deliverer in self.deliverers:
            deliverer.close()
        with _RUNNING_LOCK:
            _RUNNING.difference_update(self._claimed)

    def lag(self) -> list[tuple[str, float]]:
        """(hook label, seconds) for every hook this control plane delivers."""
        return [(d.hook.label, d.lag_s()) for d in self.deliverers]

    def _on_appends(self, appended: Sequence[Appended], _bound: Sequence[BindingRecord]) -> None:
        kinds = self._kinds
        if any(frame[0] in kinds for entry in appended for frame in entry[3]):
            for deliverer in self.deliverers:
                deliverer.wake()
