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
    """The compiler of a registered substrate (``ducklake``, ``iceberg``, ``iceberg-sql``, or one a
    package adds: :mod:`lakewrap.substrates.registry`)."""
    from lakewrap.substrates.registry import get

    return get(substrate).compiler()


__all__ = ["Capabilities", "Compiler", "compiler_for"]
