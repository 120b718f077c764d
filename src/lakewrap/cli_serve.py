"""``lakewrap serve``: the HTTP API and the operations page (:mod:`lakewrap.service_app`) on uvicorn.

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``).
Without ``LAKEWRAP_API_TOKEN`` it binds only a loopback address. When the project's queue is drained
by one worker at a time (a DuckDB-file or SQLite catalog, which one process owns), it also starts
``lakewrap worker`` as a child process (``--no-worker``: don't); with PostgreSQL, API and workers
are separate processes (docs/deployment.md).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from lakewrap.cli_io import _say, handled, project_option

DEFAULT_WAIT = "10"  # seconds a read waits for a catalog the worker holds (LAKEWRAP_WAIT overrides)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def worker_argv(project: Path) -> list[str]:
    return [sys.executable, "-m", "lakewrap", "worker", "--project", str(project)]


def _exit_on_term(signum: int, frame: Any) -> None:
    sys.exit(0)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; a non-loopback one needs LAKEWRAP_API_TOKEN.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--worker/--no-worker", "with_worker", default=True, show_default=True,
              help="Start `lakewrap worker` beside the API when the catalog has one owner (DuckDB file, SQLite).")
@click.option("--wait", type=click.FloatRange(min=0, max=86400), default=None, metavar="SECONDS",
              help=f"How long a read waits for a catalog the worker holds (default {DEFAULT_WAIT}; LAKEWRAP_WAIT).")
@project_option
@handled
def serve_cmd(host: str, port: int, with_worker: bool, wait: float | None, project: Path) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json) and the operations page (/ui)."""
    from lakewrap.execute.lockwait import WAIT_ENV
    from lakewrap.jobs import open_queue
    from lakewrap.project import require_project
    from lakewrap.service_app import TOKEN_ENV

    if not os.environ.get(TOKEN_ENV) and not is_loopback(host):
        _say("error:", f"refusing to serve on {host} without a token: anyone who reaches it could run models",
             "bold red", stderr=True)
        _say("hint:", f"set {TOKEN_ENV} (clients send `Authorization: Bearer <token>`), or bind 127.0.0.1",
             "yellow", stderr=True)
        sys.exit(2)
    root = require_project(project).resolve()
    # the reads of this process wait for a catalog the worker holds (set only once serve starts:
    # a refused serve leaves the environment of its caller as it was)
    if wait is not None:
        os.environ[WAIT_ENV] = f"{wait:g}"
    else:
        os.environ.setdefault(WAIT_ENV, DEFAULT_WAIT)
    with open_queue(root) as queue:  # refuses a broken lakewrap.toml before anything listens
        exclusive, where = queue.exclusive, queue.where
    import uvicorn

    from lakewrap.service_app import create_app

    app = create_app(root, shared_catalog=not exclusive)
    child = None
    if with_worker and exclusive:
        child = subprocess.Popen(worker_argv(root))
        _say("worker:", f"started (pid {child.pid}) on {where}", "cyan", stderr=True)
    shown = f"[{host}]" if ":" in host else host
    _say("serving:", f"http://{shown}:{port}/ (operations page /ui, OpenAPI /openapi.json); Ctrl-C stops",
         "green", stderr=True)
    # uvicorn re-raises a SIGTERM it caught once it has shut down: this handler turns it into SystemExit,
    # so the worker below is stopped before the process ends
    signal.signal(signal.SIGTERM, _exit_on_term)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        if child is not None and child.poll() is None:
            child.terminate()  # SIGTERM: the worker finishes or hands back its job
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def register(group: click.Group) -> None:
    group.add_command(serve_cmd)
