"""A small Iceberg REST catalog for the tests: Flask over pyiceberg's SqlCatalog.

No REST catalog server is installable here, so -- the way Apache Iceberg's own REST test fixture
(``RESTCatalogServer``) wraps a JDBC catalog -- this adapter serves the REST protocol from a
SqlCatalog on SQLite. pyiceberg's ``RestCatalog`` and DuckDB's ``ATTACH ... (TYPE iceberg,
ENDPOINT ...)`` both talk to it. Commits go through ``SqlCatalog.commit_table`` with the
requirements and updates parsed by pyiceberg's own pydantic models, so optimistic concurrency is
the SqlCatalog's (a stale requirement answers 409 ``CommitFailedException``).

Endpoints: ``/v1/config``; namespaces (list, create, load/HEAD, drop); tables (list, create
including ``stage-create``, load/HEAD, commit, drop); ``/v1/transactions/commit``, atomic across
tables as the REST spec requires: every table's requirements are validated and its new metadata
file written first, then all the catalog rows are swapped in one SQLite transaction, each guarded
by the metadata location it was validated against, so either every table of the transaction moves
or none does (:func:`commit_all`). No auth.

Use :func:`serve` (a context manager) to run it on a free port in a thread of the test process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from flask import Flask, Response, jsonify, request
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
    ValidationError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableRequest
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from werkzeug.serving import make_server

from servers import free_port

ERRORS: list[tuple[type[Exception], int]] = [
    (NoSuchTableError, 404), (NoSuchNamespaceError, 404), (TableAlreadyExistsError, 409),
    (NamespaceAlreadyExistsError, 409), (CommitFailedException, 409), (NamespaceNotEmptyError, 409),
    (ValidationError, 400),
]


class _Named:
    """What ``SqlCatalog.commit_table`` needs of a table that does not exist yet: its name."""

    def __init__(self, identifier: tuple[str, ...]):
        self.identifier = identifier

    def name(self) -> tuple[str, ...]:
        return self.identifier


ENDPOINTS = [
    "GET /v1/{prefix}/namespaces", "POST /v1/{prefix}/namespaces", "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}", "DELETE /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables", "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}", "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}", "POST /v1/{prefix}/transactions/commit",
]


def _ns(text: str) -> tuple[str, ...]:
    return tuple(unquote(text).split("\x1f"))


def _table_result(metadata_location: str | None, metadata: Any) -> dict[str, Any]:
    return {"metadata-location": metadata_location, "metadata": metadata.model_dump(mode="json", by_alias=True,
                                                                                     exclude_none=True),
            "config": {}}


def make_app(catalog: SqlCatalog, faults: dict[str, int] | None = None,
             journal: list[tuple[str, ...]] | None = None) -> Flask:
    """The Flask app. ``faults`` injects failures of ``/v1/transactions/commit`` for the reliability
    tests: ``{"lose": n}`` commits the next n transactions but answers 503 (a lost response: the
    client cannot know it landed), ``{"refuse": n}`` answers 503 without committing. ``journal``
    receives, for each committed ``/v1/transactions/commit``, the sorted ``schema.table`` names it
    carried."""
    app = Flask("lakewrap-test-rest-catalog")
    faults = faults if faults is not None else {}
    lock = threading.Lock()  # one commit at a time, like a catalog's row lock

    @app.errorhandler(Exception)
    def error(exc: Exception) -> tuple[Response, int]:
        code = next((c for kind, c in ERRORS if isinstance(exc, kind)), 500)
        body = {"error": {"message": str(exc), "type": type(exc).__name__, "code": code}}
        return jsonify(body), code

    @app.get("/v1/config")
    def config() -> Response:
        # Without an `endpoints` list a client assumes the spec's default set, which lacks
        # /v1/transactions/commit: DuckDB 1.5.5 then commits each table of a transaction on its own.
        return jsonify({"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS})

    @app.get("/v1/namespaces")
    def list_namespaces() -> Response:
        return jsonify({"namespaces": [list(ns) for ns in catalog.list_namespaces()]})

    @app.post("/v1/namespaces")
    def create_namespace() -> Response:
        body = request.get_json()
        catalog.create_namespace(tuple(body["namespace"]), body.get("properties") or {})
        return jsonify({"namespace": body["namespace"], "properties": body.get("properties") or {}})

    @app.route("/v1/namespaces/<ns>", methods=["GET", "HEAD"])
    def load_namespace(ns: str) -> Response:
        props = catalog.load_namespace_properties(_ns(ns))
        return jsonify({"namespace": list(_ns(ns)), "properties": props})

    @app.delete("/v1/namespaces/<ns>")
    def drop_namespace(ns: str) -> tuple[str, int]:
        catalog.drop_namespace(_ns(ns))
        return "", 204

    @app.get("/v1/namespaces/<ns>/tables")
    def list_tables(ns: str) -> Response:
        return jsonify({"identifiers": [{"namespace": list(i[:-1]), "name": i[-1]}
                                        for i in catalog.list_tables(_ns(ns))]})

    @app.post("/v1/namespaces/<ns>/tables")
    def create_table(ns: str) -> Response:
        body = request.get_json()
        identifier = (*_ns(ns), body["name"])
        schema = Schema.model_validate(body["schema"])
        spec = PartitionSpec.model_validate(body["partition-spec"]) if body.get("partition-spec") else \
            UNPARTITIONED_PARTITION_SPEC
        order = SortOrder.model_validate(body["write-order"]) if body.get("write-order") else UNSORTED_SORT_ORDER
        props = body.get("properties") or {}
        if body.get("stage-create"):
            if catalog.table_exists(identifier):
                raise TableAlreadyExistsError(f"Table {'.'.join(identifier)} already exists")
            staged = catalog._create_staged_table(identifier, schema, body.get("location"), spec, order, props)
            location = staged.metadata.location
            if location.startswith("file://"):  # DuckDB writes manifests before the creating commit
                for sub in ("metadata", "data"):
                    Path(location.removeprefix("file://"), sub).mkdir(parents=True, exist_ok=True)
            return jsonify(_table_result(None, staged.metadata))
        table = catalog.create_table(identifier, schema, body.get("location"), spec, order, props)
        return jsonify(_table_result(table.metadata_location, table.metadata))

    @app.route("/v1/namespaces/<ns>/tables/<name>", methods=["GET", "HEAD"])
    def load_table(ns: str, name: str) -> Response:
        table = catalog.load_table((*_ns(ns), unquote(name)))
        return jsonify(_table_result(table.metadata_location, table.metadata))

    @app.delete("/v1/namespaces/<ns>/tables/<name>")
    def drop_table(ns: str, name: str) -> tuple[str, int]:
        catalog.drop_table((*_ns(ns), unquote(name)))
        return "", 204

    def commit(body: dict[str, Any]) -> dict[str, Any]:
        req = CommitTableRequest.model_validate(body)
        identifier = (*req.identifier.namespace.root, req.identifier.name)
        with lock:
            try:
                table: Any = catalog.load_table(identifier)
            except NoSuchTableError:
                table = _Named(identifier)
            response = catalog.commit_table(table, req.requirements, req.updates)
        return {"metadata-location": response.metadata_location,
                "metadata": response.metadata.model_dump(mode="json", by_alias=True, exclude_none=True)}

    @app.post("/v1/namespaces/<ns>/tables/<name>")
    def commit_table(ns: str, name: str) -> Response:
        body = request.get_json()
        body.setdefault("identifier", {"namespace": list(_ns(ns)), "name": unquote(name)})
        return jsonify(commit(body))

    @app.post("/v1/transactions/commit")
    def commit_transaction() -> tuple[str, int]:
        requests = [CommitTableRequest.model_validate(c) for c in request.get_json()["table-changes"]]
        if faults.get("refuse", 0) > 0:
            faults["refuse"] -= 1
            return jsonify({"error": {"message": "injected: unavailable", "type": "ServiceUnavailable",
                                      "code": 503}}), 503  # type: ignore[return-value]
        with lock:
            commit_all(catalog, requests)
        if journal is not None:
            journal.append(tuple(sorted(".".join((*r.identifier.namespace.root, r.identifier.name))
                                        for r in requests)))
        if faults.get("lose", 0) > 0:
            faults["lose"] -= 1
            return jsonify({"error": {"message": "injected: response lost", "type": "ServiceUnavailable",
                                      "code": 503}}), 503  # type: ignore[return-value]
        return "", 204

    return app


def commit_all(catalog: SqlCatalog, requests: list[CommitTableRequest]) -> None:
    """Commit several tables atomically (``POST /v1/transactions/commit``).

    Phase 1, for every table: load it, validate the requirements and apply the updates
    (``_update_and_stage_table`` raises ``CommitFailedException`` on a stale requirement), and write
    the new metadata file (unreferenced until phase 2, so harmless if the transaction fails).
    Phase 2: one SQLAlchemy session updates each table's catalog row from the metadata location
    phase 1 read to the new one (``WHERE metadata_location = <old>``: a concurrent commit by another
    process makes the row count 0) or inserts the row of a new table; any failure rolls the session
    back, so no table moves. Same-process commits are also serialized by the adapter's lock.
    """
    from pyiceberg.catalog.sql import IcebergTables
    from sqlalchemy import insert, update
    from sqlalchemy.exc import IntegrityError
    from sqlalchemy.orm import Session

    staged = []
    for req in requests:
        identifier = (*req.identifier.namespace.root, req.identifier.name)
        try:
            current: Any = catalog.load_table(identifier)
        except NoSuchTableError:
            current = None
        new = catalog._update_and_stage_table(current, identifier, req.requirements, req.updates)
        if current is not None and new.metadata == current.metadata:
            continue
        catalog._write_metadata(metadata=new.metadata, io=new.io, metadata_path=new.metadata_location)
        staged.append((identifier, current, new))
    with Session(catalog.engine) as session:
        for identifier, current, new in staged:
            namespace, name = ".".join(identifier[:-1]), identifier[-1]
            if current is not None:
                result = session.execute(update(IcebergTables).where(
                    IcebergTables.catalog_name == catalog.name, IcebergTables.table_namespace == namespace,
                    IcebergTables.table_name == name,
                    IcebergTables.metadata_location == current.metadata_location,
                ).values(metadata_location=new.metadata_location,
                         previous_metadata_location=current.metadata_location))
                if result.rowcount < 1:  # type: ignore[attr-defined]
                    raise CommitFailedException(f"Table has been updated by another process: {namespace}.{name}")
            else:
                try:
                    session.execute(insert(IcebergTables).values(
                        **catalog._create_table_row(namespace, name, new.metadata_location)))
                except IntegrityError:
                    raise TableAlreadyExistsError(f"Table {namespace}.{name} already exists") from None
        session.commit()


@contextmanager
def serve(catalog: SqlCatalog, faults: dict[str, int] | None = None,
          journal: list[tuple[str, ...]] | None = None) -> Iterator[str]:
    """Serve ``catalog`` on 127.0.0.1 in a thread; yields the base URI (``faults``: see :func:`make_app`)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    port = free_port()
    server = make_server("127.0.0.1", port, make_app(catalog, faults, journal), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
