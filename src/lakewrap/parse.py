"""Model file → :class:`~lakewrap.spec.ModelSpec`.

The header (the leading run of ``--`` lines) is read by the annotation lexer and the keyword
registry; the body is checked by DuckDB's own parser (:mod:`lakewrap.grammar`, an in-memory
connection that opens no lake) and analysed with sqlglot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError
from sqlglot import exp

from lakewrap import grammar
from lakewrap.annotations.header import Header
from lakewrap.annotations.lexer import Arg, lex_line
from lakewrap.annotations.registry import Registry, default_registry
from lakewrap.column_reads import column_reads
from lakewrap.errors import AnnotationError, LakewrapError, Location, ModelError, SqlError, choices_hint, suggest
from lakewrap.frozen import plain
from lakewrap.spec import ModelSpec, TableRef
from lakewrap.sqlpos import offset_location
from lakewrap.sqltext import (
    Statement,
    node_location,
    parameter_location,
    parameter_uses,
    parameters,
    parse_body,
    positional_parameter_location,
)

PARTITION_PARAMETERS = ("partition_start", "partition_end", "partition_value")
SCD2_COLUMNS = ("valid_from", "valid_to", "is_current", "is_deleted")
QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except)


def default_target(rel: str) -> TableRef:
    """``models/<schema>/<name>.sql`` → ``schema.name``; ``models/<name>.sql`` → ``main.name``."""
    parts = rel.split("/")
    if parts and parts[0] == "models":
        parts = parts[1:]
    stem = parts[-1].rsplit(".", 1)[0]
    schema = parts[0] if len(parts) > 1 else "main"
    return TableRef(schema_name=schema, name=stem)


def split_header(text: str) -> tuple[list[tuple[int, str]], int]:
    """The header lines as (line number, text) and the number of the first body line."""
    lines = text.splitlines()
    header: list[tuple[int, str]] = []
    i = 0
    while i < len(lines) and not lines[i].strip() and not header:
        i += 1
    while i < len(lines) and lines[i].lstrip().startswith("--"):
        header.append((i + 1, lines[i].rstrip()))
        i += 1
    return header, i + 1


def parse_model(path: Path, root: Path, *, text: str | None = None, registry: Registry | None = None,
                rel: str | None = None) -> ModelSpec:
    """Parse one model file.

    Args:
        path: The model file.
        root: The project root; the model's identity is its path relative to it.
        text: The file's content, when already read.
        registry: Keywords to accept (default: core plus installed plugins).
        rel: The file's resolved path relative to the resolved root, when the caller has it
            (:func:`lakewrap.project.model_files`); computed otherwise.

    Raises:
        ModelError: with file, line, column and a hint, for anything wrong in the file.

    Example:
        >>> spec = parse_model(Path("models/sales/orders.sql"), Path("."))  # doctest: +SKIP
        >>> spec.strategy.kind
        'merge'
    """
    reg = registry or default_registry()
    if rel is None:
        try:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            rel = path.as_posix()
    if text is None:
        text = _read_text(path, rel)
    if "\x00" in text:
        where = offset_location(text, text.index("\x00"), rel)
        raise ModelError(
            "the file contains a NUL byte",
            location=Location(rel, where.line, where.column, (where.snippet or "").replace("\x00", "\\0")),
            hint="save the model as plain text; a NUL byte usually means a binary file or a bad copy-paste",
        )
    header_lines, body_line = split_header(text)
    header = Header(path=rel, root=root)
    for line_no, line in header_lines:
        ann = lex_line(line, rel, line_no)
        if ann is None:
            continue
        kw = reg.keywords.get(ann.keyword)
        if kw is None:
            raise ann.error(
                "unknown annotation keyword",
                hint=choices_hint(ann.keyword, reg.keywords, "keyword"),
            )
        if ann.keyword in header.seen and not kw.repeatable:
            first = header.seen[ann.keyword]
            raise ann.error(f"given twice (first on line {first.line})", hint="keep one of the two lines")
        header.seen.setdefault(ann.keyword, ann)
        kw.handle(ann, header)

    lines = text.splitlines()
    # The body exactly as written (line separators inside strings included), after blank lines that
    # keep every line number equal to the file's.
    header_chars = sum(len(line) for line in text.splitlines(keepends=True)[: body_line - 1])
    body_text = "\n" * (body_line - 1) + text[header_chars:]
    _reject_stray_annotations(lines, body_line, rel, reg)
    try:
        fields = header.resolve(Location(rel, body_line))
    except (ValidationError, ValueError) as exc:  # pragma: no cover - handlers validate first
        raise ModelError(str(exc), location=Location(rel)) from None
    wrapped = fields["materialized"] is not None
    grammar.check_limits(body_text, rel)
    # DuckDB's parser is the judge: its errors come first; sqlglot then reads what DuckDB accepts.
    spans = grammar.check_body(body_text, rel, literal=not wrapped)
    statements = parse_body(body_text, rel)
    _same_statements(statements, spans, rel, body_text)
    if not statements:
        raise SqlError(
            "the model has no SQL statement",
            location=Location(rel, body_line),
            hint="write one SELECT after the header" if fields["materialized"] else "write the statements to run",
        )
    uses: list[tuple[set[str], bool]] | None = None  # a wrapped model's: one walk for all its nodes below
    if wrapped:
        query = _single_query(statements, rel, body_text)
        nodes = list(query.find_all(exp.CTE, exp.Table, exp.Columns, exp.Placeholder, exp.Parameter))
        output = output_columns(query, rel, body_text, statements[0],
                                columns=any(isinstance(n, exp.Columns) for n in nodes))
        upstreams = table_refs(query, nodes)
        uses = [parameter_uses(query, nodes)]
        reads = column_reads(query, statements[0])
    else:
        output = reads = None
        refs: dict[str, TableRef] = {}
        written: dict[str, TableRef] = {}
        for st in statements:
            for ref in written_tables(st.tree):
                written.setdefault(ref.key, ref)
            for ref in table_refs(st.tree):
                refs.setdefault(ref.key, ref)
        upstreams = tuple(r for k, r in refs.items() if k not in written)
        if header.target is None and len(written) == 1:
            header.target = next(iter(written.values()))  # a literal model names the table it writes
    target = header.target or default_target(rel)
    upstreams = tuple(u for u in upstreams if u.key != target.key)
    _check_parameters(statements, fields, rel, body_text, _annotation_sql(header), uses)
    _check_column_refs(header, output, fields, rel)
    if wrapped and fields["materialized"] == "snapshot":
        _check_snapshot_output(statements[0], rel, body_text)
    try:
        return ModelSpec.validate(plain({
            "path": rel,
            "name": target.name,
            "target": target,
            "sql": body_text,
            "body_line": body_line,
            "upstreams": upstreams,
            "output_columns": output,
            "column_reads": reads,
            **fields,
        }))
    except ValidationError as exc:
        detail = exc.errors()[0]
        raise ModelError(f"invalid model: {detail['msg']}", location=Location(rel)) from None


def _read_text(path: Path, rel: str) -> str:
    """The file's text; a located error when it is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line_start = before.rfind(b"\n") + 1
        line_end = data.find(b"\n", exc.start)
        raw_line = data[line_start : line_end if line_end >= 0 else len(data)]
        column = len(before[line_start:].decode("utf-8")) + 1
        raise ModelError(
            f"the file is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            location=Location(rel, before.count(b"\n") + 1, column, raw_line.decode("utf-8", "replace").rstrip("\r")),
            hint="save the model as UTF-8 (it looks like another encoding, e.g. Latin-1 or Windows-1252)",
        ) from None


