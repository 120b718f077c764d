"""``lakewrap ls``, ``graph`` and ``show`` (issue 23, items 4 and 5).

The expected structure of the example project is computed here from the files themselves: each
model's header lines read with regular expressions, its tables with sqlglot's parser (not lakewrap's
DAG), the seeds from ``seeds/**/*.csv``. ``show``'s rows are compared with plain DuckDB computing the
same SELECT over the seed CSV (or over the lake's table, read without lakewrap), and ``show`` must
leave every file under ``.lakewrap/`` byte for byte as it was, the snapshot lists and the run log with
it, on DuckLake and on Iceberg (pyiceberg's embedded SQL catalog).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pydot
import pytest
import sqlglot
from sqlglot import exp

from lakeproject import cli

# pydot's DOT grammar calls pyparsing names pyparsing 3.3 deprecates
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pydot")

ROOT = Path(__file__).resolve().parent.parent
SHOP = ROOT / "examples" / "shop"
FX = """-- materialized table
-- tag finance
-- description "Order amounts in EUR, from a rates table loaded outside lakewrap"
SELECT o.order_id, o.amount * r.rate AS amount_eur
FROM sales.orders AS o
JOIN ext.rates AS r ON r.day = CAST(o.created_at AS DATE)
"""


def copy_shop(folder: Path) -> Path:
    shutil.copytree(SHOP, folder, ignore=shutil.ignore_patterns(".lakewrap", "target"))
    return folder


def ok(*args: str) -> str:
    code, out, err = cli(*args)
    assert code == 0, out + err
    return out


# --- the project's structure, computed from its files -------------------------------------------


def header_and_body(text: str) -> tuple[list[str], str]:
    lines = text.splitlines()
    n = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    return lines[:n], "\n".join(lines[n:])


def expected_model(root: Path, path: Path) -> dict[str, Any]:
    header, body = header_and_body(path.read_text())
    words = {line.split()[1]: line for line in header}
    if "snapshot" in words:
        strategy = "snapshot"
    elif "materialized table" in words.get("materialized", ""):
        strategy = "table"
    elif "materialized view" in words.get("materialized", ""):
        strategy = "view"
    else:
        strategy = "merge" if "unique_key" in words else "append" if "append" in words else "delete+insert"
    partitioning = None
    if "partitioned" in words:
        grain, *options = words["partitioned"].split()[2:]
        opts = dict(o.split("=", 1) for o in options)
        partitioning = {"kind": "time", "grain": grain, "key": opts["key"], "tz": opts.get("tz", "UTC"),
                        "start": opts.get("start"), "lookback": int(opts.get("lookback", 0)),
                        "batch": int(opts.get("batch", 31))}  # docs/annotations.md: batch= defaults to 31
    description = re.search(r'^-- description "(.*)"$', words["description"]).group(1) \
        if "description" in words else None
    tree = sqlglot.parse_one(body, read="duckdb")
    ctes = {c.alias for c in tree.find_all(exp.CTE)}
    reads = {f"{t.db}.{t.name}" for t in tree.find_all(exp.Table) if t.name not in ctes}
    rel = path.relative_to(root)
    return {"name": path.stem, "target": f"{rel.parts[1]}.{path.stem}", "path": rel.as_posix(),
            "strategy": strategy, "partitioning": partitioning,
            "tags": [line.split()[2] for line in header if line.startswith("-- tag ")],
            "description": description, "upstreams": reads}


def expected_python_models(root: Path, path: Path) -> list[dict[str, Any]]:
    """The ``@lakewrap.model`` functions of a Python model file, read with ``ast``: their keywords
    (the same texts a SQL header holds) and the literal ``ctx.ref("...")`` calls in their bodies."""
    rel = path.relative_to(root)
    found = []
    for fn in ast.parse(path.read_text()).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        for deco in fn.decorator_list:
            if not (isinstance(deco, ast.Call) and ast.unparse(deco.func) == "lakewrap.model"):
                continue
            kw = {k.arg: ast.literal_eval(k.value) for k in deco.keywords}
            refs = {c.args[0].value for c in ast.walk(fn) if isinstance(c, ast.Call)
                    and ast.unparse(c.func) == "ctx.ref" and isinstance(c.args[0], ast.Constant)}
            tags = kw.get("tag", [])
            found.append({"name": fn.name, "target": f"{rel.parts[1]}.{fn.name}", "path": rel.as_posix(),
                          "strategy": kw["materialized"], "partitioning": None,
                          "tags": [tags] if isinstance(tags, str) else list(tags),
                          "description": kw.get("description"), "upstreams": refs | set(kw.get("deps", ()))})
    assert found, f"{rel}: no @lakewrap.model function"  # the example's Python models are tables
    return found


def structure(root: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str], dict[str, set[str]]]:
    """(models by target, seeds: target -> file, sources: table -> the models reading it)."""
    models = {m["target"]: m for m in (expected_model(root, p) for p in sorted((root / "models").rglob("*.sql")))}
    models |= {m["target"]: m for p in sorted((root / "models").rglob("*.py")) for m in expected_python_models(root, p)}
    seeds = {f"{p.parent.name}.{p.stem}": p.relative_to(root).as_posix()
             for p in sorted((root / "seeds").rglob("*.csv"))}
    sources: dict[str, set[str]] = {}
    for target, m in models.items():
        for table in m["upstreams"] - set(models) - set(seeds):
            sources.setdefault(table, set()).add(target)
    return models, seeds, sources


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example project with one more model, which reads a table no model or seed writes."""
    root = copy_shop(tmp_path_factory.mktemp("look") / "shop")
    (root / "models" / "marts" / "fx_revenue.sql").write_text(FX)
    return root


