"""The core header keywords and test kinds (the contract documented in ``docs/annotations.md``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from lakewrap.annotations.header import Header
from lakewrap.annotations.lexer import Annotation, Arg, split_list
from lakewrap.errors import PlanError, choices_hint
from lakewrap.partitions import Grain, parse_partition, zone
from lakewrap.spec import ColumnSpec, DynamicPartitioning, TableRef, TestSpec, TimePartitioning

if TYPE_CHECKING:  # the registry calls register_core; this module never needs it at run time
    from lakewrap.annotations.registry import Registry

# --- argument helpers -----------------------------------------------------------------------------


def positional(ann: Annotation, low: int, high: int | None, usage: str) -> tuple[Arg, ...]:
    """The positional arguments, checked to number between ``low`` and ``high``."""
    args = ann.positional
    if len(args) < low:
        raise ann.error(
            "missing argument" if low - len(args) == 1 else "missing arguments",
            column=ann.end_column,
            hint=f"write `-- {usage}`",
        )
    if high is not None and len(args) > high:
        extra = args[high]
        raise ann.error(f"unexpected argument `{extra.raw}`", column=extra.column, hint=f"write `-- {usage}`")
    return args


def options(
    ann: Annotation, allowed: tuple[str, ...], usage: str, required: tuple[str, ...] = ()
) -> dict[str, Arg]:
    """The ``key=value`` options, each allowed and given at most once; ``required`` ones present."""
    found: dict[str, Arg] = {}
    for arg in ann.options:
        assert arg.key is not None
        if arg.key not in allowed:
            hint = choices_hint(arg.key, allowed, "option") if allowed else f"write `-- {usage}`"
            raise ann.error(f"unknown option `{arg.key}`", column=arg.column, hint=hint)
        if arg.key in found:
            raise ann.error(f"option `{arg.key}` is given twice", column=arg.column)
        if not arg.value:
            raise ann.error(f"option `{arg.key}` has an empty value", column=arg.column, hint=f"write `-- {usage}`")
        found[arg.key] = arg
    for key in required:
        if key not in found:
            raise ann.error(f"missing option `{key}=`", column=ann.end_column, hint=f"write `-- {usage}`")
    return found


def tz_option(ann: Annotation, opts: dict[str, Arg]) -> str:
    """The ``tz=`` option's IANA zone (UTC when absent), refused at its column when unknown."""
    if "tz" not in opts:
        return "UTC"
    try:
        zone(opts["tz"].value)
    except PlanError as exc:
        raise ann.error(exc.message, column=opts["tz"].column, hint=exc.hint) from None
    return opts["tz"].value


def choice(ann: Annotation, arg: Arg, choices: tuple[str, ...], noun: str) -> str:
    """``arg``'s value, which must be one of ``choices``."""
    if arg.value not in choices:
        raise ann.error(f"unknown {noun} `{arg.value}`", column=arg.column, hint=choices_hint(arg.value, choices, noun))
    return arg.value


def column_name(ann: Annotation, arg: Arg, header: Header, role: str) -> str:
    """A single column name, remembered for the check against the SELECT's output."""
    names = split_list(arg, ann)
    if len(names) != 1:
        raise ann.error(f"expected one column for {role}, got `{arg.raw}`", column=arg.column)
    header.ref(names[0], ann, arg, role)
    return names[0]


def column_list(ann: Annotation, arg: Arg, header: Header, role: str) -> tuple[str, ...]:
    """A comma-separated column list, each remembered for the output-column check."""
    names = split_list(arg, ann)
    for name in names:
        header.ref(name, ann, arg, role)
    return names


def table_ref(ann: Annotation, arg: Arg) -> TableRef:
    """``schema.table`` (or ``table``, meaning ``main.table``); quoted parts allowed."""
    from sqlglot import exp
    from sqlglot.errors import ParseError

    text = arg.raw if not arg.quoted else '"' + arg.value.replace('"', '""') + '"'
    try:
        table = exp.to_table(text, dialect="duckdb")
    except (ParseError, ValueError):
        table = None
    if table is None or not table.name or (table.args.get("catalog") is not None and table.catalog):
        raise ann.error(
            f"`{arg.raw}` is not a table name",
            column=arg.column,
            hint="write `schema.table` (quote names with spaces: `\"my schema\".\"my table\"`)",
        )
    return TableRef(schema_name=table.db or "main", name=table.name)