def _reject_stray_annotations(lines: list[str], body_line: int, rel: str, reg: Registry) -> None:
    """A full-line ``-- keyword ...`` comment after the header would be silently ignored: refuse it.

    Before the first line of SQL (e.g. after a blank line that ended the header), any comment that
    parses as an annotation is refused. Inside the SQL, words common in prose (``test``, ``column``,
    ``tag``, ``description``, ...) are flagged only when the line reads like that annotation.
    """
    in_preamble = True
    for i in range(body_line - 1, len(lines)):
        stripped = lines[i].strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            in_preamble = False
            continue
        words = stripped[2:].split()
        if not words or words[0] not in reg.keywords:
            continue
        flagged = _parses_as_annotation(stripped, rel, i + 1, reg) if in_preamble else _looks_like_annotation(words)
        if not flagged:
            continue
        raise AnnotationError(
            f"annotation `-- {words[0]}` after the header would be ignored",
            location=Location(rel, i + 1, lines[i].index("--") + 1, lines[i]),
            hint="move it into the leading run of `--` lines (no blank line or SQL before it), "
            "or write prose comments as `/* ... */`",
        )


def _parses_as_annotation(line: str, rel: str, line_no: int, reg: Registry) -> bool:
    words = line[2:].split()
    if words and words[0] in _UNAMBIGUOUS:
        return True
    try:
        ann = lex_line(line, rel, line_no)
        kw = reg.keywords.get(ann.keyword) if ann is not None else None
        if ann is None or kw is None:
            return False
        kw.handle(ann, Header(path=rel))
    except LakewrapError:
        return False
    return True


