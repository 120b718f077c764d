"""The substrates lakewrap writes to, behind one protocol (:mod:`lakewrap.substrates.protocol`).

``resolve(config.lake)`` is the substrate object of a project (:mod:`lakewrap.substrates.registry`);
``ducklake/`` and ``iceberg/`` are the built-in ones. Nothing here imports a database driver until
a role is used.
"""

from __future__ import annotations

from lakewrap.substrates.registry import get, names, resolve

__all__ = ["get", "names", "resolve"]
