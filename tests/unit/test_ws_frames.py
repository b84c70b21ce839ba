"""The text frames ``serve --listen`` writes itself (a burst of updates in one write) are
byte for byte the frames the ``websockets`` library would write, at every length class."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode

from control_plane.remote.ws_protocol import text_frame_header


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 65535, 65536, 1_000_000])
def test_text_frame_matches_the_websockets_library(length: int) -> None:
    payload = b"x" * length
    ours = text_frame_header(length) + payload
    theirs = Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])
    assert ours == theirs
