"""Schedules' due times as pure functions (between two instants, in a time zone, across DST) and
the catch-up policies; then ``lakewrap scheduler --once`` on a real DuckLake project, whose queue
must hold exactly one job per due time the policy keeps, with the partition that was complete then.

The expected due times are written out by hand (or walked minute by minute in plain Python with
``zoneinfo``), independently of croniter.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from lakewrap.cli import main
from lakewrap.jobs import open_queue
from lakewrap.schedules import cron_problem, decide, due_times, iso, previous_due
from queueproject import write_project

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def brute(minute: int, hour: int | None, tz: str, after: datetime, upto: datetime) -> list[datetime]:
    """Every instant in (after, upto] whose local wall time in ``tz`` reads hour:minute (any hour when
    None), walked minute by minute: an independent reference for ``M H * * *`` crons."""
    out, t = [], after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    zone = ZoneInfo(tz)
    while t <= upto:
        local = t.astimezone(zone)
        if local.minute == minute and (hour is None or local.hour == hour):
            out.append(t)
        t += timedelta(minutes=1)
    return out


def test_due_times_between_two_instants() -> None:
    after, upto = at("2024-01-01T00:00:00+00:00"), at("2024-01-01T03:15:00+00:00")
    assert due_times("15 * * * *", "UTC", after, upto) == [
        at("2024-01-01T00:15:00+00:00"), at("2024-01-01T01:15:00+00:00"),
        at("2024-01-01T02:15:00+00:00"), at("2024-01-01T03:15:00+00:00")]  # upto is included
    assert due_times("15 * * * *", "UTC", at("2024-01-01T00:15:00+00:00"), upto)[0] == at("2024-01-01T01:15:00+00:00")
    assert due_times("0 6 * * 1-5", "UTC", at("2024-01-05T07:00:00+00:00"), at("2024-01-09T07:00:00+00:00")) == [
        at("2024-01-08T06:00:00+00:00"), at("2024-01-09T06:00:00+00:00")]  # Friday 5th after 6:00; no weekend
    assert due_times("15 * * * *", "UTC", after, upto, limit=2) == [at("2024-01-01T00:15:00+00:00"),
                                                                     at("2024-01-01T01:15:00+00:00")]
    with pytest.raises(ValueError):
        due_times("15 * * * *", "UTC", datetime(2024, 1, 1), upto)


@pytest.mark.parametrize(("minute", "hour", "tz", "after", "upto"), [
    (0, 6, "Europe/Berlin", "2024-03-28T00:00:00+00:00", "2024-04-02T00:00:00+00:00"),  # spring forward
    (30, 1, "Europe/Berlin", "2024-10-25T00:00:00+00:00", "2024-10-29T00:00:00+00:00"),  # fall back
    (0, 9, "America/New_York", "2024-03-08T00:00:00+00:00", "2024-03-12T00:00:00+00:00"),
    (45, None, "Asia/Kolkata", "2024-01-01T00:00:00+00:00", "2024-01-01T06:00:00+00:00"),  # +05:30
])
def test_due_times_in_a_time_zone_match_a_minute_walk(minute: int, hour: int | None, tz: str, after: str,
                                                      upto: str) -> None:
    cron = f"{minute} {'*' if hour is None else hour} * * *"
    got = due_times(cron, tz, at(after), at(upto))
    assert got == brute(minute, hour, tz, at(after), at(upto))
    assert all(t.tzinfo == UTC for t in got)
    assert previous_due(cron, tz, at(upto), len(got)) == list(reversed(got))


def test_dst_offsets_of_a_daily_six_am_in_berlin() -> None:
    got = due_times("0 6 * * *", "Europe/Berlin", at("2024-03-30T00:00:00+00:00"), at("2024-04-01T00:00:00+00:00"))
    assert [iso(t) for t in got] == ["2024-03-30T05:00:00Z", "2024-03-31T04:00:00Z"]  # CET, then CEST


def test_catch_up_policies() -> None:
    due = [at(f"2024-01-01T0{h}:00:00+00:00") for h in range(1, 6)]
    now, cursor, grace = at("2024-01-01T05:02:00+00:00"), at("2024-01-01T00:00:00+00:00"), timedelta(minutes=5)
    every = decide(due, "all", now, cursor, grace)
    assert every.fire == tuple(due) and every.skipped == () and every.cursor == due[-1]
    latest = decide(due, "latest", now, cursor, grace)
    assert latest.fire == (due[-1],) and latest.skipped == tuple(due[:-1])
    skip = decide(due, "skip", now, cursor, grace)
    assert skip.fire == (due[-1],) and skip.skipped == tuple(due[:-1])
    late = decide(due, "skip", now + timedelta(minutes=10), cursor, grace)  # even the last is late
    assert late.fire == () and late.skipped == tuple(due) and late.cursor == due[-1]
    assert decide([], "all", now, cursor, grace).cursor == cursor
    with pytest.raises(ValueError):
        decide(due, "some", now, cursor, grace)  # type: ignore[arg-type]


@pytest.mark.parametrize(("expr", "problem"), [
    ("15 * * * *", None), ("@hourly", None), ("*/15 8-18 * * mon-fri", None),
    ("15 * * *", "expected 5 fields"), ("0 0 * * * *", "expected 5 fields"),
    ("61 * * * *", "out of range"), ("x * * * *", "not a number"), ("@often", "unknown alias"),
])
def test_cron_problems(expr: str, problem: str | None) -> None:
    got = cron_problem(expr)
    assert (got is None) if problem is None else (got is not None and problem in got)


# --- lakewrap scheduler --once on a DuckLake ----------------------------------------------------

TOML = """\
[schedules.hourly]
cron = "10 * * * *"
select = ["core.ev"]
catch_up = "all"

