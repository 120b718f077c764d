"""The ``state:`` selectors: models whose SQL differs from what a lake last recorded, or never ran.

* ``state:new``: the lake holds no materialization of the model's target;
* ``state:modified``: ``state:new``, plus the models whose ``sql_sha256`` compiled now differs from the
  ``sql_sha256`` of the target's latest materialization (any partition: the hash does not depend on
  the partition value, ``docs/architecture.md``, "The compile cache");
* ``+``/``+`` around them as for any selector (``state:modified+``: and their descendants).

The lake compared with is the current environment's (``--env``/``LAKEWRAP_ENV``), or the one
``--state ENV`` (``LAKEWRAP_STATE``) names. A model's plan is made as a run makes it (the substrate's
``plan_step`` on a read-only connection: the recorded watermark, a ``SELECT *`` merge's probed
columns), so the hash compared is the one a run would record. A lake that does not exist yet holds
nothing: every model is new. See ``docs/environments.md``, "State selection".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from lakewrap.errors import NoLake, SelectionError, choices_hint

if TYPE_CHECKING:
    from lakewrap.project import Project

STATE_VAR = "LAKEWRAP_STATE"
KINDS = ("modified", "new")


@dataclass
class State:
    """What one lake recorded of a project's models, by target key."""

    env: str | None
    new: set[str] = field(default_factory=set)
    modified: set[str] = field(default_factory=set)  # changed SQL (``new`` ones not included)


def state_env() -> str | None:
    """The environment whose lake ``state:`` compares with: ``--state``, else the current one."""
    return os.environ.get(STATE_VAR) or os.environ.get("LAKEWRAP_ENV") or None


def match(project: Project, kind: str) -> set[str]:
    """The target keys ``state:<kind>`` selects (before ``+`` closures)."""
    if kind not in KINDS:
        raise SelectionError(f"unknown state selector `state:{kind}`", hint=choices_hint(kind, KINDS, "state"))
    env = state_env()
    state = project.states.get(env)
    if state is None:
        state = project.states[env] = compare(project, env)
    return set(state.new) if kind == "new" else state.new | state.modified


def compare(project: Project, env: str | None) -> State:
    """Read the latest record of every model's target in ``env``'s lake and compile each model as a
    run would there."""
    state = State(env)
    latest = recorded(project, env, set(project.models))
    state.new = set(project.models) - set(latest)
    planned = planned_hashes(project, env, set(latest))
    state.modified = {key for key, sha in latest.items() if planned[key] != sha}
    return state


def recorded(project: Project, env: str | None, keys: set[str]) -> dict[str, str]:
    """The ``sql_sha256`` of the latest materialization of each of ``keys`` (target keys) in ``env``'s
    lake; a model it never materialized (or a lake that does not exist) is left out."""
    from lakewrap.config import load_config
    from lakewrap.substrates.registry import resolve

    config = load_config(project.root, env)
    substrate = resolve(config.lake)
    try:
        lake = substrate.open(project.root, config=config, read_only=True)
        with substrate.state_reader(lake) as read:
            return {key: records[-1].sql_sha256 for key in sorted(keys)
                    if (records := read(str(project.models[key].target)))}
    except NoLake:
        return {}


def planned_hashes(project: Project, env: str | None, keys: set[str]) -> dict[str, str | None]:
    """The ``sql_sha256`` each of ``keys`` compiles to now in ``env``, planned as a run plans it (on a
    read-only connection to its lake; without a lake, as ``lakewrap compile`` plans it). None: it
    cannot be planned (e.g. the ``SELECT *`` probe fails)."""
    from lakewrap.compilers import compiler_for
    from lakewrap.config import load_config
    from lakewrap.plan import make_plan
    from lakewrap.substrates.registry import key as substrate_key
    from lakewrap.substrates.registry import resolve
    from lakewrap.testfiles import read_test_files

    if not keys:
        return {}
    config = load_config(project.root, env)
    substrate = resolve(config.lake)
    now = datetime.now(timezone.utc)
    lake = substrate.open(project.root, config=config, read_only=True)
    try:
        con = lake.connect()
    except NoLake:
        con = None
    out: dict[str, str | None] = {}
    try:
        for key in sorted(keys):
            spec = project.models[key]
            try:
                plan = (substrate.plan_step(lake, con, spec, None, now) if con is not None else
                        make_plan(spec, substrate=substrate_key(config.lake), partition=None, now=now))
                if spec.tests:
                    plan = read_test_files(plan, project.root)
                out[key] = compiler_for(plan.substrate).compile(plan).sql_sha256
            except Exception:  # it cannot be planned as a run would (its inputs changed): not what ran
                out[key] = None
    finally:
        if con is not None:
            lake.close(con)
    return out