def test_ls_json_lists_what_the_files_hold(shop: Path) -> None:
    models, seeds, sources = structure(shop)
    assert sources == {"ext.rates": {"marts.fx_revenue"}}  # the fixture is what the test means
    doc = json.loads(ok("ls", "--project", str(shop), "--format", "json"))
    assert doc["schema_version"] == 1 and doc["lakewrap_version"]
    got = {m["target"]: m for m in doc["models"]}
    assert set(got) == set(models)
    for target, want in models.items():
        m = got[target]
        assert {k: m[k] for k in ("name", "path", "strategy", "partitioning", "tags", "description")} == \
            {k: want[k] for k in ("name", "path", "strategy", "partitioning", "tags", "description")}, target
        assert set(m["upstreams"]) == want["upstreams"], target
    order = [m["target"] for m in doc["models"]]  # dependency order: what a model reads comes first
    for target, want in models.items():
        for up in want["upstreams"] & set(models):
            assert order.index(up) < order.index(target), (up, target)
    assert {s["target"]: s["path"] for s in doc["seeds"]} == seeds
    readers = {s: {t for t, m in models.items() if s in m["upstreams"]} for s in seeds}
    assert {s["target"]: set(s["read_by"]) for s in doc["seeds"]} == readers
    assert {s["target"]: set(s["read_by"]) for s in doc["sources"]} == sources


def test_ls_text_has_a_line_per_model_seed_and_source(shop: Path) -> None:
    models, seeds, sources = structure(shop)
    out = ok("ls", "--project", str(shop))
    lines = out.splitlines()
    assert lines[0].split() == ["type", "name", "strategy", "partitioning", "tags", "path"]
    rows = {line.split()[1]: line.split() for line in lines[2:]}
    assert set(rows) == set(models) | set(seeds) | set(sources)
    for target, m in models.items():
        row = rows[target]
        assert row[0] == "model" and row[2] == m["strategy"] and row[-1] == m["path"]
        assert row[-2] == (",".join(m["tags"]) or "-")
        if m["partitioning"]:
            assert f"key={m['partitioning']['key']}" in row
    assert rows["ext.rates"][0] == "source" and rows["raw.orders"][0] == "seed"


def downstream_closure(models: dict[str, dict[str, Any]], start: str) -> set[str]:
    out, todo = {start}, [start]
    while todo:
        cur = todo.pop()
        for t, m in models.items():
            if cur in m["upstreams"] and t not in out:
                out.add(t)
                todo.append(t)
    return out


def upstream_closure(models: dict[str, dict[str, Any]], start: str) -> set[str]:
    out, todo = {start}, [start]
    while todo:
        for up in models[todo.pop()]["upstreams"] & set(models):
            if up not in out:
                out.add(up)
                todo.append(up)
    return out


def ls_targets(shop: Path, *args: str) -> list[str]:
    doc = json.loads(ok("ls", "--project", str(shop), "--format", "json", *args))
    assert doc["seeds"] == [] and doc["sources"] == []  # a selection is of models
    return [m["target"] for m in doc["models"]]


