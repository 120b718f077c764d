"""Running script tests: ``-- test script checks/<file>.py[:<function>] [key=value ...]`` and the test
kinds a package registers with a Python function (``registry.script_test``, ``docs/tests.md``).

The compiled ``test`` statement is the relation the test covers (the window written, or the whole
table), a DuckDB relation on the materialization's own connection, inside its transaction before
COMMIT, like every data test. The function gets it first, then each ``key=value`` as a keyword
argument (text), and ``ctx`` (:class:`ScriptContext`) when it names that parameter. It returns the
failing rows (a DuckDB relation, a pyarrow table, a pandas or polars DataFrame, a list) or their
count; an ``error`` failure rolls the write back like a SQL test's. The function runs in this
process (it needs the open transaction): it is trusted code, like the hooks (``docs/security.md``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import threading
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ExecutionError, Location
from lakewrap.redact import redact_value

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledStatement
    from lakewrap.execute.log import StatementLog

Failing = tuple[int, list[str], list[dict[str, Any]]]  # count, columns, up to 20 rows (redacted)

SAMPLE_ROWS = 20
_MODULES: dict[tuple[str, str], Any] = {}  # (file, sha256) -> its module, loaded once per process
_LOADING = threading.Lock()


class ScriptTestError(ExecutionError):
    """A script test's function could not be loaded, raised, or returned something that is no answer."""


@dataclass(frozen=True)
class ScriptContext:
    """What a script test's function gets as ``ctx`` when it names that parameter."""

    con: Any  # the materialization's connection (its open transaction)
    model: str  # the model file
    line: int  # the ``-- test`` line
    params: dict[str, Any]  # the statement's bound parameters (``partition_start``, ``partition_end``)
    args: dict[str, str]  # the ``key=value`` arguments


class _Relations:
    """What the statement log runs a script test's statement on: it makes the relation, lazily."""

    def __init__(self, con: Any) -> None:
        self.con = con

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        return self.con.sql(sql, params=params) if params else self.con.sql(sql)


def run_script(con: Any, st: CompiledStatement, log: StatementLog, path: str, lake: Any) -> Failing:
    """Run one script test: the relation of ``st`` handed to its function, the answer read as the
    failing rows or their count (a sample of up to 20 rows, redacted)."""
    info, script = st.test, st.test.script if st.test is not None else None
    assert info is not None and script is not None
    where = Location(path, info.line)
    fn = _function(Path(lake.root) if lake is not None else None, script, where)
    params = {k: v.python() for k, v in st.params.items()}
    lock = lake.statement_lock if lake is not None and getattr(lake, "is_shared", False) else nullcontext()
    with lock:  # one caller at a time on an instance the run's threads share (the function runs queries)
        relation = log.run(_Relations(con), st.sql, params or None, role="test")
        kwargs: dict[str, Any] = dict(script.params)
        if _takes_ctx(fn):
            kwargs["ctx"] = ScriptContext(con=con, model=path, line=info.line, params=params, args=dict(script.params))
        shown = f"{script.path}:{script.function}()" if script.path else f"{script.function}()"
        try:
            answer = fn(relation, **kwargs)
            count, columns, sample = _failing(answer, shown)
        except ScriptTestError as exc:
            raise ScriptTestError(f"test `{info.name}`: {exc.message}", location=where, hint=exc.hint) from None
        except Exception as exc:
            raise ScriptTestError(f"test `{info.name}`: {shown} raised {type(exc).__name__}: {exc}"
                                  + _frame(exc, script.path), location=where,
                                  hint="fix the function; nothing was written") from None
    log.note(f"script test {info.name}: {count} failing rows")
    return count, [log.redact(c) for c in columns], redact_value(sample, log.redact)


def _takes_ctx(fn: Callable[..., Any]) -> bool:
    try:
        return "ctx" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _frame(exc: BaseException, file: str | None) -> str:
    """`` (checks/x.py line 7)``: where in the script the exception came from."""
    if file is None:
        return ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(file)]
    return f" ({file} line {frames[-1].lineno})" if frames else ""


