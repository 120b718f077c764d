"""Mutation testing of lakewrap's safety rules with cosmic-ray (not run in CI: it takes hours).

Each target is a module and the test files that must catch a change to it. For a target, the
repository's tracked files are copied to a scratch folder (cosmic-ray edits the module in place, so
never in the working tree), cosmic-ray mutates that copy one change at a time and runs the tests
against it (``PYTHONPATH`` puts the copy first), and the surviving mutants are printed as diffs.

    .venv/bin/python tools/mutation.py                     # every target
    .venv/bin/python tools/mutation.py retry partitions    # some
    .venv/bin/python tools/mutation.py --list

The survivors of the last run, each killed by a test or explained, are listed in docs/tests.md
("Mutation testing").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    """A module under mutation and the tests that must kill every mutant of it."""

    module: str
    tests: tuple[str, ...]


TARGETS: dict[str, Target] = {
    "retry": Target("src/lakewrap/execute/retry.py", ("tests/test_retry_classification.py",)),
    "partitions": Target("src/lakewrap/partitions.py", ("tests/test_partition_edges.py", "tests/test_partitions.py")),
    # the guard statements (window, NULL and duplicate keys) are built by compilers/sql.py's helpers
    "guards": Target("compilers/sql.py", ("tests/test_golden.py", "tests/test_strategies_exec.py")),
    "redaction": Target("src/lakewrap/redact.py", ("tests/test_redaction.py",)),
    "skip-rules": Target("src/lakewrap/skips.py", ("tests/test_skip_rules.py",)),
    "commit-lookup": Target("src/lakewrap/substrates/iceberg/commit.py", ("tests/test_iceberg_reliability.py",)),
}


# Operators left out: ``X | None`` is the only ``|`` in the targets, and with ``from __future__ import
# annotations`` an annotation is never evaluated, so its mutants (``X % None`` ...) are all equivalent.
EXCLUDED = ("core/ReplaceBinaryOperator_BitOr_.*",)


def copy_tree(dest: Path) -> None:
    """The tracked files (and untracked, not ignored ones) of the repository, into ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    # the installed layout: lakewrap.compilers is the repository's compilers/ folder
    (dest / "src" / "lakewrap" / "compilers").symlink_to(dest / "compilers", target_is_directory=True)


def run(name: str, target: Target, timeout: float) -> list[dict[str, object]]:
    """Mutate ``target`` in a scratch copy; the survivors (each with its diff)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"lakewrap-mutation-{name}-"))
    try:
        copy_tree(scratch)
        python = sys.executable
        command = " ".join([python, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                            *target.tests])
        config = scratch / "cosmic-ray.toml"
        config.write_text(
            "[cosmic-ray]\n"
            f"module-path = {json.dumps(target.module)}\n"
            f"timeout = {timeout}\n"
            "excluded-modules = []\n"
            f"test-command = {json.dumps(command)}\n"
            "[cosmic-ray.distributor]\n"
            'name = "local"\n'
            "[cosmic-ray.filters.operators-filter]\n"
            f"exclude-operators = {json.dumps(list(EXCLUDED))}\n"
        )
        env = {**os.environ, "PYTHONPATH": str(scratch / "src")}
        session = scratch / "session.sqlite"
        bin_dir = Path(python).parent
        subprocess.run([str(bin_dir / "cosmic-ray"), "init", str(config), str(session)], cwd=scratch, env=env,
                       check=True)
        subprocess.run([str(bin_dir / "cr-filter-operators"), str(session), str(config)], cwd=scratch, env=env,
                       check=True)
        base = subprocess.run(command.split(), cwd=scratch, env=env, capture_output=True, text=True)
        if base.returncode != 0:
            raise SystemExit(f"{name}: the tests fail without any mutation:\n{base.stdout[-2000:]}")
        started = time.monotonic()
        subprocess.run([str(bin_dir / "cosmic-ray"), "exec", str(config), str(session)], cwd=scratch, env=env,
                       check=True)
        dump = subprocess.run([str(bin_dir / "cosmic-ray"), "dump", str(session)], cwd=scratch, env=env,
                              check=True, capture_output=True, text=True).stdout
        items = [json.loads(line) for line in dump.splitlines() if line.strip()]
        items = [(w, r) for w, r in items if r is None or r.get("worker_outcome") != "skipped"]
        survivors = []
        for work, result in items:
            if result is None or result.get("test_outcome") != "survived":
                continue
            (mutation,) = work["mutations"]
            survivors.append({"operator": mutation["operator_name"], "line": mutation["start_pos"][0],
                              "diff": result.get("diff", "")})
        killed = sum(1 for _, r in items if r is not None and r.get("test_outcome") == "killed")
        print(f"== {name}: {target.module}: {len(items)} mutants, {killed} killed, {len(survivors)} survived, "
              f"{time.monotonic() - started:.0f} s", flush=True)
        for s in survivors:
            print(f"-- survived: {s['operator']} at line {s['line']}\n{s['diff']}", flush=True)
        return survivors
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help=f"some of: {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--list", action="store_true", help="list the targets and their tests")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's test run")
    args = parser.parse_args()
    if args.list:
        for name, t in TARGETS.items():
            print(f"{name}: {t.module} <- {' '.join(t.tests)}")
        return
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS)}")
    total = 0
    for name in args.targets or list(TARGETS):
        total += len(run(name, TARGETS[name], args.timeout))
    print(f"{total} surviving mutants")


if __name__ == "__main__":
    main()
