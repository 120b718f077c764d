"""Tracing: one trace per run with a span per step, through the SDK's InMemorySpanExporter; the same
spans over OTLP/HTTP to a receiver on 127.0.0.1 (decoded with opentelemetry-proto); and no import of
opentelemetry when tracing is off.

Expected row counts come from the model's own definition (three rows a day), the snapshot ids from
the lake's ``snapshots()``, read apart from lakewrap's report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from lakewrap import tracing
from lakewrap.runner import run_project
from queueproject import day, table_rows, wait_for, write_project

BAD = "-- materialized table\n-- test expression \"n < 0\"\nSELECT 1 AS n\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = write_project(tmp_path / "p")
    (root / "models" / "core" / "bad.sql").write_text(BAD)
    return root


@pytest.fixture
def exporter() -> Iterator[Any]:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    got = InMemorySpanExporter()
    tracing.use_exporter(got)
    try:
        yield got
    finally:
        tracing.use_exporter(None)


def test_one_trace_per_run_a_span_per_step(project: Path, exporter: Any) -> None:
    report = run_project(project, (), start=day(0), end=day(2))
    assert report.status == "failed"  # core.bad's test fails; core.ev's three partitions commit
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    assert [s.name for s in roots] == ["lakewrap run"]
    root = roots[0]
    assert root.attributes["lakewrap.run_id"] == report.run_id
    assert root.attributes["lakewrap.status"] == "failed" and root.status.status_code.name == "ERROR"
    steps = [s for s in spans if s.parent is not None]
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}  # one trace
    assert {s.parent.span_id for s in steps} == {root.context.span_id}
    assert sorted(s.name for s in steps) == ["core.bad", *(f"core.ev [{day(i)}]" for i in range(3))]
    snapshots = {r[0] for r in table_rows(project, "SELECT snapshot_id FROM lake.snapshots()")}
    for s in steps:
        a = s.attributes
        assert root.start_time <= s.start_time <= s.end_time <= root.end_time
        if a["lakewrap.model"] == "core.ev":
            assert a["lakewrap.status"] == "success" and a["lakewrap.rows_inserted"] == 3
            assert a["lakewrap.partition"] in {day(i) for i in range(3)}
            assert a["lakewrap.snapshot_id"] in snapshots and a["lakewrap.attempts"] == 1
            assert s.status.status_code.name == "UNSET"
        else:
            assert a["lakewrap.status"] == "failed" and s.status.status_code.name == "ERROR"
            assert "n < 0" in a["lakewrap.error"] and a["lakewrap.error_class"]
            assert "lakewrap.snapshot_id" not in a and "lakewrap.partition" not in a
    by_step = {(r.target, r.partition): r.snapshot_id for r in report.results}
    assert {(s.attributes["lakewrap.model"], s.attributes.get("lakewrap.partition")): s.attributes.get(
        "lakewrap.snapshot_id") for s in steps} == by_step
    run_project(project, ("core.ev",), partition=day(3))  # a second run: a second trace
    traces = {s.context.trace_id for s in exporter.get_finished_spans()}
    assert len(traces) == 2


class Receiver(BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.bodies.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_spans_go_over_otlp_http_and_nothing_is_imported_when_off(project: Path) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Receiver.bodies = []
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}"}
    try:
        done = subprocess.run([sys.executable, "-m", "lakewrap", "run", "core.ev", "--partition", day(0),
                               "--project", str(project)], env=env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode()
        wait_for("an OTLP request", lambda: Receiver.bodies, timeout=30)  # flushed before the process exits
    finally:
        server.shutdown()
    names = []
    for path, body in Receiver.bodies:
        assert path == "/v1/traces"
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            assert any(a.key == "service.name" and a.value.string_value == "lakewrap" for a in rs.resource.attributes)
            names += [s.name for ss in rs.scope_spans for s in ss.spans]
    assert sorted(names) == [f"core.ev [{day(0)}]", "lakewrap run"]
    # tracing off: a run imports no opentelemetry module
    code = ("import sys; from pathlib import Path; from lakewrap.runner import run_project; "
            f"r = run_project(Path({str(project)!r}), ('core.ev',), partition={day(1)!r}); "
            "assert r.status == 'success', r.status; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT")
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert off.returncode == 0, off.stderr.decode()
    assert off.stdout.decode().strip() == "[]"


def test_endpoint_precedence_and_a_missing_extra(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lakewrap.config import load_config

    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert tracing.endpoint(load_config(project)) is None and tracing.start(load_config(project), "r", "run") is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    assert tracing.endpoint(load_config(project)) == "http://127.0.0.1:1"
    (project / "lakewrap.toml").write_text('[tracing]\nendpoint = "http://127.0.0.1:2"\nservice_name = "etl"\n')
    assert tracing.endpoint(load_config(project)) == "http://127.0.0.1:2"  # the file wins
    (project / "lakewrap.toml").write_text('[tracing]\nendpoint = "http://user:pw@127.0.0.1:2"\n')
    with pytest.raises(Exception, match="without credentials"):
        load_config(project)
    # without the extra (its package made unimportable): refused before anything runs, nothing written
    (project / "lakewrap.toml").write_text('[tracing]\nendpoint = "http://127.0.0.1:2"\n')
    code = ("import sys; sys.modules['opentelemetry'] = None; from pathlib import Path; "
            "from lakewrap.runner import run_project; "
            f"run_project(Path({str(project)!r}), ('core.ev',), partition='2024-01-01')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode != 0
    assert b"OpenTelemetry is not installed" in done.stderr and b"lakewrap[otel]" in done.stderr
    assert not (project / ".lakewrap").exists()