def test_ls_selectors_select_models(shop: Path) -> None:
    models, _, _ = structure(shop)
    tagged = {t for t, m in models.items() if "sales" in m["tags"]}
    assert len(tagged) == 2 and set(ls_targets(shop, "tag:sales")) == tagged
    assert set(ls_targets(shop, "orders+")) == downstream_closure(models, "sales.orders")
    assert set(ls_targets(shop, "+orders_daily")) == upstream_closure(models, "sales.orders_daily")
    marts = {t for t in models if t.startswith("marts.")}
    assert set(ls_targets(shop, "path:models/marts")) == marts
    assert set(ls_targets(shop, "path:models/marts", "--exclude", "fx_revenue")) == marts - {"marts.fx_revenue"}
    doc = json.loads(ok("ls", "--project", str(shop), "--format", "json", "--exclude", "tag:sales"))
    assert {m["target"] for m in doc["models"]} == set(models) - tagged and doc["seeds"]


def test_ls_and_graph_refuse_unknown_selectors_with_a_suggestion(shop: Path) -> None:
    for command in ("ls", "graph"):
        code, _out, err = cli(command, "orders_dayly", "--project", str(shop))
        assert code == 2 and "no model matches `orders_dayly`" in err and "did you mean `orders_daily`?" in err, err
        code, _out, err = cli(command, "tga:sales", "--project", str(shop))
        assert code == 2 and "did you mean `tag:`?" in err, err
        code, _out, err = cli(command, "tag:nope", "--project", str(shop))
        assert code == 2 and "no model has tag `nope`" in err and "finance, sales" in err, err


def layers(nodes: set[str], edges: set[tuple[str, str]]) -> dict[str, int]:
    """The longest path from a node without inputs, by repeated relaxation."""
    layer = dict.fromkeys(nodes, 0)
    for _ in nodes:
        for a, b in edges:
            layer[b] = max(layer[b], layer[a] + 1)
    return layer


def expected_graph(shop: Path, selected: set[str] | None = None) -> tuple[set[str], set[tuple[str, str]]]:
    models, seeds, sources = structure(shop)
    chosen = set(models) if selected is None else selected
    inputs = {t for m in chosen for t in models[m]["upstreams"] if t not in models}
    nodes = chosen | inputs | (set(seeds) | set(sources) if selected is None else set())
    edges = {(t, m) for m in chosen for t in models[m]["upstreams"] if t in nodes}
    return nodes, edges


def test_graph_json_is_the_dag_of_the_files(shop: Path) -> None:
    nodes, edges = expected_graph(shop)
    doc = json.loads(ok("graph", "--project", str(shop), "--format", "json"))
    assert doc["schema_version"] == 1
    assert {n["id"] for n in doc["nodes"]} == nodes
    assert {(e["from"], e["to"]) for e in doc["edges"]} == edges
    assert {n["id"]: n["layer"] for n in doc["nodes"]} == layers(nodes, edges)
    models, seeds, _sources = structure(shop)
    kinds = {n["id"]: (n["type"], n["strategy"], n["path"]) for n in doc["nodes"]}
    assert kinds["sales.orders"] == ("model", models["sales.orders"]["strategy"], models["sales.orders"]["path"])
    assert kinds["raw.orders"] == ("seed", None, seeds["raw.orders"]) and kinds["ext.rates"] == ("source", None, None)
    layer_of = [n["layer"] for n in doc["nodes"]]
    assert layer_of == sorted(layer_of)  # printed layer by layer


def test_graph_of_a_selection_has_its_inputs_as_leaves(shop: Path) -> None:
    models, _, _ = structure(shop)
    chosen = upstream_closure(models, "sales.orders_daily")
    nodes, edges = expected_graph(shop, chosen)
    doc = json.loads(ok("graph", "+orders_daily", "--project", str(shop), "--format", "json"))
    assert {n["id"] for n in doc["nodes"]} == nodes == chosen | {"raw.orders"}
    assert {(e["from"], e["to"]) for e in doc["edges"]} == edges
    doc = json.loads(ok("graph", "fx_revenue", "--project", str(shop), "--format", "json"))
    # sales.orders is a model, not selected: no node; ext.rates is its input source
    assert {n["id"] for n in doc["nodes"]} == {"marts.fx_revenue", "ext.rates"}
    assert [(e["from"], e["to"]) for e in doc["edges"]] == [("ext.rates", "marts.fx_revenue")]


def test_graph_text_prints_the_layers(shop: Path) -> None:
    nodes, edges = expected_graph(shop)
    want = layers(nodes, edges)
    out = ok("graph", "--project", str(shop))
    layer, got, reads = None, {}, {}
    for line in out.splitlines():
        if line.startswith("layer "):
            layer = int(line.split()[1])
            continue
        name, _kind, *rest = line.split()
        got[name] = layer
        reads[name] = {r.rstrip(",") for r in rest[1:]} if rest else set()
    assert got == want
    assert reads == {n: {a for a, b in edges if b == n} for n in nodes}