_UNAMBIGUOUS = {"materialized", "partitioned", "unique_key", "snapshot", "on_schema_change", "retry", "freshness"}


def _looks_like_annotation(words: list[str]) -> bool:
    kw, rest = words[0], words[1:]
    if kw in _UNAMBIGUOUS:
        return bool(rest)
    if kw == "append":
        return not rest
    if kw == "test":
        return bool(rest) and rest[0] in ("unique", "not_null", "accepted_values", "relationships",
                                          "row_count", "expression", "sql")
    if kw == "column":
        return len(rest) >= 2 and rest[1].isupper()
    if kw in ("target", "on"):
        return len(rest) == 1 and "." in rest[0]
    return False


def _single_query(statements: tuple[Statement, ...], rel: str, body: str) -> exp.Expr:
    if len(statements) > 1:
        second = statements[1]
        raise SqlError(
            f"a wrapped model must hold exactly one SELECT, found {len(statements)} statements",
            location=offset_location(body, second.start, rel),
            hint="remove the extra statements, or drop `-- materialized` to make a literal model",
        )
    tree = statements[0].tree
    if not isinstance(tree, QUERY_TYPES):
        if isinstance(tree, exp.Command):
            kind = str(tree.this).upper()  # statements sqlglot keeps as text: CALL, ...
        else:
            kind = tree.key.upper() if hasattr(tree, "key") else type(tree).__name__
        raise SqlError(
            f"a wrapped model's body must be a SELECT, not {kind}",
            location=offset_location(body, statements[0].start, rel),
            hint="write only the SELECT; lakewrap writes the DDL/DML around it "
            "(or drop `-- materialized` to run the statements as written)",
        )
    return tree


def _projections(query: exp.Expr) -> list[exp.Expr]:
    select = query
    while isinstance(select, (exp.Union, exp.Intersect, exp.Except)):
        select = select.left
    if not isinstance(select, exp.Select):  # pragma: no cover - guarded by _single_query
        return []
    return list(select.expressions)


def _is_star(proj: exp.Expr, columns: bool = True) -> bool:
    """``*``, ``t.*``, ``* EXCLUDE (...)``, ``COLUMNS(...)`` (also inside an expression, as in
    ``max(COLUMNS(*))``, which DuckDB expands to one column per match): columns not known from the
    text alone. ``columns=False``: the query holds no ``COLUMNS(...)`` anywhere."""
    return (
        isinstance(proj, (exp.Star, exp.Columns))
        or (isinstance(proj, exp.Column) and isinstance(proj.this, exp.Star))
        or (columns and proj.find(exp.Columns) is not None)
    )


