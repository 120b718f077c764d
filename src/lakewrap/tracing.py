"""Tracing (the ``otel`` extra): one OpenTelemetry trace per run, a span per step, exported over OTLP
(docs/running.md, "Tracing").

Enabled when ``[tracing] endpoint`` of ``lakewrap.toml`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set
(the file wins); otherwise nothing here imports ``opentelemetry``, so a run without tracing pays
nothing. The run's span (``lakewrap <command>``) starts when the scheduler starts and ends with the
run; each step's span (``<target> [<partition>]``) is a child of it, timed from the step's own
duration when it finished, with its model, partition, rows, snapshot, attempts and, for a failed
step, its error class and (redacted) message, each failed attempt an event. Spans go through a
``BatchSpanProcessor`` of a provider of the run's own, flushed and shut down when the run ends.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ConfigError, Location

if TYPE_CHECKING:
    from lakewrap.config import ProjectConfig
    from lakewrap.execute.executor import Result
    from lakewrap.steps import RunReport

ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
_exporter: Any = None  # an exporter set by use_exporter (tests: the SDK's InMemorySpanExporter)


def use_exporter(exporter: Any) -> None:
    """Export every run's spans to ``exporter`` (None: back to the configured OTLP endpoint, if any),
    through a ``SimpleSpanProcessor`` (each span when it ends)."""
    global _exporter
    _exporter = exporter


def endpoint(config: ProjectConfig) -> str | None:
    """Where spans go: ``[tracing] endpoint``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` (None: tracing is off)."""
    return config.tracing.endpoint or os.environ.get(ENV) or None


def _attrs(values: dict[str, Any]) -> dict[str, Any]:
    return {f"lakewrap.{k}": v for k, v in values.items() if v is not None and v != ""}


class RunTrace:
    """The spans of one run."""

    def __init__(self, config: ProjectConfig, run_id: str, command: str) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        self.provider = TracerProvider(resource=Resource.create({"service.name": config.tracing.service_name}))
        if _exporter is not None:
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor

            self.provider.add_span_processor(SimpleSpanProcessor(_exporter))
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            url = endpoint(config) or ""
            url = url if url.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"
            self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
        self.tracer = self.provider.get_tracer("lakewrap")
        self.root = self.tracer.start_span(f"lakewrap {command}", attributes=_attrs(
            {"run_id": run_id, "command": command}))
        self.context = trace.set_span_in_context(self.root)

    def step(self, result: Result) -> None:
        """A finished step's span: it ended now and lasted ``result.seconds``."""
        from opentelemetry.trace import Status, StatusCode

        end = time.time_ns()
        start = max(end - int(result.seconds * 1e9), self.root.start_time or 0)  # type: ignore[attr-defined]
        name = result.target + (f" [{result.partition}]" if result.partition else "")
        span = self.tracer.start_span(name, context=self.context, start_time=start, attributes=_attrs({
            "model": result.target, "path": result.model, "partition": result.partition,
            "strategy": result.strategy, "status": result.status, "rows_inserted": result.rows_inserted,
            "rows_updated": result.rows_updated, "rows_deleted": result.rows_deleted,
            "snapshot_id": result.snapshot_id, "attempts": result.attempts, "sql_sha256": result.sql_sha256,
            "error_class": result.error_class, "error": result.error}))
        for failed in result.attempt_errors:
            span.add_event("attempt failed", attributes=_attrs({k: failed.get(k) for k in
                                                                ("attempt", "error_class", "error", "seconds")}))
        if result.status == "failed":
            span.set_status(Status(StatusCode.ERROR, result.error_class or "failed"))
        span.end(end_time=end)

    def finish(self, report: RunReport) -> None:
        from opentelemetry.trace import Status, StatusCode

        status = report.final_status()
        counts = report.counts()
        self.root.set_attributes(_attrs({"status": status, "steps": len(report.results) + report.earlier,
                                         **{f"steps_{k}": v for k, v in counts.items()}}))
        if status != "success":
            self.root.set_status(Status(StatusCode.ERROR, status))
        self.root.end()
        self.provider.force_flush()
        if _exporter is None:  # the run's own OTLP exporter; an exporter handed in outlives the run
            self.provider.shutdown()


def start(config: ProjectConfig, run_id: str, command: str) -> RunTrace | None:
    """The trace of a run starting now, or None when tracing is off."""
    if _exporter is None and endpoint(config) is None:
        return None
    try:
        return RunTrace(config, run_id, command)
    except ImportError:
        raise ConfigError("tracing is enabled ([tracing] endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) but "
                          "OpenTelemetry is not installed", location=Location("lakewrap.toml"),
                          hint="pip install 'lakewrap[otel]', or unset the endpoint") from None
