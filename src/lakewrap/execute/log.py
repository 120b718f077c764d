"""The statement log: every statement a materialization executes, with its bound parameters,
timing and outcome, appended to ``target/run/<run_id>/<target>[__<partition>].sql`` as it runs, so
a user can read exactly what ran even when the run failed or the process died."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.execute.binding import inline
from lakewrap.execute.locate import remember


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)[:120]


class StatementLog:
    """Appends to one file per materialization; every line passes through ``redact``."""

    def __init__(self, folder: Path, compiled: CompiledPlan, redact: Callable[[str], str]):
        folder.mkdir(parents=True, exist_ok=True)
        name = _safe(compiled.target) + (f"__{_safe(compiled.window.value)}" if compiled.window else "")
        self.path = folder / f"{name}.sql"
        self.redact = redact
        self.count = 0
        self.fh: IO[str] = self.path.open("a", encoding="utf-8")
        self._write(f"-- model {compiled.path} -> {compiled.target} ({compiled.strategy}), "
                    f"sql_sha256 {compiled.sql_sha256}, started {datetime.now(timezone.utc).isoformat()}\n")

    def _write(self, text: str) -> None:
        self.fh.write(self.redact(text))
        self.fh.flush()

    def note(self, text: str) -> None:
        self._write(f"-- note: {text}\n")

    def run(self, con: Any, statement: str, params: dict[str, Any] | None = None, role: str | None = None) -> Any:
        """Log, execute, and log the outcome of one statement."""
        self.count += 1
        head = f"-- [{self.count}]" + (f" {role}" if role else "")
        lines = [head]
        if params:
            lines.append("-- params: " + ", ".join(f"${k} = {v!r}" for k, v in params.items()))
        self._write("\n".join(lines) + "\n" + statement.rstrip().rstrip(";") + ";\n")
        start = time.perf_counter()
        text, bind = inline(statement, params)  # no pandas import (execute/binding.py)
        try:
            cursor = con.execute(text, bind) if bind else con.execute(text)
        except Exception as exc:
            # the error's position is in the text that ran, its role that of the statement (execute/locate.py)
            remember(exc, statement, role, executed=text)
            self._write(f"-- failed after {time.perf_counter() - start:.3f}s: {str(exc).splitlines()[0]}\n")
            raise
        self._write(f"-- ok {time.perf_counter() - start:.3f}s\n")
        return cursor

    def close(self, status: str, error: str | None) -> None:
        self._write(f"-- outcome: {status}" + (f": {error.splitlines()[0]}" if error else "") + "\n\n")
        self.fh.close()
