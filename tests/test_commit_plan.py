"""``lakewrap compile`` shows the commits a run makes (issue 20: grouping "visible in compile"), and
a real run on a DuckLake then commits exactly those: each predicted commit is one snapshot holding
those plans' materializations, in the predicted order, and no two predicted commits share one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lakeproject import cli
from test_group_commit import DAILY, NOW, project

CHAIN = {"m.c1": "SELECT id, w + 1 AS w FROM m.t1", "m.c2": "SELECT id, w * 2 AS w FROM m.c1"}
HOOKED = "-- materialized table\n-- pre_run scripts/noop.py\nSELECT id FROM raw.events\n"


def dag(root: Path) -> Path:
    tables = {f"m.t{i}": f"SELECT id, v * {i} AS w FROM raw.events" for i in range(1, 4)} | CHAIN
    project(root, tables, {"m/daily.sql": DAILY,
                           "m/daily_sum.sql": ("-- materialized incremental\n"
                                               "-- partitioned daily key=day start=2024-01-01\n"
                                               "SELECT day, sum(v1) AS s FROM m.daily WHERE day >= $partition_start "
                                               "AND day < $partition_end GROUP BY day\n")})
    return root


def predicted(root: Path, *args: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    code, out, err = cli("compile", "--format", "json", "--now", NOW, "--project", str(root), *args)
    assert code == 0, err
    doc = json.loads(out)
    return doc["plans"], doc["commits"]


def ran(root: Path, *args: str) -> list[dict[str, Any]]:
    code, out, err = cli("run", "--format", "json", "--now", NOW, "--project", str(root), *args)
    assert code == 0, err + out
    return json.loads(out)["results"]


def first_partition(plan: dict[str, Any]) -> str | None:
    w = plan["window"]
    if w is None:
        return None
    return w["partitions"][0]["value"] if w["partitions"] else w["value"]


def check_prediction(plans: list[dict[str, Any]], commits: list[dict[str, Any]],
                     results: list[dict[str, Any]]) -> None:
    """Every result is in one predicted commit; a commit's results share one snapshot, and the
    snapshots rise in the predicted order (so no two commits share one)."""
    assert sorted(p for c in commits for p in c["plans"]) == list(range(len(plans)))
    by_step = {(r["target"], r["partition"]): r for r in results}
    leaders = [r for r in results if not r.get("batch") or r["partition"] == r["batch"][0]]
    assert len(leaders) == len(plans)
    snapshots = []
    for c in commits:
        members = [by_step[(plans[p]["target"], first_partition(plans[p]))] for p in c["plans"]]
        assert all(m["status"] == "success" for m in members)
        ids = {m["snapshot_id"] for m in members}
        assert len(ids) == 1, (c, members)
        groups = {m["group"] for m in members}
        assert (groups == {None}) == (len(c["plans"]) == 1), (c, groups)
        snapshots.append(ids.pop())
    assert snapshots == sorted(snapshots) and len(set(snapshots)) == len(snapshots)


def test_a_run_commits_what_compile_shows_across_dag_levels(tmp_path: Path) -> None:
    root = dag(tmp_path / "p")
    plans, commits = predicted(root, "--partition", "2024-01-02")
    # the three tables, the chain on t1 and the day of both daily models: one commit, in DAG order
    assert len(commits) == 1 and len(commits[0]["plans"]) == len(plans) == 7
    check_prediction(plans, commits, ran(root, "--partition", "2024-01-02"))
    code, out, _ = cli("compile", "--now", NOW, "--partition", "2024-01-02", "--project", str(root))
    assert code == 0
    assert out.count("-- commit:     1 of 1, one snapshot with 6 other plans (member ") == 7
    assert "-- commits: 1 for 7 plans, 1 of them shared by several plans" in out


def test_a_range_commits_what_compile_shows_per_partition_and_per_batch(tmp_path: Path) -> None:
    root = dag(tmp_path / "p")
    rng = ("--start", "2024-01-01", "--end", "2024-01-04")
    # per partition: each daily model's four days are members, the tables too
    plans, commits = predicted(root, *rng, "--batch-size", "1")
    assert len(plans) == 5 + 8
    check_prediction(plans, commits, ran(root, *rng, "--batch-size", "1"))
    # in batches: a batch commits on its own, and says so
    plans, commits = predicted(root, *rng)
    alone = [c for c in commits if len(c["plans"]) == 1]
    assert {plans[c["plans"][0]]["target"] for c in alone} == {"m.daily", "m.daily_sum"}
    assert {c["alone"] for c in alone} == {"a range batch commits on its own"}
    check_prediction(plans, commits, ran(root, *rng))


def test_compile_says_why_a_plan_commits_alone(tmp_path: Path) -> None:
    root = dag(tmp_path / "p")
    (root / "scripts").mkdir()
    (root / "scripts" / "noop.py").write_text("def main(context):\n    pass\n")
    (root / "models" / "m" / "hooked.sql").write_text(HOOKED)
    with (root / "lakewrap.toml").open("a") as f:
        f.write('\n[security]\nscripts = ["scripts"]\n')
    plans, commits = predicted(root, "--partition", "2024-01-02")
    hooked = next(i for i, p in enumerate(plans) if p["target"] == "m.hooked")
    assert {"plans": [hooked], "alone": "a model with hooks"} in commits
    check_prediction(plans, commits, ran(root, "--partition", "2024-01-02"))
    # [run] group_commit = false: every plan alone, for that reason, and the run agrees
    with (root / "lakewrap.toml").open("a") as f:
        f.write("\n[run]\ngroup_commit = false\n")
    plans, commits = predicted(root, "--partition", "2024-01-02")
    assert len(commits) == len(plans)  # the hooked model keeps its own reason
    assert {c["plans"][0]: c["alone"] for c in commits} == {
        i: "a model with hooks" if i == hooked else "[run] group_commit = false" for i in range(len(plans))}
    check_prediction(plans, commits, ran(root, "--partition", "2024-01-02"))
    code, out, _ = cli("compile", "--now", NOW, "--partition", "2024-01-02", "--project", str(root))
    assert code == 0
    assert (f"-- commits: {len(plans)} for {len(plans)} plans, one each ([run] group_commit = false; "
            "a model with hooks)") in out
