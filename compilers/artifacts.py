"""The compiled plan: the statements one materialization executes, in order, with their parameters.

:class:`CompiledPlan` is the versioned, documented JSON contract of ``lakewrap compile --format json``
(``schema_version`` changes only with a breaking change; fields are only ever added).
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict

from lakewrap.plan import Param

# The temporary table a plan stages the SELECT's rows in (the executor counts them there).
STAGE = "__lakewrap_stage"

SCHEMA_VERSION = 1

Role = Literal["setup", "stage", "guard", "bootstrap", "write", "cleanup", "literal"]
Effect = Literal["insert", "delete", "update", "merge"]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CompiledStatement(_Out):
    """One statement: its role in the plan, its SQL, and exactly the parameters it uses."""

    role: Role
    sql: str
    params: dict[str, Param] = {}
    note: str | None = None
    effect: Effect | None = None  # what a write's row count means


class Window(_Out):
    """The window a partitioned materialization covers (ISO 8601 with offsets)."""

    kind: Literal["time", "dynamic"]
    value: str
    start: str
    end: str
    closed: Literal["[start, end)", "(start, end]"]
    lookback: int = 0


class CompiledPlan(_Out):
    """Everything ``lakewrap compile`` prints for one model and partition."""

    schema_version: int = SCHEMA_VERSION
    model: str
    path: str
    target: str
    strategy: str
    substrate: str
    write_path: str
    window: Window | None
    idempotent: bool | None
    idempotent_note: str
    statements: tuple[CompiledStatement, ...]
    sql_sha256: str

    @staticmethod
    def digest(statements: tuple[CompiledStatement, ...]) -> str:
        """sha256 over the statements' SQL (not their parameter values, which vary per partition)."""
        h = hashlib.sha256()
        for st in statements:
            h.update(st.sql.encode())
            h.update(b"\x00")
        return h.hexdigest()


class CompileOutput(_Out):
    """The top-level JSON document of ``lakewrap compile --format json``."""

    schema_version: int = SCHEMA_VERSION
    lakewrap_version: str
    plans: tuple[CompiledPlan, ...]
