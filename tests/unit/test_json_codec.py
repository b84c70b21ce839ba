"""protocol.json_codec: orjson speed without giving up what the standard library reads."""

from __future__ import annotations

import json

import pytest

from protocol import json_codec


def test_large_integers_round_trip_exactly() -> None:
    text = b'{"big": 123456789012345678901234567890, "neg": -9223372036854775809}'
    value = json_codec.loads(text)
    assert value == {"big": 123456789012345678901234567890, "neg": -9223372036854775809}
    assert json.loads(json_codec.dumps(value)) == value


def test_text_is_kept_exactly() -> None:
    value = {"text": 'é ✓ \u2028 "quoted" \\ end', "n": 1.5, "list": [None, True]}
    assert json_codec.loads(json_codec.dumps(value)) == value
    assert json_codec.loads(json.dumps(value).encode()) == value


@pytest.mark.parametrize("bad", [b"{not json", b"", b'{"a": 1', b"[1,]"])
def test_not_json_is_a_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        json_codec.loads(bad)


@pytest.mark.parametrize(
    ("text", "long_run"),
    [
        (b"1234567890123456789", True),  # 19 digits: the shortest integer orjson cannot keep
        (b'{"n": -9223372036854775809}', True),
        (b'{"n": 18446744073709551615}', True),  # fits, parsed exactly by the fallback anyway
        (b'{"n": 123456789012345678}', False),  # 18 digits: orjson is exact
        (b'{"id": "sess_0123456789abcdef", "t": 1.5e10}', False),
        (b"", False),
    ],
)
def test_long_digit_runs_are_found(text: bytes, long_run: bool) -> None:
    assert json_codec.has_long_digit_run(text) is long_run
    if text:
        assert json_codec.loads(text) == json.loads(text)


def test_json_nested_beyond_any_parser_is_a_value_error_not_a_recursion_error() -> None:
    import pytest

    from protocol import json_codec

    for text in (b"[" * 1100 + b"]" * 1100, b'{"a":' * 5000 + b"1" + b"}" * 5000):
        with pytest.raises(ValueError, match="nested too deeply"):
            json_codec.loads(text)
    digits = b"[" * 1100 + b"1" * 20 + b"]" * 1100  # the standard library's path
    with pytest.raises(ValueError):
        json_codec.loads(digits)
