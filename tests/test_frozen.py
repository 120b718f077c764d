"""Records (``lakewrap.frozen``): pydantic validates input; the cache's own decoder must agree with it.

``Frozen.decode`` rebuilds records from their JSON form by hand (so a warm run needs no pydantic);
pydantic's validation of the same JSON is the independent reference it is compared with, on every
model of the fixtures and the example project and on their compiled plans.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import FIXTURES
from lakewrap.compile import load_project
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.config import DuckLakeLakeConfig, ProjectConfig
from lakewrap.partitions import Grain
from lakewrap.plan import Binding, Plan, make_plan
from lakewrap.spec import MergeStrategy, ModelSpec, TimePartitioning
from test_golden import CASES, compile_case
from test_golden_iceberg import RUNNABLE
from test_golden_iceberg import compile_case as iceberg_case

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "shop"
NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)


def specs() -> list[ModelSpec]:
    out: list[ModelSpec] = []
    for root in (FIXTURES / "models", EXAMPLE):
        out += load_project(root, None).models.values()
    return out


def test_decode_agrees_with_pydantic_on_every_spec() -> None:
    all_specs = specs()
    kinds = {s.strategy.kind for s in all_specs}
    assert kinds == {"table", "view", "delete+insert", "merge", "append", "snapshot", "literal"}
    for spec in all_specs:
        text = spec.dump_json()
        decoded = ModelSpec.decode(json.loads(text))
        assert decoded == spec, spec.path
        assert ModelSpec.validate_json(text) == spec, spec.path
        assert type(decoded.strategy) is type(spec.strategy)
        if isinstance(spec.partition, TimePartitioning):
            assert isinstance(decoded.partition, TimePartitioning) and isinstance(decoded.partition.grain, Grain)


def test_decode_agrees_with_pydantic_on_compiled_plans_and_plans() -> None:
    plans = [compile_case(case) for case in CASES]
    plans += [iceberg_case(case) for case in RUNNABLE]  # with pyiceberg commit operations
    assert len(plans) > 40 and any(p.commits and p.commits[0].partition for p in plans)
    for compiled in plans:
        doc = json.loads(compiled.dump_json())
        assert CompiledPlan.decode(doc) == compiled == CompiledPlan.validate(doc)
    spec = next(s for s in specs() if isinstance(s.partition, TimePartitioning))
    plan = make_plan(spec, partition="2024-01-02", now=NOW)
    assert isinstance(plan.binding, Binding)
    again = Plan.decode(json.loads(plan.dump_json()))
    assert again == plan == Plan.validate(plan.dump())
    assert again.binding is not None and again.binding.start == plan.binding.start  # a datetime again


def test_rules_hold_however_a_record_is_built() -> None:
    with pytest.raises(ValueError, match="unique_key needs at least one column"):
        MergeStrategy(unique_key=())
    merge = MergeStrategy(unique_key=("id",))
    with pytest.raises(ValueError, match="cannot be combined"):
        merge.replace(update_columns=("a",), exclude_columns=("b",))
    with pytest.raises(ValueError, match="names exactly one ordering column"):
        MergeStrategy.decode({"kind": "merge", "unique_key": ["id"], "dedupe": "latest_by"})
    with pytest.raises(ValueError, match="a postgres catalog needs dsn"):
        DuckLakeLakeConfig(catalog="postgres")
    with pytest.raises(TypeError):  # a key of another substrate is no field of this one's record
        DuckLakeLakeConfig(warehouse="w")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        MergeStrategy(unique_key=("id",), bogus=1)  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        merge.unique_key = ("x",)  # type: ignore[misc]
    # equality and hashing are by class and field values; repr names both
    same = MergeStrategy.decode(merge.dump())
    assert same == merge and same is not merge and hash(same) == hash(merge) and len({same, merge}) == 1
    assert merge != merge.replace(dedupe="latest_by", dedupe_by="t")
    assert merge != TimePartitioning(grain=Grain.DAILY, key="d")
    assert repr(merge).startswith("MergeStrategy(kind='merge', unique_key=('id',), dedupe='error'")


def test_pydantic_reports_what_a_person_got_wrong() -> None:
    with pytest.raises(ValidationError) as tag:
        ModelSpec.validate({**json.loads(specs()[0].dump_json()), "strategy": {"kind": "upsert"}})
    (err,) = tag.value.errors()
    assert err["type"] == "union_tag_invalid" and err["loc"] == ("strategy",)
    with pytest.raises(ValidationError) as bound:
        ProjectConfig.validate({"maintain": {"delete_threshold": 1.5}})
    errors = [(e["type"], e["loc"]) for e in bound.value.errors()]
    assert errors == [("less_than_equal", ("maintain", "delete_threshold"))]
    with pytest.raises(ValidationError) as check:
        ProjectConfig.validate({"lake": {"data_path": "s3://b/p/", "s3": {"endpoint": "http://h:1"}}})
    # [lake] is a union tagged on the substrate: pydantic puts the tag in the path (config.py drops it)
    assert [e["loc"] for e in check.value.errors()] == [("lake", "ducklake", "s3", "endpoint")]
    with pytest.raises(ValidationError) as unknown:
        ProjectConfig.validate({"run": {"retrys": 3}})
    assert unknown.value.errors()[0]["loc"] == ("run", "retrys")
    # coercion: lists become tuples, as the type says
    assert ProjectConfig.validate({"lake": {"data_path": "s3://b/p/"}}).lake.s3 is not None
    assert MergeStrategy.validate({"unique_key": ["a", "b"]}).unique_key == ("a", "b")
