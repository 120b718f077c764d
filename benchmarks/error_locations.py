"""How often a runtime error lands on the right place of the model file (docs/running.md).

Not a timing. The script writes a project of models that each break one marked reference of a
multi-line SELECT (a column, a table or a function renamed to one that does not exist), under three
strategies (delete+insert, merge, append), runs them all in one ``lakewrap run --format json`` and
compares each error's ``error_location`` with where the broken reference starts in the file:

- *exact*: the line and column of the broken reference;
- *line*: the right line, another column;
- *file*: the model file without a line (allowed: "never a wrong line");
- *wrong*: another line (must be 0).

```sh
python benchmarks/error_locations.py            # ~15 s; --substrate iceberg for the pyiceberg path
```
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ORDERS = "order_id,customer_id,amount,status,created_at\n" + "".join(
    f"{i},{i % 5},{i * 1.5},{'placed' if i % 2 else 'shipped'},2024-01-0{1 + i % 3} {i % 24:02d}:00:00\n"
    for i in range(1, 40))
CUSTOMERS = "customer_id,name,country\n" + "".join(f"{i},n{i},c{i % 3}\n" for i in range(5))

# Each {marked} reference is broken once per model (the others kept as written).
TEMPLATES = {
    "join": """\
SELECT
    o.order_id,
    {o.customer_id} AS customer_id,
    {c.name} AS customer_name,
    {o.amount}::DECIMAL(18, 2) AS amount,
    o.created_at
FROM {raw.orders} AS o
JOIN {raw.customers} AS c ON {c.customer_id} = {o.customer_id}
WHERE {o.created_at} >= $partition_start AND o.created_at < $partition_end
""",
    "cte_window": """\
WITH recent AS (
    SELECT order_id, {customer_id}, {amount}, {status}, created_at
    FROM {raw.orders}
    WHERE {created_at} >= $partition_start AND created_at < $partition_end
)
SELECT order_id, created_at, customer_id,
       {row_number}() OVER (PARTITION BY {customer_id} ORDER BY {amount} DESC) AS rank_in_customer,
       {max}(amount) OVER (PARTITION BY customer_id) AS top_amount
FROM recent
QUALIFY rank_in_customer <= 10
""",
    "case_subquery": """\
SELECT order_id,
       CASE WHEN {status} = 'placed' THEN {amount} ELSE 0 END AS placed_amount,
       (SELECT {max}({name}) FROM {raw.customers} AS c WHERE {c.customer_id} = o.customer_id) AS who,
       created_at
FROM raw.orders AS o
WHERE created_at >= $partition_start
  AND created_at < $partition_end
  AND {amount} > 0
GROUP BY ALL
""",
    "rewritten": """\
SELECT order_id, created_at,
       {amount}::INT AS whole,
       list_transform([{amount}, 1], x -> x + 1) AS lifted,
       count(*) FILTER (WHERE {status} = 'placed') OVER () AS placed,
       {status} ILIKE 'p%' AS is_p,
       created_at + INTERVAL 1 DAY AS next_day,
       {customer_id} IN (1, 2, 3) AS vip,
       {amount} BETWEEN 1 AND 10 AS small,
       {strftime}(created_at, '%Y') AS y
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
""",
}
HEADERS = {
    "di": "-- materialized incremental\n-- partitioned daily key=created_at start=2024-01-01\n",
    "merge": "-- materialized incremental\n-- partitioned daily key=created_at start=2024-01-01\n"
             "-- unique_key order_id dedupe=latest_by(created_at)\n",
    "append": "-- materialized incremental\n-- partitioned daily key=created_at start=2024-01-01\n-- append\n",
}
MARK = re.compile(r"\{([^}]*)\}")


def broken(template: str, k: int) -> tuple[str, int, int]:
    """The template with its k-th mark broken; (text, line, column) of the broken reference."""
    out, at, pos = [], 0, None
    for i, m in enumerate(MARK.finditer(template)):
        out.append(template[at:m.start()])
        word = m.group(1)
        if i == k:
            pos = sum(len(p) for p in out)
            word = word + "_x" if "." not in word or word.startswith(("o.", "c.")) else word + "z"
        out.append(word)
        at = m.end()
    out.append(template[at:])
    text = "".join(out)
    assert pos is not None
    return text, text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--substrate", choices=["ducklake", "iceberg"], default="ducklake")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n' if args.substrate == "iceberg" else "")
        (root / "seeds" / "raw").mkdir(parents=True)
        (root / "seeds" / "raw" / "orders.csv").write_text(ORDERS)
        (root / "seeds" / "raw" / "customers.csv").write_text(CUSTOMERS)
        expected: dict[str, tuple[int, int]] = {}
        for tname, template in TEMPLATES.items():
            for k in range(len(MARK.findall(template))):
                for hname, header in HEADERS.items():
                    text, line, column = broken(template, k)
                    name = f"{tname}_{k}_{hname}"
                    path = root / "models" / "b" / f"{name}.sql"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(header + text)
                    expected[f"b.{name}"] = (line + header.count("\n"), column)
        lw = [str(Path(sys.executable).parent / "lakewrap")]
        seeded = subprocess.run([*lw, "seed", "--project", str(root)], capture_output=True, text=True)
        if seeded.returncode != 0:  # a broken model fails the project's load: the script's bug
            sys.exit(seeded.stderr)
        out = subprocess.run([*lw, "run", "--project", str(root), "--partition", "2024-01-02", "--format", "json"],
                             capture_output=True, text=True)
        results = {r["target"]: r for r in json.loads(out.stdout)["results"]}
    tally: Counter[str] = Counter()
    for target, (line, column) in expected.items():
        r = results[target]
        loc = r.get("error_location") or {}
        if r["status"] != "failed":
            kind = "not failed"
        elif loc.get("line") is None:
            kind = "file"
        elif loc["line"] != line:
            kind = "wrong"
        else:
            kind = "exact" if loc["column"] == column else "line"
        tally[kind] += 1
        if kind != "exact":
            print(f"{kind}: {target} want {line}:{column}: {(r.get('error') or '').splitlines()[0]}")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
    print(f"{args.substrate}: {len(expected)} broken models: {counts}")


if __name__ == "__main__":
    main()
