"""``lakewrap.toml``'s validation errors as :class:`~lakewrap.errors.ConfigError`s at the key's line.

pydantic reports where a value is wrong (``("lake", "ducklake", "s3", "endpoint")``); this module
turns its first error into one sentence a person can act on: the key's line in the file, a key of
another substrate named as such, an unknown substrate with the registered ones as a close-match
hint. It reads the config classes it is given and imports none of lakewrap's config.
"""

from __future__ import annotations

import re
import typing
from typing import TYPE_CHECKING, Any

from lakewrap.errors import ConfigError, Location, choices_hint, suggest

if TYPE_CHECKING:
    from lakewrap.config import SubstrateConfig

CONFIG_FILE = "lakewrap.toml"
_HINT = "see docs/configuration.md for the keys of [lake], [run], [maintain] and [security]"


def find_line(text: str, key: str) -> int | None:
    """The line of ``key = ...``, or of a table header ``[key]`` / ``[lake.key]``."""
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line) or re.match(rf"\s*\[\s*([\w.]+\.)?{re.escape(key)}\s*\]", line):
            return i
    return None


def located(err: Any, text: str, lake: dict[str, Any] | None,
            classes: dict[str, type[SubstrateConfig]], tables: dict[str, Any] | None = None) -> ConfigError:
    """pydantic's error ``err`` of the file ``text`` as a located :class:`ConfigError`.

    ``lake``: the file's ``[lake]`` table (None when it is not a table); ``classes``: the config class
    of each substrate tag (:func:`lakewrap.config.config_classes`); ``tables``: the record class of
    each other table (``run``, ``hooks``, ...), whose keys an unknown key is matched against.
    """
    loc = [str(p) for p in err["loc"]]
    kind = err["type"]
    if kind in ("union_tag_invalid", "union_tag_not_found") and loc == ["lake"]:
        if lake is None:
            return ConfigError("lake: write [lake] as a table (a [lake] line, then key = value lines)",
                               location=Location(CONFIG_FILE, find_line(text, "lake")),
                               hint="see docs/configuration.md for the keys of [lake]")
        tag = str(err.get("ctx", {}).get("tag", lake.get("substrate")))
        return ConfigError(
            f"lake.substrate: no substrate `{tag}`",
            location=Location(CONFIG_FILE, find_line(text, "substrate")),
            hint=choices_hint(tag, classes, "substrate") + " (a package adds one through the "
            "`lakewrap.substrates` entry point)",
        )
    if len(loc) >= 2 and loc[0] in KEYED:
        return _keyed(err, text, loc, (tables or {}).get(loc[0]))
    substrate = str(lake.get("substrate", "ducklake")) if lake is not None else "ducklake"
    if loc[:1] == ["lake"] and len(loc) > 1:
        loc.pop(1)  # the substrate's tag, which pydantic puts in the path of a tagged union's member
    key = loc[-1] if loc else ""
    where = Location(CONFIG_FILE, find_line(text, key) if key else None)
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        if len(loc) == 2 and loc[0] == "lake":
            return _foreign_key(key, substrate, classes, where) or _unknown_lake_key(key, substrate, classes, where)
        owner = (tables or {}).get(loc[0]) if len(loc) == 2 else None
        close = suggest(key, owner.__dataclass_fields__) if owner is not None else None
        return ConfigError(f"unknown key `{'.'.join(loc)}`", location=where,
                           hint=(f"did you mean `{close}`? " if close is not None else "") + _HINT)
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "literal_error" and loc == ["lake", "catalog"] and lake is not None:
        msg = _foreign_catalog(str(lake.get("catalog")), substrate, classes) or msg
    return ConfigError(f"{'.'.join(loc)}: {msg}", location=where, hint=_HINT)


KEYED = ("sources", "schedules")  # tables of tables: [sources."raw.events"], [schedules.<name>]


def _keyed(err: Any, text: str, loc: list[str], owner: Any) -> ConfigError:
    """An error inside ``[sources."<table>"]`` or ``[schedules.<name>]``, at the key's line in that table."""
    from lakewrap.config_sched import section_line

    table, name, key = loc[0], loc[1], (loc[2] if len(loc) > 2 else None)
    where = Location(CONFIG_FILE, section_line(text, table, name, key))
    section = f'{table}."{name}"' if table == "sources" else f"{table}.{name}"
    hint = "see docs/schedules.md for the keys of [sources] and [schedules]"
    if err["type"] in ("extra_forbidden", "unexpected_keyword_argument") and key is not None:
        close = suggest(key, owner.__dataclass_fields__) if owner is not None else None
        return ConfigError(f"unknown key `{key}` in [{section}]", location=where,
                           hint=(f"did you mean `{close}`? " if close is not None else "") + hint)
    if err["type"] in ("missing", "missing_keyword_argument") and key is not None:
        return ConfigError(f"[{section}] needs `{key}`", location=where, hint=hint)
    msg = err["msg"].removeprefix("Value error, ")
    return ConfigError(f"[{section}]" + (f" {key}" if key else "") + f": {msg}", location=where, hint=hint)


def _foreign_key(key: str, substrate: str, classes: dict[str, type[SubstrateConfig]],
                 where: Location) -> ConfigError | None:
    """A ``[lake]`` key of another substrate than the one named, as an error saying so."""
    owners = sorted(tag for tag, cls in classes.items() if tag != substrate and key in cls.__dataclass_fields__)
    if not owners:
        return None
    mine = classes.get(substrate)
    instead = mine.instead.get(key) if mine is not None else None
    return ConfigError(
        f"lake: {key} does not apply to substrate = \"{substrate}\""
        + (f" (use {instead})" if instead else ""),
        location=where,
        hint=f"{key} is a key of substrate = " + " or ".join(f"\"{o}\"" for o in owners)
        + "; see docs/configuration.md for the keys of each substrate",
    )


def _unknown_lake_key(key: str, substrate: str, classes: dict[str, type[SubstrateConfig]],
                      where: Location) -> ConfigError:
    """A ``[lake]`` key no substrate has, with the closest key of the one named as a hint."""
    mine = classes.get(substrate)
    close = suggest(key, mine.__dataclass_fields__) if mine is not None else None
    return ConfigError(f"unknown key `lake.{key}`", location=where,
                       hint=(f"did you mean `{close}`? " if close is not None else "") + _HINT)


def _catalogs(cls: type[SubstrateConfig]) -> tuple[str, ...]:
    """The values a config class's ``catalog`` takes (its ``Literal``), or none."""
    if "catalog" not in cls.__dataclass_fields__:
        return ()
    return tuple(str(a) for a in typing.get_args(typing.get_type_hints(cls)["catalog"]))


def _foreign_catalog(catalog: str, substrate: str, classes: dict[str, type[SubstrateConfig]]) -> str | None:
    """``catalog = "sqlite"`` under Iceberg (or the reverse): which substrate the catalog belongs to."""
    mine = classes.get(substrate)
    ours = _catalogs(mine) if mine is not None else ()
    for tag, cls in classes.items():
        if tag != substrate and catalog in _catalogs(cls) and mine is not None and ours:
            theirs = cls.label or f"substrate = \"{tag}\""
            label = mine.label or f"substrate = \"{substrate}\""
            return (f"catalog = \"{catalog}\" is {_a(theirs)} {theirs} catalog; {_a(label)} {label} catalog is "
                    + ", ".join(f"\"{c}\"" for c in ours[:-1]) + (" or " if len(ours) > 1 else "") + f"\"{ours[-1]}\"")
    return None


def _a(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"
