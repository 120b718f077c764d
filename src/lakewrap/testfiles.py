"""The files of ``-- test sql <file>`` and ``-- test script <file.py>`` lines, read for the compiler
(which does no I/O).

A test file is a project-relative path (checked at parse time: no ``..``, not absolute); here it
must also resolve inside the project (no symlink out of it) and be UTF-8 text, and a script must
lie in a folder ``[security] scripts`` lists (``docs/security.md``, "Scripts").
"""

from __future__ import annotations

from pathlib import Path

from lakewrap.errors import Location, ModelError
from lakewrap.plan import Plan


def read_test_files(plan: Plan, root: Path) -> Plan:
    """``plan`` with the text of each ``-- test sql`` / ``-- test script`` file of its model in
    ``plan.test_sql``."""
    tests = [t for t in plan.model.tests if t.kind in ("sql", "script") and "path" in t.args]
    if not tests:
        return plan
    root = root.resolve()
    texts: dict[str, str] = {}
    for test in tests:
        rel = str(test.args["path"])
        where = Location(plan.model.path, test.line)
        line = f"`-- test {test.kind} {rel}`"
        if test.kind == "script":
            from lakewrap.hooks import refuse_unlisted

            refuse_unlisted(root, rel, line, where)
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            raise ModelError(f"{line} resolves outside the project", location=where,
                             hint="keep test files inside the project folder")
        try:
            texts[rel] = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            from lakewrap.scriptfiles import missing_hint

            what = ("a file holding one SELECT that returns the failing rows" if test.kind == "sql"
                    else "a Python file with a function returning the failing rows")
            raise ModelError(f"{line}: no such file", location=where, hint=missing_hint(root, rel, what)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"{line} cannot be read: {exc}", location=where) from None
    return plan.replace(test_sql=texts)
