"""Substrate compilers: the only code that builds SQL. Pure: no I/O, no database drivers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakewrap.compilers.base import Capabilities, Compiler


def __getattr__(name: str) -> Any:
    if name in ("Capabilities", "Compiler"):
        from lakewrap.compilers import base

        return getattr(base, name)
    raise AttributeError(name)


def compiler_for(substrate: str) -> Compiler:
    """The compiler of a substrate (``ducklake``, ``iceberg``, or ``iceberg-sql``: Iceberg written by DuckDB SQL)."""
    from lakewrap.errors import UnsupportedError

    if substrate == "ducklake":
        from lakewrap.compilers.ducklake import DuckLakeCompiler

        return DuckLakeCompiler()
    if substrate == "iceberg":
        from lakewrap.compilers.iceberg import IcebergCompiler

        return IcebergCompiler()
    if substrate == "iceberg-sql":
        from lakewrap.compilers.iceberg_sql import IcebergSqlCompiler

        return IcebergSqlCompiler()
    raise UnsupportedError(f"no compiler for substrate `{substrate}`", hint="use `ducklake` or `iceberg`")


__all__ = ["Capabilities", "Compiler", "compiler_for"]
