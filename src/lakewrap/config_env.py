"""``[env.<name>]`` sections of ``lakewrap.toml``: environments that override ``[lake]`` and ``[run]``.

An environment is chosen with ``--env NAME`` or ``LAKEWRAP_ENV`` (``--env`` sets the variable for the
process, so worker processes inherit it). Each environment is the file's ``[lake]`` and ``[run]`` with
its own keys laid over them key by key (``[env.dev.lake] path = ...`` changes only the path); an
environment whose ``[env.<name>.lake]`` names another ``substrate`` starts from that substrate's
defaults instead. ``defer = "<other env>"`` (DuckLake; Iceberg through pyiceberg) reads the tables
this environment's lake lacks from the other environment's lake (``lakewrap.substrates.*.defer``).
See ``docs/environments.md``.

This module splits the raw TOML data into the base and one table per environment and locates errors
in the environment's section; :mod:`lakewrap.config` validates each merged table.
"""

from __future__ import annotations

import os
import re
from typing import Any

from lakewrap.config_errors import CONFIG_FILE
from lakewrap.errors import ConfigError, Location, choices_hint

ENV_VAR = "LAKEWRAP_ENV"
ENV_KEYS = ("lake", "run", "defer")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class UnknownEnv(ConfigError):
    """``--env`` / ``LAKEWRAP_ENV`` names no ``[env.<name>]`` of ``lakewrap.toml`` (exit code 2)."""

    exit_code = 2


def chosen(env: str | None = None) -> str | None:
    """The environment asked for: ``env``, else ``LAKEWRAP_ENV`` (empty means none)."""
    name = env if env is not None else os.environ.get(ENV_VAR)
    return name or None


def section_line(text: str, name: str, key: str | None = None, table: str | None = None) -> int | None:
    """The line of ``[env.<name>]`` (or ``[env.<name>.<table>]``), or of ``key = ...`` inside it.

    Also finds the dotted forms ``[env]`` + ``name.key = ...`` only through the header: a key
    written outside a header of its own is located at the environment's header line.
    """
    header = re.compile(r"\s*\[\s*env\s*\.\s*" + re.escape(name) + (r"\s*\.\s*" + re.escape(table) if table else "")
                        + r"\s*\]")
    inside = False
    first: int | None = None
    for i, line in enumerate(text.splitlines(), 1):
        if header.match(line):
            inside, first = True, first or i
            if key is None:
                return i
            continue
        if inside and re.match(r"\s*\[", line):
            inside = False
        if inside and key is not None and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return i
    if table is not None and first is None:
        return section_line(text, name, key)  # written inline: `lake = {...}` under [env.<name>]
    return first


def split(data: dict[str, Any], text: str) -> dict[str, dict[str, Any]]:
    """The raw tables of each environment, keyed by name; ``data`` loses its ``env`` table.

    Each value holds ``lake`` (merged over the base ``[lake]``), ``run`` (merged over ``[run]``) and
    the environment's ``defer``. Shape errors (an env that is not a table, an unknown key, a bad
    name, a ``defer`` naming no environment or itself) are located in the env's section.
    """
    raw = data.pop("env", None)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError("env: write each environment as a table, [env.<name>]",
                          location=Location(CONFIG_FILE, _line(text, r"\s*env\s*=")),
                          hint="see docs/environments.md")
    out: dict[str, dict[str, Any]] = {}
    for name, body in raw.items():
        where = Location(CONFIG_FILE, section_line(text, name))
        if not _NAME.fullmatch(name):
            raise ConfigError(f"env.{name}: an environment's name is letters, digits, _ and -",
                              location=where, hint="e.g. [env.dev] or [env.prod]")
        if not isinstance(body, dict):
            raise ConfigError(f"env.{name}: write the environment as a table, [env.{name}]",
                              location=where, hint="see docs/environments.md")
        for key in body:
            if key not in ENV_KEYS:
                raise ConfigError(f"unknown key `env.{name}.{key}`",
                                  location=Location(CONFIG_FILE, _header(text, name, key)
                                                    or section_line(text, name, key)),
                                  hint=choices_hint(key, ENV_KEYS, "key") + "; see docs/environments.md")
        for table in ("lake", "run"):
            if table in body and not isinstance(body[table], dict):
                raise ConfigError(f"env.{name}.{table}: write it as a table, [env.{name}.{table}]",
                                  location=Location(CONFIG_FILE, section_line(text, name, table)),
                                  hint="see docs/environments.md")
        out[name] = {"lake": _over(data.get("lake"), body.get("lake")),
                     "run": _over(data.get("run"), body.get("run")), "defer": body.get("defer")}
    for name, body in out.items():
        defer = body["defer"]
        if defer is None:
            continue
        where = Location(CONFIG_FILE, section_line(text, name, "defer"))
        if not isinstance(defer, str) or defer not in out or defer == name:
            others = [n for n in out if n != name]
            raise ConfigError(f"env.{name}.defer: no other environment `{defer}`",
                              location=where, hint=choices_hint(str(defer), others, "environment"))
    return out