def test_graph_dot_is_read_by_a_dot_parser(shop: Path) -> None:
    nodes, edges = expected_graph(shop)
    text = ok("graph", "--project", str(shop), "--format", "dot")
    (graph,) = pydot.graph_from_dot_data(text)
    assert graph.get_type() == "digraph"
    got_nodes = {n.get_name().strip('"') for n in graph.get_nodes() if n.get_name() not in ("node", "edge")}
    assert got_nodes == nodes
    assert {(e.get_source().strip('"'), e.get_destination().strip('"')) for e in graph.get_edges()} == edges
    shapes = {n.get_name().strip('"'): n.get_shape() for n in graph.get_nodes() if n.get_name() != "node"}
    assert shapes["sales.orders"] == "box" and shapes["raw.orders"] == shapes["ext.rates"] == "cylinder"


def test_dot_and_mermaid_escape_names_their_grammars_read_specially() -> None:
    from lakewrap import graph as g
    from lakewrap.listing import Node

    odd = ['we"ird.x\\y', "a#b.c<d>;e"]
    graph = g.Graph([(0, Node(odd[0].lower(), odd[0], "source")), (1, Node(odd[1].lower(), odd[1], "source"))],
                    [(odd[0].lower(), odd[1].lower())])
    (parsed,) = pydot.graph_from_dot_data(g.dot(graph))
    names = [n.get_name() for n in parsed.get_nodes() if n.get_name() != "node"]
    unquote = [n[1:-1].replace('\\"', '"').replace("\\\\", "\\") for n in names]
    assert unquote == odd and len(parsed.get_edges()) == 1
    text = g.mermaid(graph)
    labels = re.findall(r'\["([^"]*)"\]|\[\("([^"]*)"\)\]', text)
    decoded = [re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), a or b).split("<br/>")[0] for a, b in labels]
    assert decoded == odd


MERMAID_LINE = re.compile(r'^(flowchart LR|  n\d+(\["[^"]*"\]|\[\("[^"]*"\)\])|  n\d+ --> n\d+|'
                          r"  classDef (model|seed|source) [a-z-]+:#[0-9a-f]{6},[a-z-]+:#[0-9a-f]{6}|"
                          r"  class n\d+(,n\d+)* (model|seed|source))$")


def test_graph_mermaid_has_the_shape_of_its_grammar(shop: Path) -> None:
    nodes, edges = expected_graph(shop)
    text = ok("graph", "--project", str(shop), "--format", "mermaid")
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    for line in lines:
        assert MERMAID_LINE.match(line), line
    ids = {}
    for m in re.finditer(r'^  (n\d+)\[\(?"([^"]*)"', text, re.M):
        ids[m.group(1)] = m.group(2).split("<br/>")[0]
    assert set(ids.values()) == nodes and len(ids) == len(nodes)
    got = {(ids[a], ids[b]) for a, b in re.findall(r"^  (n\d+) --> (n\d+)$", text, re.M)}
    assert got == edges
    declared = set(re.findall(r"^  class (\S+) ", text, re.M))
    assert {i for group in declared for i in group.split(",")} == set(ids)


# --- show -----------------------------------------------------------------------------------------

TYPED_OK = """-- materialized incremental
-- partitioned daily key=created_at start=2024-01-01
-- column order_id BIGINT not_null
-- column amount "DECIMAL(18,2)" not_null
-- column created_at TIMESTAMP
SELECT order_id, CAST(amount AS DECIMAL(18, 2)) AS amount, created_at
FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end
"""
TYPED_BAD = """-- materialized table
-- column order_id INTEGER
-- column amount DOUBLE
-- column status VARCHAR
SELECT order_id, CAST(amount AS DECIMAL(18, 2)) AS amount, status
FROM raw.orders
"""
TYPED_NULL = """-- materialized table
-- column order_id BIGINT
-- column note VARCHAR not_null
SELECT order_id, CASE WHEN order_id % 2 = 0 THEN NULL ELSE 'odd' END AS note
FROM raw.orders
"""
TYPED_STAR = """-- materialized table
-- column ORDER_ID BIGINT
-- column gone VARCHAR
SELECT * FROM raw.orders
"""
BROKEN = """-- materialized table
SELECT order_id, no_such_column
FROM raw.orders
"""
LITERAL = """-- tag lit
CREATE TABLE IF NOT EXISTS sales.lit AS SELECT 1 AS a;
"""


