"""``lakewrap.toml``: where the lake lives. Typed, validated, with located errors.

Without the file, a project uses the embedded default: a DuckLake whose catalog is a DuckDB file
and whose data folder are both under ``<project>/.lakewrap/``. A file holding only
``[lake] substrate = "..."`` means the embedded default of that substrate: for ``iceberg``, a
pyiceberg SQL catalog in the SQLite file ``.lakewrap/iceberg.db`` with its warehouse in
``.lakewrap/warehouse/``.

Credentials never live in this file: S3 keys come from ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), PostgreSQL passwords from ``PGPASSWORD`` or
``~/.pgpass``. A key that looks like a credential is refused with a hint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

from lakewrap.errors import ConfigError, Location
from lakewrap.frozen import Frozen, Meta

CONFIG_FILE = "lakewrap.toml"
DEFAULT_DIR = ".lakewrap"
_SECRET_WORDS = ("password", "secret", "access_key", "key_id", "token", "credential")


def _host_port(v: str | None) -> str | None:
    if v is not None and "://" in v:
        raise ValueError("write the endpoint as host:port, without http:// or https:// (see use_ssl)")
    return v


def _url(what: str, example: str) -> Meta:
    """A field holding an http(s) URL without credentials."""

    def check(v: str | None) -> str | None:
        if v is not None and not re.match(r"https?://[^\s/@]+(/\S*)?$", v):
            raise ValueError(f"write {what} as {example}")
        return v

    return Meta(check=check)


class S3Config(Frozen):
    """Where an ``s3://`` data path is served; credentials come from the environment."""

    endpoint: Annotated[str | None, Meta(check=_host_port)] = None  # host:port, e.g. 127.0.0.1:5055; None: AWS
    region: str = "us-east-1"
    url_style: Literal["path", "vhost"] = "vhost"
    use_ssl: bool = True


class GlueConfig(Frozen):
    """``[lake.glue]``: an AWS Glue catalog (Iceberg). Credentials come from the AWS credential chain."""

    region: str = "us-east-1"
    # a URL, e.g. http://127.0.0.1:5055 (an AWS-compatible server); None means AWS
    endpoint: Annotated[str | None, _url("the Glue endpoint",
                                         "a URL without credentials, e.g. https://glue.eu-west-1.amazonaws.com")] = None
    catalog_id: str | None = None  # the AWS account id of the Glue catalog; None means the caller's


class RestConfig(Frozen):
    """``[lake.rest]``: an Iceberg REST catalog. A bearer token, if any, comes from ``LAKEWRAP_ICEBERG_TOKEN``."""

    uri: Annotated[str, _url("the REST catalog uri", "http(s)://host[:port][/path], without credentials")]
    warehouse: str | None = None  # the warehouse name the catalog serves (passed on as `warehouse`)


