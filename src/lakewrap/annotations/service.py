"""The keywords of incremental maintenance as a service: ``freshness``, ``schedule`` and ``trigger``
(docs/annotations.md; what they drive: docs/schedules.md). Registered by the default registry
after the core keywords."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakewrap.annotations.header import Header
from lakewrap.annotations.keywords import choice, duration_seconds, options, positional, tz_option
from lakewrap.annotations.lexer import Annotation, Arg

if TYPE_CHECKING:
    from lakewrap.annotations.registry import Registry


def register_service(reg: Registry) -> None:
    """Register ``freshness``, ``schedule`` and ``trigger`` on ``reg``."""
    fresh_usage = "freshness warn_after=<duration> error_after=<duration>"

    @reg.keyword("freshness", usage=fresh_usage,
                 summary="warn/error when the last materialization is older (e.g. warn_after=1h error_after=6h)")
    def freshness(ann: Annotation, h: Header) -> None:
        from lakewrap.spec import Freshness

        opts = options(ann, ("warn_after", "error_after"), fresh_usage)
        args = positional(ann, 0, 1, fresh_usage)
        if args and opts:
            raise ann.error("give one duration or warn_after=/error_after=, not both", column=args[0].column,
                            hint=f"write `-- {fresh_usage}` (`-- freshness 6h` is short for error_after=6h)")
        if not args and not opts:
            raise ann.error("missing warn_after= or error_after=", column=ann.end_column,
                            hint=f"write `-- {fresh_usage}`")
        if args:  # the one-duration form of earlier versions: the error threshold
            h.freshness = Freshness(error_after=duration_seconds(ann, args[0]))
            return
        warn = duration_seconds(ann, opts["warn_after"]) if "warn_after" in opts else None
        error = duration_seconds(ann, opts["error_after"]) if "error_after" in opts else None
        if warn is not None and error is not None and warn >= error:
            raise ann.error("warn_after must be shorter than error_after", column=opts["warn_after"].column,
                            hint="a table is first late (warn), then too late (error): e.g. "
                            "`-- freshness warn_after=1h error_after=6h`")
        h.freshness = Freshness(warn_after=warn, error_after=error)

    sched_usage = 'schedule "<cron>" [tz=<IANA zone>] [catch_up=latest|all|skip]'

    @reg.keyword("schedule", usage=sched_usage, summary="enqueue a run at each due time of a cron expression")
    def schedule(ann: Annotation, h: Header) -> None:
        from lakewrap.schedules import cron_problem
        from lakewrap.spec import ScheduleSpec

        args = positional(ann, 1, 7, sched_usage)
        opts = options(ann, ("tz", "catch_up"), sched_usage)
        # the fields may also be written unquoted (a Python model's schedule="0 6 * * *" renders so)
        arg = args[0] if len(args) == 1 else Arg(" ".join(a.value for a in args), args[0].column,
                                                   raw=" ".join(a.raw for a in args))
        problem = cron_problem(arg.value)
        if problem is not None:
            raise ann.error(f"`{arg.value}` is not a cron expression: {problem}", column=arg.column,
                            hint='write five fields in quotes, minute hour day month weekday: e.g. '
                            '`-- schedule "15 * * * *"` (hourly at :15) or `"0 6 * * 1-5"`')
        tz = tz_option(ann, opts)
        how = "latest"
        if "catch_up" in opts:
            how = choice(ann, opts["catch_up"], ("latest", "all", "skip"), "catch-up policy")
        h.schedule = ScheduleSpec.validate({"cron": arg.value, "tz": tz, "catch_up": how, "line": ann.line})

    trig_usage = "trigger upstream [debounce=<duration>]"

    @reg.keyword("trigger", usage=trig_usage, summary="enqueue the partitions whose upstream rows changed")
    def trigger(ann: Annotation, h: Header) -> None:
        from lakewrap.spec import TriggerSpec

        (arg,) = positional(ann, 1, 1, trig_usage)
        choice(ann, arg, ("upstream",), "trigger")
        opts = options(ann, ("debounce",), trig_usage)
        debounce = duration_seconds(ann, opts["debounce"], what="debounce", zero=True) if "debounce" in opts else 0
        h.trigger = TriggerSpec(debounce=debounce, line=ann.line)