def lake_files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / ".lakewrap").rglob("*")) if p.is_file()}


def runlog_rows(catalog: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the run-log tables in a DuckDB file, read without lakewrap."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{catalog}' AS cat (READ_ONLY)")
        tables = [r for r in con.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = "
                                         "'cat' AND table_name LIKE 'lakewrap_%' ORDER BY ALL").fetchall()]
        assert {t for _, t in tables} >= {"lakewrap_runs", "lakewrap_steps"}, tables
        return {f"{s}.{t}": con.execute(f'SELECT * FROM cat."{s}"."{t}" ORDER BY ALL').fetchall() for s, t in tables}
    finally:
        con.close()


def csv_rows(root: Path, select: str) -> list[tuple[Any, ...]]:
    """``select`` over ``orders``: the seed CSV as plain DuckDB reads it (its sidecar-free types)."""
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"CREATE VIEW orders AS SELECT * FROM read_csv('{root / 'seeds' / 'raw' / 'orders.csv'}')")
        return con.execute(select).fetchall()
    finally:
        con.close()


ORDERS_OF_DAY = ("SELECT order_id, customer_id, CAST(amount AS DECIMAL(18, 2)), status, created_at, updated_at "
                 "FROM orders WHERE created_at >= TIMESTAMP '{day}' "
                 "AND created_at < TIMESTAMP '{day}' + INTERVAL 1 DAY")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example project on its embedded DuckLake, seeded and run for 2024-01-01..03; then models
    with contracts, a broken one and a literal one added (never run)."""
    root = copy_shop(tmp_path_factory.mktemp("show") / "shop")
    ok("seed", "--project", str(root))
    ok("run", "--project", str(root), "--start", "2024-01-01", "--end", "2024-01-03")
    for name, text in (("typed_ok", TYPED_OK), ("typed_bad", TYPED_BAD), ("typed_null", TYPED_NULL),
                       ("typed_star", TYPED_STAR), ("broken", BROKEN), ("lit", LITERAL)):
        (root / "models" / "sales" / f"{name}.sql").write_text(text)
    return root


def as_json(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    """Rows as `show --format json` prints them (values JSON has no type for as their text)."""
    return Counter(tuple(json.loads(json.dumps(list(r), default=str))) for r in rows)


def show_json(root: Path, *args: str, code: int = 0) -> dict[str, Any]:
    got, out, err = cli("show", *args, "--project", str(root), "--format", "json")
    assert got == code, out + err
    return json.loads(out)  # type: ignore[no-any-return]


def test_show_prints_the_rows_of_the_partition_and_writes_nothing(built: Path, inspector: Any) -> None:
    before = (lake_files(built), inspector.state(built), runlog_rows(built / ".lakewrap" / "lake.ducklake"))
    want = csv_rows(built, ORDERS_OF_DAY.format(day="2024-01-02"))
    assert 10 < len(want) < 1000
    from lakewrap.show import show

    shown = show(built, "orders", partition="2024-01-02", limit=1000)
    assert Counter(shown.rows) == Counter(want) and not shown.truncated
    assert {r[4].date().isoformat() for r in shown.rows} == {"2024-01-02"}  # only that day
    assert [(c.name, c.type) for c in shown.columns] == [
        ("order_id", "BIGINT"), ("customer_id", "BIGINT"), ("amount", "DECIMAL(18,2)"), ("status", "VARCHAR"),
        ("created_at", "TIMESTAMP"), ("updated_at", "TIMESTAMP")]
    doc = show_json(built, "sales.orders", "--partition", "2024-01-02", "--limit", "1000")
    assert doc["window"]["value"] == "2024-01-02" and doc["window"]["start"] == "2024-01-02T00:00:00+00:00"
    assert Counter(tuple(r) for r in doc["rows"]) == as_json(want)
    assert (lake_files(built), inspector.state(built), runlog_rows(built / ".lakewrap" / "lake.ducklake")) == before


def test_show_reads_upstream_models_as_the_lake_holds_them(built: Path, inspector: Any) -> None:
    """orders_daily reads sales.orders: the reference reads that table from the lake without lakewrap."""
    before = inspector.state(built)
    con = inspector.con
    con.execute(f"ATTACH 'ducklake:{built / '.lakewrap' / 'lake.ducklake'}' AS chk "
                f"(DATA_PATH '{built / '.lakewrap' / 'data'}/', READ_ONLY)")
    try:
        con.execute("SET TimeZone = 'UTC'")
        want = con.execute("SELECT CAST(date_trunc('day', created_at) AS TIMESTAMP), status, count(*), sum(amount) "
                           "FROM chk.sales.orders WHERE created_at >= TIMESTAMP '2024-01-03' "
                           "AND created_at < TIMESTAMP '2024-01-04' GROUP BY ALL").fetchall()
    finally:
        con.execute("DETACH chk")
    from lakewrap.show import show

    shown = show(built, "orders_daily", partition="2024-01-03")
    assert Counter(shown.rows) == Counter(want) and len(want) == 3
    assert [c.name for c in shown.columns] == ["order_day", "status", "orders", "revenue"]
    assert inspector.state(built) == before


def test_show_of_a_python_model_runs_its_function_on_the_pinned_lake_and_writes_nothing(
        built: Path, inspector: Any) -> None:
    """The example's Python model: show runs its function (``ctx.ref`` reading the lake) and prints
    its result; the reference computes the segments in plain DuckDB from the lake's table."""
    before = (lake_files(built), inspector.state(built), runlog_rows(built / ".lakewrap" / "lake.ducklake"))
    con = inspector.con
    con.execute(f"ATTACH 'ducklake:{built / '.lakewrap' / 'lake.ducklake'}' AS chk "
                f"(DATA_PATH '{built / '.lakewrap' / 'data'}/', READ_ONLY)")
    try:
        want = con.execute(
            "WITH r AS (SELECT customer_id, revenue FROM chk.marts.revenue_by_customer), "
            "t AS (SELECT quantile_cont(revenue, 0.8) AS top FROM r WHERE revenue > 0) "
            "SELECT customer_id, revenue, CASE WHEN revenue = 0 THEN 'new' WHEN revenue >= top THEN 'top' "
            "ELSE 'regular' END FROM r, t").fetchall()
    finally:
        con.execute("DETACH chk")
    from lakewrap.show import show

    shown = show(built, "customer_segments", limit=1000)
    assert Counter(shown.rows) == Counter(want) and len(want) > 5 and not shown.truncated
    assert {r[2] for r in want} >= {"top", "regular"}  # the data reach both sides of the threshold
    assert [(c.name, c.type) for c in shown.columns] == [
        ("customer_id", "BIGINT"), ("revenue", "DECIMAL(38,2)"), ("segment", "VARCHAR")]
    assert (lake_files(built), inspector.state(built), runlog_rows(built / ".lakewrap" / "lake.ducklake")) == before


