"""The annotations that name the project's scripts: ``-- pre_run`` / ``-- post_run`` /
``-- on_failure <path>`` (hooks, :mod:`lakewrap.hooks`) and ``-- test script <file.py>[:<function>]
[key=value ...]`` (:mod:`lakewrap.scripttests`).

A path is relative to the project folder; a missing file is an error on the path's column with the
closest of the project's files as a hint, and nothing of the file is run while parsing (a Python
file's functions are read from its syntax tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakewrap import scriptfiles
from lakewrap.annotations.header import Header
from lakewrap.annotations.keywords import options, positional
from lakewrap.annotations.lexer import Annotation, Arg
from lakewrap.errors import choices_hint
from lakewrap.spec import HookSpec

if TYPE_CHECKING:
    from pathlib import Path

    from lakewrap.annotations.registry import Registry

EVENTS = ("pre_run", "post_run", "on_failure")
SUMMARIES = {
    "pre_run": "a script run before the step writes anything; its failure fails the step",
    "post_run": "a script run after the step committed; its failure is reported",
    "on_failure": "a script run when the step failed; its failure is reported",
}
MAX_TIMEOUT = 86_400.0


def register_scripts(reg: Registry) -> None:
    """Register the hook keywords and the ``script`` test kind on ``reg``."""
    for event in EVENTS:
        reg.keyword(event, usage=f"{event} <path> [timeout=<seconds>]", summary=SUMMARIES[event],
                    repeatable=True)(_hook(event))
    reg.test_kind("script", usage="script <file.py>[:<function>] [key=value ...]",
                  summary="a Python function given the rows, returning the failing ones or a count")(_script_test)


def timeout_seconds(ann: Annotation, arg: Arg) -> float:
    """A positive number of seconds, at most a day."""
    try:
        value = float(arg.value)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_TIMEOUT:
        raise ann.error(f"timeout must be a number of seconds between 0 and {int(MAX_TIMEOUT)}, got `{arg.value}`",
                        column=arg.column, hint="write e.g. `timeout=30` (seconds)")
    return value


def _hook(event: str) -> Any:
    usage = f"{event} <path> [timeout=<seconds>]"

    def handle(ann: Annotation, h: Header) -> None:
        (arg,) = positional(ann, 1, 1, usage)
        opts = options(ann, ("timeout",), usage)
        timeout = timeout_seconds(ann, opts["timeout"]) if "timeout" in opts else None
        project_file(ann, arg, h.root, hook=True)
        h.hooks.append(HookSpec(event=event, path=arg.value, timeout=timeout,  # type: ignore[arg-type]
                                line=ann.line, column=arg.column))

    return handle


def project_file(ann: Annotation, arg: Arg, root: Path | None, *, hook: bool = False,
                 function: str | None = None, column: int | None = None) -> None:
    """Check the file ``arg`` names (relative to ``root``): inside the project, present, a hook's
    Python file or executable, a Python file defining ``function``. No ``root``: spelling only."""
    rel = arg.value
    what = ("a Python file with `main(context)`, or an executable" if hook
            else f"a Python file defining `{function}(relation, ...)`")
    bad = scriptfiles.problem(rel)
    if bad is not None:
        raise ann.error(bad, column=arg.column, hint="write a path relative to the project folder, "
                        + ("e.g. `hooks/notify.py`" if hook else "e.g. `checks/amounts.py`"))
    if not hook and not rel.endswith(".py"):
        raise ann.error(f"`{rel}` is not a Python file", column=arg.column,
                        hint="a script test is a `.py` file whose function returns the failing rows")
    if root is None:
        return
    try:
        path = scriptfiles.resolve(root, rel)
    except FileNotFoundError:
        raise ann.error(f"no such file `{rel}`", column=arg.column,
                        hint=scriptfiles.missing_hint(root, rel, what)) from None
    except ValueError as exc:
        raise ann.error(str(exc), column=arg.column, hint=f"name {what} inside the project") from None
    if hook and not scriptfiles.runnable(path):
        raise ann.error(f"`{rel}` is neither a Python file (.py) nor executable", column=arg.column,
                        hint=f"`chmod +x {rel}`, or write a .py file with `def main(context): ...`")
    wanted = "main" if hook and path.suffix == ".py" else function
    if wanted is None:
        return
    names = scriptfiles.functions(path)
    if names is None:
        raise ann.error(f"`{rel}` is not valid Python", column=arg.column,
                        hint=f"fix the file; `python -m py_compile {rel}` shows where")
    if wanted not in names:
        hint = (choices_hint(wanted, names, "function") if names else "the file defines no function")
        raise ann.error(f"`{rel}` defines no function `{wanted}`", column=column or arg.column,
                        hint=hint + f"; write `def {wanted}(" + ("context" if hook else "relation, ...") + "):`")


def script_params(ann: Annotation, args: tuple[Arg, ...], usage: str) -> dict[str, str]:
    """The ``key=value`` arguments of a script test, as text, each key once and a Python name."""
    out: dict[str, str] = {}
    for a in args:
        if a.key is None:
            raise ann.error(f"unexpected argument `{a.raw}`", column=a.column,
                            hint=f"arguments of a script test are `key=value`; write `-- test {usage}`")
        if not a.key.isidentifier() or a.key == "ctx":
            raise ann.error(f"`{a.key}` cannot be an argument name", column=a.column,
                            hint="write a Python name other than `ctx` (which is the context), e.g. `max_share=0.1`")
        if a.key in out:
            raise ann.error(f"option `{a.key}` is given twice", column=a.column)
        out[a.key] = a.value
    return out


def _script_test(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
    usage = "script <file.py>[:<function>] [key=value ...]"
    if not args or args[0].key is not None:
        raise ann.error("missing the script's file", column=args[0].column if args else ann.end_column,
                        hint=f"write `-- test {usage}`")
    first, rest = args[0], args[1:]
    path, sep, function = first.value.partition(":")
    function = function if sep else "check"
    if not function.isidentifier():
        raise ann.error(f"`{function}` is not a function name", column=first.column + len(path) + 1,
                        hint=f"write `-- test {usage}`")
    project_file(ann, Arg(path, first.column, raw=path), h.root, function=function,
                 column=first.column + len(path) + 1 if sep else None)
    return {"path": path, "function": function, "params": script_params(ann, rest, usage)}
