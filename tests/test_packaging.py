"""The distribution ships every package: ``pip install .`` (not only ``-e``) must give a working lakewrap.

pyproject.toml lists the packages by hand (``lakewrap.compilers`` lives outside ``src/``), so a new
sub-package is easily forgotten; editable installs, which the README and CI use, would not notice.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject() -> None:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = set()
    for package, folder in setup["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base)
            found.add(".".join([package, *rel.parts]))
    assert found, "no package found under package-dir"
    assert found - listed == set(), f"packages missing from [tool.setuptools] packages: {sorted(found - listed)}"