def _identifier(v: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
        raise ValueError("the alias must be a plain identifier (letters, digits, _)")
    return v


def _no_password(v: str | None) -> str | None:
    # parsed as libpq does (key=value pairs or a postgresql:// URI with its ?query, lakewrap.dsn)
    from lakewrap.dsn import DsnError, has_password, parse

    if v is None:
        return v
    if has_password(v):
        raise ValueError("do not put a password in the dsn (user:password@, ?password= or password=); "
                         "set PGPASSWORD, or use a service file (PGSERVICEFILE) or ~/.pgpass")
    try:
        parse(v)
    except DsnError as exc:
        raise ValueError(str(exc)) from None
    return v


DUCKLAKE_CATALOGS = ("duckdb", "sqlite", "postgres")
ICEBERG_CATALOGS = ("sql", "glue", "rest")


class LakeConfig(Frozen):
    """The ``[lake]`` table."""

    substrate: Literal["ducklake", "iceberg"] = "ducklake"
    # DuckLake: duckdb | sqlite | postgres. Iceberg: sql (pyiceberg's SqlCatalog on SQLite) | glue | rest.
    # Left out, each substrate takes its embedded default (duckdb, sql).
    catalog: Literal["duckdb", "sqlite", "postgres", "sql", "glue", "rest"] = "duckdb"
    path: str | None = None  # duckdb/sqlite catalog file, relative to the project
    dsn: Annotated[str | None, Meta(check=_no_password)] = None  # postgres: libpq key=value or URI, no password
    data_path: str | None = None  # local folder (relative to the project) or s3://bucket/prefix/
    alias: Annotated[str, Meta(check=_identifier)] = "lake"
    data_inlining_row_limit: Annotated[int | None, Meta(ge=0)] = None
    s3: S3Config | None = None
    # Iceberg only
    warehouse: str | None = None  # local folder (relative to the project) or s3://bucket/prefix
    write_path: Literal["pyiceberg", "sql"] = "pyiceberg"
    glue: GlueConfig | None = None
    rest: RestConfig | None = None
    runlog: str | None = None  # the run log's DuckDB file, relative to the project (default: beside the catalog)

    def __post_init__(self) -> None:
        if self.substrate == "iceberg":
            self._iceberg_rules()
        else:
            self._ducklake_rules()
        # the embedded defaults of the optional tables
        if self.is_s3 and self.s3 is None:
            object.__setattr__(self, "s3", S3Config())
        if self.catalog == "glue" and self.glue is None:
            object.__setattr__(self, "glue", GlueConfig())

    def _ducklake_rules(self) -> None:
        for key in ("warehouse", "glue", "rest"):
            if getattr(self, key) is not None:
                raise ValueError(f"{key} only applies to substrate = \"iceberg\"")
        if self.runlog is not None:
            raise ValueError("runlog only applies to substrate = \"iceberg\" (a DuckLake keeps its run log "
                             "in the catalog database)")
        if self.write_path != "pyiceberg":
            raise ValueError("write_path only applies to substrate = \"iceberg\"")
        if self.catalog not in DUCKLAKE_CATALOGS:
            raise ValueError(f"catalog = \"{self.catalog}\" is an Iceberg catalog; a DuckLake catalog is "
                             "\"duckdb\", \"sqlite\" or \"postgres\"")
        if self.catalog == "postgres" and not self.dsn:
            raise ValueError("a postgres catalog needs dsn = \"dbname=... host=... port=... user=...\"")
        if self.catalog != "postgres" and self.dsn:
            raise ValueError(f"dsn only applies to catalog = \"postgres\", not \"{self.catalog}\"")

    def _iceberg_rules(self) -> None:
        catalog = self.catalog
        if catalog not in ICEBERG_CATALOGS:
            raise ValueError(f"catalog = \"{catalog}\" is a DuckLake catalog; an Iceberg catalog is "
                             "\"sql\", \"glue\" or \"rest\"")
        for key in ("dsn", "data_path", "data_inlining_row_limit"):
            if getattr(self, key) is not None:
                hint = " (use warehouse)" if key == "data_path" else ""
                raise ValueError(f"{key} does not apply to substrate = \"iceberg\"{hint}")
        if catalog == "rest" and self.rest is None:
            raise ValueError("a rest catalog needs [lake.rest] with uri = \"http(s)://host:port\"")
        if catalog != "rest" and self.rest is not None:
            raise ValueError(f"[lake.rest] only applies to catalog = \"rest\", not \"{catalog}\"")
        if catalog != "glue" and self.glue is not None:
            raise ValueError(f"[lake.glue] only applies to catalog = \"glue\", not \"{catalog}\"")
        if catalog == "glue" and not (self.warehouse or "").startswith("s3://"):
            raise ValueError("a glue catalog needs warehouse = \"s3://bucket/prefix\"")
        if catalog != "sql" and self.path is not None:
            raise ValueError(f"path (the SQLite catalog file) does not apply to catalog = \"{catalog}\"")
        if self.write_path == "sql" and catalog != "rest":
            raise ValueError("write_path = \"sql\" writes through DuckDB's Iceberg REST client: "
                             "it needs catalog = \"rest\"")
        if self.s3 is not None and not self.is_s3:
            raise ValueError("[lake.s3] only applies to an s3:// warehouse")

    @property
    def is_s3(self) -> bool:
        if self.substrate == "iceberg":
            return bool(self.warehouse and self.warehouse.startswith("s3://"))
        return bool(self.data_path and self.data_path.startswith("s3://"))

    def iceberg_catalog_path(self, root: Path) -> Path:
        """The SQLite file of an Iceberg ``sql`` catalog."""
        return (root / self.path) if self.path else root / DEFAULT_DIR / "iceberg.db"

    def runlog_path(self, root: Path) -> Path:
        """An Iceberg lake's run-log DuckDB file: ``runlog``, or ``runlog.duckdb`` beside the
        embedded catalog (``.lakewrap/runlog.duckdb``; under ``.lakewrap/`` for a glue or rest catalog)."""
        if self.runlog:
            return root / self.runlog
        base = self.iceberg_catalog_path(root).parent if self.catalog == "sql" else root / DEFAULT_DIR
        return base / "runlog.duckdb"

    def warehouse_location(self, root: Path) -> str:
        """The Iceberg warehouse: ``s3://...`` as written, or a local folder as a ``file://`` URI."""
        if self.warehouse is None:
            return (root / DEFAULT_DIR / "warehouse").resolve().as_uri()
        if self.is_s3:
            return self.warehouse.rstrip("/")
        return (root / self.warehouse).resolve().as_uri()

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

    retries: Annotated[int, Meta(ge=0)] = 19  # per model, retryable errors only; ``-- retry N`` overrides
    workers: Annotated[int | None, Meta(ge=1)] = None  # default: one per core


class MaintainConfig(Frozen):
    """The ``[maintain]`` table: the policy of ``lakewrap maintain`` (``docs/maintenance.md``)."""

    # snapshots younger than this many days are kept; older ones are expired unless protected
    retain_days: Annotated[float, Meta(ge=0)] = 7.0
    keep_last: Annotated[int, Meta(ge=1)] = 10  # the newest N snapshots are always kept
    # which run records protect their pins and their own snapshot: every record, or only the
    # latest materialization of each (model, partition) (superseded builds lose time travel)
    protect: Literal["all", "latest"] = "all"
    compact: bool = True  # rewrite delete-heavy files and merge small ones of the selected models' tables
    delete_threshold: Annotated[float, Meta(gt=0, le=1)] = 0.5  # deleted-row share that makes a file rewritten
    # files no snapshot knows are deleted only when older than this: a live writer's files are unknown
    # until it commits
    orphan_min_age_minutes: Annotated[float, Meta(ge=0)] = 60.0


def _folders(v: tuple[str, ...]) -> tuple[str, ...]:
    for path in v:
        if not path.strip():
            raise ValueError("an allowed path must not be empty")
        if "://" in path and not path.startswith("s3://"):
            raise ValueError(f"`{path}`: write a local folder or s3://bucket/prefix/")
    return v


class SecurityConfig(Frozen):
    """The ``[security]`` table: what the SQL users write may read besides the project and the lake."""

    # folders (relative to the project, or absolute) or s3://bucket/prefix/ whose files models,
    # tests and `lakewrap query` may read (docs/security.md)
    allow_paths: Annotated[tuple[str, ...], Meta(check=_folders)] = ()

    def directories(self, root: Path) -> list[str]:
        """The allowed folders as DuckDB matches them: absolute, ending with ``/``."""
        out = []
        for path in self.allow_paths:
            full = path if path.startswith("s3://") else str((root / path).resolve())
            out.append(full.rstrip("/") + "/")
        return out


class ProjectConfig(Frozen):
    """The whole ``lakewrap.toml``."""

    lake: LakeConfig = field(default_factory=LakeConfig)
    run: RunConfig = field(default_factory=RunConfig)
    maintain: MaintainConfig = field(default_factory=MaintainConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)


def _find_line(text: str, key: str) -> int | None:
    """The line of ``key = ...``, or of a table header ``[key]`` / ``[lake.key]``."""
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line) or re.match(rf"\s*\[\s*([\w.]+\.)?{re.escape(key)}\s*\]", line):
            return i
    return None


