"""``lakewrap shell``: another DuckDB client attaches the lake with the printed statements, and the
Python console reads it through a read-only connection. Both refuse a folder without a lake and
create nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parent.parent
LAKEWRAP = str(Path(sys.executable).with_name("lakewrap"))


def lakewrap(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LAKEWRAP, *args], capture_output=True, text=True, input=stdin, timeout=300,
                          env={**os.environ, "NO_COLOR": "1"})


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shell") / "shop"
    shutil.copytree(ROOT / "examples" / "shop", root, ignore=shutil.ignore_patterns(".lakewrap", "target"))
    assert lakewrap("seed", "--project", str(root)).returncode == 0
    return root


def test_the_printed_statements_attach_the_lake_in_a_plain_duckdb_client(shop: Path) -> None:
    printed = lakewrap("shell", "--print", "--project", str(shop))
    assert printed.returncode == 0, printed.stderr
    statements = printed.stdout.splitlines()
    assert statements[-2] == (f"ATTACH 'ducklake:{shop}/.lakewrap/lake.ducklake' AS \"lake\" "
                              f"(DATA_PATH '{shop}/.lakewrap/data/');")
    assert statements[-1] == 'USE "lake";'
    # a DuckDB client of its own (autoinstall off: only the printed LOAD can bring the extension)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for statement in statements:
            con.execute(statement)
        got = con.execute("SELECT count(*), sum(amount) FROM raw.orders").fetchone()
    finally:
        con.close()
    expected = lakewrap("query", "--project", str(shop), "--format", "csv",
                        "SELECT count(*), sum(amount) FROM raw.orders").stdout.splitlines()[1]
    assert got is not None and ",".join(str(v) for v in got) == expected


def test_the_console_reads_through_a_read_only_connection(shop: Path) -> None:
    script = ("print(con.sql('SELECT count(*) FROM raw.customers').fetchone()[0])\n"
              "try:\n    con.execute('DELETE FROM raw.customers')\n"
              "except Exception as e:\n    print('refused:', type(e).__name__)\n\n"
              "print(con.sql('SELECT count(*) FROM raw.customers').fetchone()[0])\n")
    proc = lakewrap("shell", "--read-only", "--project", str(shop), stdin=script)
    assert proc.returncode == 0, proc.stderr
    first, refused, after = proc.stdout.split()[0], proc.stdout.splitlines()[1], proc.stdout.split()[-1]
    assert int(first) > 0 and first == after
    assert refused.startswith("refused:"), proc.stdout


@pytest.mark.parametrize("flag", [["--print"], []], ids=["print", "console"])
def test_a_folder_without_a_lake_is_refused_and_left_alone(tmp_path: Path, flag: list[str]) -> None:
    (tmp_path / "models").mkdir()
    proc = lakewrap("shell", *flag, "--project", str(tmp_path), stdin="")
    assert proc.returncode == 2 and "the lake does not exist yet" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    missing = lakewrap("shell", *flag, "--project", str(tmp_path / "nope"), stdin="")
    assert missing.returncode == 2 and "does not exist" in missing.stderr, missing.stderr
    assert not (tmp_path / "nope").exists()


def test_the_console_writes_by_default_inside_the_sandbox(tmp_path: Path) -> None:
    """Read-write by default: a row inserted in the shell is in the lake afterwards (read back by
    `lakewrap query`); the settings stay locked and files outside the project stay unreadable."""
    root = tmp_path / "p"
    assert lakewrap("init", str(root)).returncode == 0
    assert lakewrap("seed", "--project", str(root)).returncode == 0
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    script = ("con.execute(\"INSERT INTO raw.orders VALUES (7, 14, '5.00', 'placed', '2024-01-04 10:00:00')\")\n"
              f"for stmt in (\"SET enable_external_access = true\", \"SELECT * FROM read_csv('{outside}')\"):\n"
              "    try:\n        con.execute(stmt)\n        print('allowed')\n"
              "    except Exception as e:\n        print('refused:', type(e).__name__)\n\n")
    proc = lakewrap("shell", "--project", str(root), stdin=script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("refused:") == 2 and "allowed" not in proc.stdout, proc.stdout
    count = lakewrap("query", "--project", str(root), "--format", "csv", "SELECT count(*) FROM raw.orders")
    assert count.stdout.split() == ["count_star()", "7"], count.stdout + count.stderr
