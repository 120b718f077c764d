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