def output_columns(
    query: exp.Expr, rel: str, body: str, statement: Statement | None = None, *, columns: bool = True
) -> tuple[str, ...] | None:
    """The SELECT's output column names, or None when it selects ``*``.

    A column is named by an alias or is a plain column reference; any other expression would get a
    name made up by the engine (``CAST(x AS INTEGER)``, ``count_star()``), so it must be aliased.
    """
    names: list[str] = []
    for proj in _projections(query):
        if _is_star(proj, columns):
            return None
        if isinstance(proj, exp.Alias):
            name = proj.alias
        elif isinstance(proj, exp.Column):
            name = proj.name
        else:
            name = ""

        def where(proj: exp.Expr = proj) -> Location:
            return node_location(proj, statement, body, rel) if statement is not None else Location(rel)

        if not name:
            snippet = proj.sql(dialect="duckdb")
            raise SqlError(
                f"the output column `{snippet}` has no name",
                location=where(),
                hint=f"give it an alias: `{snippet} AS <name>`",
            )
        if name.lower() in (n.lower() for n in names):
            first = next(n for n in names if n.lower() == name.lower())
            raise SqlError(
                f"the SELECT returns two columns named `{name}`"
                + (f" (and `{first}`)" if first != name else ""),
                location=where(),
                hint="give one of them a different alias (column names are case-insensitive)",
            )
        names.append(name)
    return tuple(names)


def table_refs(tree: exp.Expr, nodes: Sequence[exp.Expr] | None = None) -> tuple[TableRef, ...]:
    """Tables a statement reads or writes, minus CTE names and table functions (``nodes``: its find_all)."""
    nodes = list(tree.find_all(exp.CTE, exp.Table)) if nodes is None else nodes  # one walk
    ctes = {c.alias_or_name.lower() for c in nodes if isinstance(c, exp.CTE)}
    refs: dict[str, TableRef] = {}
    for table in nodes:
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) or not table.name:
            continue
        if not table.db and table.name.lower() in ctes:
            continue
        ref = TableRef(schema_name=table.db or "main", name=table.name)
        refs.setdefault(ref.key, ref)
    return tuple(refs.values())


def _same_statements(statements: tuple[Statement, ...], spans: list[grammar.Span], rel: str, body: str) -> None:
    """What runs is each statement's text: sqlglot must have read the very statements DuckDB did."""
    for i, span in enumerate(spans):
        st = statements[i] if i < len(statements) else None
        if st is None or st.start != span.start or st.text.strip() != body[span.start:span.end]:
            raise SqlError(
                "lakewrap's SQL analyser (sqlglot) reads this statement differently from DuckDB",
                location=offset_location(body, span.start if st is None else min(st.start, span.start), rel),
                hint="rewrite the construct near here more plainly (a comment, quote or string spelling "
                "DuckDB and sqlglot tokenize differently); please report it",
            )


def written_tables(tree: exp.Expr) -> tuple[TableRef, ...]:
    """The tables a DML/DDL statement writes (INSERT, DELETE, UPDATE, MERGE, CREATE TABLE)."""
    target: object = None
    if isinstance(tree, (exp.Insert, exp.Delete, exp.Update, exp.Merge)):
        target = tree.this
        if isinstance(target, exp.Schema):
            target = target.this
    elif isinstance(tree, exp.Create) and str(tree.args.get("kind", "")).upper() in ("TABLE", "VIEW"):
        target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if isinstance(target, exp.Table) and isinstance(target.this, exp.Identifier) and target.name:
        return (TableRef(schema_name=target.db or "main", name=target.name),)
    return ()


def _annotation_sql(header: Header) -> list[tuple[str, Location]]:
    """SQL fragments written in annotations (merge predicate, test expressions) with their line."""
    out: list[tuple[str, Location]] = []
    if header.merge and header.merge.get("predicate"):
        out.append((header.merge["predicate"], header.seen["unique_key"].at()))
    for test in header.tests:
        if "expression" in test.args:
            out.append((test.args["expression"], Location(header.path, test.line)))
    return out


