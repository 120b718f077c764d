"""What an Iceberg session must see of a model: the tables it reads, each a view in its scratch session."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lakewrap.spec import ModelSpec


def reads_of(spec: ModelSpec) -> tuple[str, ...]:
    """The tables a model reads (views in its scratch session), as ``schema.name``."""
    return tuple(str(u) for u in spec.all_upstreams)
