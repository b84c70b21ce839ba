"""``[[notify]]`` in the configuration and ``acpctl notify test``: bad entries are a
ConfigError (exit 2) that never repeats the URL; a test notification reaches every hook and
each answer is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from control_plane.cli import app
from control_plane.config import ConfigError, load_config
from tests.support.webhook_receiver import Reply, receiving

TOKEN = "tok-5ecret-topic"


def _run(config: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = CliRunner().invoke(app, ["--config", str(config), *args], env=env or {})
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (f'url = "ftp://hooks.example/{TOKEN}"', "http:// or https://"),
        (f'url = "https://hooks.example:port/{TOKEN}"', "is not a URL"),
        (f'url = "https:///{TOKEN}"', "with a host"),
        (f'url = "https://h/{TOKEN}"\nevents = ["turn_done"]', "unknown event 'turn_done'"),
        (f'url = "https://h/{TOKEN}"\nformat = "xml"', "'json', 'slack' or 'ntfy'"),
        (f'url = "https://h/{TOKEN}"\nsecret_env = "NOT A NAME"', "secret_env"),
        (f'url = "https://h/{TOKEN}"\nevents = []', "events"),
        (f'url = "https://h/{TOKEN}"\nmystery = 1', "mystery"),
    ],
)
def test_a_bad_notify_entry_is_exit_2_and_never_repeats_the_url(
    tmp_path: Path, entry: str, says: str
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f"[[notify]]\n{entry}\n")
    with pytest.raises(ConfigError):
        load_config(str(config))
    code, _, err = _run(config, "notify", "test")
    assert code == 2 and says in err and TOKEN not in err


def test_two_hooks_with_one_name_and_a_bad_console_url_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[[notify]]\nurl="https://a/"\nname="x"\n[[notify]]\nurl="https://b/"\nname="x"\n'
    )
    assert _run(config, "notify", "test")[0] == 2
    config.write_text('[console]\nurl = "javascript:alert(1)"\n')
    assert _run(config, "notify", "test")[0] == 2


def test_notify_test_without_hooks_says_so(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("")
    code, _, err = _run(config, "notify", "test")
    assert code == 2 and "no [[notify]] hooks" in err


def test_notify_test_reports_each_hook_and_fails_when_one_refuses(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    with receiving("sig") as good, receiving() as bad:
        bad.script = lambda _r, _n: Reply(503)
        config.write_text(
            f'[[notify]]\nurl = "{good.url}/{TOKEN}"\nname = "good"\nsecret_env = "SIG"\n'
            f'[[notify]]\nurl = "{bad.url}"\nformat = "slack"\n'
            '[console]\nurl = "https://console.example/"\n'
        )
        code, out, _ = _run(config, "notify", "test", "--json", env={"SIG": "sig"})
        assert code == 1
        answers = json.loads(out)
        assert [(a["hook"], a["outcome"], a["status"]) for a in answers] == [
            ("good", "accepted", 200),
            ("hook1", "retry", 503),
        ]
        assert (
            TOKEN not in out
            and answers[0]["url"]
            == "http://127.0.0.1:" + good.url.split(":")[2].split("/")[0] + "/…"
        )
        (sent,) = good.requests
        assert sent.signature_ok and sent.json()["type"] == "test"
        assert sent.key.startswith("test-")
        assert bad.requests[0].json()["text"].startswith("acpctl test notification")
        bad.script = lambda _r, _n: Reply(200)
        code, out, _ = _run(config, "notify", "test", env={"SIG": "sig"})
        assert code == 0 and "good" in out and "hook1" in out


def test_config_show_masks_hook_urls(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[[notify]]\nurl = "https://ntfy.sh/{TOKEN}"\nformat = "ntfy"\n')
    code, out, _ = _run(config, "config", "show", "--json")
    assert code == 0 and TOKEN not in out
    assert json.loads(out)["notify"][0]["url"] == "https://ntfy.sh/…"