def test_show_limit_caps_the_rows_and_says_there_are_more(built: Path) -> None:
    total = len(csv_rows(built, ORDERS_OF_DAY.format(day="2024-01-01")))
    doc = show_json(built, "orders", "--partition", "2024-01-01", "--limit", "2")
    assert len(doc["rows"]) == 2 and doc["truncated"] is True and doc["limit"] == 2
    doc = show_json(built, "orders", "--partition", "2024-01-01", "--limit", str(total))
    assert len(doc["rows"]) == total and doc["truncated"] is False
    doc = show_json(built, "orders", "--partition", "2024-01-01", "--limit", "0")
    assert doc["rows"] == [] and next(c["name"] for c in doc["columns"]) == "order_id"
    code, out, err = cli("show", "orders", "--partition", "2024-01-01", "--limit", "2", "--project", str(built))
    assert code == 0 and "the first 2 rows (there are more" in out and "nothing was written" in out, out + err
    code, _out, err = cli("show", "orders", "--limit", "-1", "--project", str(built))
    assert code == 2 and "--limit" in err


def test_show_without_partition_reads_the_latest_complete_one(built: Path) -> None:
    doc = show_json(built, "orders", "--now", "2024-01-03T05:00:00Z", "--limit", "1000")
    assert doc["window"]["value"] == "2024-01-02"
    assert Counter(tuple(r) for r in doc["rows"]) == as_json(csv_rows(built, ORDERS_OF_DAY.format(day="2024-01-02")))


