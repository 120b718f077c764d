"""Which substrate a project's ``[lake]`` names: the one place that decides.

The built-in substrates are ``ducklake`` and Iceberg's two write paths, ``iceberg`` (pyiceberg
commits) and ``iceberg-sql`` (DuckDB SQL through a REST catalog). A package adds one through the
``lakewrap.substrates`` entry-point group, naming a :class:`~lakewrap.substrates.protocol.Substrate`
subclass::

    [project.entry-points."lakewrap.substrates"]
    memory = "my_package.substrate:MemorySubstrate"
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING

from lakewrap.errors import UnsupportedError, choices_hint

if TYPE_CHECKING:
    from lakewrap.config import LakeConfig
    from lakewrap.substrates.protocol import Substrate

ENTRY_POINT_GROUP = "lakewrap.substrates"

BUILTIN = {
    "ducklake": "lakewrap.substrates.ducklake:DuckLake",
    "iceberg": "lakewrap.substrates.iceberg:Iceberg",
    "iceberg-sql": "lakewrap.substrates.iceberg:IcebergSql",
}


@cache
def _table() -> dict[str, str]:
    from importlib.metadata import entry_points

    table = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        table.setdefault(ep.name, ep.value)  # a plugin cannot replace a built-in substrate
    return table


def names() -> list[str]:
    """Every substrate name this installation knows."""
    return sorted(_table())


@cache
def get(name: str) -> Substrate:
    """The substrate registered as ``name``."""
    target = _table().get(name)
    if target is None:
        raise UnsupportedError(f"no substrate `{name}`", hint=choices_hint(name, names(), "substrate"))
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)()  # type: ignore[no-any-return]


def key(lake: LakeConfig) -> str:
    """The registered name of the substrate ``[lake]`` describes (Iceberg's write path picks one of two)."""
    if lake.substrate == "iceberg":  # substrate branch 1 of 1 in the registry: the write path is a substrate
        return "iceberg-sql" if lake.write_path == "sql" else "iceberg"
    return lake.substrate


@cache
def of_plan(substrate: str, write_path: str) -> Substrate:
    """The substrate whose compiler wrote a plan (``CompiledPlan.substrate`` and ``.write_path``)."""
    first = _table().get(substrate)
    candidates = ([substrate] if first else []) + [n for n in names() if n != substrate]
    for name in candidates:
        found = get(name)
        caps = found.capabilities
        if caps.name == substrate and caps.write_path == write_path:
            return found
    raise UnsupportedError(f"no substrate compiles plans of `{substrate}` (write path {write_path})",
                           hint=choices_hint(substrate, names(), "substrate"))


def resolve(lake: LakeConfig) -> Substrate:
    """The substrate object of a project's ``[lake]``."""
    return get(key(lake))
