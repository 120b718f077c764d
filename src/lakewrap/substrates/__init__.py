"""The substrates lakewrap writes to, behind one protocol (:mod:`lakewrap.substrates.protocol`).

``resolve(config.lake)`` is the substrate object of a project (:mod:`lakewrap.substrates.registry`);
``ducklake/`` and ``iceberg/`` are the built-in ones. Nothing here imports a database driver until
a role is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lakewrap.substrates.registry import get, names, resolve

if TYPE_CHECKING:
    from lakewrap.substrates.protocol import Substrate


def of_project(root: Path) -> Substrate:
    """The substrate of the project at ``root`` (its ``lakewrap.toml``'s ``[lake]``). Here, not in the
    registry, which :mod:`lakewrap.config` consults while it validates ``[lake]``."""
    from lakewrap.config import load_config

    return resolve(load_config(root).lake)


__all__ = ["get", "names", "of_project", "resolve"]
