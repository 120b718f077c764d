"""The Iceberg side of a pyiceberg commit: a new table's schema and partition spec from the result's
Arrow schema, and the schema changes a commit carries (a full rebuild's, ``on_schema_change``'s)."""

from __future__ import annotations

from typing import Any

from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.compilers.schema import Changes, SchemaChangeError
from lakewrap.errors import ExecutionError, Location


def iceberg_schema(arrow_schema: Any) -> Any:
    """The Iceberg schema of a new table from the result's Arrow schema, with field ids 1..n."""
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import assign_fresh_schema_ids

    return assign_fresh_schema_ids(Catalog._convert_schema_if_needed(arrow_schema))


def partition_spec(schema: Any, layout: tuple[str, str] | None) -> Any:
    """The partition spec of a table the commit creates: ``day(created_at)`` etc., by field name.

    A time transform needs a date or timestamp column; a key of another type leaves the table
    unpartitioned (the window filter still selects its rows).
    """
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, HourTransform, MonthTransform, YearTransform

    names = {f.name: f for f in schema.fields}
    if layout is None or layout[1] not in names:
        return UNPARTITIONED_PARTITION_SPEC
    transform, column = layout
    field = names[column]
    if str(field.field_type) not in ("date", "timestamp", "timestamptz") or (
            transform == "hour" and str(field.field_type) == "date"):
        return UNPARTITIONED_PARTITION_SPEC
    source_id = field.field_id
    transforms: dict[str, Any] = {"hour": HourTransform, "day": DayTransform, "month": MonthTransform,
                                  "year": YearTransform}
    fn = transforms[transform]()
    return PartitionSpec(PartitionField(source_id=source_id, field_id=1000, transform=fn,
                                        name=f"{column}_{transform}"))


# strategies that replace the whole table: like CREATE OR REPLACE, they take the result's columns
REPLACING = ("table", "seed")


def same_columns(arrow_schema: Any, schema: Any) -> bool:
    """Whether the result's columns and types are the table's (by name)."""
    ours = {(f.name, str(f.field_type)) for f in iceberg_schema(arrow_schema).fields}
    return ours == {(f.name, str(f.field_type)) for f in schema.fields}


def evolve(tx: Any, arrow_schema: Any, name: str) -> None:
    """A full rebuild whose columns changed: drop the columns the result lost or retyped, add the new
    ones, in the same transaction as the data."""
    new = {f.name: str(f.field_type) for f in iceberg_schema(arrow_schema).fields}
    try:
        with tx.update_schema(allow_incompatible_changes=True) as update:
            for field in tx.table_metadata.schema().fields:
                if new.get(field.name) != str(field.field_type):
                    update.delete_column(field.name)
        with tx.update_schema() as update:
            update.union_by_name(iceberg_schema(arrow_schema))
    except Exception as exc:
        raise ExecutionError(f"cannot change the columns of the Iceberg table {name}: {str(exc).splitlines()[0]}",
                             hint="drop the table and run again") from None


def apply_changes(tx: Any, changes: Changes, arrow_schema: Any, compiled: CompiledPlan) -> None:
    """``on_schema_change``'s changes to the Iceberg table, in the materialization's transaction;
    the types of new and widened columns are the result's (``arrow_schema``)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    def field_type(name: str) -> Any:
        return iceberg_schema(pa.schema([arrow_schema.field(name)])).fields[0].field_type

    try:
        with tx.update_schema() as update:
            for col in changes.drop:
                update.delete_column(col)
            for col, _ in changes.widen:
                update.update_column(col, field_type=field_type(col))
            for col, _ in changes.add:
                update.add_column(col, field_type(col))
    except Exception as exc:
        raise SchemaChangeError(
            f"cannot change the columns of the Iceberg table {compiled.target} ("
            + "; ".join(changes.describe()) + f"): {str(exc).splitlines()[0]} (nothing was written)",
            location=Location(compiled.path),
            hint="rebuild the table with `lakewrap run --full-refresh`, or change the SELECT back") from None


def conform(rows: Any, schema: Any) -> Any:
    """The rows with the table's column order (by name); a mismatch is left for pyiceberg to report."""
    names = [f.name for f in schema.fields]
    if sorted(names) == sorted(rows.schema.names):
        return rows.select(names)
    raise ExecutionError(
        "the result's columns differ from the Iceberg table's: "
        f"missing {sorted(set(names) - set(rows.schema.names))}, new {sorted(set(rows.schema.names) - set(names))}",
        hint="on_schema_change is `fail` on Iceberg: run with --full-refresh to rebuild the table",
    )