def duration_seconds(ann: Annotation, arg: Arg, *, what: str = "a freshness duration", zero: bool = False) -> int:
    """Parse ``1d``, ``6h``, ``2h30m``, ``90s`` into seconds (:mod:`lakewrap.durations`)."""
    from lakewrap.durations import HINT, parse_duration

    try:
        return parse_duration(arg.value, zero=zero)
    except ValueError as exc:
        positive = "positive" in str(exc)
        raise ann.error(
            f"{what} must be positive" if positive else f"`{arg.value}` is not a duration",
            column=arg.column,
            hint=HINT + ("; remove the line to never warn" if positive and what == "a freshness duration" else ""),
        ) from None


def integer(ann: Annotation, arg: Arg, low: int, high: int, what: str) -> int:
    """An integer argument within ``[low, high]``."""
    hint = f"write a whole number from {low} to {high}" if high < 10**6 else f"write a whole number of at least {low}"
    try:
        value = int(arg.value)
    except ValueError:
        raise ann.error(f"{what} must be a whole number, got `{arg.value}`", column=arg.column, hint=hint) from None
    if not low <= value <= high:
        raise ann.error(f"{what} must be between {low} and {high}, got {value}", column=arg.column, hint=hint)
    return value


def sql_condition(ann: Annotation, arg: Arg, what: str, example: str) -> str:
    """A boolean SQL expression (not a statement), normalized through sqlglot."""
    import sqlglot
    from sqlglot.errors import ParseError

    try:
        cond = sqlglot.condition(arg.value, dialect="duckdb")
    except ParseError:
        cond = None
    if cond is None or not arg.value.strip():
        raise ann.error(
            f"{what} `{arg.value}` is not a SQL expression",
            column=arg.column,
            hint=f"write one boolean SQL expression in quotes, e.g. `{example}`",
        )
    return cond.sql(dialect="duckdb")


# --- core keywords --------------------------------------------------------------------------------

GRAINS = tuple(g.value for g in Grain)
MATERIALIZED = ("table", "view", "incremental", "snapshot")
ON_SCHEMA_CHANGE = ("fail", "append_new_columns", "sync_all_columns", "ignore")
_LATEST_BY = re.compile(r"^latest_by\(\s*(.+?)\s*\)$")


