"""``lakewrap freshness`` and the freshness column of ``status`` on a real DuckLake, against a
controlled clock (``now=``): a model's age from its last materialization, a source's from its
``loaded_at`` column or from the lake's last commit that changed it, and located errors for bad
``-- freshness`` lines and ``[sources]`` tables.

The expected times are independent of lakewrap: the wall clock read around each commit, and the
``loaded_at`` values this test wrote.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import execute
from lakewrap.cli import main
from lakewrap.errors import AnnotationError, ConfigError
from lakewrap.freshness import breached, check, state_of
from lakewrap.inspect import status
from lakewrap.parse import parse_model

MODELS = {
    "models/core/ev.sql": "-- materialized table\n-- freshness warn_after=1h error_after=6h\n"
                          "SELECT id, ts FROM raw.events\n",
    "models/core/old.sql": "-- materialized table\n-- freshness 2h\nSELECT id FROM raw.events\n",  # error_after=2h
    "models/core/plain.sql": "-- materialized table\nSELECT id FROM raw.events\n",  # no policy
}
TOML = """\
[sources."raw.events"]
warn_after = "1h"
error_after = "1d"

[sources."raw.loads"]
loaded_at = "loaded_at"
warn_after = "30m"
error_after = "2h"
"""
LOADED = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)  # the newest loaded_at written below


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    for rel, text in MODELS.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "lakewrap.toml").write_text(TOML)
    return tmp_path


def by_name(rows: list) -> dict:  # type: ignore[type-arg]
    return {r.name: r for r in rows}


def test_states_pure() -> None:
    assert state_of(None, 60, 120) == "never"
    assert state_of(60, 60, 120) == "ok"  # equal to a threshold is not past it
    assert state_of(61, 60, 120) == "warn"
    assert state_of(121, 60, 120) == "error"
    assert state_of(10**9, None, None) == "ok"
    assert state_of(121, None, 120) == "error"


def test_models_and_sources_against_a_controlled_clock(project: Path) -> None:
    t0 = now_utc()
    execute(project, "CREATE SCHEMA raw", "CREATE TABLE raw.events AS SELECT 1 AS id, TIMESTAMP '2024-01-01' AS ts",
            "CREATE TABLE raw.loads (id INTEGER, loaded_at TIMESTAMP)",
            "INSERT INTO raw.loads VALUES (1, TIMESTAMP '2024-03-01 09:00:00'), (2, TIMESTAMP '2024-03-01 12:00:00')")
    t1 = now_utc()
    # before any run: the models were never materialized
    before = by_name(check(project, now=t1))
    assert before["core.ev"].state == "never" and before["core.ev"].age_seconds is None
    assert before["core.old"].state == "never"
    assert breached(list(before.values()))  # core.old has an error_after and was never built
    assert "core.plain" not in before  # no policy, not selected: not listed

    # raw.events has no loaded_at: its age is from the lake's last commit that changed it
    events = before["raw.events"]
    assert events.basis == "last commit" and events.loaded_at is not None
    assert t0 <= events.loaded_at <= t1
    # raw.loads: max(loaded_at), a TIMESTAMP read as UTC
    loads = before["raw.loads"]
    assert loads.basis == "max(loaded_at)" and loads.loaded_at == LOADED

    result = CliRunner().invoke(main, ["run", "--project", str(project)])
    assert result.exit_code == 0, result.output
    t2 = now_utc()
    # a commit to another table does not make raw.events younger
    execute(project, "CREATE TABLE raw.other AS SELECT 1 AS x")
    ev = by_name(check(project, ["core.ev", "core.plain", "raw.events", "source:raw.loads"], now=t2))
    built = ev["core.ev"].loaded_at
    assert built is not None and t1 <= built <= t2
    assert ev["raw.events"].loaded_at == events.loaded_at
    assert ev["core.plain"].state == "ok" and ev["core.plain"].error_after is None

    def states(now: datetime) -> dict[str, str]:
        return {r.name: r.state for r in check(project, ["core.ev", "core.old", "raw.events", "raw.loads"], now=now)}

    assert built is not None and events.loaded_at is not None
    assert states(built + timedelta(minutes=59))["core.ev"] == "ok"
    assert states(built + timedelta(hours=1, seconds=1))["core.ev"] == "warn"
    assert states(built + timedelta(hours=6, seconds=1)) == {
        "core.ev": "error", "core.old": "error",
        "raw.events": "warn",  # loaded before the run: more than 6h, less than 1d old
        "raw.loads": "error"}
    assert states(LOADED + timedelta(minutes=31))["raw.loads"] == "warn"
    assert states(LOADED + timedelta(minutes=29))["raw.loads"] == "ok"
    assert states(events.loaded_at + timedelta(days=1, seconds=1))["raw.events"] == "error"
    got = check(project, ["core.ev"], now=built + timedelta(hours=3))
    assert got[0].age_seconds == pytest.approx(3 * 3600, abs=0.01)

    # status shows the model's state against the same clock
    st = {s.target: s for s in status(project, ("core.ev", "core.plain"), now=built + timedelta(hours=2))}
    assert st["core.ev"].freshness == "warn" and st["core.plain"].freshness is None

    # the command: exit 1 on an error-level breach, 0 otherwise; JSON holds the same states
    late = (built + timedelta(hours=7)).isoformat()
    out = CliRunner().invoke(main, ["freshness", "core.ev", "--project", str(project), "--now", late,
                                    "--format", "json"])
    assert out.exit_code == 1, out.output
    doc = json.loads(out.stdout)
    assert [(d["name"], d["state"], d["error_after"]) for d in doc] == [("core.ev", "error", 21600)]
    fine = CliRunner().invoke(main, ["freshness", "core.ev", "--project", str(project),
                                     "--now", (built + timedelta(minutes=90)).isoformat()])
    assert fine.exit_code == 0, fine.output
    assert "warn" in fine.stdout and "core.ev" in fine.stdout


def test_a_bad_loaded_at_column_is_a_clear_error(project: Path) -> None:
    execute(project, "CREATE SCHEMA raw", "CREATE TABLE raw.events AS SELECT 1 AS id, TIMESTAMP '2024-01-01' AS ts",
            "CREATE TABLE raw.loads (id INTEGER, loaded_at VARCHAR)", "INSERT INTO raw.loads VALUES (1, 'soon')")
    out = CliRunner().invoke(main, ["freshness", "raw.loads", "--project", str(project)])
    assert out.exit_code == 1
    assert "[sources.\"raw.loads\"]: loaded_at column `loaded_at` holds 'soon', not a time" in out.output
    (project / "lakewrap.toml").write_text(TOML.replace('loaded_at = "loaded_at"', 'loaded_at = "loadedat"'))
    out = CliRunner().invoke(main, ["freshness", "raw.loads", "--project", str(project)])
    assert out.exit_code == 1 and "cannot read max(loadedat)" in out.output


@pytest.mark.parametrize(("toml", "line", "message", "hint"), [
    ('[sources."raw.events"]\nloadd_at = "ts"\nerror_after = "1h"\n', 2,
     'unknown key `loadd_at` in [sources."raw.events"]', "did you mean `loaded_at`?"),
    ('[sources."raw.events"]\nwarn_after = "6h"\nerror_after = "1h"\n', 1,
     "warn_after must be shorter than error_after", "docs/schedules.md"),
    ('[sources."raw.events"]\nloaded_at = "ts"\n', 1, "a source needs warn_after, error_after or both", None),
    ('[sources."raw.a"]\nerror_after = "1h"\n\n[sources."raw.events"]\nerror_after = "6 hours"\n', 5,
     '[sources."raw.events"] error_after: `6 hours` is not a duration', None),
    ('[sources.events]\nerror_after = "1h"\n', None, "`events` is not a schema.table name", None),
])
def test_bad_sources_are_located(tmp_path: Path, toml: str, line: int | None, message: str,
                                 hint: str | None) -> None:
    from lakewrap.config import load_config

    (tmp_path / "models").mkdir()
    (tmp_path / "lakewrap.toml").write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, save=False)
    err = info.value
    assert message in err.message
    assert err.location is not None and err.location.path == "lakewrap.toml"
    if line is not None:
        assert err.location.line == line
    if hint is not None:
        assert err.hint is not None and hint in err.hint
    assert not (tmp_path / "target").exists()  # nothing written


def test_freshness_annotation_forms(tmp_path: Path) -> None:
    def spec(line: str):  # type: ignore[no-untyped-def]
        return parse_model(tmp_path / "m.sql", tmp_path,
                           text=f"-- materialized table\n{line}\nSELECT 1 AS x\n", rel="models/m.sql")

    f = spec("-- freshness warn_after=1h error_after=1d").freshness
    assert (f.warn_after, f.error_after) == (3600, 86400)
    f = spec("-- freshness 90m").freshness  # the one-duration form: error_after
    assert (f.warn_after, f.error_after) == (None, 5400)
    f = spec("-- freshness warn_after=2h30m").freshness
    assert (f.warn_after, f.error_after) == (9000, None)
    with pytest.raises(AnnotationError) as info:
        spec("-- freshness")
    assert "missing warn_after= or error_after=" in info.value.message and info.value.location.line == 2


def test_iceberg_models_and_sources(tmp_path: Path) -> None:
    """The same on an Iceberg lake (pyiceberg, the embedded catalog): the source's last commit is its
    current snapshot's time, loaded_at is read through the lake's query role."""
    root = tmp_path / "ice"
    (root / "models" / "core").mkdir(parents=True)
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "models" / "core" / "ev.sql").write_text(MODELS["models/core/ev.sql"])
    (root / "seeds" / "raw" / "events.csv").write_text("id,ts\n1,2024-01-01 10:00:00\n")
    (root / "seeds" / "raw" / "loads.csv").write_text("id,loaded_at\n1,2024-03-01 09:00:00\n2,2024-03-01 12:00:00\n")
    (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n\n' + TOML)
    t0 = now_utc()
    for command in ("seed", "run"):
        out = CliRunner().invoke(main, [command, "--project", str(root)])
        assert out.exit_code == 0, out.output
    t1 = now_utc()
    got = by_name(check(root, now=t1 + timedelta(hours=2)))
    assert got["raw.events"].basis == "last commit"
    assert got["raw.events"].loaded_at is not None and t0 - timedelta(seconds=1) <= got["raw.events"].loaded_at <= t1
    assert got["raw.events"].state == "warn"  # 2h old: past warn_after=1h, not error_after=1d
    assert got["raw.loads"].loaded_at == LOADED and got["raw.loads"].state == "error"
    built = got["core.ev"].loaded_at
    assert built is not None and t0 <= built <= t1 and got["core.ev"].state == "warn"
