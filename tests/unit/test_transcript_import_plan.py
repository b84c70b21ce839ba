"""Reading a transcript for an import (protocol/transcript/import_plan.py, upgrade.py and the
reader's strict mode): every line kept as its text, bad input refused with its line number,
v1/v2 files brought to v3, and what the search index gets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol.transcript.import_plan import SearchText, plan_import, search_text
from protocol.transcript.reader import TranscriptFormatError, read_transcript
from tests.unit.test_transcript_reader import (
    EXAMPLE,
    HEADER,
    assistant,
    entry,
    tool_result,
    user,
)


def jsonl(*objects: Any) -> bytes:
    lines = [obj if isinstance(obj, str) else json.dumps(obj) for obj in objects]
    return "".join(line + "\n" for line in lines).encode()


def refused(raw: bytes) -> TranscriptFormatError:
    with pytest.raises(TranscriptFormatError) as caught:
        plan_import(raw, "t.jsonl")
    return caught.value


# --------------------------------------------------------------------------- the plan


def test_the_example_is_planned_as_its_lines_with_its_header_and_digest() -> None:
    raw = EXAMPLE.read_bytes()
    plan = plan_import(raw, "example.jsonl")
    lines = raw.decode().splitlines()
    assert [e.text for e in plan.entries] == lines[1:]
    assert [e.line for e in plan.entries] == list(range(2, 14))
    assert plan.header == json.loads(lines[0])
    assert plan.header_id == "0b7e6c1a-3f2d-4e8a-9c55-1d2e3f4a5b6c"
    assert (plan.version, plan.cwd, plan.agent_name) == (3, "/home/user/repo", "anthropic")
    assert len(plan.sha256) == 64
    assert plan.entries[2].created_at == pytest.approx(1773568801.0)  # 2026-03-15T10:00:01Z
    meta = plan.metadata("2026-04-01T00:00:00.000Z")
    assert meta["headerId"] == plan.header_id and meta["entries"] == 12
    assert meta["header"] == plan.header and meta["file"] == "example.jsonl"


def test_a_line_is_kept_as_written_whatever_its_json_formatting() -> None:
    spaced = (
        '{ "type": "custom", "id": "a1", "parentId": null, "timestamp": "t",  '
        '"customType": "x", "data": {"cost": 3e-7} }'
    )
    plan = plan_import(jsonl(HEADER, "  " + spaced + "\t"), "t.jsonl")
    assert plan.entries[0].text == spaced  # only the whitespace around the line goes


def test_blank_lines_crlf_and_a_byte_order_mark_are_read() -> None:
    raw = b"\xef\xbb\xbf" + jsonl(HEADER).replace(b"\n", b"\r\n") + b"\n" + jsonl(user("a1", None))
    plan = plan_import(raw, "t.jsonl")
    assert [json.loads(e.text)["id"] for e in plan.entries] == ["a1"]
    assert plan.entries[0].line == 3


def test_the_same_bytes_give_the_same_digest_and_other_bytes_another() -> None:
    raw = EXAMPLE.read_bytes()
    assert plan_import(raw, "a").sha256 == plan_import(raw, "b").sha256
    assert plan_import(raw + b"\n", "a").sha256 != plan_import(raw, "a").sha256


# --------------------------------------------------------------------------- refusals


def test_a_line_that_is_not_json_is_an_error_naming_it() -> None:
    error = refused(jsonl(HEADER, user("a1", None), "{not json", user("a2", "a1")))
    assert error.line == 3 and "not a JSON line" in error.reason
    # The tolerant reader skips that line; the import does not.
    assert refused(jsonl(HEADER, "\x00garbage")).line == 2


def test_invalid_utf8_and_nan_are_not_json_lines() -> None:
    assert refused(jsonl(HEADER) + b"\xff\xfe{}\n").line == 2
    nan = '{"type":"custom","id":"a1","parentId":null,"timestamp":"t","customType":"x","data":NaN}'
    assert refused(jsonl(HEADER, nan)).line == 2


def test_an_entry_that_is_json_but_not_valid_is_an_error_naming_it() -> None:
    bad = entry("a2", "a1", "model_change", provider="p")  # modelId missing
    error = refused(jsonl(HEADER, user("a1", None), bad))
    assert error.line == 3 and "modelId" in error.reason


@pytest.mark.parametrize(
    ("raw", "line", "words"),
    [
        (b"", 1, "empty"),
        (b"\n  \n", 1, "empty"),
        (jsonl(user("a1", None)), 1, "session header"),
        (jsonl({**HEADER, "version": 4}), 1, "version 4"),
        (jsonl(HEADER, user("a1", None), user("a1", None)), 3, "duplicate entry id"),
        (jsonl(HEADER, user("a2", "nowhere")), 2, "does not name an earlier entry"),
    ],
)
def test_files_that_cannot_be_imported(raw: bytes, line: int, words: str) -> None:
    error = refused(raw)
    assert error.line == line and words in error.reason, error


# --------------------------------------------------------------------------- older versions


V1_HEADER = {key: value for key, value in HEADER.items() if key != "version"}


def v1(entry_type: str, **fields: Any) -> dict[str, Any]:
    return {"type": entry_type, "timestamp": "2026-03-15T10:00:01.000Z", **fields}


def test_a_v1_file_gets_a_chain_of_ids_and_its_compaction_an_entry_id(tmp_path: Path) -> None:
    message = {"role": "user", "content": "x", "timestamp": 1}
    raw = jsonl(
        V1_HEADER,
        v1("message", message=message),
        v1("message", message=message),
        v1("compaction", summary="s", firstKeptEntryIndex=2, tokensBefore=9),
    )
    plan = plan_import(raw, "old.jsonl")
    entries = [json.loads(e.text) for e in plan.entries]
    ids = [e["id"] for e in entries]
    assert len(set(ids)) == 3 and all(len(i) == 8 for i in ids)
    assert [e["parentId"] for e in entries] == [None, ids[0], ids[1]]
    assert entries[2]["firstKeptEntryId"] == ids[1]  # index 2 = the second entry (0 = header)
    assert "firstKeptEntryIndex" not in entries[2]
    assert list(entries[0])[-2:] == ["id", "parentId"]  # where pi's own migration puts them
    assert plan.version == 1
    assert plan_import(raw, "again.jsonl").entries == plan.entries  # derived, not random
    # The entries are valid v3 ones.
    (tmp_path / "v3.jsonl").write_bytes(jsonl({**V1_HEADER, "version": 3}, *entries))
    assert len(read_transcript(tmp_path / "v3.jsonl").entries) == 3


@pytest.mark.parametrize("index", [0, 3, "1", None])
def test_a_v1_compaction_pointing_nowhere_is_an_error(index: Any) -> None:
    message = {"role": "user", "content": "x", "timestamp": 1}
    compaction = v1("compaction", summary="s", firstKeptEntryIndex=index, tokensBefore=9)
    error = refused(jsonl(V1_HEADER, v1("message", message=message), compaction))
    assert error.line == 3


def test_a_v2_hook_message_is_stored_with_its_v3_role() -> None:
    hook = {
        "role": "hookMessage",
        "customType": "e",
        "content": "n",
        "display": True,
        "timestamp": 5,
    }
    plan = plan_import(
        jsonl({**HEADER, "version": 2}, entry("a1", None, "message", message=hook)), "x"
    )
    assert json.loads(plan.entries[0].text)["message"]["role"] == "custom"
    assert plan.version == 2


# --------------------------------------------------------------------------- search


def test_search_text_of_messages() -> None:
    assert search_text(user("a1", None, "hello there")) == SearchText("user", "hello there")
    blocks = [{"type": "text", "text": "see"}, {"type": "image", "data": "", "mimeType": "p"}]
    said = entry("a1", None, "message", message={"role": "user", "content": blocks, "timestamp": 1})
    assert search_text(said) == SearchText("user", "see\n[image: p]")
    assert search_text(assistant("a2", "a1", "c1")) == SearchText("agent", "ok\nbash")
    assert search_text(tool_result("a3", "a2", "c1")) is None
    assert search_text(user("a4", None, "  ")) is None
    assert search_text(entry("a5", None, "custom", customType="x")) is None