[schedules.nightly]
cron = "0 2 * * *"
tz = "Europe/Berlin"
select = ["core.ev"]

[schedules.strict]
cron = "30 * * * *"
select = ["core.ev"]
partition = "2024-01-01"
catch_up = "skip"
grace = "10m"
"""


def jobs(root: Path) -> dict[str, tuple[str | None, str]]:
    with open_queue(root) as queue:
        return {j.dedupe_key or "": (j.partition, j.requested_by) for j in queue.list(limit=1000)}


def once(root: Path, now: str) -> dict:  # type: ignore[type-arg]
    out = CliRunner().invoke(main, ["scheduler", "--once", "--now", now, "--format", "json", "--project", str(root)])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_scheduler_once_enqueues_each_kept_due_time_once(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", TOML)
    # a model's own schedule, named by its target
    (root / "models" / "core" / "ev.sql").write_text(
        '-- schedule "0 0 * * *" catch_up=all\n' + (root / "models" / "core" / "ev.sql").read_text())
    first = once(root, "2024-01-10T05:20:00Z")
    # a new schedule fires its latest due time only; strict's 04:30 is 50 minutes late: skipped
    assert jobs(root) == {
        "schedule:hourly:2024-01-10T05:10:00Z": ("2024-01-09", "schedule:hourly"),  # the last complete day
        "schedule:nightly:2024-01-10T01:00:00Z": ("2024-01-09", "schedule:nightly"),  # 02:00 CET
        "schedule:core.ev:2024-01-10T00:00:00Z": ("2024-01-09", "schedule:core.ev"),
    }
    assert len(first["enqueued"]) == 3
    again = once(root, "2024-01-10T05:20:00Z")  # the same look again: nothing new
    assert again["enqueued"] == []
    # four hours later: hourly catches up every due time, nightly only its latest (none new),
    # strict's 09:30 is on time
    once(root, "2024-01-10T09:35:00Z")
    got = jobs(root)
    hourly = sorted(k for k in got if k.startswith("schedule:hourly:"))
    assert hourly == [f"schedule:hourly:2024-01-10T0{h}:10:00Z" for h in range(5, 10)]
    assert got["schedule:strict:2024-01-10T09:30:00Z"] == ("2024-01-01", "schedule:strict")
    assert got["schedule:hourly:2024-01-10T09:10:00Z"] == ("2024-01-09", "schedule:hourly")
    assert len(got) == 3 + 4 + 1
    # two days later: nightly (latest) skips the missed night, core.ev (all) catches up both
    once(root, "2024-01-12T03:00:00Z")
    got = jobs(root)
    assert sorted(k for k in got if "nightly" in k) == ["schedule:nightly:2024-01-10T01:00:00Z",
                                                          "schedule:nightly:2024-01-12T01:00:00Z"]
    assert sorted(k for k in got if "core.ev" in k) == [f"schedule:core.ev:2024-01-{d}T00:00:00Z"
                                                          for d in (10, 11, 12)]
    assert got["schedule:core.ev:2024-01-12T00:00:00Z"][0] == "2024-01-11"


def test_bad_schedules_are_located(tmp_path: Path) -> None:
    root = write_project(tmp_path / "p", '[schedules.x]\ncron = "0 6 * * *"\nselect = ["core.ev"]\nwhen = "now"\n')
    out = CliRunner().invoke(main, ["scheduler", "--once", "--project", str(root)])
    assert out.exit_code == 1
    assert "lakewrap.toml:4: unknown key `when` in [schedules.x]" in out.output
    (root / "lakewrap.toml").write_text('[schedules.x]\ncron = "0 25 * * *"\nselect = ["core.ev"]\n')
    out = CliRunner().invoke(main, ["scheduler", "--once", "--project", str(root)])
    assert out.exit_code == 1 and "lakewrap.toml:2: [schedules.x] cron: `0 25 * * *` is not a cron" in out.output
    (root / "lakewrap.toml").write_text('[schedules.x]\ncron = "0 6 * * *"\nselect = ["core.nope"]\n')
    out = CliRunner().invoke(main, ["scheduler", "--once", "--now", "2024-01-02T07:00:00Z", "--project", str(root)])
    assert out.exit_code == 1 and "schedule x" in out.output and "core.nope" in out.output
    assert jobs(root) == {}


def test_schedule_lines_quoted_unquoted_and_in_a_python_model(tmp_path: Path) -> None:
    from lakewrap.compile import load_project
    from lakewrap.parse import parse_model

    def spec(line: str):  # type: ignore[no-untyped-def]
        return parse_model(tmp_path / "m.sql", tmp_path, text=f"-- materialized table\n{line}\nSELECT 1 AS x\n",
                           rel="models/m.sql").schedule

    quoted = spec('-- schedule "0 6 * * 1-5" tz=Europe/Berlin catch_up=skip')
    assert (quoted.cron, quoted.tz, quoted.catch_up, quoted.line) == ("0 6 * * 1-5", "Europe/Berlin", "skip", 2)
    assert spec("-- schedule 0 6 * * 1-5 tz=Europe/Berlin catch_up=skip") == quoted
    assert spec('-- schedule "@hourly"').cron == "@hourly"
    root = tmp_path / "py"
    (root / "models").mkdir(parents=True)
    (root / "lakewrap.toml").write_text('[security]\nscripts = ["models"]\n')
    (root / "models" / "m.py").write_text(
        "import lakewrap\n\n\n@lakewrap.model(materialized=\"table\", schedule=\"15 * * * *\", "
        "trigger=\"upstream debounce=2m\", freshness=\"warn_after=1h\")\n"
        "def m(ctx):\n    import pyarrow as pa\n    return pa.table({\"x\": [1]})\n")
    (model,) = load_project(root, None).select(())
    assert model.schedule is not None and model.schedule.cron == "15 * * * *"
    assert model.trigger is not None and model.trigger.debounce == 120
    assert model.freshness is not None and model.freshness.warn_after == 3600


def test_the_loop_looks_until_stopped(tmp_path: Path) -> None:
    import threading

    from lakewrap.ticks import Look, run_loop

    root = write_project(tmp_path / "p", '[schedules.q]\ncron = "*/15 * * * *"\nselect = ["core.ev"]\n'
                         'catch_up = "all"\n')
    clock = iter(at(t) for t in ("2024-01-01T00:01:00+00:00", "2024-01-01T00:16:00+00:00",
                                 "2024-01-01T00:20:00+00:00", "2024-01-01T01:00:00+00:00"))
    stop, looks = threading.Event(), []

    def report(found: Look) -> None:
        looks.append([j["due"] for j in found.enqueued])
        if len(looks) == 4:
            stop.set()  # what SIGTERM does in `lakewrap scheduler`

    run_loop(root, interval=0.01, stop=stop, clock=lambda: next(clock), report=report)
    assert looks == [["2024-01-01T00:00:00Z"], ["2024-01-01T00:15:00Z"], [],
                     ["2024-01-01T00:30:00Z", "2024-01-01T00:45:00Z", "2024-01-01T01:00:00Z"]]
    assert sorted(jobs(root)) == [f"schedule:q:2024-01-01T{t}:00Z" for t in
                                  ("00:00", "00:15", "00:30", "00:45", "01:00")]


def test_the_scheduler_process_stops_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    from queueproject import wait_for

    root = write_project(tmp_path / "p", '[schedules.q]\ncron = "* * * * *"\nselect = ["core.ev"]\n')
    proc = subprocess.Popen([sys.executable, "-m", "lakewrap", "scheduler", "--interval", "0.2", "--project",
                             str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        wait_for("the first job", lambda: jobs(root), timeout=120)  # its first look enqueued the latest minute
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()
    keys = sorted(jobs(root))  # one, or two when a minute ticked before the signal
    assert 1 <= len(keys) <= 2 and all(k.startswith("schedule:q:") for k in keys)
    assert f"enqueued: job 1 for schedule q due {keys[0].removeprefix('schedule:q:')}" in out.decode()


def test_the_loop_survives_a_broken_lakewrap_toml(tmp_path: Path) -> None:
    import threading

    from lakewrap.ticks import Look, run_loop

    good = '[schedules.q]\ncron = "0 * * * *"\nselect = ["core.ev"]\n'
    root = write_project(tmp_path / "p", good)
    clock = iter(at(f"2024-01-01T0{h}:30:00+00:00") for h in range(3))
    stop, looks = threading.Event(), []

    def report(found: Look) -> None:
        looks.append(([j["due"] for j in found.enqueued], found.errors))
        (root / "lakewrap.toml").write_text(good.replace("0 * * * *", "0 * * *") if len(looks) == 1 else good)
        if len(looks) == 3:
            stop.set()

    run_loop(root, interval=0.01, stop=stop, clock=lambda: next(clock), report=report)
    assert looks[0] == (["2024-01-01T00:00:00Z"], [])
    assert looks[1][0] == [] and "is not a cron expression" in looks[1][1][0]  # said, not raised
    assert looks[2] == (["2024-01-01T02:00:00Z"], [])
