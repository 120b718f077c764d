"""Mutation testing of lakewrap's safety rules with cosmic-ray (not run in CI: minutes to hours a target).

Each target is the code holding one kind of safety rule (whole modules, or only some functions of a
module, ``Target.only``) and the fast test files that must catch a change to it: each mutant's test
run takes seconds (``-x -q -p no:randomly``, only those files). For a target, the repository's
tracked files are copied to a scratch folder (cosmic-ray edits the module in place, so never in the
working tree), cosmic-ray mutates that copy one change at a time and runs the tests against it
(``PYTHONPATH`` puts the copy first), and the surviving mutants are printed as diffs, with the
counts, the minutes taken and the load average before and after.

    nice -n 10 .venv/bin/python tools/mutation.py                     # every target
    nice -n 10 .venv/bin/python tools/mutation.py retry partitions    # some
    .venv/bin/python tools/mutation.py --list                         # the targets, their code and tests
    .venv/bin/python tools/mutation.py --count guards                 # how many mutants, without running them
    nice -n 10 .venv/bin/python tools/mutation.py --hand redaction    # the hand-made mutants (HAND) instead
    nice -n 19 .venv/bin/python tools/mutation.py --shard 1/2 partitions &   # half the mutants on each core,
    nice -n 19 .venv/bin/python tools/mutation.py --shard 2/2 partitions     # each in its own scratch copy
    nice -n 19 .venv/bin/python tools/mutation.py --minutes 30 partitions    # stop after 30 min, count what ran

The survivors of the last run, each killed by a test or explained, are listed in docs/testing.md
("Mutation testing").
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    """Modules under mutation and the tests that must kill every mutant of them.

    ``only`` restricts a module (a key of it) to some of its functions (``Class.method`` or
    ``function``; ``name/try`` is only the ``try`` statements of that function): its other code is
    not mutated.
    """

    modules: tuple[str, ...]
    tests: tuple[str, ...]
    only: dict[str, tuple[str, ...]] = field(default_factory=dict)


BLOCKS, STRATEGIES = "compilers/blocks.py", "compilers/strategies.py"
SUBSTRATES = "src/lakewrap/substrates"
DUCKLAKE_RUN, ICEBERG_RUN = f"{SUBSTRATES}/ducklake/run.py", f"{SUBSTRATES}/iceberg/run.py"
ICEBERG_COMMIT, ICEBERG_SUMMARY = f"{SUBSTRATES}/iceberg/commit.py", f"{SUBSTRATES}/iceberg/summary.py"
TARGETS: dict[str, Target] = {
    "retry": Target(("src/lakewrap/execute/retry.py",), ("tests/test_retry_classification.py",)),
    "partitions": Target(("src/lakewrap/partitions.py",),
                         ("tests/test_partition_edges.py", "tests/test_partitions.py")),
    # the guard statements (window, NULL and duplicate keys): compilers/sql.py's builders, and the
    # compiler's functions that put them together (blocks.py; the SCD2 snapshot's in strategies.py)
    "guards": Target(("compilers/sql.py", BLOCKS, STRATEGIES), ("tests/test_guard_builders.py",),
                     {BLOCKS: ("Blocks.window_condition", "Blocks.guard_window", "Blocks.guard_keys"),
                      STRATEGIES: ("Strategies.snapshot_guards",)}),
    "redaction": Target(("src/lakewrap/redact.py",), ("tests/test_redaction_rules.py",)),
    # the skip rules (skips.py) and the DuckLake records they read (Substrate.step_records)
    "skip-rules": Target(("src/lakewrap/skips.py", DUCKLAKE_RUN), ("tests/test_skip_marks.py",),
                         {DUCKLAKE_RUN: ("Records",)}),
    # the coordinator's look-up (outcome.py's shared rules, each substrate's resolve_outcome) and the
    # executor's look-up after an unknown Iceberg commit
    "commit-lookup": Target(("src/lakewrap/outcome.py", DUCKLAKE_RUN, ICEBERG_RUN, ICEBERG_COMMIT, ICEBERG_SUMMARY),
                            ("tests/test_commit_lookup.py",),
                            {DUCKLAKE_RUN: ("resolve_outcome",), ICEBERG_RUN: ("resolve_outcome",),
                             ICEBERG_COMMIT: ("IcebergExecutor._commit/try", "IcebergExecutor._landed",
                                              "definitely_not_committed"),
                             ICEBERG_SUMMARY: ("committed_snapshots",)}),
}


# Mutants cosmic-ray cannot make (it has no operator that drops an element of a tuple or set, or
# that widens a rule): (module, text, replacement), each applied alone by ``--hand``.
_MARKERS = ("Transaction conflict", "Failed to commit DuckLake transaction", "database is locked", "Conflict_409",
            "CommitFailedException", "ducklake_snapshot_pkey", "could not serialize access",
            "Failed to query most recent snapshot")
_CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD",
                "LAKEWRAP_ICEBERG_TOKEN")
RETRY, REDACT, SKIPS = "src/lakewrap/execute/retry.py", "src/lakewrap/redact.py", "src/lakewrap/skips.py"
# the errors after which pyiceberg guarantees nothing landed (definitely_not_committed), and those
# after which a commit not found in the table's history is retried (IcebergExecutor._commit)
_NOT_COMMITTED = ("CommitFailedException", "ValidationException", "TableAlreadyExistsError", "ValueError")
_UNKNOWN = ("CommitStateUnknownException", "OSError")


def _dropped(names: tuple[str, ...], left_out: str) -> str:
    kept = [n for n in names if n != left_out]
    return f"({', '.join(kept)}{',' if len(kept) == 1 else ''})"


HAND: dict[str, tuple[tuple[str, str, str], ...]] = {
    "retry": tuple((RETRY, f'    "{m}",', "") for m in _MARKERS),
    "redaction": (
        *((REDACT, f'"{n}"', '"LAKEWRAP_NOT_A_CREDENTIAL"') for n in _CREDENTIALS),
        (REDACT, "raw.hex()}", "}"),  # one derived form left out
        (REDACT, "quote_plus(secret), ", ""),
        (REDACT, "secret[::-1], ", ""),
        (REDACT, "for k in range(3):", "for k in range(1):"),  # base64 inside a longer text at offset 0 only
        (REDACT, ', encoded.translate(str.maketrans("+/", "-_"))', ""),
    ),
    "skip-rules": (
        # --missing-only / resume: every partition once any of the model's partitions is recorded
        (SKIPS, "if sha is not None and rec is not None and rec[0] == sha and (not resuming or rec[1] == run_id):",
         "if sha is not None:"),
        (SKIPS, "(not resuming or rec[1] == run_id)", "True"),  # resume skips another run's commits
        (SKIPS, "_drop_stale(candidates, by_target, selected, project, records)", "pass"),  # upstream changes
        (SKIPS, "forced = any(d not in skip for d in s.deps)", "forced = False"),  # a dependency that runs
        (SKIPS, "return not reappend or run_id in present[partition]", "return not reappend"),  # a resume's own
        (SKIPS, "        if refresh and run_id != refreshed_by:\n            present, refreshed_by = {}, run_id\n",
         ""),  # records before a full refresh count
        (SKIPS, "if refresh and run_id != refreshed_by:", "if refresh:"),  # a range batch's refresh empties once
        (DUCKLAKE_RUN, 'r[1] == "true"', 'r[1] is True'),  # the full-refresh flag of DuckLake's records (text)
    ),
    "commit-lookup": (
        *((ICEBERG_COMMIT, _dropped(_NOT_COMMITTED, ""), _dropped(_NOT_COMMITTED, n)) for n in _NOT_COMMITTED),
        *((ICEBERG_COMMIT, f"isinstance(exc, {_dropped(_UNKNOWN, '')})", f"isinstance(exc, {_dropped(_UNKNOWN, n)})")
          for n in _UNKNOWN),
    ),
}


# Operators left out: ``X | None`` is the only ``|`` in the targets, and with ``from __future__ import
# annotations`` an annotation is never evaluated, so its mutants (``X % None`` ...) are all equivalent.
EXCLUDED = ("core/ReplaceBinaryOperator_BitOr_.*",)


def line_ranges(module: Path, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """The lines of ``names`` (functions, ``Class.method``, ``name/try``) in ``module``."""
    tree = ast.parse(module.read_text())
    found: dict[str, ast.AST] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found[prefix + child.name] = child
                walk(child, f"{prefix}{child.name}.")

    walk(tree, "")
    out = []
    for name in names:
        base, _, part = name.partition("/")
        if base not in found:
            raise SystemExit(f"{module}: no function {base}")
        nodes = [found[base]] if not part else [n for n in ast.walk(found[base]) if isinstance(n, ast.Try)]
        if not nodes:
            raise SystemExit(f"{module}: {base} has no {part}")
        out += [(n.lineno, n.end_lineno or n.lineno) for n in nodes]  # type: ignore[attr-defined]
    return out


def check(name: str, target: Target, root: Path = ROOT) -> None:
    """Refuse a target that no longer fits the code (a module moved, a function renamed, a hand
    mutant's text changed): every module and test file exists, every ``only`` function is found and
    every text of ``HAND[name]`` occurs exactly once in its module. Raises ``SystemExit``."""
    for rel in (*target.modules, *target.tests, *(m for m, _, _ in HAND.get(name, ()))):
        if not (root / rel).is_file():
            raise SystemExit(f"{name}: {rel} does not exist")
    for module, names in target.only.items():
        if module not in target.modules:
            raise SystemExit(f"{name}: {module} is restricted but not mutated")
        line_ranges(root / module, names)
    for module, old, _ in HAND.get(name, ()):
        n = (root / module).read_text().count(old)
        if n != 1:
            raise SystemExit(f"{name}: hand mutant {old!r} occurs {n} times in {module}, not once")


def restrict(session: Path, scratch: Path, target: Target, shard: tuple[int, int] = (1, 1)) -> None:
    """Mark the mutants outside ``target.only``'s functions skipped in the cosmic-ray session, and,
    for ``shard`` (k, n), every mutant but the k-th of each n (in the order of the file: module,
    line, column, operator)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    ranges = {(scratch / m).resolve(): line_ranges(scratch / m, names) for m, names in target.only.items()}
    with use_db(str(session), WorkDB.Mode.open) as db:
        outside, inside = [], []
        for item in db.pending_work_items:
            for mutation in item.mutations:
                lines = ranges.get((scratch / mutation.module_path).resolve())
                if lines is not None and not any(a <= mutation.start_pos[0] <= b for a, b in lines):
                    outside.append(item.job_id)
                else:
                    inside.append(((str(mutation.module_path), tuple(mutation.start_pos), mutation.operator_name,
                                    mutation.occurrence), item.job_id))
        if outside:
            db.set_multiple_results(outside, WorkResult(output="outside the target's functions",
                                                        worker_outcome=WorkerOutcome.SKIPPED))
        k, n = shard
        other = [job for i, (_, job) in enumerate(sorted(inside)) if i % n != k - 1]
        if other:
            db.set_multiple_results(other, WorkResult(output=f"another shard's (not {k}/{n})",
                                                      worker_outcome=WorkerOutcome.SKIPPED))


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


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


def run(name: str, target: Target, timeout: float, count_only: bool = False, shard: tuple[int, int] = (1, 1),
        minutes: float | None = None) -> list[dict[str, object]]:
    """Mutate ``target`` in a scratch copy; the survivors (each with its diff). ``shard`` runs only
    the k-th of each n mutants; after ``minutes`` the run is stopped and what ran is counted."""
    check(name, target)
    scratch = Path(tempfile.mkdtemp(prefix=f"lakewrap-mutation-{name}-"))
    try:
        copy_tree(scratch)
        python = sys.executable
        command = " ".join([python, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                            "-p", "mutation_plugin", *target.tests])
        config = scratch / "cosmic-ray.toml"
        config.write_text(
            "[cosmic-ray]\n"
            f"module-path = {json.dumps(list(target.modules))}\n"
            f"timeout = {timeout}\n"
            "excluded-modules = []\n"
            f"test-command = {json.dumps(command)}\n"
            "[cosmic-ray.distributor]\n"
            'name = "local"\n'
            "[cosmic-ray.filters.operators-filter]\n"
            f"exclude-operators = {json.dumps(list(EXCLUDED))}\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scratch / "src"), str(scratch / "tools")])}
        session = scratch / "session.sqlite"
        bin_dir = Path(python).parent
        subprocess.run([str(bin_dir / "cosmic-ray"), "init", str(config), str(session)], cwd=scratch, env=env,
                       check=True)
        subprocess.run([str(bin_dir / "cr-filter-operators"), str(session), str(config)], cwd=scratch, env=env,
                       check=True)
        restrict(session, scratch, target, shard)
        if count_only:
            print(f"== {name}: {len(pending(session))} mutants", flush=True)
            return []
        base = subprocess.run(command.split(), cwd=scratch, env=env, capture_output=True, text=True)
        if base.returncode != 0:
            raise SystemExit(f"{name}: the tests fail without any mutation:\n{base.stdout[-2000:]}")
        started, load = time.monotonic(), loadavg()
        # its own process group: stopped after ``minutes``, with the test run it has under way
        proc = subprocess.Popen([str(bin_dir / "cosmic-ray"), "exec", str(config), str(session)], cwd=scratch,
                                env=env, start_new_session=True)
        try:
            code = proc.wait(timeout=None if minutes is None else minutes * 60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
            print(f"== {name}: stopped after {minutes} min", flush=True)
        if code not in (0, None):
            raise SystemExit(f"{name}: cosmic-ray exec failed ({code})")
        dump = subprocess.run([str(bin_dir / "cosmic-ray"), "dump", str(session)], cwd=scratch, env=env,
                              check=True, capture_output=True, text=True).stdout
        items = [json.loads(line) for line in dump.splitlines() if line.strip()]
        items = [(w, r) for w, r in items if r is None or r.get("worker_outcome") != "skipped"]
        survivors = []
        for work, result in items:
            if result is None or result.get("test_outcome") != "survived":
                continue
            (mutation,) = work["mutations"]
            survivors.append({"operator": mutation["operator_name"], "module": mutation["module_path"],
                              "line": mutation["start_pos"][0], "diff": result.get("diff", "")})
        not_run = sum(1 for _, r in items if r is None)
        killed = sum(1 for _, r in items if r is not None and r.get("test_outcome") == "killed")
        # killed because a test ran past the plugin's limit (or cosmic-ray's timeout): a mutant that
        # loops, or a machine too loaded; worth a look when it is not the first
        slow = sum(1 for _, r in items if r is not None and r.get("test_outcome") == "killed"
                   and ("TestTooLong" in (r.get("output") or "") or r.get("output") == "timeout"))
        incompetent = sum(1 for _, r in items if r is not None and r.get("test_outcome") == "incompetent")
        part = "" if shard == (1, 1) else f" (shard {shard[0]}/{shard[1]})"
        print(f"== {name}{part}: {', '.join(target.modules)}: {len(items) - not_run} of {len(items)} mutants run, "
              f"{killed} killed ({slow} of them by a time limit), "
              f"{incompetent} incompetent (the mutant does not even import: counted as killed by cosmic-ray), "
              f"{len(survivors)} survived, {(time.monotonic() - started) / 60:.1f} min, "
              f"load average {load} before, {loadavg()} after", flush=True)
        for s in survivors:
            print(f"-- survived: {s['operator']} at {s['module']}:{s['line']}\n{s['diff']}", flush=True)
        return survivors
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def hand(name: str, target: Target) -> list[tuple[str, str, str]]:
    """Apply each of ``HAND[name]`` alone to a scratch copy and run the target's tests: the ones
    that survive (module, text, replacement)."""
    check(name, target)  # every text found before the first mutant runs
    survivors = []
    for module, old, new in HAND.get(name, ()):
        scratch = Path(tempfile.mkdtemp(prefix=f"lakewrap-hand-{name}-"))
        try:
            copy_tree(scratch)
            path = scratch / module
            text = path.read_text()
            if text.count(old) != 1:  # (check() looked in the working tree; this is the copy)
                raise SystemExit(f"{module}: {old!r} occurs {text.count(old)} times, not once")
            path.write_text(text.replace(old, new))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(scratch / "src"), str(scratch / "tools")])}
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                       *target.tests]
            out = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True)
            summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-200:]
            verdict = "killed" if out.returncode != 0 else "SURVIVED"
            print(f"-- {verdict}: {module}: {old.strip()!r} -> {new.strip()!r}: {summary}", flush=True)
            if out.returncode == 0:
                survivors.append((module, old, new))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return survivors


