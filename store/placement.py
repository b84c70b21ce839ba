"""Where a session may run. A session's cwd is local to a machine: a session created on one
node can only run on nodes that see the same files. Placement says which: any node (the
default, for a store used by one machine or nodes that share every path), one named node,
or any node carrying every one of some labels (for example ``shared-volume``). Takeover
after a node is lost only goes where the session's placement allows; a session none of the
live nodes may run waits, and ``acpctl status`` shows it waiting."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from state_machines.errors import ControlPlaneError


class InvalidPlacement(ControlPlaneError, ValueError):
    """A placement that names neither a node nor labels, or both."""


@dataclass(frozen=True)
class Placement:
    node: str | None = None
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.node is None) == (not self.labels):
            raise InvalidPlacement("a placement names one node, or one or more labels")
        if self.node is not None and not self.node.strip():
            raise InvalidPlacement("a placement's node name must not be empty")
        if any(not label.strip() for label in self.labels):
            raise InvalidPlacement("placement labels must not be empty")

    def allows(self, node_name: str, node_labels: Iterable[str]) -> bool:
        if self.node is not None:
            return self.node == node_name
        return set(self.labels) <= set(node_labels)

    def to_json(self) -> str:
        if self.node is not None:
            return json.dumps({"node": self.node})
        return json.dumps({"labels": sorted(self.labels)})

    @classmethod
    def from_json(cls, text: str | None) -> Placement | None:
        if not text:
            return None
        value = json.loads(text)
        if "node" in value:
            return cls(node=str(value["node"]))
        return cls(labels=tuple(str(v) for v in value["labels"]))

    def describe(self) -> str:
        return f"node {self.node}" if self.node is not None else "labels " + ",".join(self.labels)


def allowed(placement_json: str | None, node_name: str, node_labels: Iterable[str]) -> bool:
    placement = Placement.from_json(placement_json)
    return placement is None or placement.allows(node_name, node_labels)
