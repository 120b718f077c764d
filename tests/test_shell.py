"""``lakewrap shell``: another DuckDB client attaches the lake with the printed statements; DuckDB's
own CLI (the real one, from the ``duckdb-cli`` wheel of the ``dev`` extra) opens it read-write inside
the sandbox of a run; the Python console (``--python``) reads and writes it through ``con``. All
refuse a folder without a lake and create nothing."""

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
CLI = Path(sys.executable).with_name("duckdb")  # the duckdb-cli wheel's, beside lakewrap


def lakewrap(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
             tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = {"TMPDIR": str(tmp)} if tmp is not None else {}  # where the CLI's init file goes
    return subprocess.run([LAKEWRAP, *args], capture_output=True, text=True, input=stdin, timeout=300,
                          env={**os.environ, "NO_COLOR": "1", **extra, **(env or {})})


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
    proc = lakewrap("shell", "--python", "--read-only", "--project", str(shop), stdin=script)
    assert proc.returncode == 0, proc.stderr
    first, refused, after = proc.stdout.split()[0], proc.stdout.splitlines()[1], proc.stdout.split()[-1]
    assert int(first) > 0 and first == after
    assert refused.startswith("refused:"), proc.stdout


@pytest.mark.parametrize("flag", [["--print"], ["--python"], []], ids=["print", "console", "cli"])
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
    proc = lakewrap("shell", "--python", "--project", str(root), stdin=script)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("refused:") == 2 and "allowed" not in proc.stdout, proc.stdout
    count = lakewrap("query", "--project", str(root), "--format", "csv", "SELECT count(*) FROM raw.orders")
    assert count.stdout.split() == ["count_star()", "7"], count.stdout + count.stderr


@pytest.fixture
def fresh(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    assert lakewrap("init", str(root)).returncode == 0
    assert lakewrap("seed", "--project", str(root)).returncode == 0
    (tmp_path / "tmp").mkdir()
    return root


def test_the_duckdb_cli_is_installed_by_the_dev_extra_at_duckdbs_version() -> None:
    out = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith(f"v{duckdb.__version__} "), out


def test_the_cli_writes_the_lake_inside_the_sandbox_and_leaves_no_init_file(fresh: Path, tmp_path: Path) -> None:
    """The real DuckDB CLI, statements piped in: a table it creates is read back by `lakewrap query`;
    settings, files outside the project, environment variables and the CLI's own file and shell
    commands are refused; its private init file is gone afterwards."""
    outside = tmp_path / "outside.csv"
    outside.write_text("a\n1\n")
    escape = tmp_path / "escaped.txt"
    script = "\n".join([
        "CREATE TABLE raw.made_in_cli AS SELECT 40 + range AS x FROM range(3);",
        "SET enable_external_access = true;",
        "SET lock_configuration = false;",
        f"SELECT * FROM read_csv('{outside}');",
        f"COPY (SELECT 1) TO '{escape}';",
        "SELECT getenv('HOME');",
        f".shell touch {escape}",
        f".output {escape}",
        f".read {outside}",
        "SELECT current_setting('TimeZone') || '|' || current_setting('lock_configuration') AS s;",
    ]) + "\n"
    proc = lakewrap("shell", "--project", str(fresh), stdin=script, tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr  # the CLI's: some statements failed
    errors = proc.stderr
    assert errors.count("the configuration has been locked") == 2, errors
    assert errors.count("disabled by configuration") == 2, errors  # read_csv, COPY
    assert "getenv is disabled through configuration" in errors
    for dot in (".sh/.system", ".output", ".read"):
        assert f"{dot}" in errors and "cannot be used in -safe mode" in errors, errors
    assert "UTC|true" in proc.stdout, proc.stdout
    assert not escape.exists()
    got = lakewrap("query", "--project", str(fresh), "--format", "csv", "SELECT x FROM raw.made_in_cli ORDER BY x")
    assert got.stdout.split() == ["x", "40", "41", "42"], got.stdout + got.stderr
    assert list((tmp_path / "tmp").iterdir()) == []  # the init file and its folder were removed


def test_the_cli_read_only_refuses_a_write(fresh: Path, tmp_path: Path) -> None:
    script = "DELETE FROM raw.orders;\nSELECT count(*) AS n FROM raw.orders;\n"
    proc = lakewrap("shell", "--read-only", "--project", str(fresh), stdin=script, tmp=tmp_path / "tmp")
    assert "attached in read-only mode" in proc.stderr, proc.stderr
    count = lakewrap("query", "--project", str(fresh), "--format", "csv", "SELECT count(*) FROM raw.orders")
    assert count.stdout.split()[1] in proc.stdout.split() and int(count.stdout.split()[1]) > 0, proc.stdout
    assert list((tmp_path / "tmp").iterdir()) == []


def test_python_gives_the_console_even_with_the_cli_installed(fresh: Path) -> None:
    assert CLI.exists()
    proc = lakewrap("shell", "--python", "--project", str(fresh),
                    stdin="print('rows', con.sql('SELECT count(*) FROM raw.orders').fetchone()[0])\n")
    assert proc.returncode == 0 and proc.stdout.split()[0] == "rows", proc.stdout + proc.stderr


def test_a_cli_of_another_version_is_refused_with_a_hint(fresh: Path, tmp_path: Path) -> None:
    """A FAKE CLI: a two-line script named duckdb printing another DuckDB version (no real CLI of
    another version is installed); it must be refused before it is started for a session."""
    fake = tmp_path / "bin" / "duckdb"
    fake.parent.mkdir()
    started = tmp_path / "started"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {started}\necho 'v1.4.0 (Andium) 0123456789'\n")
    fake.chmod(0o755)
    proc = lakewrap("shell", "--project", str(fresh), stdin="", env={"LAKEWRAP_DUCKDB_CLI": str(fake)},
                    tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stderr
    assert f"is version 1.4.0, not DuckDB {duckdb.__version__}" in proc.stderr, proc.stderr
    assert f"pip install duckdb-cli=={duckdb.__version__}" in proc.stderr and "--python" in proc.stderr
    assert started.read_text().split() == ["--version"]  # asked its version only
    assert list((tmp_path / "tmp").iterdir()) == []
    missing = lakewrap("shell", "--project", str(fresh), stdin="", env={"LAKEWRAP_DUCKDB_CLI": str(tmp_path / "no")})
    assert missing.returncode == 1 and "is not an executable" in missing.stderr, missing.stderr


def test_ctrl_c_ends_a_piped_cli_session_and_the_init_file_is_removed(fresh: Path, tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C, while the CLI reads a piped
    stdin: the CLI (not interactive) ends, lakewrap waits for it without a traceback, and the init
    file (0600 in a 0700 folder) is gone. An interactive CLI keeps its session on Ctrl-C; that
    needs a terminal and is not tested here."""
    import signal
    import time

    tmp = tmp_path / "tmp"
    proc = subprocess.Popen([LAKEWRAP, "shell", "--project", str(fresh)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "NO_COLOR": "1", "TMPDIR": str(tmp)})
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        folder = next(tmp.iterdir())
        init = next(folder.iterdir())
        assert folder.name.startswith("lakewrap-shell-")
        assert init.stat().st_mode & 0o777 == 0o600 and folder.stat().st_mode & 0o777 == 0o700
        time.sleep(1)  # the CLI has read the init file and waits for stdin
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert list(tmp.iterdir()) == []


def test_the_docs_show_what_print_prints(shop: Path) -> None:
    """docs/configuration.md's example (a project at /srv/shop) is `--print` of such a project."""
    import re

    page = (ROOT / "docs" / "configuration.md").read_text()
    shown = re.search(r"For the embedded default that is.*?```sql\n(.*?)```", page, re.S)
    assert shown is not None
    site = Path(duckdb.__file__).resolve().parent.parent  # the extension wheels' site-packages
    want = shown.group(1).replace("<site-packages>", str(site)).replace("/srv/shop", str(shop)).splitlines()
    printed = lakewrap("shell", "--print", "--project", str(shop))
    assert printed.stdout.splitlines() == want, printed.stdout


def test_the_cli_refuses_a_lake_on_s3_before_writing_an_init_file(tmp_path: Path) -> None:
    """A lake whose data is on S3 needs a secret, which would have to go into the init file: the CLI
    is refused with a hint (no S3 is reached; the catalog file only has to exist)."""
    root = tmp_path / "s3lake"
    (root / "models").mkdir(parents=True)
    (root / "lakewrap.toml").write_text('[lake]\ndata_path = "s3://bucket/lake/"\n\n[lake.s3]\nregion = "us-east-1"\n')
    (root / ".lakewrap").mkdir()
    duckdb.connect(str(root / ".lakewrap" / "lake.ducklake")).close()
    (tmp_path / "tmp").mkdir()
    proc = lakewrap("shell", "--project", str(root), stdin="SELECT 1;\n", tmp=tmp_path / "tmp")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not started for a lake on S3" in proc.stderr and "lakewrap shell --python" in proc.stderr, proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_cli_and_the_console_both_attach_the_deferred_lake(tmp_path: Path) -> None:
    """Read-write in an environment that defers: DuckDB's CLI attaches the other lake read-only as
    `lakewrap_defer`, at the snapshot lakewrap pinned, as the Python console does."""
    root = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", root, ignore=shutil.ignore_patterns(".lakewrap", "target"))
    for args in (("seed", "--env", "prod"), ("run", "--env", "prod", "--start", "2024-01-01", "--end", "2024-01-02"),
                 ("seed", "--env", "dev")):
        assert lakewrap(*args, "--project", str(root)).returncode == 0
    want = lakewrap("query", "--env", "prod", "--project", str(root), "--format", "csv",
                    "SELECT count(*) FROM sales.orders").stdout.split()[1]
    assert int(want) > 0
    sql = "SELECT 'n=' || count(*) AS n FROM lakewrap_defer.sales.orders"
    cli = lakewrap("shell", "--env", "dev", "--project", str(root), stdin=sql + ";\n", tmp=tmp_path)
    console = lakewrap("shell", "--python", "--env", "dev", "--project", str(root),
                       stdin=f"print(con.sql(\"{sql}\").fetchone()[0])\n")
    assert cli.returncode == 0 and f"n={want}" in cli.stdout, cli.stdout + cli.stderr
    assert console.returncode == 0 and f"n={want}" in console.stdout, console.stdout + console.stderr
    refused = lakewrap("shell", "--env", "dev", "--project", str(root), tmp=tmp_path,
                       stdin="DELETE FROM lakewrap_defer.sales.orders;\n")
    assert "read-only" in refused.stderr, refused.stderr  # the other lake is never written
