"""Shared fixtures: a real DuckLake (DuckDB + the ducklake extension from its PyPI wheel)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
EXAMPLES = ROOT / "examples"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite fixtures/golden/* from the compiler")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def extension_path(name: str) -> Path:
    """The extension binary shipped in the `duckdb-extension-<name>` wheel."""
    import duckdb

    module = importlib.import_module(f"duckdb_extension_{name}")
    version = duckdb.__version__
    return Path(module.__file__).parent / "extensions" / f"v{version}" / f"{name}.duckdb_extension"


def connect_ducklake(folder: Path):  # type: ignore[no-untyped-def]
    """A DuckDB connection with a fresh DuckLake attached as `lake` and selected with USE."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{extension_path('ducklake')}'")
    folder.mkdir(parents=True, exist_ok=True)
    con.execute(f"ATTACH 'ducklake:{folder / 'meta.ducklake'}' AS lake (DATA_PATH '{folder / 'data'}/')")
    con.execute("USE lake")
    con.execute("SET TimeZone = 'UTC'")
    return con


@pytest.fixture
def ducklake(tmp_path: Path) -> Iterator[object]:
    con = connect_ducklake(tmp_path / "lake")
    try:
        yield con
    finally:
        con.close()


@pytest.fixture
def inspector() -> Iterator[Any]:
    """A :class:`lakeproject.Inspector` whose session renders TIMESTAMPTZ values in UTC (set before any
    ``state()``). A test file that wants another defines its own ``inspector``."""
    from lakeproject import Inspector

    ins = Inspector()
    ins.con.execute("SET TimeZone = 'UTC'")
    try:
        yield ins
    finally:
        ins.close()


@pytest.fixture
def rest_uri(tmp_path: Path) -> Iterator[str]:
    """The test REST adapter over a SqlCatalog (a REST catalog for the Iceberg SQL write path)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from rest_adapter import serve

    server = tmp_path / "rest-server"
    server.mkdir()
    backing = SqlCatalog("rest", uri=f"sqlite:///{server / 'rest.db'}", warehouse=(server / "wh").as_uri())
    with ExitStack() as stack:
        yield stack.enter_context(serve(backing, {}, []))
