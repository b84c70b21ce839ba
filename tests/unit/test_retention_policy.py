"""Retention's input: durations, states, the archive directory, the ``[retention]``
section; and the pacing of its transactions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from control_plane.config import ConfigError, load_config
from control_plane.retention.pacing import Pace, Pacer
from control_plane.retention.policy import (
    RetentionPolicy,
    RetentionRefused,
    checked_archive_dir,
    parse_duration,
    parse_states,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 2_592_000),
        ("12h", 43_200),
        ("90m", 5_400),
        ("45s", 45),
        ("0s", 0),
        ("1.5h", 5_400),  # the one reading of durations (control_plane/timespec.py)
        ("1w", 604_800),
        ("1d2h", 93_600),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "1y", "30 days"])
def test_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(RetentionRefused, match="not a duration"):
        parse_duration(text)


def test_states_are_checked_and_ordered() -> None:
    assert parse_states(["error,closed"]) == ("closed", "error")
    assert parse_states(["idle", "closed, idle"]) == ("closed", "idle")
    with pytest.raises(RetentionRefused, match="never deleted"):
        parse_states(["cancelling"])
    with pytest.raises(RetentionRefused, match="unknown state"):
        parse_states(["archived"])


def test_the_defaults_are_thirty_days_of_closed_and_error_sessions() -> None:
    policy = RetentionPolicy()
    assert policy.older_than_s == 30 * 86_400
    assert policy.states == ("closed", "error")
    rule = policy.rule(now=1_000_000_000.0)
    assert rule.cutoff == 1_000_000_000.0 - 30 * 86_400
    assert rule.states == frozenset({"closed", "error"}) and not rule.force


def test_an_archive_directory_must_be_writable(tmp_path: Path) -> None:
    made = checked_archive_dir(tmp_path / "a" / "b")
    assert made.is_dir() and list(made.iterdir()) == []  # the probe left nothing
    (tmp_path / "file").write_text("")
    with pytest.raises(RetentionRefused, match="not writable"):
        checked_archive_dir(tmp_path / "file" / "sub")
    # A dry run creates nothing, but still refuses what could not be written.
    assert not checked_archive_dir(tmp_path / "later", create=False).exists()
    with pytest.raises(RetentionRefused, match="not writable"):
        checked_archive_dir(tmp_path / "file" / "sub", create=False)


def test_the_retention_section(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[retention]\nenabled = true\nolder_than = "7d"\nstates = ["idle", "closed"]\n'
        'archive_dir = "~/arch"\ninterval = "15m"\n'
    )
    scheduled = load_config(str(config), environ={}).retention.scheduled()
    assert scheduled is not None
    assert scheduled.interval_s == 900
    assert scheduled.policy.older_than_s == 7 * 86_400
    assert scheduled.policy.states == ("closed", "idle")
    assert scheduled.policy.archive_dir == Path(os.path.expanduser("~/arch"))
    # Off by default: deleting data must be asked for.
    config.write_text("[retention]\n")
    assert load_config(str(config), environ={}).retention.scheduled() is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('interval = "0s"', "longer than 0s"),
        ('older_than = "a month"', "not a duration"),
        ('states = ["running"]', "never deleted"),
        ("keep = true", "Extra inputs"),
    ],
)
def test_a_bad_retention_section_is_a_config_error(tmp_path: Path, body: str, message: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f"[retention]\n{body}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(str(config), environ={})


def test_the_pacer_sizes_transactions_from_the_lock_time_of_the_last_one() -> None:
    pacer = Pacer(Pace(target_s=0.01, first_units=1000, min_units=10, max_units=100_000))
    assert pacer.units("rows") == 1000
    pacer.record("rows", 1000, 0.005)  # held half the target: doubled
    assert pacer.units("rows") == 2000
    pacer.record("rows", 2000, 0.1)  # ten times too long: a quarter at most at once
    assert pacer.units("rows") == 500
    pacer.record("rows", 3, 0.001)  # a small tail under the target says nothing
    assert pacer.units("rows") == 500
    pacer.record("rows", 3, 0.04)  # a small one over it does: the rows were slow
    assert pacer.units("rows") == 125
    assert pacer.units("pages") == 1000  # each kind on its own
    assert pacer.locks.count == 4 and pacer.locks.to_json()["maxMs"] == 100.0


def test_the_pacer_stops_when_asked() -> None:
    pacer = Pacer(Pace(rest_ratio=1.0))
    assert pacer.rest(0.0)
    pacer.stop.set()
    assert not pacer.rest(10.0)  # at once, not after the rest
