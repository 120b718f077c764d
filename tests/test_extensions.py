"""Extension loading: DuckDB checks a wheel binary's signature once; a recorded, unchanged binary
is loaded with the check off, and the check is back on before any other statement.

Real binaries only: the DuckLake extension from its wheel, copied, and a copy whose signature has
one byte flipped (its code is intact, so it loads only when the check is off).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from conftest import extension_path
from lakewrap.errors import ExecutionError
from lakewrap.execute import extensions


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("LAKEWRAP_CACHE_DIR", str(folder))
    extensions.forget()
    yield folder / extensions.RECORD
    extensions.forget()  # later tests read the real cache folder again


def copy_of_ducklake(folder: Path, *, flip_signature: bool = False, name: str = "ducklake") -> Path:
    """A copy of the wheel's binary (the file name is DuckDB's entry point, so it stays)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.duckdb_extension"
    shutil.copyfile(extension_path(name), path)
    if flip_signature:  # the signature is the file's last 256 bytes
        with path.open("r+b") as f:
            f.seek(-100, os.SEEK_END)
            byte = f.read(1)[0]
            f.seek(-100, os.SEEK_END)
            f.write(bytes([byte ^ 0xFF]))
    return path


def unsigned_setting(con: duckdb.DuckDBPyConnection) -> object:
    return con.execute("SELECT current_setting('allow_unsigned_extensions')").fetchone()[0]  # type: ignore[index]


def test_a_binary_duckdb_accepted_is_recorded_and_the_record_follows_the_file(cache: Path, tmp_path: Path) -> None:
    path = copy_of_ducklake(tmp_path / "wheel")
    con = extensions.connect_binaries([("ducklake", path)])
    assert unsigned_setting(con) is False
    con.close()
    record = json.loads(cache.read_text())
    st = os.stat(path)
    assert record[str(path)] == [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]

    # the fast path: same file, record matches; the check is off only while loading
    extensions.forget()
    con = extensions.connect_binaries([("ducklake", path)])
    assert unsigned_setting(con) is False
    with pytest.raises(duckdb.Error, match="Cannot change allow_unsigned_extensions"):
        con.execute("SET allow_unsigned_extensions = true")
    con.close()

    # touched: no longer the file DuckDB checked; it is checked (and recorded) again
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    extensions.forget()
    extensions.connect_binaries([("ducklake", path)]).close()
    assert json.loads(cache.read_text())[str(path)][1] == st.st_mtime_ns + 1_000_000_000


def test_a_changed_binary_is_checked_again_and_refused(cache: Path, tmp_path: Path) -> None:
    path = copy_of_ducklake(tmp_path / "wheel")
    extensions.connect_binaries([("ducklake", path)]).close()  # checked by DuckDB, recorded

    # replaced by a binary whose signature is broken: its identity differs, DuckDB checks it
    bad = copy_of_ducklake(tmp_path / "other", flip_signature=True)
    os.replace(bad, path)
    extensions.forget()
    with pytest.raises(ExecutionError, match="signature") as err:
        extensions.connect_binaries([("ducklake", path)])
    assert "pip install duckdb-extension-ducklake" in (err.value.hint or "")
    # the record still holds the binary DuckDB accepted, which the refused one does not match
    assert json.loads(cache.read_text())[str(path)] != extensions._identity(path)


def test_only_the_record_skips_the_check(cache: Path, tmp_path: Path) -> None:
    """The broken copy loads only when its identity is recorded (as a binary DuckDB accepted would
    be): evidence that the record, and nothing else, turns the check off. The connection that
    loaded it refuses any further unsigned extension."""
    bad = copy_of_ducklake(tmp_path / "wheel", flip_signature=True)
    with pytest.raises(ExecutionError, match="signature"):
        extensions.connect_binaries([("ducklake", bad)])
    assert not cache.exists()  # nothing DuckDB refused is recorded

    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({str(bad): extensions._identity(bad)}))
    extensions.forget()
    con = extensions.connect_binaries([("ducklake", bad)])
    other = copy_of_ducklake(tmp_path / "another", flip_signature=True, name="avro")
    with pytest.raises(duckdb.Error, match="signature"):
        con.execute(f"LOAD '{other}'")
    con.close()


