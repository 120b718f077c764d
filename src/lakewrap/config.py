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
from typing import Annotated, Any, ClassVar, Literal, Union

from lakewrap.config_errors import CONFIG_FILE, find_line, located
from lakewrap.config_hooks import HooksConfig, script_folders
from lakewrap.config_sched import ScheduleConfig, SourceConfig, TracingConfig, schedule_names, source_names
from lakewrap.errors import ConfigError, Location
from lakewrap.frozen import Frozen, Meta

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


class SubstrateConfig(Frozen):
    """What every ``[lake]`` table holds: the substrate it names. Each substrate validates its own
    keys with its config class (:attr:`lakewrap.substrates.protocol.Substrate.config_class`), a
    subclass whose ``substrate`` is a ``Literal`` of its tag; this base is the config class of a
    substrate whose ``[lake]`` takes no other key."""

    substrate: str

    # For error messages only: the substrate's name in a sentence, and its key to use instead of
    # another substrate's (a DuckLake's data_path for Iceberg's warehouse).
    label: ClassVar[str] = ""
    instead: ClassVar[dict[str, str]] = {}


class DuckLakeLakeConfig(SubstrateConfig):
    """``[lake]`` of a DuckLake (``substrate = "ducklake"``, the default)."""

    substrate: Literal["ducklake"] = "ducklake"
    catalog: Literal["duckdb", "sqlite", "postgres"] = "duckdb"
    path: str | None = None  # duckdb/sqlite catalog file, relative to the project
    dsn: Annotated[str | None, Meta(check=_no_password)] = None  # postgres: libpq key=value or URI, no password
    data_path: str | None = None  # local folder (relative to the project) or s3://bucket/prefix/
    alias: Annotated[str, Meta(check=_identifier)] = "lake"
    data_inlining_row_limit: Annotated[int | None, Meta(ge=0)] = None
    s3: S3Config | None = None

    label: ClassVar[str] = "DuckLake"
    instead: ClassVar[dict[str, str]] = {"warehouse": "data_path"}

    def __post_init__(self) -> None:
        if self.catalog == "postgres" and not self.dsn:
            raise ValueError("a postgres catalog needs dsn = \"dbname=... host=... port=... user=...\"")
        if self.catalog != "postgres" and self.dsn:
            raise ValueError(f"dsn only applies to catalog = \"postgres\", not \"{self.catalog}\"")
        if self.is_s3 and self.s3 is None:  # the embedded default of [lake.s3]
            object.__setattr__(self, "s3", S3Config())

    @property
    def is_s3(self) -> bool:
        return bool(self.data_path and self.data_path.startswith("s3://"))

    @property
    def write_path(self) -> None:
        """Iceberg's key, read on any lake by callers that compare it with ``"sql"``: a DuckLake has none."""
        return None

    def catalog_path(self, root: Path) -> Path:
        default = {"duckdb": "lake.ducklake", "sqlite": "lake.sqlite", "postgres": ""}[self.catalog]
        return (root / self.path) if self.path else root / DEFAULT_DIR / default

    def data_location(self, root: Path) -> str:
        if self.data_path is None:
            return str(root / DEFAULT_DIR / "data") + "/"
        if self.is_s3:
            return self.data_path if self.data_path.endswith("/") else self.data_path + "/"
        return str(root / self.data_path).rstrip("/") + "/"


class IcebergLakeConfig(SubstrateConfig):
    """``[lake]`` of an Apache Iceberg lake (``substrate = "iceberg"``), on either write path."""

    substrate: Literal["iceberg"] = "iceberg"
    # sql: pyiceberg's SqlCatalog on SQLite (the embedded default) | glue | rest
    catalog: Literal["sql", "glue", "rest"] = "sql"
    path: str | None = None  # the SQLite file of a sql catalog, relative to the project
    alias: Annotated[str, Meta(check=_identifier)] = "lake"
    warehouse: str | None = None  # local folder (relative to the project) or s3://bucket/prefix
    write_path: Literal["pyiceberg", "sql"] = "pyiceberg"
    s3: S3Config | None = None
    glue: GlueConfig | None = None
    rest: RestConfig | None = None
    runlog: str | None = None  # the run log's DuckDB file, relative to the project (default: beside the catalog)

    label: ClassVar[str] = "Iceberg"
    instead: ClassVar[dict[str, str]] = {"data_path": "warehouse"}

    def __post_init__(self) -> None:
        catalog = self.catalog
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
        # the embedded defaults of the optional tables
        if self.is_s3 and self.s3 is None:
            object.__setattr__(self, "s3", S3Config())
        if catalog == "glue" and self.glue is None:
            object.__setattr__(self, "glue", GlueConfig())

    @property
    def is_s3(self) -> bool:
        return bool(self.warehouse and self.warehouse.startswith("s3://"))

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