def _over(base: Any, mine: Any) -> Any:
    """``mine``'s keys laid over ``base`` (nested tables merged the same way); a ``substrate`` other
    than the base's starts from nothing."""
    if mine is None:
        return base
    if not isinstance(base, dict):
        return mine
    if "substrate" in mine and mine["substrate"] != base.get("substrate", "ducklake"):
        return dict(mine)
    merged = dict(base)
    for key, value in mine.items():
        merged[key] = _over(base.get(key), value) if isinstance(value, dict) else value
    return merged


def unknown(name: str, known: list[str]) -> UnknownEnv:
    """The error for ``--env NAME`` naming no environment."""
    where = f"--env {name}"
    if not known:
        return UnknownEnv(f"{where}: it defines no environments (no [env.<name>] section)",
                          location=Location(CONFIG_FILE),
                          hint="add e.g. [env.dev] with [env.dev.lake] keys; see docs/environments.md")
    return UnknownEnv(f"{where}: no environment `{name}` in it",
                      location=Location(CONFIG_FILE), hint=choices_hint(name, known, "environment"))


def _header(text: str, name: str, table: str) -> int | None:
    """The line of the header ``[env.<name>.<table>]``, if the file has one."""
    return _line(text, r"\s*\[\s*env\s*\.\s*" + re.escape(name) + r"\s*\.\s*" + re.escape(table) + r"\s*\]")


def _line(text: str, pattern: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(pattern, line):
            return i
    return None


def relocated(err: ConfigError, pyd: Any, text: str, name: str) -> ConfigError:
    """A validation error of environment ``name``'s merged config, named and located in its section
    (the key's line there, else the base key's line :func:`lakewrap.config_errors.located` found)."""
    loc = [str(p) for p in pyd["loc"]]
    table = loc[0] if loc and loc[0] in ("lake", "run") else None
    key = loc[-1] if len(loc) > 1 else None
    line = section_line(text, name, key, table) if key else section_line(text, name, None, table)
    message = f"env.{name}: {err.message}"
    location = Location(CONFIG_FILE, line) if line else err.location
    return ConfigError(message, location=location, hint=err.hint)


def check_defer(config: Any, other: Any, text: str) -> None:
    """``defer`` needs a substrate that can read the other environment's lake (the substrate's
    :meth:`~lakewrap.substrates.protocol.Substrate.defer_refusal`), and another lake than the env's own."""
    name = config.env
    where = Location(CONFIG_FILE, section_line(text, name, "defer"))
    from lakewrap.substrates.registry import key, resolve

    refusal = resolve(config.lake).defer_refusal(resolve(other.lake))
    if refusal is not None:
        raise ConfigError(
            f"env.{name}.defer: {refusal} (environment `{name}` is substrate = \"{key(config.lake)}\", "
            f"`{config.defer}` is \"{key(other.lake)}\")",
            location=where, hint="remove defer, or build the upstream models in this environment "
            "(docs/environments.md, \"Defer\")")
    if config.lake.dump() == other.lake.dump():
        raise ConfigError(f"env.{name}.defer: environment `{config.defer}` has the same [lake] as "
                          f"`{name}`", location=where,
                          hint=f"give [env.{name}.lake] its own path and data_path, "
                          f"e.g. path = \".lakewrap/{name}.ducklake\"")
