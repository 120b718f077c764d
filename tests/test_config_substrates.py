"""``[lake]`` is a union tagged on ``substrate``: each substrate's config class validates its own keys
(a package's substrate through the ``lakewrap.substrates`` entry point too), and every mistake is a
located error naming the key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import install_dist, site_env
from lakewrap import config as config_module
from lakewrap.config import DuckLakeLakeConfig, IcebergLakeConfig, load_config
from lakewrap.errors import ConfigError
from lakewrap.substrates import resolve

DOCS_HINT = "see docs/configuration.md for the keys of [lake], [run], [maintain] and [security]"


def lake_of(root: Path, text: str):  # type: ignore[no-untyped-def]
    (root / "lakewrap.toml").write_text(text)
    return load_config(root).lake


def test_each_substrate_gets_its_own_record(tmp_path: Path) -> None:
    duck = lake_of(tmp_path, '[lake]\ncatalog = "sqlite"\ndata_path = "s3://b/p"\n')
    assert type(duck) is DuckLakeLakeConfig and duck.substrate == "ducklake" and duck.s3 is not None
    assert duck.catalog_path(tmp_path) == tmp_path / ".lakewrap" / "lake.sqlite"
    assert duck.data_location(tmp_path) == "s3://b/p/"
    assert duck.write_path is None  # Iceberg's key, readable on a DuckLake by callers comparing it
    assert resolve(duck).name == "ducklake"
    ice = lake_of(tmp_path, '[lake]\nsubstrate = "iceberg"\ncatalog = "rest"\nwrite_path = "sql"\n'
                            '[lake.rest]\nuri = "http://h:1"\n')
    assert type(ice) is IcebergLakeConfig and (ice.catalog, ice.write_path, ice.alias) == ("rest", "sql", "lake")
    assert resolve(ice).name == "iceberg-sql"
    assert not hasattr(ice, "data_path") and not hasattr(duck, "warehouse")
    # the embedded default, and a file without [lake]
    (tmp_path / "lakewrap.toml").unlink()
    assert load_config(tmp_path).lake == DuckLakeLakeConfig()


@pytest.mark.parametrize("toml", [
    '[lake]\ncatalog = "postgres"\ndsn = "dbname=x host=h"\ndata_inlining_row_limit = 0\n',
    '[lake]\nsubstrate = "iceberg"\ncatalog = "glue"\nwarehouse = "s3://b/w"\n[lake.glue]\nregion = "eu-west-1"\n',
])
def test_the_cached_config_decodes_to_the_same_record(tmp_path: Path, toml: str) -> None:
    validated = lake_of(tmp_path, toml)
    config_module._LOADED.clear()  # the next load reads target/cache/config.json
    cached = json.loads((tmp_path / config_module.CONFIG_CACHE).read_text())["configs"][""]["lake"]
    assert cached["substrate"] == validated.substrate
    again = load_config(tmp_path).lake
    assert again == validated and type(again) is type(validated)


@pytest.mark.parametrize(("text", "line", "message", "hint"), [
    ('[lake]\ncatalgo = "sqlite"\n', 2, "unknown key `lake.catalgo`", "docs/configuration.md"),
    ('[lake]\nwarehouse = "w"\n', 2, 'lake: warehouse does not apply to substrate = "ducklake" (use data_path)',
     'warehouse is a key of substrate = "iceberg"'),
    ('[lake]\nwrite_path = "sql"\n', 2, 'write_path does not apply to substrate = "ducklake"',
     'a key of substrate = "iceberg"'),
    ('[lake]\nsubstrate = "iceberg"\n\ndsn = "dbname=x"\n', 4, 'dsn does not apply to substrate = "iceberg"',
     'a key of substrate = "ducklake"'),
    ('[lake]\ncatalog = "glue"\n', 2,
     'lake.catalog: catalog = "glue" is an Iceberg catalog; a DuckLake catalog is "duckdb", "sqlite" or "postgres"',
     ""),
    ('[lake]\ncatalog = "mysql"\n', 2, "lake.catalog: Input should be 'duckdb', 'sqlite' or 'postgres'", ""),
    ('[lake]\nalias = "x"\nsubstrate = "duklake"\n', 3, "lake.substrate: no substrate `duklake`",
     "did you mean `ducklake`? valid substrates: `ducklake`, `iceberg`"),
    ('lake = 3\n', 1, "write [lake] as a table", ""),
    ('[lake]\ndata_path = "s3://b/p/"\n\n[lake.s3]\nendpoint = "http://h:1"\n', 5,
     "lake.s3.endpoint: write the endpoint as host:port", ""),
])
def test_a_bad_lake_table_is_located_at_its_key(tmp_path: Path, text: str, line: int, message: str,
                                                hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        lake_of(tmp_path, text)
    err = info.value
    assert err.location is not None and (err.location.path, err.location.line) == ("lakewrap.toml", line)
    assert message in err.message and hint in (err.hint or "")
    assert not (tmp_path / config_module.CONFIG_CACHE).exists()  # nothing written


@pytest.mark.parametrize(("text", "rendered"), [
    ('[lake]\ncatalgo = "sqlite"\n',
     "lakewrap.toml:2: unknown key `lake.catalgo`\nhint: did you mean `catalog`? " + DOCS_HINT),
    ('[lake]\nsubstrate = "iceberg"\nwarehous = "w"\n',  # the close match is among the named substrate's keys
     "lakewrap.toml:3: unknown key `lake.warehous`\nhint: did you mean `warehouse`? " + DOCS_HINT),
    ('[lake]\nzzzz = 1\n', "lakewrap.toml:2: unknown key `lake.zzzz`\nhint: " + DOCS_HINT),  # nothing close
])
def test_an_unknown_lake_key_names_the_file_once_and_the_closest_key(tmp_path: Path, text: str,
                                                                      rendered: str) -> None:
    with pytest.raises(ConfigError) as info:
        lake_of(tmp_path, text)
    assert info.value.render() == rendered


MEMORY = '''
from typing import Annotated, Literal

from lakewrap.config import SubstrateConfig
from lakewrap.frozen import Meta
from lakewrap.substrates.protocol import Substrate


class MemoryLakeConfig(SubstrateConfig):
    substrate: Literal["memory"] = "memory"
    capacity: Annotated[int, Meta(ge=1)] = 10


class Memory(Substrate):
    name = "memory"
    config_class = MemoryLakeConfig
'''

PROBE = '''
import sys
from pathlib import Path
from lakewrap import config
from lakewrap.errors import ConfigError
from lakewrap.substrates import resolve
root = Path(sys.argv[1])
try:
    lake = config.load_config(root).lake
except ConfigError as exc:
    print("ERROR", exc.render().replace(chr(10), " | "))
else:
    config._LOADED.clear()
    again = config.load_config(root).lake  # from target/cache/config.json
    print("LAKE", type(lake).__name__, lake.capacity, resolve(lake).name, again == lake, type(again).__name__)
'''


def test_a_substrate_added_through_the_entry_point_validates_its_own_keys(tmp_path: Path) -> None:
    """A real installed distribution (a dist-info on sys.path) registers a substrate whose config class
    takes its own [lake] keys, with the same located errors as the built-in ones."""
    site = install_dist(tmp_path / "site", "lakewrap_memory", "lakewrap.substrates", "memory = lakewrap_memory:Memory",
                        MEMORY)
    root = tmp_path / "project"
    root.mkdir()
    env = site_env(site)

    def probe(toml: str) -> str:
        (root / "lakewrap.toml").write_text(toml)
        proc = subprocess.run([sys.executable, "-c", PROBE, str(root)], capture_output=True, text=True, env=env,
                              check=True)
        return proc.stdout.strip()

    out = probe('[lake]\nsubstrate = "memory"\ncapacity = 3\n')
    assert out == "LAKE MemoryLakeConfig 3 memory True MemoryLakeConfig", out
    out = probe('[lake]\nsubstrate = "memory"\ncapacity = 0\n')
    assert out.startswith("ERROR lakewrap.toml:3: lake.capacity: Input should be greater than"), out
    out = probe('[lake]\nsubstrate = "memory"\ncapacty = 3\n')  # a key of the package's config class is close
    assert out.startswith("ERROR lakewrap.toml:3: unknown key `lake.capacty` | hint: did you mean `capacity`?"), out
    out = probe('[lake]\nsubstrate = "memory"\ndata_path = "d"\n')
    assert 'lakewrap.toml:3: lake: data_path does not apply to substrate = "memory"' in out, out
    out = probe('[lake]\nsubstrate = "memroy"\n')
    assert "no substrate `memroy`" in out and "did you mean `memory`?" in out, out
    assert "`ducklake`, `iceberg`, `memory`" in out
    # Without the package, the same file names an unknown substrate.
    with pytest.raises(ConfigError, match="no substrate `memory`"):
        lake_of(root, '[lake]\nsubstrate = "memory"\n')


def test_a_broken_substrate_package_names_itself(tmp_path: Path) -> None:
    site = install_dist(tmp_path / "site", "lakewrap_broken", "lakewrap.substrates", "broken = lakewrap_broken:Broken",
                        "raise ImportError('no module named lakewrap_broken_dep')\n")
    root = tmp_path / "project"
    root.mkdir()
    (root / "lakewrap.toml").write_text('[lake]\ncatalog = "sqlite"\n')
    env = site_env(site)
    proc = subprocess.run([sys.executable, "-c", PROBE, str(root)], capture_output=True, text=True, env=env,
                          check=True)
    assert proc.stdout.startswith("ERROR substrate `broken` failed to load: no module named lakewrap_broken_dep")
    assert "fix or uninstall the package providing the `lakewrap.substrates` entry point" in proc.stdout
    assert not (root / config_module.CONFIG_CACHE).exists()
