"""``protocol/attribute_docstrings.py`` reads attribute docstrings once per file: every class
gets the descriptions pydantic's own function gives it, each in a fresh interpreter, one
with pydantic as it is and one with the reader installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Prints [module.class, {field: description}] of every pydantic model of the given modules,
# and how often pydantic's own function was asked (counted from the interpreter's start).
_DESCRIBE = """
import importlib, json, sys
mode, modules = sys.argv[1], json.loads(sys.argv[2])
import pydantic._internal._fields as fields
asked = []
stock = fields.extract_docstrings_from_cls
def counted(cls, use_inspect=False):
    asked.append(cls.__qualname__)
    return stock(cls, use_inspect=use_inspect)
fields.extract_docstrings_from_cls = counted
if mode == "installed":
    from protocol.attribute_docstrings import install
    assert install()
import pydantic
seen = {}  # one entry per class (two classes may share a name)
for name in modules:
    module = importlib.import_module(name)
    for value in [*vars(module).values(), *getattr(module, "MADE", [])]:
        if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
            described = {field: info.description for field, info in value.model_fields.items()}
            seen[id(value)] = [f"{name}.{value.__qualname__}", described]
print(json.dumps({"models": list(seen.values()), "asked": asked}))
"""


def _describe(mode: str, modules: list[str], path: Path | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("ACPCTL_FAST_DOCSTRINGS", None)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, path) if p is not None)
    done = subprocess.run(
        [sys.executable, "-c", _DESCRIBE, mode, json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_every_sdk_model_gets_the_descriptions_pydantic_gives_without_asking_pydantic() -> None:
    stock = _describe("stock", ["acp.schema"])
    installed = _describe("installed", ["acp.schema"])
    described = [d for _, fields in stock["models"] for d in fields.values() if d]
    assert len(stock["models"]) > 250 and len(described) > 800  # the SDK's schema, described
    assert installed["models"] == stock["models"]
    assert len(stock["asked"]) > 250
    assert installed["asked"] == []  # every SDK class placed from the file's one reading


# Class statements in the shapes a file can hold them, two classes of one name among them
# (the reason pydantic walks frames on Python < 3.13).
_SHAPES = '''
from pydantic import BaseModel, ConfigDict

MADE = []


def keep(cls):
    MADE.append(cls)
    return cls


class Docs(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


@keep
class Plain(Docs):
    a: int = 0
    """Plain's a."""
    b: int = 0
    c: str = ""
    """Plain's c,

        over two lines."""


@keep
@keep
class Decorated(
    Docs,
):
    x: int = 0
    """Decorated's x, under a header of three lines."""


def make():
    @keep
    class InFunction(Docs):
        y: int = 0
        """made in a function."""

    return InFunction


make()

if MADE:
    @keep
    class InIf(Docs):
        z: int = 0
        """in an if."""

try:
    @keep
    class InTry(Docs):
        t: int = 0
        """in a try."""
except ImportError:
    pass


@keep
class Twice(Docs):
    first: int = 0
    """the first Twice."""


@keep
class Twice(Docs):  # noqa: F811
    second: int = 0
    """the second Twice."""


class Outer(Docs):
    @keep
    class Inner(Docs):
        i: int = 0
        """inner."""

    o: int = 0
    """outer."""


keep(Outer)
exec(compile("""
class NoFile(Docs):
    n: int = 0
    \\"\\"\\"only pydantic can say.\\"\\"\\"
keep(NoFile)
""", "<nofile>", "exec"))
'''


def test_classes_of_every_shape_get_pydantic_s_answer(tmp_path: Path) -> None:
    (tmp_path / "shapes.py").write_text(textwrap.dedent(_SHAPES))
    stock = _describe("stock", ["shapes"], tmp_path)
    installed = _describe("installed", ["shapes"], tmp_path)

    def by_name(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        found = [(name, fields) for name, fields in report["models"]]
        return sorted(found, key=json.dumps)

    assert by_name(installed) == by_name(stock)
    assert ("shapes.Twice", {"second": "the second Twice."}) in by_name(stock)
    plain = {"a": "Plain's a.", "b": None, "c": "Plain's c,\n\nover two lines."}
    assert ("shapes.Plain", plain) in by_name(stock)
    names = [name for name, _ in by_name(stock)]
    for made in ("Decorated", "make.<locals>.InFunction", "InIf", "InTry", "Outer.Inner"):
        assert f"shapes.{made}" in names
    # Only what has no file to read went to pydantic's own function.
    assert installed["asked"] == ["NoFile"]


def test_acpctl_installs_it_when_a_command_first_loads_pydantic_and_not_before() -> None:
    probe = (
        "import sys\n"
        "from control_plane.cli import main\n"
        "sys.argv = ['acpctl', '--help']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('pydantic' in sys.modules)\n"
        "import acp.schema\n"
        "import pydantic._internal._fields as fields\n"
        "print(getattr(fields.extract_docstrings_from_cls, 'reads_each_file_once', False))\n"
        "print(acp.schema.InitializeRequest.model_fields['protocol_version'].description)\n"
    )

    def run(**env: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[-3:]

    help_loaded, installed, description = run(ACPCTL_FAST_DOCSTRINGS="1")
    assert (help_loaded, installed) == ("False", "True")
    assert "protocol version" in description.lower()
    assert run(ACPCTL_FAST_DOCSTRINGS="0")[1] == "False"  # the way back to pydantic's own