def test_show_marks_the_columns_against_the_contract(built: Path) -> None:
    doc = show_json(built, "typed_ok", "--partition", "2024-01-02")
    assert doc["contract"] == {"declared": True, "ok": True, "problems": []}
    assert [(c["name"], c["type"], c["declared"], c["problem"]) for c in doc["columns"]] == [
        ("order_id", "BIGINT", "BIGINT", None), ("amount", "DECIMAL(18,2)", "DECIMAL(18,2)", None),
        ("created_at", "TIMESTAMP", "TIMESTAMP", None)]
    doc = show_json(built, "typed_bad", code=1)
    assert doc["contract"]["ok"] is False
    marks = {c["name"]: c["problem"] for c in doc["columns"]}
    assert marks["status"] is None
    assert marks["order_id"] == "column `order_id` is declared INTEGER but the SELECT returns BIGINT"
    assert marks["amount"] == "column `amount` is declared DOUBLE but the SELECT returns DECIMAL(18,2)"
    assert doc["contract"]["problems"] == [
        "models/sales/typed_bad.sql:2: column `order_id` is declared INTEGER but the SELECT returns BIGINT",
        "models/sales/typed_bad.sql:3: column `amount` is declared DOUBLE but the SELECT returns DECIMAL(18,2)"]
    assert doc["rows"]  # the rows are still shown
    code, out, err = cli("show", "typed_bad", "--project", str(built))
    assert code == 1 and "MISMATCH" in out and "typed_bad.sql:3: column `amount` is declared DOUBLE" in err


def test_show_checks_not_null_on_the_rows_shown_and_names_undeclared_columns(built: Path) -> None:
    doc = show_json(built, "typed_null", "--limit", "7", code=1)
    nulls = sum(r[1] is None for r in doc["rows"])
    assert len(doc["rows"]) == 7 and 0 < nulls < 7 and all((r[1] is None) == (r[0] % 2 == 0) for r in doc["rows"])
    assert doc["contract"]["problems"] == [
        f"models/sales/typed_null.sql:3: column `note` is declared not_null but {nulls} of the rows shown are NULL"]
    columns_only = show_json(built, "typed_null", "--limit", "0")  # no row shown, no NULL seen; types agree
    assert columns_only["contract"]["ok"] is True
    doc = show_json(built, "typed_star", "--limit", "1", code=1)
    names = [c["name"] for c in doc["columns"]]
    assert names == ["order_id", "customer_id", "amount", "status", "created_at", "updated_at"]
    assert doc["columns"][0]["declared"] == "BIGINT" and doc["columns"][0]["problem"] is None  # ORDER_ID
    assert doc["contract"]["problems"] == [
        *(f"models/sales/typed_star.sql: the SELECT returns column `{c['name']}` ({c['type']}) that no "
          "`-- column` declares" for c in doc["columns"][1:]),
        "models/sales/typed_star.sql:3: column `gone` is declared VARCHAR but the SELECT does not return it"]
    code, out, err = cli("show", "typed_star", "--limit", "1", "--project", str(built))
    assert code == 1 and "MISMATCH: not declared" in out and "`gone` is declared VARCHAR" in err, out + err


def test_show_refuses_what_it_cannot_show_and_names_it(built: Path) -> None:
    code, _out, err = cli("show", "orders", "--partition", "2024-1-2", "--project", str(built))
    assert code == 2 and "models/sales/orders.sql: `2024-1-2` is not a daily partition value" in err, err
    assert "daily partitions are written YYYY-MM-DD" in err
    code, _out, err = cli("show", "customers", "--partition", "2024-01-02", "--project", str(built))
    assert code == 2 and "is not partitioned; it takes no --partition" in err, err
    code, _out, err = cli("show", "ordrs", "--project", str(built))
    assert code == 2 and "did you mean `orders`?" in err, err
    code, _out, err = cli("show", "tag:sales", "--project", str(built))
    assert code == 2 and "`show` takes one model" in err, err
    code, _out, err = cli("show", "lit", "--project", str(built))
    assert code == 2 and "is a literal model" in err, err
    code, _out, err = cli("show", "broken", "--project", str(built))
    assert code == 1 and "models/sales/broken.sql:2:" in err and "no_such_column" in err, err


def test_show_names_both_models_of_an_ambiguous_name(tmp_path: Path) -> None:
    root = tmp_path / "p"
    for schema in ("a", "b"):
        (root / "models" / schema).mkdir(parents=True)
        (root / "models" / schema / "m.sql").write_text("-- materialized table\nSELECT 1 AS x\n")
    code, _out, err = cli("show", "m", "--project", str(root))
    assert code == 2 and "`m` names 2 models: a.m, b.m" in err and "schema.name" in err, err
    assert not (root / ".lakewrap").exists()
    code, _out, err = cli("show", "a.m", "--project", str(root))
    assert code == 2 and "the lake does not exist yet" in err and not (root / ".lakewrap").exists(), err