# The tag of a [lake] table that names no substrate.
DEFAULT_SUBSTRATE = "ducklake"


def config_classes() -> dict[str, type[SubstrateConfig]]:
    """The config class of every substrate this installation knows, by the ``substrate`` tag it takes
    (Iceberg's two write paths share one; a package's substrate brings its own,
    :attr:`~lakewrap.substrates.protocol.Substrate.config_class`)."""
    from lakewrap.substrates.registry import get, names

    out: dict[str, type[SubstrateConfig]] = {}
    for name in names():
        try:
            cls = get(name).config_class
        except Exception as exc:  # a broken package must say which one it is
            raise ConfigError(f"substrate `{name}` failed to load: {exc}",
                              hint="fix or uninstall the package providing the `lakewrap.substrates` entry point",
                              ) from exc
        default = cls.__dataclass_fields__["substrate"].default
        out.setdefault(default if isinstance(default, str) else name, cls)
    return out


def _tag(value: Any) -> Any:
    """The substrate a ``[lake]`` table (or a validated record) names."""
    if isinstance(value, dict):
        return value.get("substrate", DEFAULT_SUBSTRATE)
    return getattr(value, "substrate", None)


class _BySubstrate:
    """The annotation of ``ProjectConfig.lake``: validated by the config class of the substrate it
    names (a union tagged on ``substrate`` over the registered substrates, so a package's substrate
    validates its own keys), decoded from the config cache the same way."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic import Discriminator, Tag

        members = tuple(Annotated[cls, Tag(tag)] for tag, cls in config_classes().items())
        union = Annotated[Union[members], Discriminator(_tag)]  # type: ignore[valid-type]  # noqa: UP007
        return handler.generate_schema(union)

    @staticmethod
    def decode(data: Any) -> Any:
        if isinstance(data, SubstrateConfig):
            return data
        builtin: dict[str, type[SubstrateConfig]] = {"ducklake": DuckLakeLakeConfig, "iceberg": IcebergLakeConfig}
        tag = _tag(data)
        cls = builtin.get(tag) or config_classes().get(tag, SubstrateConfig)
        return cls.decode(data)


# ``[lake]``, typed: the built-in substrates' config classes, tagged on ``substrate`` (at run time the
# registry's, so ``lakewrap.toml`` may name a substrate a package adds; code above the substrates
# reads only ``substrate`` and hands the rest to :func:`lakewrap.substrates.resolve`).
LakeConfig = Annotated[DuckLakeLakeConfig | IcebergLakeConfig, _BySubstrate()]


class RunConfig(Frozen):
    """The ``[run]`` table: defaults of ``lakewrap run`` / ``backfill``."""

    retries: Annotated[int, Meta(ge=0)] = 19  # per model, retryable errors only; ``-- retry N`` overrides
    workers: Annotated[int | None, Meta(ge=1)] = None  # default: one per core
    # several materializations in one lake transaction where the substrate can (docs/running.md,
    # "Group commit and --atomic"); false: one transaction per (model, partition), as --no-group
    group_commit: bool = True


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
    # project folders whose scripts model files may run: hooks, `-- test script` files (docs/security.md)
    scripts: Annotated[tuple[str, ...], Meta(check=script_folders)] = ()

    def directories(self, root: Path) -> list[str]:
        """The allowed folders as DuckDB matches them: absolute, ending with ``/``."""
        out = []
        for path in self.allow_paths:
            full = path if path.startswith("s3://") else str((root / path).resolve())
            out.append(full.rstrip("/") + "/")
        return out


class ProjectConfig(Frozen):
    """The whole ``lakewrap.toml``."""

    lake: LakeConfig = field(default_factory=DuckLakeLakeConfig)
    run: RunConfig = field(default_factory=RunConfig)
    maintain: MaintainConfig = field(default_factory=MaintainConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    hooks: HooksConfig = field(default_factory=HooksConfig)
    # tables lakewrap does not build, by schema.table: their freshness policy (docs/schedules.md)
    sources: Annotated[dict[str, SourceConfig], Meta(check=source_names)] = field(default_factory=dict)
    schedules: Annotated[dict[str, ScheduleConfig], Meta(check=schedule_names)] = field(default_factory=dict)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    # set by load_config, never read from the file: the environment this config is (None: the file's
    # own [lake] and [run]), the environment it defers to, and every environment the file defines
    env: str | None = None
    defer: str | None = None
    envs: tuple[str, ...] = ()


CONFIG_CACHE = Path("target") / "cache" / "config.json"
# lakewrap.toml files read in this process, by (project, sha256 of the file): the config of the
# file's own [lake] and [run] (key "") and of each environment (its name)
_LOADED: dict[tuple[str, str], dict[str, ProjectConfig]] = {}


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


def load_config(root: Path, env: str | None = None, *, save: bool = True) -> ProjectConfig:
    """Read ``<root>/lakewrap.toml`` (absent: the embedded default), as environment ``env`` (default:
    ``LAKEWRAP_ENV``; none: the file's own ``[lake]`` and ``[run]``; :mod:`lakewrap.config_env`).

    The validated config is kept in ``target/cache/config.json`` under the file's sha256 and the
    code key of the compile cache, so a run whose ``lakewrap.toml`` did not change neither parses
    nor validates it again (validating imports pydantic, ~70 ms). Every environment is validated
    when the file is, so a typo in any of them is reported whichever is chosen. ``save=False``
    writes no cache (a command that keeps nothing under ``target/``, such as ``lakewrap unit``).
    """
    from lakewrap.config_env import chosen, unknown

    check_project_path(root)
    name = chosen(env)
    path = root / CONFIG_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if name is not None:
            raise unknown(name, []) from None
        return ProjectConfig()
    except OSError as exc:
        raise ConfigError(f"cannot read lakewrap.toml: {exc.strerror}", location=Location(CONFIG_FILE)) from None
    digest = hashlib.sha256(raw).hexdigest()
    memo = (str(root), digest)
    configs = _LOADED.get(memo) or _cached(root, digest)
    if configs is None:
        configs = _validate(raw)
        if save:
            _save(root, digest, configs)
    _LOADED[memo] = configs
    if name is None:
        return configs[""]
    if name not in configs or not name:
        raise unknown(name, [k for k in configs if k])
    return configs[name]


def _cached(root: Path, digest: str) -> dict[str, ProjectConfig] | None:
    from lakewrap.targetdir import code_key

    try:
        doc = json.loads((root / CONFIG_CACHE).read_bytes())
        if doc["sha256"] == digest and doc["key"] == code_key():
            return {name: ProjectConfig.decode(c) for name, c in doc["configs"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass  # none yet, another file's or version's, or damaged: validate the file
    return None


def _save(root: Path, digest: str, configs: dict[str, ProjectConfig]) -> None:
    from lakewrap.targetdir import code_key, write_atomic

    with contextlib.suppress(OSError):  # a read-only project validates its config on every run
        write_atomic(root / CONFIG_CACHE, json.dumps({"sha256": digest, "key": code_key(),
                                                      "configs": {n: c.dump() for n, c in configs.items()}}))


def _validate(raw: bytes) -> dict[str, ProjectConfig]:
    """Parse and validate the file's bytes: the base config (key ``""``) and each environment's; a
    :class:`ConfigError` with its line on any problem."""
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
    from lakewrap import config_env

    for key in ("defer", "envs"):  # set by load_config, never read from the file's top level
        if key in data:
            raise ConfigError(f"unknown key `{key}`",
                              location=Location(CONFIG_FILE, find_line(text, key)),
                              hint="an environment's defer goes in its own section: [env.<name>] defer = \"prod\"")
    envs = config_env.split(data, text)
    lake = data.get("lake")
    lakes = [lake, *(e["lake"] for e in envs.values())]
    sections = [t for tbl in lakes if isinstance(tbl, dict)
                for t in (tbl, *(tbl.get(k) for k in ("s3", "glue", "rest")))]
    for section in sections:
        if not isinstance(section, dict):
            continue
        for key in section:
            if any(w in key.lower() for w in _SECRET_WORDS):
                raise ConfigError(
                    f"lakewrap.toml must not hold credentials (`{key}`)",
                    location=Location(CONFIG_FILE, find_line(text, key)),
                    hint="set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or PGPASSWORD in the environment",
                )
    from pydantic import ValidationError

    try:
        base = ProjectConfig.validate(data)
    except ValidationError as exc:
        raise located(exc.errors()[0], text, lake if isinstance(lake, dict) else None, config_classes(),
                      {"run": RunConfig, "maintain": MaintainConfig, "security": SecurityConfig,
                       "hooks": HooksConfig, "sources": SourceConfig, "schedules": ScheduleConfig,
                       "tracing": TracingConfig}) from None
    names = tuple(envs)
    out = {"": base.replace(envs=names)}
    for name, body in envs.items():
        merged = {k: v for k, v in data.items() if k not in ("lake", "run")}
        merged.update({k: body[k] for k in ("lake", "run") if body[k] is not None})
        try:
            config = ProjectConfig.validate(merged)
        except ValidationError as exc:
            err = located(exc.errors()[0], text, body["lake"] if isinstance(body["lake"], dict) else None,
                          config_classes())
            raise config_env.relocated(err, exc.errors()[0], text, name) from None
        out[name] = config.replace(env=name, defer=body["defer"], envs=names)
    for config in out.values():
        if config.defer is not None:
            config_env.check_defer(config, out[config.defer], text)
    return out