def _function(root: Path | None, script: Any, where: Location) -> Callable[..., Any]:
    if script.path is None:  # a package's kind: its plugin registers the function when the registry loads
        from lakewrap.annotations.registry import default_registry

        fn = default_registry().script_functions.get(script.function)
        if fn is None:
            raise ScriptTestError(f"test kind `{script.function}` has no function in this process", location=where,
                                  hint="install the package whose `lakewrap.plugins` entry point registers it")
        return fn
    if root is None:
        raise ScriptTestError("a script test needs the project folder", location=where)
    file = (root / script.path).resolve()
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ScriptTestError(f"`{script.path}` cannot be read: {exc.strerror}", location=where) from None
    sha = hashlib.sha256(data.decode("utf-8", "replace").encode()).hexdigest()
    if script.sha256 is not None and sha != script.sha256:
        raise ScriptTestError(f"`{script.path}` changed since the plan was compiled", location=where,
                              hint="run again: the plan is compiled with the file as it is then")
    with _LOADING:
        module = _MODULES.get((str(file), sha))
        if module is None:
            spec = importlib.util.spec_from_file_location(f"lakewrap_script_{sha[:16]}", file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                raise ScriptTestError(f"`{script.path}` failed to load: {type(exc).__name__}: {exc}"
                                      + _frame(exc, script.path), location=where) from None
            _MODULES[(str(file), sha)] = module
    fn = getattr(module, script.function, None)
    if not callable(fn):
        raise ScriptTestError(f"`{script.path}` defines no function `{script.function}`", location=where,
                              hint=f"write `def {script.function}(relation, ...):` returning the failing rows")
    return fn  # type: ignore[no-any-return]


def _failing(answer: Any, shown: str) -> tuple[int, list[str], list[dict[str, Any]]]:
    """(count, columns, up to 20 rows) of what a script test's function returned."""
    if answer is None:
        raise ScriptTestError(f"{shown} returned nothing",
                              hint="return the failing rows (a relation, an Arrow table, a DataFrame, a list) "
                              "or their count (0: the test passes)")
    if isinstance(answer, bool):
        raise ScriptTestError(f"{shown} returned {answer}, which is no row count",
                              hint="return the failing rows or their count (0: the test passes)")
    if isinstance(answer, int):
        if answer < 0:
            raise ScriptTestError(f"{shown} returned a negative count ({answer})")
        return answer, [], []
    kind = type(answer).__module__.split(".")[0]
    if kind in ("duckdb", "_duckdb") and hasattr(answer, "aggregate"):
        columns = list(answer.columns)
        count = int(answer.aggregate("count(*)").fetchone()[0])
        rows = answer.limit(SAMPLE_ROWS).fetchall()
        return count, columns, [dict(zip(columns, r, strict=True)) for r in rows]
    if kind == "pyarrow" and hasattr(answer, "num_rows"):
        return int(answer.num_rows), list(answer.schema.names), answer.slice(0, SAMPLE_ROWS).to_pylist()
    if kind == "pandas" and hasattr(answer, "to_dict"):
        return len(answer), [str(c) for c in answer.columns], answer.head(SAMPLE_ROWS).to_dict("records")
    if kind == "polars" and hasattr(answer, "to_dicts"):
        return int(answer.height), list(answer.columns), answer.head(SAMPLE_ROWS).to_dicts()
    if isinstance(answer, (list, tuple)):
        sample = [r if isinstance(r, dict) else {"value": r} for r in answer[:SAMPLE_ROWS]]
        columns = sorted({k for r in sample for k in r})
        return len(answer), columns, sample
    raise ScriptTestError(f"{shown} returned a {type(answer).__name__}",
                          hint="return the failing rows (a DuckDB relation, a pyarrow table, a pandas or polars "
                          "DataFrame, a list) or their count")