# --- show on Iceberg ------------------------------------------------------------------------------


def iceberg_state(root: Path) -> dict[str, list[int]]:
    from lakewrap.execute.iceberg import IcebergLake

    lake = IcebergLake.open(root)
    return {name: [s.snapshot_id for s in lake.load(name).metadata.snapshots] for name in lake.tables()}


def test_show_on_iceberg_reads_pinned_views_and_writes_nothing(tmp_path: Path) -> None:
    root = copy_shop(tmp_path / "shop")
    (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\n\n[security]\nscripts = ["models/marts"]\n')
    view = root / "models" / "staging" / "customers.sql"
    view.write_text(view.read_text().replace("-- materialized view", "-- materialized table"))
    ok("seed", "--project", str(root))
    ok("run", "orders", "--project", str(root), "--partition", "2024-01-02")
    before = (lake_files(root), iceberg_state(root), runlog_rows(root / ".lakewrap" / "runlog.duckdb"))
    assert before[1]["sales.orders"] and before[1]["raw.orders"]

    doc = show_json(root, "orders", "--partition", "2024-01-03", "--limit", "1000")  # reads the seed raw.orders
    assert doc["substrate"] == "iceberg"
    want = csv_rows(root, ORDERS_OF_DAY.format(day="2024-01-03"))
    assert Counter(tuple(r) for r in doc["rows"]) == as_json(want)

    from lakewrap.execute.iceberg import IcebergLake

    table = IcebergLake.open(root).load("sales.orders").scan().to_arrow()
    con = duckdb.connect()
    con.register("t", table)
    want = con.execute("SELECT CAST(date_trunc('day', created_at) AS TIMESTAMP), status, count(*), sum(amount) "
                       "FROM t GROUP BY ALL").fetchall()
    con.close()
    from lakewrap.show import show

    shown = show(root, "orders_daily", partition="2024-01-02")  # reads the model sales.orders
    assert Counter(shown.rows) == Counter(want) and len(want) == 3
    assert all(isinstance(r[0], datetime) and isinstance(r[3], Decimal) for r in shown.rows)
    assert (lake_files(root), iceberg_state(root), runlog_rows(root / ".lakewrap" / "runlog.duckdb")) == before


def test_ls_state_new_lists_the_models_the_lake_never_built(built: Path) -> None:
    doc = json.loads(ok("ls", "state:new", "--project", str(built), "--format", "json"))
    assert {m["target"] for m in doc["models"]} == {"sales.typed_ok", "sales.typed_bad", "sales.typed_null",
                                                    "sales.typed_star", "sales.broken", "sales.lit"}
    assert next(m for m in doc["models"] if m["target"] == "sales.lit")["strategy"] == "literal"


EVENTS = "id,ts\n" + "".join(f"{i},2024-01-0{1 + i % 3} {i:02d}:00:00\n" for i in range(1, 13))
DYNAMIC = """-- materialized incremental
-- partitioned dynamic key=ts
-- append
SELECT id, ts FROM raw.events WHERE ts > $partition_start AND ts <= $partition_end
"""


def test_show_reads_a_dynamic_models_window_from_its_recorded_watermark(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "models" / "app").mkdir(parents=True)
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "events.csv").write_text(EVENTS)
    (root / "models" / "app" / "events.sql").write_text(DYNAMIC)
    ok("seed", "--project", str(root))
    ok("run", "--project", str(root), "--now", "2024-01-02T00:00:00Z")  # records the watermark
    doc = show_json(root, "events", "--now", "2024-01-03T00:00:00Z", "--limit", "100")
    assert doc["window"]["kind"] == "dynamic" and doc["window"]["closed"] == "(start, end]"
    assert doc["window"]["start"] == "2024-01-02T00:00:00+00:00" and doc["window"]["end"] == "2024-01-03T00:00:00+00:00"
    con = duckdb.connect()
    want = con.execute(f"SELECT id, ts FROM read_csv('{root / 'seeds' / 'raw' / 'events.csv'}') "
                       "WHERE ts > TIMESTAMP '2024-01-02' AND ts <= TIMESTAMP '2024-01-03'").fetchall()
    con.close()
    assert 0 < len(want) < 12 and Counter(tuple(r) for r in doc["rows"]) == as_json(want)
    code, _out, err = cli("show", "events", "--partition", "2024-01-02", "--project", str(root))
    assert code == 2 and "has a dynamic (watermark) partition; it takes no --partition" in err, err
