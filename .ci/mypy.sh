#!/usr/bin/env bash
# mypy cannot follow setuptools' package-dir mapping (compilers/ ships as lakewrap.compilers), so
# type-check a throw-away copy laid out the way the package is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r src/lakewrap "$tmp/lakewrap"
cp -r compilers "$tmp/lakewrap/compilers"
cp pyproject.toml "$tmp/"
(cd "$tmp" && python -m mypy --config-file pyproject.toml -p lakewrap)
