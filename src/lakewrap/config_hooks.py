"""``[hooks]`` in ``lakewrap.toml`` and which project folders hold scripts models may run
(``[security] scripts``): records validated like the other tables, with errors on the key's line.

The files are checked when a run starts (:func:`lakewrap.hooks.check_config`), not here: the
validated config is cached by the file's bytes, and a script may be created or removed later.
"""

from __future__ import annotations

from typing import Annotated

from lakewrap.frozen import Frozen, Meta

DEFAULT_TIMEOUT = 60.0  # seconds a hook may run before it is killed


def _path(v: str | None) -> str | None:
    if v is not None and (not v.strip() or v.startswith("/") or "\\" in v or ".." in v.split("/")):
        raise ValueError(f"`{v}`: write a path relative to the project folder, e.g. \"hooks/notify.py\"")
    return v


def script_folders(v: tuple[str, ...]) -> tuple[str, ...]:
    for folder in v:
        _path(folder)
    return v


Script = Annotated[str | None, Meta(check=_path)]


class HooksConfig(Frozen):
    """The ``[hooks]`` table: scripts run once per ``run`` / ``backfill`` / ``resume`` (docs/hooks.md)."""

    on_run_start: Script = None  # before the first step; its failure fails the run, nothing written
    on_run_end: Script = None  # after the last step, whatever the outcome
    on_failure: Script = None  # after the last step of a run that did not succeed, before on_run_end
    timeout: Annotated[float, Meta(gt=0, le=86_400)] = DEFAULT_TIMEOUT  # seconds, every hook's default
    # credential variables lakewrap reads (AWS_*, PGPASSWORD, LAKEWRAP_ICEBERG_TOKEN) given to hooks
    pass_env: tuple[str, ...] = ()


def allowed(rel: str, folders: tuple[str, ...]) -> bool:
    """Whether the project file ``rel`` lies in one of ``folders`` (project-relative)."""
    return any(rel.startswith(f.strip("/") + "/") or f.strip("/") in ("", ".") for f in folders)
