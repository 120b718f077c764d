"""``lakewrap promote --from dev --to prod SELECTORS``: re-run in one environment what another built.

Promotion never copies data: the selected models are run in the target environment by the same
scheduler as ``lakewrap run --env <to>`` (their upstreams read from the target's own lake). Before
anything runs, each selected model's ``sql_sha256`` recorded by the latest materialization of its
target in the source environment's lake is compared with the ``sql_sha256`` its plan compiles to in
the target environment (planned as a run plans it, :func:`lakewrap.state_select.planned_hashes`);
a model the source never built, or whose SQL differs, refuses the whole promotion unless
``force``. See ``docs/environments.md``, "Promote".
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lakewrap.config_env import ENV_VAR
from lakewrap.errors import StateError


class PromoteRefused(StateError):
    """The source environment did not build the SQL the target would run (``--force`` promotes anyway)."""


@contextmanager
def using_env(name: str) -> Iterator[None]:
    """``LAKEWRAP_ENV`` set to ``name`` for the block (worker processes inherit it)."""
    before = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = before


def check(root: Path, source: str, target: str, selectors: Sequence[str], exclude: Sequence[str] = ()
          ) -> tuple[list[str], list[str]]:
    """(the selected targets, the refusals): one line per model whose SQL in ``target`` is not what
    ``source`` last built."""
    from lakewrap.compile import load_project
    from lakewrap.config import load_config
    from lakewrap.state_select import planned_hashes, recorded
    from lakewrap.steps import refuse_empty

    load_config(root, source)  # unknown names are errors before anything is read
    load_config(root, target)
    if source == target:
        from lakewrap.errors import SelectionError

        raise SelectionError(f"--from and --to name the same environment `{source}`",
                             hint="promote from one environment to another, e.g. --from dev --to prod")
    with using_env(target):
        project = load_project(root, None)
        selected = project.select(selectors, exclude)
    refuse_empty(selected, selectors, exclude)
    keys = {s.target.key for s in selected}
    built = recorded(project, source, keys)
    planned = planned_hashes(project, target, keys)
    refusals = []
    for spec in selected:
        key = spec.target.key
        if key not in built:
            refusals.append(f"{spec.path}: `{source}` never built {spec.target}")
        elif planned[key] != built[key]:
            refusals.append(f"{spec.path}: the SQL differs from what `{source}` built (sql_sha256 "
                            f"{str(built[key])[:12]} in {source}, {str(planned[key])[:12]} compiled for {target})")
    return [str(s.target) for s in selected], refusals


def promote(root: Path, source: str, target: str, selectors: Sequence[str], *, exclude: Sequence[str] = (),
            force: bool = False, **run: Any) -> Any:
    """Check, then run the selected models in ``target`` (``run``: :func:`lakewrap.runner.run_project`'s
    options). Raises :class:`PromoteRefused` when a model's SQL differs and not ``force``."""
    from lakewrap.runner import run_project

    root = root.resolve()
    targets, refusals = check(root, source, target, selectors, exclude)
    if refusals and not force:
        raise PromoteRefused(f"promote --from {source} --to {target} refused: " + "; ".join(refusals),
                             hint=f"run the models in `{source}` first (`lakewrap run --env {source} ...`), "
                             "or pass --force to run them anyway")
    with using_env(target):
        return run_project(root, targets, command="promote", **run)
