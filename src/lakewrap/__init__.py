"""lakewrap: a materialization compiler for DuckLake and Apache Iceberg tables.

The public API is lazy: importing ``lakewrap`` loads neither duckdb nor pyarrow.

Example:
    >>> import lakewrap
    >>> project = lakewrap.Project("examples/shop")  # doctest: +SKIP
    >>> plans = project.compile(["orders"], partition="2024-01-02")  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lakewrap.api import Project, materialize
    from lakewrap.pymodels import model

__all__ = ["Project", "__version__", "materialize", "model"]


def __getattr__(name: str) -> Any:
    if name in ("Project", "materialize"):
        from lakewrap import api

        return getattr(api, name)
    if name == "model":
        from lakewrap.pymodels import model

        return model
    raise AttributeError(f"module 'lakewrap' has no attribute {name!r}")
