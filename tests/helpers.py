"""Small pieces several test files share: the CLI run in-process (``run``), a distribution installed
by hand (a dist-info folder on a site folder, as an installed package leaves it) and a thread runner
that cancels a run with a real SIGINT."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from lakewrap.cli import main
from lakewrap.execute.lake import Lake
from lakewrap.workers import Done, Task, ThreadRunner


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def execute(root: Path, *sql: str) -> None:
    """Run ``sql`` on the project's lake, each statement in its own transaction."""
    lake = Lake.open(root)
    con = lake.connect()
    try:
        for s in sql:
            con.execute(s)
    finally:
        lake.close(con)


def install_dist(site: Path, module: str, group: str, entry: str, source: str | None = None) -> Path:
    """A distribution named after ``module`` (``lakewrap_x`` installs ``lakewrap-x`` 0.1) in ``site``,
    whose entry point ``entry`` (``name = module:object``) is in ``group``; ``source`` is written as
    ``module``'s file (None: the module is importable from elsewhere). Returns ``site``."""
    dist = site / f"{module}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
    if source is not None:
        (site / f"{module}.py").write_text(source)
    return site


def site_env(site: Path, **extra: str) -> dict[str, str]:
    """This process's environment with ``site`` first on ``PYTHONPATH`` (and ``extra`` set)."""
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


class InterruptAfter(ThreadRunner):
    """The real thread runner; when ``n`` steps have finished it sends this process a real SIGINT.
    One commit per step (no group commit: tests/test_group_commit.py signals inside a group)."""

    groups = False

    def __init__(self, n: int) -> None:
        super().__init__(1)
        self.n, self.seen = n, 0

    def _run(self, task: Task, done: Done) -> None:
        def counted(t: Task, r: Any) -> None:
            done(t, r)
            self.seen += 1
            if self.seen == self.n:
                os.kill(os.getpid(), signal.SIGINT)

        super()._run(task, counted)
