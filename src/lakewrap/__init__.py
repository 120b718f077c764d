"""lakewrap: a materialization compiler for DuckLake and Apache Iceberg tables."""

from __future__ import annotations

__version__ = "0.1.0"