def register_core(reg: Registry) -> None:
    """Register every core keyword and test kind on ``reg``."""

    @reg.keyword("materialized", usage="materialized table|view|incremental|snapshot",
                 summary="opt into wrap mode and pick the kind of write")
    def materialized(ann: Annotation, h: Header) -> None:
        options(ann, (), "materialized table|view|incremental|snapshot")
        (arg,) = positional(ann, 1, 1, "materialized table|view|incremental|snapshot")
        h.materialized = choice(ann, arg, MATERIALIZED, "materialization")

    @reg.keyword("target", usage="target schema.table", summary="write to this table instead of the path's")
    def target(ann: Annotation, h: Header) -> None:
        options(ann, (), "target schema.table")
        (arg,) = positional(ann, 1, 1, "target schema.table")
        h.target = table_ref(ann, arg)

    part_usage = ("partitioned hourly|daily|weekly|monthly|yearly|dynamic key=<col> "
                  "[tz=UTC] [start=<value>] [lookback=N] [batch=N]")

    @reg.keyword("partitioned", usage=part_usage, summary="time partitions bound as $partition_start/$partition_end")
    def partitioned(ann: Annotation, h: Header) -> None:
        (arg,) = positional(ann, 1, 1, part_usage)
        grain = choice(ann, arg, (*GRAINS, "dynamic"), "partition grain")
        if grain == "dynamic":
            opts = options(ann, ("key",), "partitioned dynamic key=<col>", required=("key",))
            h.partition = DynamicPartitioning(key=column_name(ann, opts["key"], h, "the partition key"))
            return
        opts = options(ann, ("key", "tz", "start", "lookback", "batch"), part_usage, required=("key",))
        key = column_name(ann, opts["key"], h, "the partition key")
        tz = tz_option(ann, opts)
        start = None
        if "start" in opts:
            try:
                start = parse_partition(Grain(grain), opts["start"].value, tz).value
            except PlanError as exc:
                raise ann.error(f"start: {exc.message}", column=opts["start"].column, hint=exc.hint) from None
        lookback = integer(ann, opts["lookback"], 0, 10_000, "lookback") if "lookback" in opts else 0
        batch = integer(ann, opts["batch"], 1, 10_000, "batch") if "batch" in opts else 31
        h.partition = TimePartitioning(grain=Grain(grain), key=key, tz=tz, start=start, lookback=lookback, batch=batch)

    uk_usage = ("unique_key <col>[,<col>] [dedupe=error|latest_by(<col>)] "
                "[update_columns=<cols>] [exclude_columns=<cols>] [predicate=\"<SQL>\"] [matched=update|replace]")

    @reg.keyword("unique_key", usage=uk_usage, summary="MERGE on this key")
    def unique_key(ann: Annotation, h: Header) -> None:
        (arg,) = positional(ann, 1, 1, uk_usage)
        opts = options(ann, ("dedupe", "update_columns", "exclude_columns", "predicate", "matched"), uk_usage)
        merge: dict[str, Any] = {"unique_key": column_list(ann, arg, h, "unique_key")}
        if "dedupe" in opts:
            d = opts["dedupe"]
            m = _LATEST_BY.match(d.value)
            if d.value == "error":
                merge["dedupe"] = "error"
            elif m is not None:
                merge["dedupe"] = "latest_by"
                inner = d.raw.find(m.group(1), len("dedupe="))
                col = d.column + inner if inner >= 0 else d.column
                merge["dedupe_by"] = column_name(ann, Arg(m.group(1), col, quoted=False, raw=m.group(1)),
                                                 h, "dedupe=latest_by")
            else:
                raise ann.error(
                    f"unknown dedupe `{d.value}`",
                    column=d.column,
                    hint="write `dedupe=error` (the default: duplicates fail the run) or "
                    "`dedupe=latest_by(<col>)` (keep the row with the greatest <col> per key)",
                )
        if "update_columns" in opts and "exclude_columns" in opts:
            raise ann.error(
                "update_columns and exclude_columns cannot be combined",
                column=opts["exclude_columns"].column,
                hint="list the columns to update, or the columns never to update, not both",
            )
        if "update_columns" in opts:
            merge["update_columns"] = column_list(ann, opts["update_columns"], h, "update_columns")
        if "exclude_columns" in opts:
            merge["exclude_columns"] = column_list(ann, opts["exclude_columns"], h, "exclude_columns")
        keys = {k.lower() for k in merge["unique_key"]}
        for opt in ("update_columns", "exclude_columns"):
            for col in merge.get(opt, ()):
                if col.lower() in keys:
                    raise ann.error(
                        f"{opt} names the key column `{col}`",
                        column=opts[opt].column,
                        hint="key columns are matched on, never updated; remove it",
                    )
        if "predicate" in opts:
            merge["predicate"] = sql_condition(
                ann, opts["predicate"], "predicate", 'predicate="target.created_at >= now() - INTERVAL 7 DAY"'
            )
        if "matched" in opts:
            how = opts["matched"]
            if how.value not in ("update", "replace"):
                raise ann.error(
                    f"unknown matched `{how.value}`",
                    column=how.column,
                    hint="write `matched=update` (the default: MERGE updates a matched row in place) or "
                    "`matched=replace` (delete the matched rows, insert the result's)",
                )
            clash = [opt for opt in ("update_columns", "exclude_columns", "predicate") if opt in opts]
            if how.value == "replace" and clash:
                raise ann.error(
                    f"matched=replace cannot be combined with {clash[0]}=",
                    column=opts[clash[0]].column,
                    hint=f"replace writes the result's whole rows: remove {clash[0]}=, or write matched=update",
                )
            merge["matched"] = how.value
        h.merge = merge

    @reg.keyword("append", usage="append", summary="insert only (not idempotent)")
    def append(ann: Annotation, h: Header) -> None:
        options(ann, (), "append")
        positional(ann, 0, 0, "append")
        h.append = True

    snap_usage = ("snapshot strategy=timestamp|check unique_key=<cols> updated_at=<col> | "
                  "check_cols=<cols>|all [hard_deletes=ignore|invalidate|new_record]")

    @reg.keyword("snapshot", usage=snap_usage, summary="SCD2 history of the SELECT's rows")
    def snapshot(ann: Annotation, h: Header) -> None:
        positional(ann, 0, 0, snap_usage)
        opts = options(ann, ("strategy", "unique_key", "updated_at", "check_cols", "hard_deletes"),
                       snap_usage, required=("strategy", "unique_key"))
        strat = choice(ann, opts["strategy"], ("timestamp", "check"), "snapshot strategy")
        snap: dict[str, Any] = {
            "strategy": strat,
            "unique_key": column_list(ann, opts["unique_key"], h, "unique_key"),
        }
        if strat == "timestamp":
            if "check_cols" in opts:
                raise ann.error("check_cols= belongs to strategy=check", column=opts["check_cols"].column,
                                hint="remove check_cols=, or use strategy=check")
            if "updated_at" not in opts:
                raise ann.error("strategy=timestamp needs updated_at=<col>", column=ann.end_column,
                                hint=f"write `-- {snap_usage}`")
            snap["updated_at"] = column_name(ann, opts["updated_at"], h, "updated_at")
        else:
            if "updated_at" in opts:
                raise ann.error("updated_at= belongs to strategy=timestamp", column=opts["updated_at"].column,
                                hint="remove updated_at=, or use strategy=timestamp")
            if "check_cols" not in opts:
                raise ann.error("strategy=check needs check_cols=<cols> or check_cols=all",
                                column=ann.end_column, hint=f"write `-- {snap_usage}`")
            cc = opts["check_cols"]
            snap["check_cols"] = "all" if cc.value == "all" and not cc.quoted else column_list(ann, cc, h, "check_cols")
        if "hard_deletes" in opts:
            snap["hard_deletes"] = choice(ann, opts["hard_deletes"], ("ignore", "invalidate", "new_record"),
                                          "hard_deletes mode")
        h.snapshot = snap

    @reg.keyword("on", usage="on schema.table [schema.table ...]", summary="an explicit upstream",
                 repeatable=True)
    def on(ann: Annotation, h: Header) -> None:
        options(ann, (), "on schema.table")
        args = positional(ann, 1, None, "on schema.table")
        h.declared_upstreams.extend(table_ref(ann, a) for a in args)

    @reg.keyword("test", usage="test <kind> <args...> [severity=error|warn]",
                 summary="a data test run before the write is published", repeatable=True)
    def test(ann: Annotation, h: Header) -> None:
        kinds = reg.test_kinds
        if not ann.positional:
            raise ann.error(
                "missing the test kind",
                column=ann.args[0].column if ann.args else ann.end_column,
                hint="write `-- test <kind> <args...>`; kinds: " + ", ".join(f"`{k}`" for k in sorted(kinds)),
            )
        args = positional(ann, 1, None, "test <kind> <args...>")
        kind = choice(ann, args[0], tuple(kinds), "test kind")
        severity: Literal["error", "warn"] = "error"
        rest = []
        for a in ann.args[1:]:
            if a.key == "severity":
                severity = "warn" if choice(ann, a, ("error", "warn"), "severity") == "warn" else "error"
            else:
                rest.append(a)
        parsed = kinds[kind].parse(ann, tuple(rest), h)
        h.tests.append(TestSpec(kind=kind, severity=severity, args=parsed, line=ann.line))

    col_usage = 'column <name> <type> [not_null] ["description"]'

    @reg.keyword("column", usage=col_usage, summary="a schema contract enforced before write", repeatable=True)
    def column(ann: Annotation, h: Header) -> None:
        from sqlglot import exp
        from sqlglot.errors import ParseError

        args = positional(ann, 2, 4, col_usage)
        options(ann, (), col_usage)
        name = args[0].value
        first = next((c for c in h.columns if c.name.lower() == name.lower()), None)
        if first is not None:
            raise ann.error(
                f"column `{name}` is declared twice (first on line {first.line})",
                column=args[0].column,
                hint="keep one of the two lines",
            )
        h.ref(name, ann, args[0], "a column contract")
        try:
            dtype = exp.DataType.build(args[1].value, dialect="duckdb")
            if not isinstance(dtype, exp.DataType) or dtype.this == exp.DataType.Type.USERDEFINED:
                raise ValueError
        except (ParseError, ValueError, TypeError):
            raise ann.error(
                f"`{args[1].value}` is not a DuckDB type",
                column=args[1].column,
                hint="use a type such as BIGINT, VARCHAR, DECIMAL(18,2), DATE or TIMESTAMPTZ (no spaces)",
            ) from None
        not_null = False
        description = None
        for a in args[2:]:
            if a.value == "not_null" and not a.quoted and not not_null:
                not_null = True
            elif a.quoted and description is None:
                description = a.value
            else:
                raise ann.error(f"unexpected argument `{a.raw}`", column=a.column, hint=f"write `-- {col_usage}`")
        h.columns.append(ColumnSpec(name=name, type=dtype.sql(dialect="duckdb"), not_null=not_null,
                                    description=description, line=ann.line))

    @reg.keyword("on_schema_change", usage="on_schema_change fail|append_new_columns|sync_all_columns|ignore",
                 summary="what to do when the SELECT's columns differ from the table's")
    def on_schema_change(ann: Annotation, h: Header) -> None:
        options(ann, (), "on_schema_change " + "|".join(ON_SCHEMA_CHANGE))
        (arg,) = positional(ann, 1, 1, "on_schema_change " + "|".join(ON_SCHEMA_CHANGE))
        h.on_schema_change = choice(ann, arg, ON_SCHEMA_CHANGE, "on_schema_change mode")

    @reg.keyword("tag", usage="tag <name> [<name> ...]", summary="labels for selection (tag:x)", repeatable=True)
    def tag(ann: Annotation, h: Header) -> None:
        options(ann, (), "tag <name> [<name> ...]")
        args = positional(ann, 1, None, "tag <name> [<name> ...]")
        for a in args:
            if not re.match(r"^[A-Za-z0-9_.\-]+$", a.value):
                raise ann.error(
                    f"tag `{a.raw}` may only hold letters, digits, `_`, `-` and `.`",
                    column=a.column,
                    hint="write tags such as `finance` or `pii-eu`; separate several tags with spaces",
                )
            if a.value not in h.tags:
                h.tags.append(a.value)

    @reg.keyword("retry", usage="retry N", summary="retry retryable failures up to N times")
    def retry(ann: Annotation, h: Header) -> None:
        options(ann, (), "retry N")
        (arg,) = positional(ann, 1, 1, "retry N")
        h.retry = integer(ann, arg, 0, 100, "retry")

    @reg.keyword("description", usage='description "text"', summary="documentation for the model")
    def description(ann: Annotation, h: Header) -> None:
        args = positional(ann, 1, None, 'description "text"')
        if ann.options:
            # `=` inside unquoted prose: keep it as text rather than guessing an option.
            args = ann.args
        h.description = " ".join(a.value if a.quoted else a.raw for a in args)

    _register_tests(reg)


