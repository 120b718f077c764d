"""Commands that only read create nothing (issue 17, item 7).

On a folder that is not a lakewrap project, or a ``--project`` that does not exist, every read-only
command exits 2 naming the folder and what is missing, and the folder is left as it was (compared
file by file). On a project whose lake was never created, ``query``, ``status``, ``history``,
``explain``, ``test``, ``reproduce``, ``resume`` and ``show`` exit 2 with a hint (``lakewrap seed`` /
``lakewrap run``) and create no lake: on DuckLake, on Iceberg's embedded catalog (write path pyiceberg), and on a REST
catalog written by DuckDB SQL, whose catalog stays without a namespace.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import pytest

from lakeproject import cli

READERS = [["query", "SELECT 1"], ["status"], ["history", "a"], ["compile"], ["explain", "3"], ["test"],
           ["reproduce", "r"], ["resume", "r"],  # resume writes, but finds no run to resume: creates nothing
           ["show", "a"], ["ls"], ["graph"]]
LAKE_READERS = [c for c in READERS if c[0] not in ("compile", "ls", "graph")]  # these never open a lake
MODEL = "-- materialized table\n-- test unique a\nSELECT 1 AS a\n"


def files(root: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, names in os.walk(root)
                  for n in [*dirs, *names])


@pytest.mark.parametrize("command", READERS, ids=[c[0] for c in READERS])
def test_a_folder_that_is_not_a_project_is_named_and_left_untouched(tmp_path: Path, command: list[str]) -> None:
    folder = tmp_path / "EMPTY_DIR"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a project\n")
    code, out, err = cli(*command, "--project", str(folder))
    assert code == 2, out + err
    assert f"`{folder}` is not a lakewrap project" in err and "models/" in err and "lakewrap.toml" in err
    assert files(folder) == ["notes.txt"]

    missing = tmp_path / "no_such_dir"
    code, out, err = cli(*command, "--project", str(missing))
    assert code == 2 and f"project folder `{missing}` does not exist" in err, out + err
    assert not missing.exists()


def _project(root: Path, toml: str | None = None) -> Path:
    (root / "models" / "app").mkdir(parents=True)
    (root / "models" / "app" / "a.sql").write_text(MODEL)
    if toml is not None:
        (root / "lakewrap.toml").write_text(toml)
    return root


@pytest.mark.parametrize("toml", [None, '[lake]\nsubstrate = "iceberg"\n'], ids=["ducklake", "iceberg"])
def test_a_lake_never_created_is_not_created_by_reading_it(tmp_path: Path, toml: str | None) -> None:
    root = _project(tmp_path / "project", toml)
    for command in LAKE_READERS:
        code, out, err = cli(*command, "--project", str(root))
        assert code == 2, (command, out + err)
        assert "the lake does not exist yet: no catalog at .lakewrap/" in err, (command, err)
        assert "lakewrap seed" in err and "lakewrap run" in err
        assert not (root / ".lakewrap").exists(), command
    code, out, err = cli("run", "--project", str(root))  # writing creates it
    assert code == 0, out + err
    code, out, err = cli("query", "SELECT a FROM app.a", "--project", str(root), "--format", "csv")
    assert (code, out) == (0, "a\n1\n"), err


def test_reading_a_fresh_rest_catalog_creates_nothing_in_it(tmp_path: Path) -> None:
    """A REST catalog exists before any run (it is a server): reading it answers, and adds nothing."""
    from pyiceberg.catalog.rest import RestCatalog

    from icehouse_sql import rest_toml, start_rest

    with ExitStack() as stack:
        uri, _ = start_rest(tmp_path, stack)
        root = _project(tmp_path / "project", rest_toml(uri))
        for command in (["query", "SELECT 42 AS x"], ["status"], ["history", "a"], ["show", "a"]):
            code, out, err = cli(*command, "--project", str(root))
            assert code == 0, (command, out + err)
        assert not (root / ".lakewrap").exists()
        assert RestCatalog("check", uri=uri).list_namespaces() == []
