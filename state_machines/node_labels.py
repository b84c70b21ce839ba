"""The form of a node's name and labels (what placement matches: store/placement.py),
checked alike for ``[node]`` in the configuration, ``acpctl serve --node-name / --label``
and placements. Pure rules, so the command line and the configuration check them without
loading the store.

A name is what a host name may be: letters, digits, ``.``, ``_`` and ``-``, at most 253
characters. A label is a bare word (``shared-volume``) or a ``KEY=VALUE`` pair
(``zone=eu-1``); a node carries at most one value per key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from state_machines.errors import ControlPlaneError

# A host name fits (RFC 1123: 253 characters at most), as the default name is the host's.
NAME_MAX = 253
LABEL_MAX = 128
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
# A key may carry a prefix (``example.com/gpu``); a value may be any run of the same signs.
_KEY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]*[A-Za-z0-9])?")
_VALUE = re.compile(r"[A-Za-z0-9._/-]+")
LABEL_FORM = "a label is WORD or KEY=VALUE, of letters, digits and . _ - /"


class InvalidNodeName(ControlPlaneError, ValueError):
    """A node name placement could not name: empty, too long, or with other signs than
    letters, digits, ``.``, ``_`` and ``-`` (spaces included)."""


class InvalidLabel(ControlPlaneError, ValueError):
    """A label that is neither a word nor ``KEY=VALUE``, or a key given two values."""


def check_node_name(name: str) -> str:
    """``name`` if it can name a node; ``InvalidNodeName`` saying why not."""
    if len(name) > NAME_MAX:
        raise InvalidNodeName(f"node name is {len(name)} characters long; at most {NAME_MAX}")
    if not _NAME.fullmatch(name):
        raise InvalidNodeName(
            f"node name {name!r}: letters, digits, '.', '_' and '-' only (no spaces), "
            "beginning and ending with a letter or digit"
        )
    return name


def check_label(label: str) -> str:
    """``label`` if it is a word or ``KEY=VALUE``; ``InvalidLabel`` saying why not."""
    if len(label) > LABEL_MAX:
        raise InvalidLabel(f"label is {len(label)} characters long; at most {LABEL_MAX}")
    key, eq, value = label.partition("=")
    if not key:
        raise InvalidLabel(f"label {label!r}: the key before '=' is empty; {LABEL_FORM}")
    if eq and not value:
        raise InvalidLabel(f"label {label!r}: the value after '=' is empty; {LABEL_FORM}")
    if not _KEY.fullmatch(key) or (eq and not _VALUE.fullmatch(value)):
        raise InvalidLabel(f"label {label!r}: {LABEL_FORM} (no spaces, one '=')")
    return label


def check_node_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """A node's labels, each checked, sorted and without repeats; ``InvalidLabel`` if one is
    bad or a key is given two values (``zone=a`` and ``zone=b``, or ``gpu`` and ``gpu=a100``)."""
    unique = sorted({check_label(label) for label in labels})
    by_key: dict[str, str] = {}
    for label in unique:
        key = label.partition("=")[0]
        if key in by_key:
            raise InvalidLabel(f"labels {by_key[key]!r} and {label!r}: one value per key")
        by_key[key] = label
    return tuple(unique)
