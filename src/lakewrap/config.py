"""``lakewrap.toml``: where the lake lives. Typed, validated, with located errors.

Without the file, a project uses the embedded default: a DuckLake whose catalog is a DuckDB file
and whose data folder are both under ``<project>/.lakewrap/``. A file holding only
``[lake] substrate = "..."`` means the embedded default of that substrate.

Credentials never live in this file: S3 keys come from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), PostgreSQL passwords from ``PGPASSWORD`` or
``~/.pgpass``. A key that looks like a credential is refused with a hint.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from lakewrap.errors import ConfigError, Location
from lakewrap.spec import Frozen

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG_FILE = "lakewrap.toml"
DEFAULT_DIR = ".lakewrap"
_SECRET_WORDS = ("password", "secret", "access_key", "key_id", "token", "credential")


class S3Config(Frozen):
    """Where an ``s3://`` data path is served; credentials come from the environment."""

    endpoint: str | None = None  # host:port, e.g. 127.0.0.1:5055; None means AWS
    region: str = "us-east-1"
    url_style: Literal["path", "vhost"] = "vhost"
    use_ssl: bool = True

    @field_validator("endpoint")
    @classmethod
    def _no_scheme(cls, v: str | None) -> str | None:
        if v is not None and "://" in v:
            raise ValueError("write the endpoint as host:port, without http:// or https:// (see use_ssl)")
        return v


class LakeConfig(Frozen):
    """The ``[lake]`` table."""

    substrate: Literal["ducklake", "iceberg"] = "ducklake"
    catalog: Literal["duckdb", "sqlite", "postgres"] = "duckdb"
    path: str | None = None  # duckdb/sqlite catalog file, relative to the project
    dsn: str | None = None  # postgres: libpq key=value string without a password
    data_path: str | None = None  # local folder (relative to the project) or s3://bucket/prefix/
    alias: str = "lake"
    data_inlining_row_limit: int | None = Field(default=None, ge=0)
    s3: S3Config | None = None

    @field_validator("alias")
    @classmethod
    def _alias(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("the alias must be a plain identifier (letters, digits, _)")
        return v

    @field_validator("dsn")
    @classmethod
    def _no_password(cls, v: str | None) -> str | None:
        # key=value form (`password=...`) or URI form (`postgresql://user:secret@host/db`)
        if v is not None and (re.search(r"(^|\s)password\s*=", v, re.IGNORECASE)
                              or re.search(r"://[^/@\s]*:[^/@\s]*@", v)):
            raise ValueError("do not put a password in the dsn; set PGPASSWORD or use ~/.pgpass")
        return v

    @model_validator(mode="after")
    def _rules(self) -> LakeConfig:
        if self.catalog == "postgres" and not self.dsn:
            raise ValueError("a postgres catalog needs dsn = \"dbname=... host=... port=... user=...\"")
        if self.catalog != "postgres" and self.dsn:
            raise ValueError(f"dsn only applies to catalog = \"postgres\", not \"{self.catalog}\"")
        if self.is_s3 and self.s3 is None:
            return self.model_copy(update={"s3": S3Config()})
        return self

    @property
    def is_s3(self) -> bool:
        return bool(self.data_path and self.data_path.startswith("s3://"))

    def catalog_path(self, root: Path) -> Path:
        default = {"duckdb": "lake.ducklake", "sqlite": "lake.sqlite", "postgres": ""}[self.catalog]
        return (root / self.path) if self.path else root / DEFAULT_DIR / default

    def data_location(self, root: Path) -> str:
        if self.data_path is None:
            return str(root / DEFAULT_DIR / "data") + "/"
        if self.is_s3:
            return self.data_path if self.data_path.endswith("/") else self.data_path + "/"
        return str(root / self.data_path).rstrip("/") + "/"


class RunConfig(Frozen):
    """The ``[run]`` table: defaults of ``lakewrap run`` / ``backfill``."""

    retries: int = Field(default=19, ge=0)  # per model, retryable errors only; ``-- retry N`` overrides
    workers: int | None = Field(default=None, ge=1)  # default: one per core


class ProjectConfig(Frozen):
    """The whole ``lakewrap.toml``."""

    lake: LakeConfig = LakeConfig()
    run: RunConfig = RunConfig()


def _find_line(text: str, key: str) -> int | None:
    """The line of ``key = ...``, or of a table header ``[key]`` / ``[lake.key]``."""
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line) or re.match(rf"\s*\[\s*([\w.]+\.)?{re.escape(key)}\s*\]", line):
            return i
    return None


def load_config(root: Path) -> ProjectConfig:
    """Read ``<root>/lakewrap.toml`` (absent: the embedded default)."""
    path = root / CONFIG_FILE
    if not path.exists():
        return ProjectConfig()
    try:
        text = path.read_text(encoding="utf-8")
        data: dict[str, Any] = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("lakewrap.toml is not UTF-8 text", location=Location(CONFIG_FILE)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read lakewrap.toml: {exc.strerror}", location=Location(CONFIG_FILE)) from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+), column (\d+)", str(exc))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        snippet = text.splitlines()[line - 1] if line and line <= len(text.splitlines()) else None
        if snippet is not None and any(w in snippet.lower() for w in (*_SECRET_WORDS, "dsn")):
            snippet = None  # the broken line may hold a credential: never echo it
        raise ConfigError(f"lakewrap.toml is not valid TOML: {str(exc).split(' (at')[0]}",
                          location=Location(CONFIG_FILE, line, col, snippet),
                          hint="check quotes and brackets; see docs/configuration.md") from None
    lake = data.get("lake")
    sections = [lake, lake.get("s3")] if isinstance(lake, dict) else []
    for section in sections:
        if not isinstance(section, dict):
            continue
        for key in section:
            if any(w in key.lower() for w in _SECRET_WORDS):
                raise ConfigError(
                    f"lakewrap.toml must not hold credentials (`{key}`)",
                    location=Location(CONFIG_FILE, _find_line(text, key)),
                    hint="set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or PGPASSWORD in the environment",
                )
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        key = loc[-1] if loc else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key `{'.'.join(loc)}`"
        raise ConfigError(
            f"lakewrap.toml: {'.'.join(loc)}: {msg}" if err["type"] != "extra_forbidden" else f"lakewrap.toml: {msg}",
            location=Location(CONFIG_FILE, _find_line(text, key) if key else None),
            hint="see docs/configuration.md for the keys of [lake] and [run]",
        ) from None
