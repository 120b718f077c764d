"""``lakewrap init``, ``clean`` and ``--wait``: real processes, real lakes.

* ``init`` in a fresh virtualenv (its own interpreter, lakewrap reached through a ``.pth`` file
  that adds this environment's site-packages), then ``seed`` and ``run`` exit 0 and the mart's
  rows equal a reference computed by a separate DuckDB from the seed CSV;
* both substrates; a non-empty folder refused without ``--force``; a typo'd substrate gets a
  did-you-mean;
* ``clean`` removes ``target/`` and nothing else, and refuses a folder that is not a project;
* ``debug`` names the credential variables that are set and prints none of their values (canaries),
  and says whether the lake opens (a held catalog: exit 1; no lake yet: created nothing);
* ``--wait`` with a second process holding the DuckDB-file catalog: the command waits and succeeds
  once the holder lets go; a shorter wait fails with the held-catalog error after that wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

LAKEWRAP = str(Path(sys.executable).with_name("lakewrap"))
MART = "SELECT status, orders, CAST(revenue AS VARCHAR) FROM marts.orders_by_status ORDER BY status"


def lakewrap(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LAKEWRAP, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def reference(root: Path) -> list[tuple[str, int, str]]:
    """The mart computed by a separate in-memory DuckDB straight from the seed CSV."""
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT status, count(*), CAST(sum(CAST(amount AS DECIMAL(18, 2))) AS VARCHAR) "
            "FROM read_csv(?, header = true, all_varchar = true) GROUP BY status ORDER BY status",
            [str(root / "seeds" / "raw" / "orders.csv")]).fetchall()
    finally:
        con.close()
    return [(s, int(n), r) for s, n, r in rows]


def lake_rows(root: Path) -> list[tuple[str, int, str]]:
    proc = lakewrap("query", "--project", str(root), "--format", "csv", MART)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()[1:]
    return [(s, int(n), r) for s, n, r in (line.split(",") for line in lines)]


def fresh_venv(where: Path) -> Path:
    """A new virtualenv without pip whose interpreter finds lakewrap and its dependencies through one
    ``.pth`` line (``site.addsitedir``, so the editable install's own ``.pth`` is read too)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    site_dir = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    ours = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    Path(site_dir, "lakewrap_env.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    return python


def test_init_in_a_fresh_virtualenv_runs_at_once(tmp_path: Path) -> None:
    started = time.perf_counter()
    python = fresh_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["NO_COLOR"] = "1"
    where = subprocess.run([str(python), "-c", "import sys, lakewrap; print(sys.prefix); print(lakewrap.__file__)"],
                           capture_output=True, text=True, check=True, env=env).stdout.split("\n")
    assert Path(where[0]) == tmp_path / "venv"  # really the new environment's interpreter
    project = tmp_path / "proj"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), "-m", "lakewrap", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)

    init = cli("init", "proj")
    assert init.returncode == 0, init.stderr
    assert "lakewrap seed --project proj && lakewrap run --project proj" in init.stdout
    toml = (project / "lakewrap.toml").read_text()
    assert toml.startswith("# ") and 'substrate = "ducklake"' in toml
    assert sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file()) == [
        ".gitignore", "lakewrap.toml", "models/marts/orders_by_status.sql", "models/staging/orders.sql",
        "seeds/raw/orders.csv"]
    seed = cli("seed", "--project", "proj")
    assert seed.returncode == 0, seed.stderr
    run = cli("run", "--project", "proj")
    assert run.returncode == 0, run.stderr
    assert "staging.orders" in run.stdout and "marts.orders_by_status" in run.stdout
    test = cli("test", "--project", "proj")
    assert test.returncode == 0, test.stdout + test.stderr
    elapsed = time.perf_counter() - started
    print(f"\nfresh venv + init + seed + run + test: {elapsed:.1f}s")
    assert lake_rows(project) == reference(project)
    assert len(reference(project)) == 3


def test_init_iceberg_runs_at_once(tmp_path: Path) -> None:
    project = tmp_path / "ice"
    assert lakewrap("init", str(project), "--substrate", "iceberg").returncode == 0
    assert 'substrate = "iceberg"' in (project / "lakewrap.toml").read_text()
    for command in ("seed", "run"):
        proc = lakewrap(command, "--project", str(project))
        assert proc.returncode == 0, proc.stderr
    assert lake_rows(project) == reference(project)


