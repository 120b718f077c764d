"""What ``lakewrap compile`` prints is what ``lakewrap run`` executes, byte for byte.

On a copy of ``examples/shop`` (every strategy but SCD2's check variant): ``compile --format json``
for a partition, then ``run`` for the same partition; the statement log each materialization writes
under ``target/run/<run_id>/`` holds every executed statement with its role and bound parameters.
The plan's statements (those with a role) must be the compiled ones, in order, with the same text
and the same parameters. The executor's own statements (BEGIN, the fence, the snapshot lookup,
COMMIT) carry no role, and its schema comparison (``on_schema_change``: DESCRIBE and the result's
columns) the role ``schema``; neither is in the plan. The log stores a statement with its trailing
semicolon stripped and one added, so both sides are compared in that form.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import date, datetime
from pathlib import Path
from typing import Any

from lakeproject import cli

NOW = "2024-01-05T06:00:00Z"  # one logical time for both: the SCD2 model binds the run's timestamp
ROOT = Path(__file__).resolve().parent.parent
ENTRY = re.compile(r"^-- \[(\d+)\](?: (\S+))?\n(?:-- params: ([^\n]*)\n)?(.*?);\n-- (?:ok|failed)", re.S | re.M)


def logged(path: Path) -> list[dict[str, Any]]:
    """The statements of one statement log that belong to the plan (they carry a role)."""
    text = path.read_text()
    return [{"role": m.group(2), "sql": m.group(4), "params": m.group(3)} for m in ENTRY.finditer(text)
            if m.group(2) and m.group(2) != "schema"]


def params_text(params: dict[str, Any] | None) -> str | None:
    """The log's rendering of bound parameters (``$name = repr(value)``), from compile's typed JSON values."""
    if not params:
        return None
    parts = []
    for name, p in params.items():
        value: Any = p["value"]
        if p["type"].startswith("TIMESTAMP"):
            value = datetime.fromisoformat(value)
        elif p["type"] == "DATE":
            value = date.fromisoformat(value)
        parts.append(f"${name} = {value!r}")
    return ", ".join(parts)


def test_compiled_statements_are_the_executed_statements(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", project, ignore=shutil.ignore_patterns(".lakewrap", "target"))
    code, _, err = cli("seed", "--project", str(project))
    assert code == 0, err
    code, out, err = cli("compile", "--project", str(project), "--partition", "2024-01-02", "--format", "json",
                         "--no-cache", "--now", NOW)
    assert code == 0, err
    plans = json.loads(out)["plans"]
    code, out, err = cli("run", "--project", str(project), "--partition", "2024-01-02", "--format", "json",
                         "--now", NOW)
    assert code == 0, out + err
    (run_id,) = {json.loads(out)["run_id"]}
    folder = project / "target" / "run" / run_id
    assert len(plans) == 7  # the six SQL models and the Python model marts.customer_segments
    compared = 0
    for plan in plans:
        name = plan["target"] + (f"__{plan['window']['value']}" if plan["window"] else "")
        executed = logged(folder / f"{name}.sql")
        expected = [{"role": s["role"], "sql": s["sql"].rstrip().rstrip(";"), "params": params_text(s.get("params"))}
                    for s in plan["statements"]]
        assert [e["role"] for e in executed] == [e["role"] for e in expected], plan["target"]
        for got, want in zip(executed, expected, strict=True):
            assert got["sql"] == want["sql"], f"{plan['target']} {want['role']}:\n{got['sql']}\n!=\n{want['sql']}"
            assert got["params"] == want["params"], (plan["target"], want["role"])
            compared += 1
    assert compared == sum(len(p["statements"]) for p in plans) > 30, compared