def _register_tests(reg: Registry) -> None:
    def only(ann: Annotation, args: tuple[Arg, ...], n: int, usage: str) -> tuple[Arg, ...]:
        pos = [a for a in args if a.key is None]
        if len(pos) < n:
            raise ann.error("missing argument", column=ann.end_column, hint=f"write `-- test {usage}`")
        if len(pos) > n:
            raise ann.error(f"unexpected argument `{pos[n].raw}`", column=pos[n].column,
                            hint=f"write `-- test {usage}`")
        return tuple(pos)

    def no_options(ann: Annotation, args: tuple[Arg, ...], usage: str) -> None:
        for a in args:
            if a.key is not None:
                raise ann.error(f"unknown option `{a.key}`", column=a.column, hint=f"write `-- test {usage}`")

    @reg.test_kind("unique", usage="unique <col>[,<col>]", summary="no two rows share these columns")
    def unique(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        no_options(ann, args, "unique <col>[,<col>]")
        (arg,) = only(ann, args, 1, "unique <col>[,<col>]")
        return {"columns": list(column_list(ann, arg, h, "test unique"))}

    @reg.test_kind("not_null", usage="not_null <col>[,<col>]", summary="no NULL in these columns")
    def not_null(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        no_options(ann, args, "not_null <col>")
        (arg,) = only(ann, args, 1, "not_null <col>")
        return {"columns": list(column_list(ann, arg, h, "test not_null"))}

    @reg.test_kind("accepted_values", usage="accepted_values <col>=a,b,c",
                   summary="every value of the column is one of the list")
    def accepted_values(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        usage = "accepted_values <col>=a,b,c"
        if len(args) != 1 or args[0].key is None:
            col = args[0].column if args else ann.end_column
            raise ann.error("expected exactly one `<col>=a,b,c`", column=col, hint=f"write `-- test {usage}`")
        arg = args[0]
        assert arg.key is not None
        h.ref(arg.key, ann, arg, "test accepted_values")
        values = split_list(Arg(arg.value, arg.column, raw=arg.value), ann, what="value")
        return {"column": arg.key, "values": list(values)}

    @reg.test_kind("relationships", usage="relationships <col> -> <schema.table>.<col>",
                   summary="every value exists in the referenced table's column")
    def relationships(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        usage = "relationships <col> -> <schema.table>.<col>"
        no_options(ann, args, usage)
        if len(args) == 2 and args[1].value != "->":
            raise ann.error(
                f"missing `->` between `{args[0].raw}` and `{args[1].raw}`",
                column=args[1].column,
                hint=f"write `-- test {usage}`",
            )
        col, arrow, ref = only(ann, args, 3, usage)
        if arrow.value != "->":
            raise ann.error(f"expected `->`, got `{arrow.raw}`", column=arrow.column, hint=f"write `-- test {usage}`")
        h.ref(col.value, ann, col, "test relationships")
        parts = ref.value.rsplit(".", 1)
        if len(parts) != 2 or not parts[1]:
            raise ann.error(f"`{ref.raw}` does not name a table and a column", column=ref.column,
                            hint=f"write `-- test {usage}`")
        table = table_ref(ann, Arg(parts[0], ref.column, raw=parts[0]))
        h.declared_upstreams.append(table)  # the referenced table is built first
        return {"column": col.value, "to_table": str(table), "to_column": parts[1]}

    @reg.test_kind("row_count", usage="row_count [min=N] [max=N]", summary="the row count is within bounds")
    def row_count(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        usage = "row_count [min=N] [max=N]"
        out: dict[str, Any] = {}
        for a in args:
            if a.key not in ("min", "max"):
                raise ann.error(f"unexpected argument `{a.raw}`", column=a.column, hint=f"write `-- test {usage}`")
            if a.key in out:
                raise ann.error(f"option `{a.key}` is given twice", column=a.column)
            out[a.key] = integer(ann, a, 0, 10**15, a.key)
        if not out:
            raise ann.error("row_count needs min=N, max=N or both", column=ann.end_column,
                            hint=f"write `-- test {usage}`")
        if "min" in out and "max" in out and out["min"] > out["max"]:
            raise ann.error(
                f"min={out['min']} is greater than max={out['max']}",
                column=next(a.column for a in args if a.key == "max"),
                hint="no row count can pass; swap the bounds or fix one of them",
            )
        return out

    @reg.test_kind("expression", usage='expression "<boolean SQL>"', summary="holds for every row")
    def expression(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        no_options(ann, args, 'expression "<boolean SQL>"')
        (arg,) = only(ann, args, 1, 'expression "<boolean SQL>"')
        return {"expression": sql_condition(ann, arg, "expression", '-- test expression "amount >= 0"')}

    @reg.test_kind("sql", usage="sql <file.sql>", summary="a query returning the failing rows")
    def sql_file(ann: Annotation, args: tuple[Arg, ...], h: Header) -> dict[str, Any]:
        no_options(ann, args, "sql <file.sql>")
        (arg,) = only(ann, args, 1, "sql <file.sql>")
        path = arg.value
        if path.startswith("/") or "\\" in path or ".." in path.split("/") or "\x00" in path:
            raise ann.error(f"`{path}` must be a path inside the project", column=arg.column,
                            hint="write a project-relative path such as `tests/orders_amount.sql`")
        if not path.endswith(".sql"):
            raise ann.error(
                f"`{path}` is not a .sql file",
                column=arg.column,
                hint="the file holds a query returning the failing rows; name it `<name>.sql`",
            )
        return {"path": path}