def test_init_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "notes.txt").write_text("mine\n")
    proc = lakewrap("init", str(project))
    assert proc.returncode != 0
    assert "is not empty (notes.txt)" in proc.stderr and "--force" in proc.stderr
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt"]  # nothing written
    forced = lakewrap("init", str(project), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (project / "notes.txt").read_text() == "mine\n"
    assert (project / "models" / "staging" / "orders.sql").exists()
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert lakewrap("init", str(a_file)).returncode == 2


def test_init_substrate_typo_gets_did_you_mean(tmp_path: Path) -> None:
    proc = lakewrap("init", str(tmp_path / "p"), "--substrate", "icebrg")
    assert proc.returncode == 2
    assert "did you mean `iceberg`?" in proc.stderr
    assert not (tmp_path / "p").exists()


def test_clean_removes_target_and_nothing_else(tmp_path: Path) -> None:
    project = tmp_path / "p"
    assert lakewrap("init", str(project)).returncode == 0
    for command in ("seed", "run"):
        assert lakewrap(command, "--project", str(project)).returncode == 0
    assert (project / "target").is_dir()
    before = sorted(p.relative_to(project) for p in project.rglob("*") if "target" not in p.relative_to(project).parts)
    proc = lakewrap("clean", "--project", str(project))
    assert proc.returncode == 0, proc.stderr
    assert not (project / "target").exists()
    assert sorted(p.relative_to(project) for p in project.rglob("*")) == before
    again = lakewrap("clean", "--project", str(project))
    assert again.returncode == 0 and "nothing to remove" in again.stdout
    assert lake_rows(project) == reference(project)  # the lake is untouched


def test_clean_refuses_outside_a_project(tmp_path: Path) -> None:
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep").write_text("x")
    proc = lakewrap("clean", "--project", str(tmp_path))
    assert proc.returncode == 2
    assert "is not a lakewrap project" in proc.stderr
    assert (tmp_path / "target" / "keep").exists()


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from lakewrap.execute.lake import Lake
    con = Lake.open(Path(sys.argv[1])).connect()
    print("ready", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    print("released", flush=True)
""")


def hold(root: Path, seconds: float) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), str(seconds)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    project = tmp_path / "p"
    assert lakewrap("init", str(project)).returncode == 0
    assert lakewrap("seed", "--project", str(project)).returncode == 0
    return project


def test_wait_outlasts_a_process_holding_the_catalog(seeded: Path) -> None:
    holder = hold(seeded, 3)
    try:
        started = time.perf_counter()
        proc = lakewrap("run", "--project", str(seeded), "--wait", "60", timeout=120)
        elapsed = time.perf_counter() - started
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
    print(f"\n--wait 60 behind a 3 s holder: exit {proc.returncode} after {elapsed:.2f}s")
    assert proc.returncode == 0, proc.stderr
    assert elapsed > 1.5  # it did wait for the holder
    assert lake_rows(seeded) == reference(seeded)


def test_without_wait_or_past_it_the_held_catalog_error(seeded: Path) -> None:
    holder = hold(seeded, 300)
    try:
        started = time.perf_counter()
        at_once = lakewrap("run", "--project", str(seeded), timeout=60)
        t_at_once = time.perf_counter() - started
        started = time.perf_counter()
        waited = lakewrap("run", "--wait", "2", "--project", str(seeded), timeout=60)
        t_waited = time.perf_counter() - started
        via_env = lakewrap("query", "--project", str(seeded), "SELECT 1", env={"LAKEWRAP_WAIT": "1"}, timeout=60)
        bad_env = lakewrap("query", "--project", str(seeded), "SELECT 1", env={"LAKEWRAP_WAIT": "soon"}, timeout=60)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    print(f"\nheld: no --wait {t_at_once:.2f}s, --wait 2 {t_waited:.2f}s")
    held = f"the lake catalog .lakewrap/lake.ducklake is held by another process (PID {holder.pid})"
    assert at_once.returncode == 1 and held in " ".join(at_once.stderr.split())
    assert "waited" not in at_once.stderr and t_at_once < 5
    assert waited.returncode == 1 and f"{held}; waited 2 s" in " ".join(waited.stderr.split())
    assert t_waited >= 2
    assert via_env.returncode == 1 and f"{held}; waited 1 s" in " ".join(via_env.stderr.split())
    assert bad_env.returncode != 0 and "LAKEWRAP_WAIT='soon' is not a number of seconds" in bad_env.stderr


CANARIES = {"AWS_ACCESS_KEY_ID": "AKIACANARY7Q3", "AWS_SECRET_ACCESS_KEY": "canary-secret-9f8e7d6c",
            "PGPASSWORD": "canary-pg-5a4b3c", "LAKEWRAP_ICEBERG_TOKEN": "canary-token-1z2y3x"}


def test_debug_names_versions_binaries_lake_and_credentials_never_their_values(seeded: Path) -> None:
    proc = lakewrap("debug", "--project", str(seeded), env=CANARIES)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"duckdb: {duckdb.__version__}" in out
    assert "ducklake.duckdb_extension" in out and "reachable: yes" in out
    for var in CANARIES:
        assert f"{var}: set" in out
    assert "AWS_SESSION_TOKEN: not set" in out
    for value in CANARIES.values():
        assert value not in out and value not in proc.stderr
        assert value[:8] not in out  # not even a prefix
    holder = hold(seeded, 300)
    try:
        held = lakewrap("debug", "--project", str(seeded))
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert held.returncode == 1
    assert f"reachable: no: the lake catalog .lakewrap/lake.ducklake is held by another process (PID {holder.pid})" \
        in held.stdout
    fresh = tmp_path_of(seeded) / "fresh"
    assert lakewrap("init", str(fresh)).returncode == 0
    nolake = lakewrap("debug", "--project", str(fresh))
    assert nolake.returncode == 0 and "reachable: no lake yet" in nolake.stdout
    assert not (fresh / ".lakewrap").exists()  # debug created nothing


def tmp_path_of(project: Path) -> Path:
    return project.parent
