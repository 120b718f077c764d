"""The files of ``-- test sql <file>`` lines, read for the compiler (which does no I/O).

A test file is a project-relative ``.sql`` path (checked at parse time: no ``..``, not absolute);
here it must also resolve inside the project (no symlink out of it) and be UTF-8 text.
"""

from __future__ import annotations

from pathlib import Path

from lakewrap.errors import Location, ModelError
from lakewrap.plan import Plan


def read_test_files(plan: Plan, root: Path) -> Plan:
    """``plan`` with the text of each ``-- test sql`` file of its model in ``plan.test_sql``."""
    tests = [t for t in plan.model.tests if t.kind == "sql"]
    if not tests:
        return plan
    root = root.resolve()
    texts: dict[str, str] = {}
    for test in tests:
        rel = str(test.args["path"])
        where = Location(plan.model.path, test.line)
        path = (root / rel).resolve()
        if not path.is_relative_to(root):
            raise ModelError(f"`-- test sql {rel}` resolves outside the project", location=where,
                             hint="keep test queries inside the project folder")
        try:
            texts[rel] = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            raise ModelError(f"`-- test sql {rel}`: no such file", location=where,
                             hint=f"create {rel} (relative to the project folder) holding one SELECT that "
                             "returns the failing rows") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"`-- test sql {rel}` cannot be read: {exc}", location=where) from None
    return plan.replace(test_sql=texts)
