"""Version 1 entries brought to version 3, as the pi agent migrates a v1 file when it loads
one: v1 files are a plain list, v2 added the ``id``/``parentId`` tree (the list becomes one
chain, in file order) and replaced the compaction's ``firstKeptEntryIndex`` (an index into
the file's lines, header included) by ``firstKeptEntryId``. (v3's one change, the message
role ``hookMessage`` renamed ``custom``, the reader applies already.)

The new keys go last, where pi's in-place migration puts them. Ids are derived from a seed
(the file's SHA-256), not random, so the same file always upgrades to the same entries: an
import of it twice stores the same thing."""

from __future__ import annotations

from typing import Any

from protocol.transcript.inputs import entry_id
from protocol.transcript.reader import ParsedLines, TranscriptFormatError, check_entry

__all__ = ["upgrade_v1"]


def upgrade_v1(parsed: ParsedLines, seed: str) -> list[dict[str, Any]]:
    """The v1 file's entries as v3 entries, each checked as one
    (``TranscriptFormatError`` with the entry's line when one cannot be)."""
    entries = parsed.transcript.entries
    taken: set[str] = set()
    ids: list[str] = []
    for index in range(len(entries)):
        new_id = entry_id(f"{seed}:v1:{index}", taken)
        taken.add(new_id)
        ids.append(new_id)
    upgraded: list[dict[str, Any]] = []
    for index, (entry, line) in enumerate(zip(entries, parsed.entry_lines, strict=True)):
        new = {key: value for key, value in entry.items() if key not in ("id", "parentId")}
        new["id"] = ids[index]
        new["parentId"] = ids[index - 1] if index else None
        if new["type"] == "compaction" and "firstKeptEntryIndex" in new:
            kept = new.pop("firstKeptEntryIndex")
            # Line 0 of the index space is the header: entry i is index i + 1.
            if not isinstance(kept, int) or isinstance(kept, bool) or not 1 <= kept <= index:
                raise TranscriptFormatError(
                    line, f"compaction firstKeptEntryIndex {kept!r} names no earlier entry"
                )
            new["firstKeptEntryId"] = ids[kept - 1]
        check_entry(new, 3, line)
        upgraded.append(new)
    return upgraded