def _check_parameters(statements: tuple[Statement, ...], fields: dict[str, object], rel: str, body: str,
                      fragments: Sequence[tuple[str, Location]] = (),
                      uses: Sequence[tuple[set[str], bool]] | None = None) -> None:
    import sqlglot

    for text, where in fragments:
        names = parameters(sqlglot.condition(text, dialect="duckdb"))
        bad = sorted(names - set(PARTITION_PARAMETERS)) or (sorted(names) if fields["partition"] is None else [])
        if bad:
            raise AnnotationError(
                f"`${bad[0]}` cannot be bound here",
                location=where,
                hint="annotation SQL may use $partition_start, $partition_end and $partition_value, "
                "and only in a partitioned model",
            )
    used: set[str] = set()
    for names, positional in uses if uses is not None else (parameter_uses(st.tree) for st in statements):
        if positional:
            raise SqlError(
                "positional parameters (`?`, `$1`) are not supported",
                location=positional_parameter_location(body, rel),
                hint="use the named parameters $partition_start, $partition_end or $partition_value",
            )
        used |= names
    unknown = sorted(used - set(PARTITION_PARAMETERS))
    if unknown:
        name = unknown[0]
        raise SqlError(
            f"unknown parameter `${name}`",
            location=parameter_location(body, name, rel),
            hint=choices_hint(name, PARTITION_PARAMETERS, "parameter").replace("`p", "`$p"),
        )
    if fields["partition"] is None and used:
        name = sorted(used)[0]
        raise SqlError(
            f"`${name}` is used but the model has no `-- partitioned` line",
            location=parameter_location(body, name, rel),
            hint="add `-- partitioned daily key=<col>` (or another grain), or remove the parameter",
        )


def _check_column_refs(header: Header, output: tuple[str, ...] | None, fields: dict[str, object], rel: str) -> None:
    contracts = [c.name for c in header.columns]
    known = output if output is not None else (tuple(contracts) if contracts else None)
    if output is not None and contracts:
        lowered = {o.lower() for o in output}
        for col in header.columns:
            if col.name.lower() not in lowered:
                ann_line = next(a for a in header.column_refs if a.role == "a column contract" and a.name == col.name)
                raise ann_line.ann.error(
                    f"contract column `{col.name}` is not returned by the SELECT",
                    column=ann_line.arg.column,
                    hint=choices_hint(col.name, output, "column"),
                )
        declared = {c.lower() for c in contracts}
        missing = [o for o in output if o.lower() not in declared]
        if missing:
            first = header.seen["column"]
            raise first.error(
                f"the SELECT returns `{missing[0]}`, which no `-- column` contract declares",
                hint=f"declare every output column (add `-- column {missing[0]} <type>`) or none",
            )
    if known is not None:
        lowered_known = {k.lower() for k in known}
        for ref in header.column_refs:
            if ref.role == "a column contract" or ref.name.lower() in lowered_known:
                continue
            close = suggest(ref.name, known)
            raise ref.ann.error(
                f"{ref.role} names `{ref.name}`, which the SELECT does not return",
                column=_item_column(ref.arg, ref.name),
                hint=(f"did you mean `{close}`? " if close else "") + "output columns: " + ", ".join(known),
            )
    if fields["materialized"] == "snapshot" and output is None:
        for col in header.columns:
            if col.name.lower() in SCD2_COLUMNS:
                ann_line = next(a for a in header.column_refs if a.role == "a column contract" and a.name == col.name)
                raise ann_line.ann.error(
                    f"a snapshot cannot declare `{col.name}`: lakewrap adds that column",
                    column=ann_line.arg.column,
                    hint="remove the contract line; lakewrap adds " + ", ".join(SCD2_COLUMNS),
                )


def _item_column(arg: Arg, name: str) -> int:
    """The column of ``name`` inside a list argument such as ``check_cols=a,b`` (else the argument's)."""
    if arg.key == name:  # `-- test accepted_values <col>=a,b`: the key is the column
        return arg.column
    start = len(arg.key) if arg.key is not None else 0
    m = re.compile(r"(?:^|[,=(])\"?(" + re.escape(name) + r")\"?(?=$|[,)])").search(arg.raw, start)
    return arg.column + m.start(1) if m is not None else arg.column


def _check_snapshot_output(statement: Statement, rel: str, body: str) -> None:
    """A snapshot's SELECT must not return the SCD2 columns lakewrap maintains."""
    for proj in _projections(statement.tree):
        name = proj.alias if isinstance(proj, exp.Alias) else proj.name if isinstance(proj, exp.Column) else ""
        if name.lower() in SCD2_COLUMNS:
            raise SqlError(
                f"a snapshot's SELECT cannot return `{name}`: lakewrap adds that column",
                location=node_location(proj, statement, body, rel),
                hint="rename or drop the column; lakewrap adds " + ", ".join(SCD2_COLUMNS),
            )
