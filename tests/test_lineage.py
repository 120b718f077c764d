"""Column lineage (lakewrap.lineage, `lakewrap lineage`): a corpus of queries against column paths
written by hand, then the whole DAG of small projects and of examples/shop (upstream through
models and `*`, downstream, the located errors with a did-you-mean). No lake is opened here;
the docs-site tests (tests/test_docsite.py) read a lake's types."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import run
from lakewrap.errors import SelectionError
from lakewrap.lineage import build, of_project, query_paths
from lakewrap.project import Project

ROOT = Path(__file__).resolve().parents[1]

TABLES: dict[str, dict[str, str | None]] = {
    "s.orders": {"id": "BIGINT", "customer_id": "BIGINT", "amount": "DECIMAL(18, 2)", "status": "VARCHAR",
                 "created_at": "TIMESTAMP"},
    "s.customers": {"id": "BIGINT", "name": "VARCHAR", "country": "VARCHAR"},
    "s.refunds": {"order_id": "BIGINT", "amount": "DECIMAL(18, 2)"},
}

# (what it exercises, SQL, output column, every path from it to a table column, written by hand)
CORPUS: list[tuple[str, str, str, list[tuple[str, ...]]]] = [
    ("a plain column", "SELECT id FROM s.orders", "id", [("id", "s.orders.id")]),
    ("an alias over an expression", "SELECT amount * 2 AS doubled FROM s.orders", "doubled",
     [("doubled", "s.orders.amount")]),
    ("a CTE", "WITH big AS (SELECT id, amount FROM s.orders WHERE amount > 10) SELECT amount AS a FROM big", "a",
     [("a", "big.amount", "s.orders.amount")]),
    ("CTEs reading CTEs",
     "WITH a AS (SELECT amount AS x FROM s.orders), b AS (SELECT x + 1 AS y FROM a) SELECT y FROM b", "y",
     [("y", "b.y", "a.x", "s.orders.amount")]),
    ("a join with table aliases",
     "SELECT o.id, c.name FROM s.orders AS o JOIN s.customers AS c ON c.id = o.customer_id", "name",
     [("name", "s.customers.name")]),
    ("an unqualified column of a join, resolved by the known columns",
     "SELECT name, amount FROM s.orders o JOIN s.customers c ON c.id = o.customer_id", "amount",
     [("amount", "s.orders.amount")]),
    ("`*` of a table", "SELECT * FROM s.customers", "country", [("country", "s.customers.country")]),
    ("`t.*` beside a CTE's `*`",
     "WITH c AS (SELECT * FROM s.customers) SELECT o.*, c.country FROM s.orders o JOIN c ON c.id = o.customer_id",
     "status", [("status", "s.orders.status")]),
    ("a CTE's `*` column",
     "WITH c AS (SELECT * FROM s.customers) SELECT o.*, c.country FROM s.orders o JOIN c ON c.id = o.customer_id",
     "country", [("country", "c.country", "s.customers.country")]),
    ("an aggregate", "SELECT customer_id, sum(amount) AS total FROM s.orders GROUP BY ALL", "total",
     [("total", "s.orders.amount")]),
    ("count(*) reads no column", "SELECT status, count(*) AS n FROM s.orders GROUP BY status", "n", []),
    ("count(DISTINCT col)", "SELECT count(DISTINCT customer_id) AS buyers FROM s.orders", "buyers",
     [("buyers", "s.orders.customer_id")]),
    ("CASE reads its condition and its branches",
     "SELECT CASE WHEN status = 'returned' THEN -amount ELSE amount END AS signed FROM s.orders", "signed",
     [("signed", "s.orders.amount"), ("signed", "s.orders.status")]),
    ("a window function reads its argument, partition and order",
     "SELECT sum(amount) OVER (PARTITION BY customer_id ORDER BY created_at) AS running FROM s.orders", "running",
     [("running", "s.orders.amount"), ("running", "s.orders.created_at"), ("running", "s.orders.customer_id")]),
    ("a subquery in FROM", "SELECT t.v FROM (SELECT amount AS v FROM s.orders) AS t", "v",
     [("v", "t.v", "s.orders.amount")]),
    ("a scalar subquery", "SELECT id, (SELECT max(amount) FROM s.refunds) AS top_refund FROM s.orders",
     "top_refund", [("top_refund", "s.refunds.amount")]),
    ("UNION ALL: both branches, by position",
     "SELECT id, amount FROM s.orders UNION ALL SELECT order_id, amount FROM s.refunds", "id",
     [("id", "s.orders.id"), ("id", "s.refunds.order_id")]),
    ("UNION: the second column",
     "SELECT id, amount FROM s.orders UNION SELECT order_id, amount FROM s.refunds", "amount",
     [("amount", "s.orders.amount"), ("amount", "s.refunds.amount")]),
    ("a literal reads no column", "SELECT 1 AS one, id FROM s.orders", "one", []),
    ("a left join's coalesce",
     "SELECT o.id, coalesce(r.amount, 0) AS refunded FROM s.orders o LEFT JOIN s.refunds r ON r.order_id = o.id",
     "refunded", [("refunded", "s.refunds.amount")]),
    ("a partition parameter in WHERE",
     "SELECT id FROM s.orders WHERE created_at >= $partition_start AND created_at < $partition_end", "id",
     [("id", "s.orders.id")]),
    ("identifiers in any case", "SELECT ID AS Ident FROM S.Orders", "Ident", [("ident", "s.orders.id")]),
    ("an aggregate over a CTE joined to a table",
     "WITH paid AS (SELECT customer_id, amount FROM s.orders WHERE status <> 'returned') "
     "SELECT c.country, sum(p.amount) AS revenue FROM paid p JOIN s.customers c ON c.id = p.customer_id "
     "GROUP BY c.country", "revenue", [("revenue", "paid.amount", "s.orders.amount")]),
]


@pytest.mark.parametrize(("what", "sql", "column", "paths"), CORPUS, ids=[c[0] for c in CORPUS])
def test_a_query_column_has_the_paths_written_by_hand(what: str, sql: str, column: str,
                                                      paths: list[tuple[str, ...]]) -> None:
    assert query_paths(sql, column, TABLES) == sorted(paths), what


def test_the_corpus_is_large_and_covers_every_construct() -> None:
    text = " ".join(c[1].upper() for c in CORPUS)
    assert len(CORPUS) >= 15
    for construct in ("WITH", "JOIN", " AS ", "*", "SUM(", "CASE", "OVER (", "(SELECT", "UNION"):
        assert construct in text, construct


# --- a project ------------------------------------------------------------------------------------


def _project(tmp_path: Path, models: dict[str, str]) -> Path:
    root = tmp_path / "p"
    (root / "seeds" / "raw").mkdir(parents=True)
    (root / "seeds" / "raw" / "pay.csv").write_text("id,customer,amount\n1,7,2.5\n")
    (root / "seeds" / "raw" / "pay.toml").write_text('[columns]\namount = "DECIMAL(12, 2)"\n')
    for rel, text in models.items():
        path = root / "models" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


MODELS = {
    "stg/a.sql": "-- materialized table\n-- column id BIGINT \"the payment\"\n"
                 "-- column cents DECIMAL(18,0) \"amount in cents\"\n"
                 "SELECT id, CAST(amount * 100 AS DECIMAL(18, 0)) AS cents FROM raw.pay\n",
    "marts/b.sql": "-- materialized table\nSELECT * FROM stg.a\n",
    "marts/c.sql": "-- materialized table\nWITH x AS (SELECT cents FROM marts.b)\nSELECT sum(cents) AS total FROM x\n",
    "marts/d.sql": "-- materialized table\n"
                   "SELECT b.id, p.customer FROM marts.b AS b JOIN raw.pay AS p ON p.id = b.id\n",
}


def test_a_column_is_followed_through_models_and_star_down_to_the_seed(tmp_path: Path) -> None:
    root = _project(tmp_path, MODELS)
    graph = of_project(root)
    # `SELECT *` of a model: its columns are the upstream's, with the contracts' types
    assert graph.relations["marts.b"].columns == {"id": "BIGINT", "cents": "DECIMAL(18, 0)"}
    assert graph.relations["stg.a"].descriptions == {"id": "the payment", "cents": "amount in cents"}
    assert graph.relations["raw.pay"].columns == {"id": None, "customer": None, "amount": "DECIMAL(12, 2)"}
    tree = graph.upstream("marts.c", "total")
    chain = []
    step = tree
    while step.next:
        assert len(step.next) == 1
        chain.append((step.name, step.via))
        step = step.next[0]
    chain.append((step.name, step.via))
    assert chain == [("marts.c.total", ()), ("marts.b.cents", ("x.cents",)), ("stg.a.cents", ()),
                     ("raw.pay.amount", ())]
    assert tree.leaves() == ["raw.pay.amount"]
    assert step.kind == "seed" and step.path == "seeds/raw/pay.csv"


def test_downstream_finds_every_model_column_computed_from_a_source_column(tmp_path: Path) -> None:
    graph = of_project(_project(tmp_path, MODELS))
    assert graph.downstream("raw.pay", "amount").leaves() == ["marts.c.total"]
    assert graph.downstream("raw.pay", "id").leaves() == ["marts.d.id"]
    down = graph.downstream("stg.a", "id")
    assert [n.name for n in down.next] == ["marts.b.id"]
    assert down.leaves() == ["marts.d.id"]
    # a join key is not an output column's input: raw.pay.id feeds d.id only through b
    assert [n.name for n in graph.downstream("raw.pay", "id").next] == ["stg.a.id"]


def test_a_star_over_a_table_nobody_knows_is_reported_not_guessed(tmp_path: Path) -> None:
    root = _project(tmp_path, {"m/e.sql": "-- materialized table\nSELECT * FROM ext.unknown_table\n"})
    graph = of_project(root)
    assert graph.relations["m.e"].columns is None
    assert "`*`" in graph.problems["m.e"]
    with pytest.raises(SelectionError, match=r"columns of `m\.e` are not known"):
        graph.resolve("m.e.x")


def test_a_table_nobody_describes_has_the_columns_the_models_read(tmp_path: Path) -> None:
    root = _project(tmp_path, {"m/f.sql": "-- materialized table\nSELECT k, v * 2 AS w FROM ext.things\n"})
    graph = of_project(root)
    assert graph.relations["ext.things"].columns == {"k": None, "v": None}
    assert "no seed or lake table" in graph.problems["ext.things"]
    assert graph.downstream("ext.things", "v").leaves() == ["m.f.w"]
    rel, column = graph.resolve("ext.things.v")
    assert (rel.kind, column) == ("table", "v")


def test_the_lake_s_types_fill_in_what_the_files_do_not_say(tmp_path: Path) -> None:
    root = _project(tmp_path, MODELS)
    project = Project.load(root)
    lake = {"raw.pay": {"id": "BIGINT", "customer": "INTEGER", "amount": "DECIMAL(12,2)"},
            "marts.d": {"id": "BIGINT", "customer": "INTEGER"}, "ext.t": {"k": "VARCHAR"}}
    graph = build(project, root, lake)
    assert graph.relations["raw.pay"].columns == {"id": "BIGINT", "customer": "INTEGER", "amount": "DECIMAL(12,2)"}
    assert graph.relations["marts.d"].columns == {"id": "BIGINT", "customer": "INTEGER"}
    assert graph.relations["ext.t"].kind == "table"  # a lake table no model writes is a source


def test_unknown_names_get_a_located_did_you_mean(tmp_path: Path) -> None:
    root = _project(tmp_path, MODELS)
    code, out, err = run("lineage", "marts.c.totl", "--project", str(root))
    assert code == 2 and out == ""
    assert "models/marts/c.sql:2: `marts.c` has no column `totl`" in err
    assert "did you mean `total`?" in err
    code, _, err = run("lineage", "mart.c.total", "--project", str(root))
    assert code == 2 and "no model or source `mart.c`" in err and "did you mean `marts.c`?" in err
    code, _, err = run("lineage", "total", "--project", str(root))
    assert code == 2 and "schema.model.column" in err


def test_the_command_prints_the_tree_and_its_json(tmp_path: Path) -> None:
    root = _project(tmp_path, MODELS)
    code, out, _ = run("lineage", "marts.c.total", "--project", str(root))
    assert code == 0, out
    assert out.splitlines() == [
        "marts.c.total  = SUM(x.cents)  [model models/marts/c.sql]",
        "└── marts.b.cents  via x.cents  [model models/marts/b.sql]",
        "    └── stg.a.cents  = CAST(pay.amount * 100 AS DECIMAL(18, 0))  [model models/stg/a.sql]",
        "        └── raw.pay.amount  [seed seeds/raw/pay.csv]",
        "sources: raw.pay.amount",
    ]
    code, out, _ = run("lineage", "raw.pay.id", "--downstream", "--format", "json", "--project", str(root))
    assert code == 0
    got = json.loads(out)
    assert got["direction"] == "downstream"
    assert got["computed_from_it"] == ["marts.b.id", "marts.d.id", "stg.a.id"]
    assert [n["column"] for n in got["tree"]["next"]] == ["stg.a.id"]
    assert [n["column"] for n in got["tree"]["next"][0]["next"]] == ["marts.b.id"]


def test_the_example_project_lineage(tmp_path: Path) -> None:
    root = tmp_path / "shop"
    shutil.copytree(ROOT / "examples" / "shop", root, ignore=shutil.ignore_patterns("target", ".lakewrap"))
    graph = of_project(root)
    assert graph.upstream("sales.orders_daily", "revenue").leaves() == ["raw.orders.amount"]
    assert [n.name for n in graph.upstream("sales.orders_daily", "revenue").next] == ["sales.orders.amount"]
    assert graph.upstream("marts.revenue_by_customer", "country").leaves() == ["raw.customers.country"]
    assert graph.upstream("sales.orders_daily", "orders").next == ()  # count(*)
    assert graph.downstream("raw.orders", "amount").leaves() == [
        "marts.revenue_by_customer.revenue", "sales.order_events.amount", "sales.orders_daily.revenue"]
    assert graph.relations["marts.customer_history"].columns is not None
    assert list(graph.relations["marts.customer_history"].columns) == ["customer_id", "name", "country", "tier"]
    # the one model lineage cannot see into is the Python model, whose function computes its columns
    assert set(graph.problems) == {"marts.customer_segments"}
    assert graph.problems["marts.customer_segments"].startswith("a Python model")
    assert graph.upstream("marts.customer_segments", "segment").next == ()  # stops at the function
    assert not (root / ".lakewrap").exists()  # reading the project made no lake


def test_a_literal_model_says_it_has_no_column_lineage(tmp_path: Path) -> None:
    root = _project(tmp_path, {"m/log.sql": "CREATE TABLE IF NOT EXISTS m.log (id BIGINT);\n"
                                            "INSERT INTO m.log SELECT id FROM raw.pay;\n"})
    graph = of_project(root)
    assert "literal" in graph.problems["m.log"]
    assert graph.downstream("raw.pay", "id").next == ()  # its INSERT is not followed


def test_a_folder_that_is_not_a_project_is_refused_and_left_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "EMPTY_DIR"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a project\n")
    code, _, err = run("lineage", "a.b.c", "--project", str(folder))
    assert code == 2 and "is not a lakewrap project" in err
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
