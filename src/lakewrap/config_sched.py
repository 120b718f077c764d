"""``[sources."schema.table"]``, ``[schedules.<name>]`` and ``[tracing]`` of ``lakewrap.toml``: records
validated like the other tables, with errors on the key's line (docs/schedules.md, docs/running.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from lakewrap.frozen import Frozen, Meta


def _duration(v: str | None) -> str | None:
    from lakewrap.durations import HINT, parse_duration

    if v is not None:
        try:
            parse_duration(v)
        except ValueError as exc:
            raise ValueError(f"{exc}; {HINT}") from None
    return v


def _seconds(v: str | None) -> int | None:
    from lakewrap.durations import parse_duration

    return None if v is None else parse_duration(v)


Duration = Annotated[str | None, Meta(check=_duration)]


def _column(v: str | None) -> str | None:
    if v is not None and not v.strip():
        raise ValueError("write the name of the column that holds each row's load time")
    return v


class SourceConfig(Frozen):
    """``[sources."raw.events"]``: the freshness policy of a table lakewrap does not build."""

    # the column holding each row's load time (its max is the table's age); None: the time of the
    # lake's last snapshot that changed the table
    loaded_at: Annotated[str | None, Meta(check=_column)] = None
    warn_after: Duration = None
    error_after: Duration = None

    def __post_init__(self) -> None:
        warn, error = _seconds(self.warn_after), _seconds(self.error_after)
        if warn is None and error is None:
            raise ValueError("a source needs warn_after, error_after or both (e.g. warn_after = \"1h\")")
        if warn is not None and error is not None and warn >= error:
            raise ValueError("warn_after must be shorter than error_after")

    @property
    def warn_seconds(self) -> int | None:
        return _seconds(self.warn_after)

    @property
    def error_seconds(self) -> int | None:
        return _seconds(self.error_after)


def _cron(v: str) -> str:
    from lakewrap.schedules import cron_problem

    problem = cron_problem(v)
    if problem is not None:
        raise ValueError(f"`{v}` is not a cron expression: {problem} (e.g. \"15 * * * *\": hourly at :15)")
    return v


def _tz(v: str) -> str:
    from lakewrap.errors import PlanError
    from lakewrap.partitions import zone

    try:
        zone(v)
    except PlanError as exc:
        raise ValueError(exc.message + (f" ({exc.hint})" if exc.hint else "")) from None
    return v


def _selectors(v: tuple[str, ...]) -> tuple[str, ...]:
    if not v or any(not s.strip() for s in v):
        raise ValueError("select lists at least one selector, e.g. select = [\"sales.orders+\"]")
    return v


def _partition(v: str) -> str:
    if v not in ("latest", "none") and not re.fullmatch(r"[0-9T:\-]+", v):
        raise ValueError("write partition = \"latest\" (the last complete partition at the due time, the "
                         "default), \"none\" (the models' own default) or a fixed partition value")
    return v


class ScheduleConfig(Frozen):
    """``[schedules.<name>]``: a cron expression, a selection and the partition its jobs run."""

    cron: Annotated[str, Meta(check=_cron)]
    select: Annotated[tuple[str, ...], Meta(check=_selectors)]
    tz: Annotated[str, Meta(check=_tz)] = "UTC"
    # "latest": the last complete partition at the due time, per model grain; "none": no partition
    # (a run's default); else a fixed partition value
    partition: Annotated[str, Meta(check=_partition)] = "latest"
    catch_up: Literal["all", "latest", "skip"] = "latest"
    grace: Duration = "5m"  # catch_up = "skip": a due time older than this at the look is dropped

    @property
    def grace_seconds(self) -> int:
        return _seconds(self.grace) or 0


def _endpoint(v: str | None) -> str | None:
    if v is not None and not re.match(r"https?://[^\s/@]+(/\S*)?$", v):
        raise ValueError("write the OTLP endpoint as http(s)://host:port, without credentials")
    return v


class TracingConfig(Frozen):
    """``[tracing]``: OTLP export of one trace per run (the ``otel`` extra; docs/running.md)."""

    endpoint: Annotated[str | None, Meta(check=_endpoint)] = None  # else OTEL_EXPORTER_OTLP_ENDPOINT
    service_name: str = "lakewrap"


def source_names(v: dict[str, Any]) -> dict[str, Any]:
    """``[sources]`` keys are two-part table names."""
    for name in v:
        if not re.fullmatch(r"[^.\s\"]+\.[^.\s\"]+", name):
            raise ValueError(f"`{name}` is not a schema.table name; write [sources.\"raw.events\"]")
    return v


def schedule_names(v: dict[str, Any]) -> dict[str, Any]:
    for name in v:
        if not re.fullmatch(r"[A-Za-z0-9_\-]+", name):
            raise ValueError(f"schedule name `{name}` may hold letters, digits, `_` and `-` only")
    return v


def section_line(text: str, table: str, name: str, key: str | None) -> int | None:
    """The line of ``key`` inside ``[<table>.<name>]`` (quoted or not), or of that header."""
    header = re.compile(rf"\s*\[\s*{re.escape(table)}\s*\.\s*(\"{re.escape(name)}\"|'{re.escape(name)}'|"
                        rf"{re.escape(name)})\s*\]")
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if header.match(line):
            if key is None:
                return i
            for j in range(i, len(lines)):
                if lines[j].lstrip().startswith("["):
                    break
                if re.match(rf"\s*{re.escape(key)}\s*=", lines[j]):
                    return j + 1
            return i
    return None
