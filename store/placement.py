"""Where a session may run. A session's cwd is local to a machine: a session created on one
node can only run on nodes that see the same files. Placement says which: any node (the
default, for a store used by one machine or nodes that share every path), one named node,
or any node carrying every one of some labels (for example ``shared-volume``). Takeover
after a node is lost only goes where the session's placement allows; a session none of the
live nodes may run waits, and ``acpctl status`` shows it waiting.

A label is a bare word (``shared-volume``) or a ``KEY=VALUE`` pair (``zone=eu-1``); a node
carries at most one value per key. Placement compares whole labels: a session placed on
``zone=eu-1`` runs on the nodes that carry exactly that label. Node names and labels are
checked by one set of rules (state_machines/node_labels.py) for the configuration, the
command line and placements alike."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from state_machines.errors import ControlPlaneError
from state_machines.node_labels import (
    InvalidLabel,
    InvalidNodeName,
    check_label,
    check_node_labels,
    check_node_name,
)

__all__ = [
    "InvalidLabel",
    "InvalidNodeName",
    "InvalidPlacement",
    "Placement",
    "allowed",
    "check_label",
    "check_node_labels",
    "check_node_name",
]


class InvalidPlacement(ControlPlaneError, ValueError):
    """A placement that names neither a node nor labels, or both, or a bad name or label."""


@dataclass(frozen=True)
class Placement:
    node: str | None = None
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.node is None) == (not self.labels):
            raise InvalidPlacement("a placement names one node, or one or more labels")
        try:
            if self.node is not None:
                check_node_name(self.node)
            check_node_labels(self.labels)  # a node has one value per key: two never match
        except (InvalidNodeName, InvalidLabel) as exc:
            raise InvalidPlacement(f"placement: {exc}") from None

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
        node = str(value["node"]) if "node" in value else None
        labels = () if node is not None else tuple(str(v) for v in value["labels"])
        try:
            return cls(node=node, labels=labels)
        except InvalidPlacement:
            # Stored before names and labels had a form: read back as it was (it matches
            # only a node that carries exactly it, as before), never an error on reading.
            stored = object.__new__(cls)
            object.__setattr__(stored, "node", node)
            object.__setattr__(stored, "labels", labels)
            return stored

    def describe(self) -> str:
        return f"node {self.node}" if self.node is not None else "labels " + ",".join(self.labels)


def allowed(placement_json: str | None, node_name: str, node_labels: Iterable[str]) -> bool:
    placement = Placement.from_json(placement_json)
    return placement is None or placement.allows(node_name, node_labels)
