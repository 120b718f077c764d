"""Hooks: the project's scripts run around a step (``-- pre_run`` / ``-- post_run`` /
``-- on_failure`` on a model) and around a run (``[hooks]`` in ``lakewrap.toml``); ``docs/hooks.md``.

A hook is a Python file defining ``main(context)``, run by this interpreter in a child process
(it cannot break the runner), or an executable. It gets the context as JSON on stdin and as
``LAKEWRAP_*`` environment variables, runs in the project folder with a timeout (its process
group killed at the end of it), and its output (stdout and stderr, redacted) goes to the run log.
A ``pre_run`` failure fails the step before anything is written (and the step's ``on_failure``
hooks run); a ``post_run`` or ``on_failure`` failure is a warning: it never undoes a commit nor
replaces the step's error. The child's environment is the user's own minus the credential
variables lakewrap reads (``[hooks] pass_env`` lists those a hook may have).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lakewrap import scriptfiles
from lakewrap.config_hooks import DEFAULT_TIMEOUT, allowed
from lakewrap.errors import ConfigError, LakewrapError, Location, ModelError
from lakewrap.redact import SECRET_ENV

MAX_LINES = 200  # of a hook's output kept for the run log and the JSON report
MAX_BYTES = 256 * 1024

# The child process of a Python hook: load the file as a module, call main(context) with the JSON
# read from stdin. An exception is printed (the traceback goes to the run log) and exits 1.
SHIM = """\
import importlib.util, json, os, sys
path = sys.argv[1]
sys.path.insert(0, os.path.dirname(path))
spec = importlib.util.spec_from_file_location("lakewrap_hook", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
main = getattr(module, "main", None)
if not callable(main):
    sys.exit(f"{path}: defines no main(context) function")
main(json.load(sys.stdin))
"""


class HookError(LakewrapError):
    """A ``pre_run`` or ``on_run_start`` hook failed, timed out or could not start: nothing was written."""


@dataclass
class HookRun:
    """One hook's run: plain data, JSON-ready (``Result.hooks``, ``RunReport.hooks``)."""

    event: str
    path: str
    status: str  # ok | failed | timeout | error (it could not start)
    exit_code: int | None = None
    seconds: float = 0.0
    output: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def summary(self) -> str:
        """``post_run hook hooks/notify.py failed (exit 1): <its last output line>``."""
        last = next((line for line in reversed(self.output) if line.strip()), None)
        how = {"failed": f"failed (exit {self.exit_code})", "timeout": f"timed out after {self.seconds:.1f}s (killed)",
               "error": "could not run"}.get(self.status, self.status)
        return f"{self.event} hook {self.path} {how}" + (f": {self.error or last}" if (self.error or last) else "")


def environment(context: dict[str, Any], pass_env: tuple[str, ...] = ()) -> dict[str, str]:
    """The child's environment: this process's, minus the credential variables lakewrap reads (unless
    listed in ``pass_env``), plus the context as ``LAKEWRAP_*`` (a null value is left out)."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV or k in pass_env}
    part = context.get("partition") or {}
    values = {"EVENT": context.get("event"), "RUN_ID": context.get("run_id"), "COMMAND": context.get("command"),
              "PROJECT_DIR": context.get("project_dir"), "MODEL": context.get("model"),
              "TARGET": context.get("target"), "PARTITION_VALUE": part.get("value"),
              "PARTITION_START": part.get("start"), "PARTITION_END": part.get("end"),
              "STATUS": context.get("status"), "ERROR": context.get("error"),
              "ROWS_INSERTED": context.get("rows_inserted"), "ROWS_UPDATED": context.get("rows_updated"),
              "ROWS_DELETED": context.get("rows_deleted"), "SNAPSHOT_ID": context.get("snapshot_id")}
    for key, value in values.items():
        env.pop(f"LAKEWRAP_{key}", None)  # never one of an outer run's
        if value is not None:
            env[f"LAKEWRAP_{key}"] = str(value)
    return env


def run_hook(root: Path, rel: str, event: str, context: dict[str, Any], *, timeout: float,
             pass_env: tuple[str, ...], redact: Callable[[str], str]) -> HookRun:
    """Run one hook to its end or its timeout; never raises."""
    started = time.perf_counter()
    out = HookRun(event=event, path=rel, status="error")
    context = {**context, "event": event, "project_dir": str(root)}
    try:
        path = scriptfiles.resolve(root, rel)
        argv = [sys.executable, "-c", SHIM, str(path)] if path.suffix == ".py" else [str(path)]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                cwd=root, env=environment(context, pass_env), start_new_session=True)
    except (OSError, ValueError) as exc:
        out.error = redact(str(exc))
        return out
    payload = json.dumps(context, default=str).encode()
    try:
        data, _ = proc.communicate(payload, timeout=timeout)
        out.status = "ok" if proc.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        _kill(proc)
        data, _ = proc.communicate()
        out.status = "timeout"
    out.exit_code = proc.returncode
    out.seconds = round(time.perf_counter() - started, 3)
    out.output = _lines(data or b"", redact)
    return out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """The hook and every process it started (its own session's group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _lines(data: bytes, redact: Callable[[str], str]) -> list[str]:
    text = data[:MAX_BYTES].decode("utf-8", "replace")
    lines = [redact(line) for line in text.splitlines()]
    cut = len(lines) > MAX_LINES or len(data) > MAX_BYTES
    return lines[:MAX_LINES] + (["... (output cut)"] if cut else [])


# --- the project's rules --------------------------------------------------------------------------


def _config(root: Path) -> Any:
    from lakewrap.config import load_config

    return load_config(root)


def refuse_unlisted(root: Path, rel: str, what: str, where: Location) -> None:
    """A script named in a model file must lie in a folder ``[security] scripts`` lists."""
    folders = _config(root).security.scripts
    if not allowed(rel, folders):
        listed = ", ".join(f'"{f}"' for f in folders)
        first = rel.split("/")[0] if "/" in rel else "."
        raise ModelError(f"{what}: `{rel}` is not in a folder whose scripts models may run"
                         + (f" ([security] scripts = [{listed}])" if folders else ""), location=where,
                         hint=f"add `scripts = [\"{first}\"]` to [security] in lakewrap.toml: the scripts there run "
                         "as you, with your files (docs/security.md, \"Scripts\")")


def check_config(root: Path, config: Any) -> None:
    """Every ``[hooks]`` script exists and can run: a :class:`ConfigError` on the key's line."""
    from lakewrap.config_errors import CONFIG_FILE, find_line

    hooks = config.hooks
    named = [(key, getattr(hooks, key)) for key in ("on_run_start", "on_run_end", "on_failure")]
    text = (root / CONFIG_FILE).read_text(encoding="utf-8", errors="replace") if any(r for _, r in named) else ""
    for key, rel in named:
        if rel is None:
            continue
        where = Location(CONFIG_FILE, find_line(text, key))
        try:
            path = scriptfiles.resolve(root, rel)
        except FileNotFoundError:
            raise ConfigError(f"hooks.{key}: no such file `{rel}`", location=where,
                              hint=scriptfiles.missing_hint(root, rel, "a Python file with `main(context)`, "
                                                            "or an executable")) from None
        except ValueError as exc:
            raise ConfigError(f"hooks.{key}: {exc}", location=where) from None
        if not scriptfiles.runnable(path):
            raise ConfigError(f"hooks.{key}: `{rel}` is neither a Python file (.py) nor executable", location=where,
                              hint=f"`chmod +x {rel}`, or write a .py file with `def main(context): ...`")


# --- around a step --------------------------------------------------------------------------------


def _window(window: Any) -> dict[str, Any] | None:
    if window is None:
        return None
    return {"value": window.value, "start": window.start, "end": window.end}


def step_context(result: Any, run_id: str | None, window: Any) -> dict[str, Any]:
    """What a step's hooks are told: the run, the model, the partition and, after the step, its outcome."""
    return {"run_id": run_id, "command": None, "model": result.model, "target": result.target,
            "partition": _window(window) if window is not None else (
                {"value": result.partition, "start": None, "end": None} if result.partition else None),
            "status": result.status, "error": result.error, "rows_inserted": result.rows_inserted,
            "rows_updated": result.rows_updated, "rows_deleted": result.rows_deleted,
            "snapshot_id": result.snapshot_id, "attempts": result.attempts, "sql_sha256": result.sql_sha256 or None}


def around_step(lake: Any, spec: Any, run_id: str | None, window: Any, step: Callable[[], Any]) -> Any:
    """``pre_run`` hooks, then ``step()`` unless one failed, then ``post_run`` (success) or
    ``on_failure`` hooks; the step's :class:`~lakewrap.execute.executor.Result` with each hook's run."""
    from lakewrap.execute.executor import Result

    root = Path(lake.root)
    pending = Result(model=spec.path, target=str(spec.target), partition=window.value if window else None,
                     strategy=spec.strategy.kind, status="failed")
    try:
        for hook in spec.hooks:
            _usable(root, spec, hook)
    except LakewrapError as exc:
        pending.fail(exc, lake.redact)
        pending.error_class = type(exc).__name__
        return pending  # a hook that cannot run: nothing runs, not even on_failure
    runs: list[HookRun] = []
    before = {**step_context(pending, run_id, window), "status": "running", "error": None}
    for hook in (h for h in spec.hooks if h.event == "pre_run"):
        done = _run(root, lake, hook, before, runs)
        if not done.ok:
            err = HookError(f"{done.summary()}; the step did not run, nothing was written",
                            location=_at(root, spec, hook),
                            hint="fix the hook or what it checks; its output is in the run log (lakewrap_log)")
            pending.fail(err, lake.redact)
            pending.error_class = "HookError"
            return after_step(lake, spec, pending, run_id, window, runs)
    return after_step(lake, spec, step(), run_id, window, runs)


def after_step(lake: Any, spec: Any, result: Any, run_id: str | None, window: Any,
               runs: list[HookRun] | None = None) -> Any:
    """The ``post_run`` (a success) or ``on_failure`` (a failure) hooks of a finished step."""
    runs = runs if runs is not None else []
    event = "post_run" if result.status in ("success", "unchanged") else "on_failure" if result.status == "failed" \
        else None
    context = step_context(result, run_id, window)
    for hook in (h for h in spec.hooks if h.event == event):
        try:
            _usable(Path(lake.root), spec, hook)  # [security] scripts holds on every path, this one too
        except LakewrapError as exc:
            result.warnings.append(lake.redact(f"{hook.event} hook {hook.path} not run: {exc.message}"))
            continue
        done = _run(Path(lake.root), lake, hook, context, runs)
        if not done.ok:
            result.warnings.append(done.summary() + ("; the commit stands" if event == "post_run"
                                                     else "; the step's own error is above"))
    result.hooks.extend(asdict(r) for r in runs)
    return result


def _at(root: Path, spec: Any, hook: Any) -> Location:
    """The hook's path on its line of the model file (the line shown under the error)."""
    try:
        snippet: str | None = (root / spec.path).read_text(encoding="utf-8").splitlines()[hook.line - 1]
    except (OSError, UnicodeDecodeError, IndexError):
        snippet = None
    return Location(spec.path, hook.line, hook.column, snippet)


def _usable(root: Path, spec: Any, hook: Any) -> None:
    where = _at(root, spec, hook)
    what = f"`-- {hook.event} {hook.path}`"
    refuse_unlisted(root, hook.path, what, where)
    try:
        path = scriptfiles.resolve(root, hook.path)
    except FileNotFoundError:
        raise ModelError(f"{what}: no such file", location=where,
                         hint=scriptfiles.missing_hint(root, hook.path, "a Python file with `main(context)`")) from None
    except ValueError as exc:
        raise ModelError(f"{what}: {exc}", location=where) from None
    if not scriptfiles.runnable(path):
        raise ModelError(f"{what}: neither a Python file (.py) nor executable", location=where,
                         hint=f"`chmod +x {hook.path}`, or write a .py file with `def main(context): ...`")


def _run(root: Path, lake: Any, hook: Any, context: dict[str, Any], runs: list[HookRun]) -> HookRun:
    hooks = _config(root).hooks
    done = run_hook(root, hook.path, hook.event, context, timeout=hook.timeout or hooks.timeout or DEFAULT_TIMEOUT,
                    pass_env=hooks.pass_env, redact=lake.redact)
    runs.append(done)
    return done


# --- around a run ---------------------------------------------------------------------------------


class RunHooks:
    """``[hooks]`` of one ``run`` / ``backfill`` / ``resume``: ``on_run_start`` before the first step,
    ``on_failure`` and ``on_run_end`` after the last, each once; their output into the run log."""

    def __init__(self, root: Path, config: Any, run_id: str, command: str, redact: Callable[[str], str],
                 log: Any) -> None:
        self.root, self.hooks, self.run_id, self.command = root, config.hooks, run_id, command
        self.redact, self.log = redact, log

    def _context(self, report: Any, status: str) -> dict[str, Any]:
        results = report.results
        failed = next((r for r in results if r.status == "failed"), None)
        return {"run_id": self.run_id, "command": self.command, "model": None, "target": None, "partition": None,
                "status": status, "error": failed.error if failed is not None else None,
                "rows_inserted": sum(r.rows_inserted for r in results),
                "rows_updated": sum(r.rows_updated for r in results),
                "rows_deleted": sum(r.rows_deleted for r in results), "snapshot_id": None,
                "counts": report.counts(), "steps": len(results) + report.earlier}

    def _fire(self, key: str, report: Any, status: str) -> HookRun | None:
        rel = getattr(self.hooks, key)
        if rel is None:
            return None
        done = run_hook(self.root, rel, key, self._context(report, status), timeout=self.hooks.timeout,
                        pass_env=self.hooks.pass_env, redact=self.redact)
        report.hooks.append(asdict(done))
        for line in done.output:
            self.log.line("info", None, None, f"{key} {rel}: {line}")
        if done.ok:
            self.log.line("info", None, None, f"{key} hook {rel}: ok in {done.seconds:.2f}s")
        else:
            report.warnings.append(done.summary())
            self.log.line("error" if key == "on_run_start" else "warning", None, None, done.summary())
        return done

    def start(self, report: Any) -> bool:
        """``on_run_start``; False when it failed (the run then runs no step)."""
        done = self._fire("on_run_start", report, "running")
        return done is None or done.ok

    def end(self, report: Any, status: str) -> None:
        """``on_failure`` (a run that did not succeed), then ``on_run_end``."""
        if status != "success":
            self._fire("on_failure", report, status)
        self._fire("on_run_end", report, status)
