"""`lakewrap serve` in a subprocess on 127.0.0.1 for the API and browser tests (tests/test_api.py,
tests/test_api_browser.py): examples/shop copied, seeded and run, the server started on a free port
and waited for, stopped with SIGTERM (which also stops the worker it started)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from helpers import run
from servers import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
FINAL = ("succeeded", "failed", "cancelled")


def shop(base: Path, *, days: tuple[str, str] | None = ("2024-01-01", "2024-01-02"),
         edit: Callable[[Path], None] | None = None) -> Path:
    """examples/shop copied under ``base`` (then ``edit``-ed), seeded and (``days``) run for that range."""
    root = base / "shop"
    shutil.copytree(ROOT / "examples" / "shop", root, ignore=shutil.ignore_patterns("target", ".lakewrap"))
    if edit is not None:
        edit(root)
    steps = [["seed"]] + ([["run", "--start", days[0], "--end", days[1]]] if days else [])
    for args in steps:
        code, out, err = run(*args, "--project", str(root))
        assert code == 0, out + err
    return root


@dataclass
class Served:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serving(root: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``lakewrap serve --port <free> --project root *args`` until the block ends."""
    port = free_port()
    log = root.parent / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lakewrap", "serve", "--port", str(port), "--project",
                                 str(root), *args], env={**os.environ, **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT)
    served = Served(f"http://127.0.0.1:{port}", proc, log)
    try:
        assert wait_for_port(port, proc, 60), served.output()
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_job(client: httpx.Client, job_id: int, timeout: float = 90) -> dict[str, Any]:
    """Poll ``GET /jobs/{id}`` until the job is final (the job's row is the event)."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        if job["status"] in FINAL or time.monotonic() > deadline:
            return job
        time.sleep(0.1)
