"""`lakewrap compile` as a user runs it: output, exit codes, JSON contract, cache, imports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES
from helpers import install_dist, run, site_env
from lakewrap.compilers.artifacts import SCHEMA_VERSION, CompileOutput

SHOP = EXAMPLES / "shop"


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    dest = tmp_path / "shop"
    shutil.copytree(SHOP, dest, ignore=shutil.ignore_patterns("target", ".lakewrap"))
    return dest


def test_compile_prints_every_model_in_dependency_order(shop: Path) -> None:
    code, out, _ = run("compile", "--project", str(shop), "--partition", "2024-01-02")
    assert code == 0
    models = [line.split()[-1] for line in out.splitlines() if line.startswith("-- model:")]
    # every .sql file, and each Python model (one @lakewrap.model function per file here)
    assert len(models) == len(list((shop / "models").rglob("*.sql"))) + len(list((shop / "models").rglob("*.py")))
    assert models.index("models/marts/revenue_by_customer.sql") < models.index("models/marts/customer_segments.py")
    # orders_daily reads sales.orders, which reads raw.orders: upstream first
    assert models.index("models/sales/orders.sql") < models.index("models/sales/orders_daily.sql")
    assert models.index("models/staging/customers.sql") < models.index("models/marts/customer_history.sql")
    assert out.count("BEGIN TRANSACTION;") == out.count("COMMIT;") == len(models)
    assert "-- idempotent: NO (append inserts the rows again on every re-run)" in out
    assert "$partition_start = TIMESTAMPTZ '2024-01-02T00:00:00+00:00'" in out


def test_compile_json_is_the_documented_schema(shop: Path) -> None:
    code, out, _ = run("compile", "--project", str(shop), "--partition", "2024-01-02", "--format", "json")
    assert code == 0
    doc = CompileOutput.validate_json(out)
    assert doc.schema_version == SCHEMA_VERSION == 1
    by_model = {p.path: p for p in doc.plans}
    orders = by_model["models/sales/orders.sql"]
    assert orders.strategy == "merge" and orders.target == "sales.orders"
    assert orders.window is not None and orders.window.start == "2024-01-02T00:00:00+00:00"
    stage = next(s for s in orders.statements if s.role == "stage")
    assert set(stage.params) == {"partition_start", "partition_end"}  # only what the statement uses
    assert all(not s.params for s in orders.statements if s.role in ("setup", "bootstrap", "cleanup"))
    raw = json.loads(out)
    assert raw["plans"][0]["statements"][0]["role"] == "setup"


def test_selectors(shop: Path) -> None:
    def models(*args: str) -> list[str]:
        code, out, err = run("compile", "--project", str(shop), "--partition", "2024-01-02", *args)
        assert code == 0, err
        return [line.split("/")[-1] for line in out.splitlines() if line.startswith("-- model:")]

    assert models("orders") == ["orders.sql"]
    assert models("sales.orders") == ["orders.sql"]
    assert models("orders+") == ["orders.sql", "revenue_by_customer.sql", "orders_daily.sql", "customer_segments.py"]
    assert models("+customer_history") == ["customers.sql", "customer_history.sql"]
    assert sorted(models("tag:sales")) == ["orders.sql", "orders_daily.sql"]
    assert sorted(models("path:models/marts")) == ["customer_history.sql", "customer_segments.py",
                                                   "revenue_by_customer.sql"]
    assert models("orders+", "--exclude", "revenue_by_customer") == ["orders.sql", "orders_daily.sql",
                                                                     "customer_segments.py"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ordrs"], "did you mean `orders`"),
        (["tag:nope"], "no model has tag `nope`"),
        (["path:../etc"], "must stay inside the project"),
        (["--partition", "2024-02-30"], "day is out of range"),
        (["--partition", "yesterday"], "is not a daily partition value"),
    ],
)
def test_bad_usage_exits_2(shop: Path, args: list[str], message: str) -> None:
    code, out, err = run("compile", "--project", str(shop), *args)
    assert code == 2
    assert message in err
    assert out == ""


def test_unknown_option_exits_2(shop: Path) -> None:
    code, _, _ = run("compile", "--project", str(shop), "--nope")
    assert code == 2


def test_model_error_exits_1_and_names_the_file(shop: Path) -> None:
    broken = "-- materialized incremental\n-- partitoned daily\nSELECT 1 AS x\n"
    (shop / "models" / "sales" / "broken.sql").write_text(broken)
    code, out, err = run("compile", "--project", str(shop))
    assert code == 1
    assert "models/sales/broken.sql:2:4" in err
    assert "did you mean `partitioned`" in err
    assert out == ""


def test_cycle_is_reported_with_its_path(tmp_path: Path) -> None:
    models = tmp_path / "models" / "m"
    models.mkdir(parents=True)
    (models / "a.sql").write_text("-- materialized table\nSELECT x FROM m.b\n")
    (models / "b.sql").write_text("-- materialized table\nSELECT x FROM m.a\n")
    code, _, err = run("compile", "--project", str(tmp_path))
    assert code == 1
    assert "cycle" in err and "models/m/a.sql" in err and "models/m/b.sql" in err


def test_two_models_writing_one_table(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "x").mkdir(parents=True)
    (models / "x" / "t.sql").write_text("-- materialized table\nSELECT 1 AS a\n")
    (models / "other.sql").write_text("-- materialized table\n-- target x.t\nSELECT 1 AS a\n")
    code, _, err = run("compile", "--project", str(tmp_path))
    assert code == 1
    assert "two models write `x.t`" in err


def test_symlink_leaving_the_project_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.sql"
    outside.write_text("-- materialized table\nSELECT 1 AS a\n")
    project = tmp_path / "p"
    (project / "models").mkdir(parents=True)
    (project / "models" / "evil.sql").symlink_to(outside)
    code, _, err = run("compile", "--project", str(project))
    assert code == 1
    assert "resolves outside the project" in err


def test_cache_gives_identical_output_and_notices_edits(shop: Path) -> None:
    args = ("compile", "--project", str(shop), "--partition", "2024-01-03", "--now", "2024-02-01T00:00:00Z")
    cold = run(*args)[1]
    assert (shop / "target" / "cache" / "compile-v1.json").exists()
    warm = run(*args)[1]
    assert warm == cold
    assert run(*args, "--no-cache")[1] == cold
    model = shop / "models" / "sales" / "orders.sql"
    model.write_text(model.read_text().replace("customer_id, CAST", "customer_id * 2 AS customer_id, CAST"))
    edited = run(*args)[1]
    assert "customer_id * 2 AS customer_id" in edited and edited != cold


def _imported_by_compile(project: Path, *extra: str) -> list[str]:
    code = (
        "import sys\n"
        "from lakewrap.cli import main\n"
        "try:\n"
        f"    main(['compile', '--project', {str(project)!r}, '--partition', '2024-01-02', *{list(extra)!r}])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('duckdb', 'pyarrow', 'pyiceberg'))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("HEAVY "))
    return sorted({m.split(".")[0] for m in eval(line[len("HEAVY "):])})


def test_compile_imports_duckdb_only_to_parse(shop: Path) -> None:
    """A cold compile imports duckdb for its parser (lakewrap.grammar), never pyarrow or pyiceberg; a
    warm one, whose files were all checked when they were cached, does not import duckdb at all."""
    assert _imported_by_compile(shop, "--no-cache") == ["duckdb"]
    _imported_by_compile(shop)  # fills the cache
    assert _imported_by_compile(shop) == []


def test_plugin_keyword_through_entry_point(tmp_path: Path) -> None:
    """A real installed distribution (a dist-info on sys.path) adds a keyword without editing core."""
    site = install_dist(tmp_path / "site", "lakewrap_owner", "lakewrap.plugins", "owner = lakewrap_owner:register", (
        "def register(registry):\n"
        "    @registry.keyword('owner', usage='owner <team>', summary='the owning team')\n"
        "    def owner(ann, header):\n"
        "        (arg,) = ann.positional\n"
        "        header.extensions['owner'] = arg.value\n"
    ))
    model = tmp_path / "models" / "t.sql"
    model.parent.mkdir()
    model.write_text("-- materialized table\n-- owner team-a\nSELECT 1 AS a\n")
    code = (
        "from pathlib import Path\n"
        "from lakewrap.parse import parse_model\n"
        f"spec = parse_model(Path({str(model)!r}), Path({str(tmp_path)!r}))\n"
        "print(spec.extensions)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=site_env(site), check=True)
    assert "{'owner': 'team-a'}" in proc.stdout
    # Without the plugin the same keyword is an unknown-keyword error.
    from lakewrap.errors import AnnotationError
    from lakewrap.parse import parse_model

    with pytest.raises(AnnotationError, match="unknown annotation keyword"):
        parse_model(model, tmp_path)