CONFIG_CACHE = Path("target") / "cache" / "config.json"
# lakewrap.toml files read in this process, by (project, sha256 of the file)
_LOADED: dict[tuple[str, str], ProjectConfig] = {}


# Characters DuckDB reads as more than a path: a glob (``*``, ``?``, ``[``), a separator (``\\``,
# DuckLake turned a project path holding one into a relative data path), control characters.
_PATH_HAZARDS = re.compile(r"[*?\[\\\x00-\x1f\x7f]")


def path_hazard(text: str) -> str | None:
    """The first character of ``text`` that DuckDB would not take literally in a file path, if any."""
    m = _PATH_HAZARDS.search(text)
    return m.group(0) if m else None


def check_project_path(root: Path) -> None:
    """Refuse a project folder whose absolute path DuckDB would not read literally (before anything
    is written). Spaces, quotes and other characters are fine."""
    bad = path_hazard(str(root.resolve()))
    if bad is not None:
        raise ConfigError(f"the project folder's path {str(root.resolve())!r} contains {bad!r}, which DuckDB "
                          "reads as a glob, a path separator or a control character",
                          hint="move or rename the folder to a path without * ? [ \\ or control characters")


def load_config(root: Path) -> ProjectConfig:
    """Read ``<root>/lakewrap.toml`` (absent: the embedded default).

    The validated config is kept in ``target/cache/config.json`` under the file's sha256 and the
    code key of the compile cache, so a run whose ``lakewrap.toml`` did not change neither parses
    nor validates it again (validating imports pydantic, ~70 ms).
    """
    check_project_path(root)
    path = root / CONFIG_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ProjectConfig()
    except OSError as exc:
        raise ConfigError(f"cannot read lakewrap.toml: {exc.strerror}", location=Location(CONFIG_FILE)) from None
    digest = hashlib.sha256(raw).hexdigest()
    memo = (str(root), digest)
    config = _LOADED.get(memo) or _cached(root, digest)
    if config is None:
        config = _validate(raw)
        _save(root, digest, config)
    _LOADED[memo] = config
    return config


