"""The HTTP API of ``lakewrap serve`` (docs/api.md): a FastAPI app over the job queue
(:mod:`lakewrap.jobs`), the run log and the models' status (:mod:`lakewrap.service_reads`), and the
operations page at ``/ui`` (:mod:`lakewrap.service_ui`).

* With a token (``LAKEWRAP_API_TOKEN``), every request but ``/healthz`` and the page's static files
  needs ``Authorization: Bearer <token>`` (compared with :func:`hmac.compare_digest`), else 401.
* Every answer is JSON through lakewrap's redactor (:mod:`lakewrap.redact`; the token is one of the
  secrets). Errors are ``{"error": ..., "hint": ...}``: 400 for a request lakewrap refuses (unknown
  selector, bad partition), 404 for an unknown job, run, model or path, 422 for a body or query
  that does not validate, 503 while the catalog is held by another process, and 500 with the
  exception's redacted first line for anything else (never a traceback).

Only ``lakewrap serve`` imports this module: ``compile`` and the other commands never load FastAPI.
"""

from __future__ import annotations

import hmac
import logging
import os
import traceback
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from lakewrap import service_reads as reads
from lakewrap.errors import LakewrapError, PlanError, SelectionError

TOKEN_ENV = "LAKEWRAP_API_TOKEN"
OPEN_PATHS = ("/healthz", "/ui")  # no token: the liveness probe, the page's static files (no data)
log = logging.getLogger("lakewrap.serve")


class RunRequest(BaseModel):
    """``POST /runs``: a selection and one partition or a range (neither: what `lakewrap run` runs)."""

    model_config = ConfigDict(extra="forbid")
    select: list[str] = Field(min_length=1, description="selectors, as given to `lakewrap run`")
    partition: str | None = Field(default=None, description="one partition value")
    start: str | None = Field(default=None, description="first partition of a range (inclusive)")
    end: str | None = Field(default=None, description="last partition of a range (inclusive)")


