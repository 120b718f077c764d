"""Throw-away servers on 127.0.0.1 for the catalog tests: PostgreSQL and moto's S3.

Both are session fixtures; a test module imports the ones it uses::

    from servers import moto_s3, postgres  # noqa: F401  (pytest fixtures)

* ``postgres``: Debian's PostgreSQL binaries from ``/usr/lib/postgresql/*/bin`` (``apt-get install
  postgresql``; ``.ci/run`` installs them). ``initdb`` into a fresh temporary folder, then ``pg_ctl``
  on a free port with ``fsync=off``. As root both run as the ``postgres`` user through ``runuser``
  (``initdb`` refuses root). TCP connections need the password in :attr:`Postgres.password`
  (scram-sha-256), so ``PGPASSWORD`` really travels; the Unix socket (admin only) trusts.
* ``moto_s3``: ``python -m moto.server`` on a free port (``pip install -e '.[dev]'`` brings
  ``moto[server]`` and ``boto3``).

When a server cannot be found or started the fixture FAILS with what to install: these tests are
never skipped, CI must provide the servers.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
PG_INSTALL = "install PostgreSQL: `apt-get update && apt-get install -y postgresql` (.ci/run does this)"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


# --- PostgreSQL -----------------------------------------------------------------------------------


def pg_bindir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding ``pg_ctl`` and ``initdb``."""
    found = [p for p in Path("/").glob(PG_BIN_GLOB.lstrip("/")) if (p / "pg_ctl").exists() and (p / "initdb").exists()]

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    if not found:
        pytest.fail(f"PostgreSQL server binaries (pg_ctl, initdb) not found under {PG_BIN_GLOB}: {PG_INSTALL}",
                    pytrace=False)
    return max(found, key=version)


@dataclass
class Postgres:
    """A running PostgreSQL server owned by the test session."""

    bindir: Path
    base: Path
    port: int
    password: str
    host: str = "127.0.0.1"
    user: str = "postgres"

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    def dsn(self, dbname: str) -> str:
        """A libpq key=value string without the password (lakewrap.toml's ``dsn``)."""
        return f"dbname={dbname} host={self.host} port={self.port} user={self.user}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (over the trusted Unix socket) and return its dsn."""
        run([str(self.bindir / "createdb"), "-h", str(self.socket_dir), "-p", str(self.port), "-U", self.user, name],
            as_postgres=False)
        return self.dsn(name)

    def psql(self, sql: str, dbname: str = "postgres") -> str:
        out = run([str(self.bindir / "psql"), "-h", str(self.socket_dir), "-p", str(self.port), "-U", self.user,
                   "-d", dbname, "-v", "ON_ERROR_STOP=1", "-Atc", sql], as_postgres=False)
        return out.strip()


def _as_postgres(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser") is None:
        pytest.fail("running as root needs `runuser` (util-linux) to start PostgreSQL as the postgres user",
                    pytrace=False)
    return ["runuser", "-u", "postgres", "--", *argv]


def run(argv: list[str], *, as_postgres: bool = True, timeout: float = 60) -> str:
    cmd = _as_postgres(argv) if as_postgres else argv
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def start_postgres() -> Postgres:
    bindir = pg_bindir()
    base = Path(tempfile.mkdtemp(prefix="lakewrap-pg-"))
    if os.geteuid() == 0:
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(base, ignore_errors=True)
            pytest.fail(f"running as root, but there is no `postgres` user to run the server as: {PG_INSTALL}",
                        pytrace=False)
        os.chown(base, pw.pw_uid, pw.pw_gid)
    password = "pw-" + os.urandom(8).hex()
    pwfile = base / "pwfile"
    try:
        pwfile.write_text(password + "\n")
        (base / "sock").mkdir()
        if os.geteuid() == 0:
            for p in (pwfile, base / "sock"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        run([str(bindir / "initdb"), "-D", str(base / "data"), "-U", "postgres", "--auth-local=trust",
             "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"])
        pwfile.unlink()
        last = ""
        for _ in range(3):  # the free port can be taken between the probe and the bind
            port = free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {port} -k {base / 'sock'} -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
            try:
                run([str(bindir / "pg_ctl"), "-D", str(base / "data"), "-l", str(base / "server.log"), "-o", opts,
                     "-w", "-t", "30", "start"])
                return Postgres(bindir, base, port, password)
            except RuntimeError as exc:
                last = str(exc)
        raise RuntimeError(last)
    except Exception as exc:
        log = base / "server.log"
        tail = log.read_text()[-2000:] if log.exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"cannot start PostgreSQL from {bindir}: {exc}\n{tail}", pytrace=False)


def stop_postgres(pg: Postgres) -> None:
    try:
        run([str(pg.bindir / "pg_ctl"), "-D", str(pg.base / "data"), "-m", "fast", "-w", "stop"])
    finally:
        shutil.rmtree(pg.base, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A PostgreSQL server for the whole session (each test creates its own database)."""
    pg = start_postgres()
    try:
        yield pg
    finally:
        stop_postgres(pg)


# --- moto S3 --------------------------------------------------------------------------------------


@dataclass
class S3:
    """moto's S3 server: ``endpoint`` is host:port, as lakewrap.toml's ``[lake.s3] endpoint`` wants it."""

    port: int
    key_id: str = "test"
    secret: str = "test"
    region: str = "us-east-1"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=f"http://{self.endpoint}", aws_access_key_id=self.key_id,
                            aws_secret_access_key=self.secret, region_name=self.region)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def clear_glue(self) -> None:
        """Drop every database (and its tables) of moto's Glue catalog, which the whole session
        shares: two tests whose models have the same names would otherwise see each other's tables."""
        import boto3

        glue = boto3.client("glue", endpoint_url=f"http://{self.endpoint}", aws_access_key_id=self.key_id,
                            aws_secret_access_key=self.secret, region_name=self.region)
        for db in glue.get_databases()["DatabaseList"]:
            for table in glue.get_tables(DatabaseName=db["Name"])["TableList"]:
                glue.delete_table(DatabaseName=db["Name"], Name=table["Name"])
            glue.delete_database(Name=db["Name"])

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3]:
    """moto's S3 server on 127.0.0.1 for the whole session (in memory; buckets per test)."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"moto's S3 server is not installed ({exc}): pip install -e '.[dev]' "
                    "(the dev extra holds moto[server] and boto3)", pytrace=False)
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    last = ""
    for _ in range(3):
        port = free_port()
        with log_path.open("wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=log, stderr=subprocess.STDOUT)
        if wait_for_port(port, proc, timeout=30):
            break
        proc.kill()
        proc.wait()
        last = log_path.read_text(errors="replace")[-2000:]
    else:
        pytest.fail(f"moto's S3 server did not start on 127.0.0.1:\n{last}", pytrace=False)
    try:
        yield S3(port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