def test_an_unwritable_cache_folder_only_costs_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("LAKEWRAP_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    extensions.forget()
    try:
        path = copy_of_ducklake(tmp_path / "wheel")
        con = extensions.connect_binaries([("ducklake", path)])
        assert con.execute("SELECT count(*) FROM duckdb_extensions() WHERE extension_name = 'ducklake' AND loaded"
                           ).fetchone() == (1,)
        con.close()
    finally:
        extensions.forget()


def test_no_connection_draws_a_progress_bar(tmp_path: Path) -> None:
    """DuckDB's progress bar (drawn on stdout for a statement running over 2 s) would land inside
    lakewrap's own output: a ``--format json`` document, a child's report lines (seen on a loaded
    machine in ``test_iceberg_sql.py``'s two-process test). Off on every connection and cursor."""
    from lakewrap.execute.lake import Lake

    con = extensions.connect(("ducklake",))
    try:
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)
    finally:
        con.close()
    lake = Lake.open(tmp_path)
    with lake.shared():
        cursor = lake.connect()
        try:
            assert cursor.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)
        finally:
            lake.close(cursor)


# --- supported versions -------------------------------------------------------------------------------
# A second DuckDB (or an extension wheel built for another one) cannot be installed here: the machine
# has no network and one environment holds one DuckDB. So the running version is simulated by
# monkeypatching what `duckdb.__version__` reports; the wheels consulted are the real installed ones.


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every ``duckdb.connect`` call made while the test runs (the real function still runs)."""
    calls: list[object] = []
    real = duckdb.connect

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(duckdb, "connect", spy)
    return calls


def test_an_unsupported_duckdb_is_refused_before_any_connection_naming_what_to_install(
        monkeypatch: pytest.MonkeyPatch, opened: list[object]) -> None:
    assert duckdb.__version__ in extensions.SUPPORTED_DUCKDB  # the real one is supported
    monkeypatch.setattr(duckdb, "__version__", "1.4.3")
    with pytest.raises(ExecutionError) as err:
        extensions.connect(("iceberg", "avro"))
    assert err.value.message == "this is DuckDB 1.4.3; lakewrap supports DuckDB 1.5.5"
    assert err.value.hint == "pip install duckdb==1.5.5 duckdb-extension-avro==1.5.5 duckdb-extension-iceberg==1.5.5"
    assert opened == []  # no connection, so no INSTALL from DuckDB's repository either


def test_an_extension_wheel_built_for_another_duckdb_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                opened: list[object]) -> None:
    """Were DuckDB 1.4.3 supported, the installed wheels (built for 1.5.5) hold no binary for it."""
    monkeypatch.setattr(extensions, "SUPPORTED_DUCKDB", ("1.4.3", "1.5.5"))
    monkeypatch.setattr(duckdb, "__version__", "1.4.3")
    with pytest.raises(ExecutionError) as err:
        extensions.connect(("ducklake",))
    assert err.value.message == ("DuckDB 1.4.3 needs the extension `ducklake` (duckdb-extension-ducklake 1.5.5 "
                                 "is installed, without a binary for it)")
    assert err.value.hint == "pip install duckdb-extension-ducklake==1.4.3"
    assert opened == []


def test_a_missing_extension_wheel_is_named(opened: list[object]) -> None:
    with pytest.raises(ExecutionError) as err:
        extensions.connect(("ducklake", "spatial"))  # the spatial wheel is not a dependency of lakewrap
    assert err.value.message == "DuckDB 1.5.5 needs the extension `spatial` (duckdb-extension-spatial is not installed)"
    assert err.value.hint == "pip install duckdb-extension-ducklake==1.5.5 duckdb-extension-spatial==1.5.5"
    assert opened == []


def test_lakewrap_run_reports_an_unsupported_duckdb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from lakewrap.cli import main

    (tmp_path / "models").mkdir()
    (tmp_path / "lakewrap.toml").write_text("[lake]\n")
    (tmp_path / "models" / "one.sql").write_text("SELECT 1 AS x\n")
    monkeypatch.setattr(duckdb, "__version__", "1.6.0")
    got = CliRunner().invoke(main, ["run", "--project", str(tmp_path)])
    assert got.exit_code != 0
    assert "this is DuckDB 1.6.0; lakewrap supports DuckDB 1.5.5" in got.output
    assert "pip install duckdb==1.5.5 duckdb-extension-ducklake==1.5.5" in got.output
    assert not (tmp_path / ".lakewrap").exists()  # no lake was created (a run with DuckDB 1.5.5 creates it)
    monkeypatch.setattr(duckdb, "__version__", "1.5.5")
    assert CliRunner().invoke(main, ["run", "--project", str(tmp_path)]).exit_code == 0
    assert (tmp_path / ".lakewrap" / "lake.ducklake").exists()
