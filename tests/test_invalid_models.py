"""The invalid-model corpus: every bad model fails with the right error, message, place and hint.

Each file in fixtures/invalid/ is one mistake a user can make in a model; fixtures/invalid/expected.toml
says, per file, which error class it raises, a piece of its message and hint, and the line and column
it points at. A model that is wrongly accepted, an error that moves to another line, or a hint that
disappears fails here.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from lakewrap import errors
from lakewrap.cli import main
from lakewrap.errors import LakewrapError, ModelError
from lakewrap.parse import parse_model

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

INVALID = FIXTURES / "invalid"
MANIFEST = INVALID / "expected.toml"
EXPECTED: dict[str, dict[str, Any]] = tomllib.loads(MANIFEST.read_text(encoding="utf-8"))
FILES = sorted(p.name for p in INVALID.glob("*.sql"))


def parse_error(name: str) -> ModelError:
    """Parse ``fixtures/invalid/<name>`` with ``fixtures/`` as the root; return the error it raises."""
    with pytest.raises(LakewrapError) as info:
        parse_model(INVALID / name, FIXTURES)
    err = info.value
    assert isinstance(err, ModelError), f"{name}: {type(err).__name__} is not a ModelError"
    return err


def test_corpus_is_large_enough() -> None:
    assert len(FILES) >= 40


def test_every_file_has_an_entry_and_every_entry_a_file() -> None:
    assert sorted(set(FILES) - set(EXPECTED)) == [], "files without an entry in expected.toml"
    assert sorted(set(EXPECTED) - set(FILES)) == [], "entries in expected.toml without a file"


def test_entries_are_complete() -> None:
    allowed = {"error", "message", "line", "column", "hint"}
    for name, entry in EXPECTED.items():
        assert {"error", "message", "line", "hint"} <= set(entry) <= allowed, name
        assert isinstance(getattr(errors, entry["error"], None), type), f"{name}: unknown class {entry['error']}"


@pytest.mark.parametrize("name", FILES)
def test_invalid_model(name: str) -> None:
    expected = EXPECTED[name]
    err = parse_error(name)
    assert type(err).__name__ == expected["error"], err.render()
    assert expected["message"] in err.message, err.render()

    loc = err.location
    assert loc is not None, f"{name}: the error has no location"
    assert loc.path == f"invalid/{name}", "errors show the path relative to the project root"
    assert loc.line == expected["line"], err.render()
    assert loc.column == expected.get("column"), err.render()

    assert err.hint, f"{name}: the error says what is wrong but not what to do"
    assert expected["hint"] in err.hint, err.render()

    rendered = err.render()
    assert f"invalid/{name}:{expected['line']}" in rendered
    assert rendered == str(err)
    if loc.snippet is not None and loc.column is not None:
        # the caret sits under the reported column of the quoted line
        lines = rendered.splitlines()
        caret = lines[lines.index(f"    {loc.snippet}") + 1]
        assert caret == "    " + " " * (loc.column - 1) + "^"


@pytest.mark.parametrize("name", ["encoding_not_utf8.sql", "encoding_nul_byte.sql"])
def test_undecodable_files_are_refused_the_same_when_given_as_text(name: str) -> None:
    """Bytes written by the test (not only the committed fixture) hit the same checks."""
    data = (INVALID / name).read_bytes()
    if b"\x00" in data:
        with pytest.raises(ModelError, match="NUL byte") as info:
            parse_model(INVALID / name, FIXTURES, text=data.decode("utf-8"))
        assert info.value.location is not None and info.value.location.line == EXPECTED[name]["line"]
    else:
        with pytest.raises(UnicodeDecodeError):
            data.decode("utf-8")


def test_cli_compile_reports_the_located_error(tmp_path: Path) -> None:
    name = "keyword_unknown_typo.sql"
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(INVALID / name, models / name)
    result = CliRunner().invoke(main, ["compile", "--no-cache", "--project", str(tmp_path)])
    assert result.exit_code == 1, result.output
    out = result.output
    expected = EXPECTED[name]
    assert f"models/{name}:{expected['line']}:{expected['column']}" in out
    assert expected["message"] in out
    assert expected["hint"] in out
    assert str(tmp_path) not in out, "errors never print machine paths"
    assert "Traceback" not in out


def test_cli_prints_brackets_in_hints_verbatim(tmp_path: Path) -> None:
    name = "partitioned_missing_key.sql"
    (tmp_path / "models").mkdir()
    shutil.copy(INVALID / name, tmp_path / "models" / name)
    result = CliRunner().invoke(main, ["compile", "--no-cache", "--project", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "[tz=UTC] [start=<value>] [lookback=N]" in result.output