def _cached(root: Path, digest: str) -> ProjectConfig | None:
    from lakewrap.targetdir import code_key

    try:
        doc = json.loads((root / CONFIG_CACHE).read_bytes())
        if doc["sha256"] == digest and doc["key"] == code_key():
            return ProjectConfig.decode(doc["config"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass  # none yet, another file's or version's, or damaged: validate the file
    return None


def _save(root: Path, digest: str, config: ProjectConfig) -> None:
    from lakewrap.targetdir import code_key, write_atomic

    with contextlib.suppress(OSError):  # a read-only project validates its config on every run
        write_atomic(root / CONFIG_CACHE, json.dumps({"sha256": digest, "key": code_key(), "config": config.dump()}))


def _validate(raw: bytes) -> ProjectConfig:
    """Parse and validate the file's bytes; a :class:`ConfigError` with its line on any problem."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    try:
        text = raw.decode("utf-8")
        data: dict[str, Any] = tomllib.loads(text)
    except UnicodeDecodeError:
        raise ConfigError("lakewrap.toml is not UTF-8 text", location=Location(CONFIG_FILE)) from None
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
    sections = [lake, *(lake.get(k) for k in ("s3", "glue", "rest"))] if isinstance(lake, dict) else []
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
    if isinstance(lake, dict) and lake.get("substrate") == "iceberg":
        data["lake"] = {"catalog": "sql", **lake}  # an Iceberg lake's embedded catalog

    from pydantic import ValidationError

    try:
        return ProjectConfig.validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err["loc"]]
        key = loc[-1] if loc else ""
        msg = err["msg"].removeprefix("Value error, ")
        unknown = err["type"] in ("extra_forbidden", "unexpected_keyword_argument")
        if unknown:
            msg = f"unknown key `{'.'.join(loc)}`"
        raise ConfigError(
            f"lakewrap.toml: {msg}" if unknown else f"lakewrap.toml: {'.'.join(loc)}: {msg}",
            location=Location(CONFIG_FILE, _find_line(text, key) if key else None),
            hint="see docs/configuration.md for the keys of [lake], [run], [maintain] and [security]",
        ) from None