def pending(session: Path) -> list[object]:
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(session), WorkDB.Mode.open) as db:
        return list(db.pending_work_items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help=f"some of: {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--list", action="store_true",
                        help="list the targets, their code and their tests (and check that they fit the code)")
    parser.add_argument("--count", action="store_true", help="only count each target's mutants")
    parser.add_argument("--hand", action="store_true",
                        help="run the hand-made mutants (HAND: a safety tuple's element dropped, a rule widened)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant's test run")
    parser.add_argument("--shard", default="1/1", metavar="K/N",
                        help="run only the K-th of every N mutants (one process per core: 1/2 and 2/2)")
    parser.add_argument("--minutes", type=float, help="stop each target's run after this many minutes")
    args = parser.parse_args()
    try:
        k, n = (int(x) for x in args.shard.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        parser.error(f"--shard {args.shard!r}: K/N with 1 <= K <= N, for example 1/2")
    if args.list:
        for name, t in TARGETS.items():
            check(name, t)
            code = [f"{m} ({', '.join(t.only[m])})" if m in t.only else m for m in t.modules]
            print(f"{name}: {'; '.join(code)} <- {' '.join(t.tests)}; {len(HAND.get(name, ()))} hand mutants")
        return
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}; choose from {', '.join(TARGETS)}")
    total = 0
    for name in args.targets or list(TARGETS):
        if args.hand:
            total += len(hand(name, TARGETS[name]))
        else:
            total += len(run(name, TARGETS[name], args.timeout, args.count, (k, n), args.minutes))
    if not args.count:
        print(f"{total} surviving mutants")


if __name__ == "__main__":
    main()
