"""The example agent's directives that the console's browser tests lean on: ``#edit`` (a
file written through the client and reported with its diff) and ``#plan-steps``."""

from __future__ import annotations

import pytest
from acp import RequestError

from protocol.example_agent.directives import parse_directives


def test_edit_takes_a_path_and_content_with_line_breaks() -> None:
    d, message = parse_directives(r"#edit=src/a.txt:one\ntwo\n tidy")
    assert d.edit == ("src/a.txt", "one\ntwo\n") and message == "tidy"
    assert parse_directives("#edit=a.txt: x")[0].edit == ("a.txt", "")  # an empty file


@pytest.mark.parametrize("word", ["#edit=a.txt", "#edit=:content"])
def test_an_edit_without_a_path_and_content_is_refused(word: str) -> None:
    with pytest.raises(RequestError):
        parse_directives(word)


def test_plan_steps_is_a_flag() -> None:
    assert parse_directives("#plan-steps go")[0].plan_steps