class Redactor:
    """The one redactor of every response: secrets (the token too) masked, the project's path made relative."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def text(self, value: str) -> str:
        from lakewrap.redact import redact

        return redact(value, extra=[os.environ.get(TOKEN_ENV)], roots=[self.root, self.root.resolve()])

    def value(self, value: Any) -> Any:
        from lakewrap.redact import redact_value

        return redact_value(value, self.text)


def error(status: int, message: str, hint: str | None, redactor: Redactor, **extra: Any) -> JSONResponse:
    body = {"error": message, "hint": hint, **extra}
    return JSONResponse(redactor.value(body), status_code=status)


def lakewrap_status(err: LakewrapError) -> int:
    if isinstance(err, reads.Busy):
        return 503
    if isinstance(err, (SelectionError, PlanError)):
        return 400
    return 400 if err.exit_code == 2 else 500


NOW = Query(None, description="the instant to measure gaps and ages at, ISO 8601 (default: the clock); "
            "`lakewrap freshness --now`")


def instant(text: str | None) -> datetime | None:
    """The ``now`` query parameter as an aware instant (naive: UTC); a 400 when it is no time."""
    from lakewrap.freshness import as_instant

    try:
        return as_instant(text)
    except ValueError:
        raise PlanError(f"now: `{text}` is not an ISO 8601 time", hint="write e.g. 2024-06-01T00:00:00Z") from None


def create_app(root: Path, *, env: str | None = None, token: str | None = None,
               ui: bool = True, shared_catalog: bool = False) -> FastAPI:
    """The app for the project at ``root`` (environment ``env``; ``token``: default ``LAKEWRAP_API_TOKEN``).
    ``shared_catalog``: the catalog is one many processes use (PostgreSQL), so the run-log reads keep
    a read-only session open (:func:`lakewrap.service_reads.keep_open`)."""
    from lakewrap import __version__
    from lakewrap.config_env import ENV_VAR
    from lakewrap.jobs import open_queue

    if env is not None:  # the run log and status reads pick the environment up from here
        os.environ[ENV_VAR] = env
    root = root.resolve()
    if shared_catalog:
        reads.keep_open(root)
    secret = token if token is not None else os.environ.get(TOKEN_ENV) or None
    redactor = Redactor(root)
    app = FastAPI(title="lakewrap", version=__version__, docs_url=None, redoc_url=None,
                  description="Runs, jobs and models of one lakewrap project (docs/api.md).")

    def respond(value: Any, status: int = 200) -> JSONResponse:
        return JSONResponse(redactor.value(value), status_code=status)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        if secret is not None and not any(path == p or path.startswith(p + "/") for p in OPEN_PATHS):
            given = request.headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), secret.encode()):
                response: Response = error(401, "missing or wrong API token", "send `Authorization: Bearer <token>` "
                                           f"with the token in {TOKEN_ENV} of the server", redactor)
                response.headers["WWW-Authenticate"] = "Bearer"
                return response
        try:
            return await call_next(request)
        except Exception as exc:  # a bug: the answer names it, the server's log has its (redacted) traceback
            log.error("%s", redactor.text("".join(traceback.format_exception(exc))))
            first = (str(exc).strip().splitlines() or [""])[0]
            return error(500, redactor.text(f"internal error: {type(exc).__name__}: {first}".rstrip(": ")),
                         "see the server's log; this is a bug in lakewrap, please report it", redactor)

    @app.exception_handler(LakewrapError)
    async def lakewrap_error(request: Request, exc: LakewrapError) -> JSONResponse:
        return error(lakewrap_status(exc), exc.render().splitlines()[0] if exc.location else exc.message,
                     exc.hint, redactor, kind=type(exc).__name__)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        first = problems[0] if problems else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return error(422, f"{where}: {first.get('msg', 'invalid')}", "see the request's schema in /openapi.json",
                     redactor, field=where)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        hints = {404: "see /openapi.json for the endpoints", 405: "see /openapi.json for the methods"}
        response = error(exc.status_code, str(exc.detail), hints.get(exc.status_code), redactor)
        for k, v in (exc.headers or {}).items():
            response.headers[k] = v
        return response

    def not_found(what: str, hint: str) -> JSONResponse:
        return error(404, what, hint, redactor)

    @app.get("/healthz")
    def healthz() -> JSONResponse:
        """Liveness: the process answers (no token needed, nothing opened)."""
        return respond({"ok": True, "version": __version__})

    @app.post("/runs", status_code=202)
    def post_run(body: RunRequest) -> JSONResponse:
        """Queue a run of a selection for one partition or a range; 202 with the job."""
        if body.partition is not None and (body.start is not None or body.end is not None):
            raise PlanError("give `partition` or `start` and `end`, not both",
                            hint='{"select": [...], "partition": "2024-01-02"} or {"select": [...], '
                            '"start": "2024-01-01", "end": "2024-01-05"}')
        with open_queue(root, env=env) as queue:
            job = queue.enqueue(body.select, partition=body.partition, start=body.start, end=body.end,
                                requested_by="api")
        return respond({"job_id": job.id, "status": job.status, "job": job.to_json()}, 202)

    @app.get("/jobs")
    def list_jobs(status: str | None = None, limit: int = Query(50, ge=1, le=1000)) -> JSONResponse:
        """The newest jobs (of a status), newest first."""
        with open_queue(root, env=env) as queue:
            return respond({"jobs": [j.to_json() for j in queue.list(status=status, limit=limit)]})

    @app.get("/jobs/{job_id}")
    def get_job(job_id: int) -> JSONResponse:
        """One job: its status and, once a worker started it, its run id."""
        with open_queue(root, env=env) as queue:
            job = queue.get(job_id)
        if job is None:
            return not_found(f"no job {job_id}", "list the jobs with GET /jobs")
        return respond(job.to_json())

    @app.get("/runs")
    def list_runs(status: str | None = None, limit: int = Query(50, ge=1, le=1000)) -> JSONResponse:
        """The newest runs of the run log (of a status), newest first."""
        if status is not None and status not in reads.RUN_STATUSES:
            from lakewrap.errors import choices_hint

            raise PlanError(f"unknown run status `{status}`", hint=choices_hint(status, reads.RUN_STATUSES, "status"))
        return respond({"runs": reads.list_runs(root, status=status, limit=limit)})

    @app.get("/runs/{run_id}")
    def get_run(run_id: str) -> JSONResponse:
        """A run of the run log with its steps (and each step's attempts)."""
        run = reads.get_run(root, run_id)
        if run is None:
            return not_found(f"no run {run_id} in the run log", "list the runs with GET /runs")
        return respond(run)

    @app.get("/runs/{run_id}/logs")
    def get_logs(run_id: str) -> JSONResponse:
        """The run's log lines, oldest first."""
        lines = reads.run_logs(root, run_id)
        if lines is None:
            return not_found(f"no run {run_id} in the run log", "list the runs with GET /runs")
        return respond({"run_id": run_id, "lines": lines})

    @app.post("/runs/{run_id}/resume", status_code=202)
    def resume(run_id: str) -> JSONResponse:
        """Queue a resume of a run: a new job of kind `resume`."""
        if reads.get_run(root, run_id) is None:
            return not_found(f"no run {run_id} in the run log", "list the runs with GET /runs")
        with open_queue(root, env=env) as queue:
            job = queue.enqueue((), kind="resume", resume_of=run_id, requested_by="api")
        return respond({"job_id": job.id, "status": job.status, "job": job.to_json()}, 202)

    @app.get("/models")
    def get_models(now: str | None = NOW) -> JSONResponse:
        """Every model: partitions, gaps, stale partitions and failures counted, freshness, the last run."""
        return respond({"models": reads.models(root, instant(now))})

    @app.get("/models/{target}")
    def get_model(target: str, now: str | None = NOW) -> JSONResponse:
        """One model: its partitions, gaps, stale partitions (with why), failures, freshness, calendar
        strip, last run."""
        at = instant(now)
        try:
            return respond(reads.model(root, target, at))
        except SelectionError as exc:
            return error(404, exc.message, exc.hint, redactor, kind=type(exc).__name__)

    @app.get("/freshness")
    def get_freshness(now: str | None = NOW) -> JSONResponse:
        """`lakewrap freshness --format json`: each model with a policy and each [sources] table, and
        `breached` (what makes the command exit 1)."""
        return respond(reads.freshness(root, instant(now)))

    if ui:
        from lakewrap.service_ui import mount

        mount(app)
    return app
