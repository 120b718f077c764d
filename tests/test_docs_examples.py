"""The runnable examples of README.md and docs/*.md are run, and their shown output checked.

The convention (docs/tests.md, "Runnable examples in the docs"):

* a fenced ``sh`` block directly preceded by a line ``<!-- run -->`` (or ``<!-- run: note -->``) is
  runnable: each line is one command, or several joined by ``&&``; ``#`` starts a comment. Commands
  that install lakewrap (``python3 -m venv``, ``pip install``) are skipped (the test runs in that
  installation), ``.venv/bin/lakewrap`` and ``lakewrap`` run this installation's ``lakewrap``;
* every command must exit 0;
* a fenced ``text`` block preceded by ``<!-- output -->`` right after a runnable block (one line of
  prose may stand between them) is the exact standard output of that block's last command; a last
  line ``...`` makes it a prefix.

Each page runs in a scratch folder holding a copy of ``examples/shop`` (as ``examples/shop``). The
README's examples start from the bare project; every other page's run in one folder after the
README's set-up (``seed``, then ``run --start 2024-01-01 --end 2024-01-05``). Commands run
with the copy as the working folder unless they name ``--project`` or are ``lakewrap init`` (which
run in the scratch folder, so ``init DIR`` and ``--project DIR`` name the same folder).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^<!-- run(?::[^>]*)? -->\n```sh\n(.*?)^```\n"
                   r"(?:\n(?:[^<\n][^\n]*\n\n)?<!-- output -->\n```text\n(.*?)^```\n)?", re.S | re.M)
SKIPPED = ("python3 -m venv", ".venv/bin/pip install", "pip install")
LAKEWRAP = str(Path(sys.executable).with_name("lakewrap"))


@dataclass(frozen=True)
class Example:
    page: str
    line: int
    commands: tuple[str, ...]
    output: str | None


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found = []
    for m in BLOCK.finditer(text):
        commands = []
        for raw in m.group(1).splitlines():
            for part in raw.split("&&"):
                command = part.strip()
                if command and not command.startswith("#") and not command.startswith(SKIPPED):
                    commands.append(command)
        found.append(Example(page.name, text.count("\n", 0, m.start()) + 2, tuple(commands), m.group(2)))
    return found


ALL = [(page, ex) for page in PAGES for ex in examples(page)]


def test_the_convention_finds_the_marked_examples() -> None:
    pages = {ex.page for _, ex in ALL}
    assert {"README.md", "configuration.md", "running.md"} <= pages, pages
    assert sum(ex.output is not None for _, ex in ALL) >= 1
    for _, ex in ALL:
        assert ex.commands, f"{ex.page}:{ex.line}: a runnable block with no command"
        for command in ex.commands:
            assert shlex.split(command, comments=True)[0] in ("lakewrap", ".venv/bin/lakewrap"), \
                f"{ex.page}:{ex.line}: `{command}` is not a lakewrap command"


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command, comments=True)
    argv[0] = LAKEWRAP
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def set_up(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/shop after the README's set-up: seeded and run for five days. Shared by the pages
    (a DuckLake catalog records its data path, so a lake cannot be copied elsewhere); their examples
    change no result another page shows."""
    root = tmp_path_factory.mktemp("docs-set-up")
    shutil.copytree(ROOT / "examples" / "shop", root / "examples" / "shop",
                    ignore=shutil.ignore_patterns(".lakewrap", "target"))
    for command in ("lakewrap seed --project examples/shop",
                    "lakewrap run --project examples/shop --start 2024-01-01 --end 2024-01-05"):
        done = run(command, root)
        assert done.returncode == 0, done.stderr
    return root


@pytest.mark.parametrize("page", sorted({p for p, _ in ALL}, key=str), ids=lambda p: p.name)
def test_the_examples_of_a_page_run_and_print_what_it_shows(page: Path, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    if page.name == "README.md":
        folder = tmp_path
        shutil.copytree(ROOT / "examples" / "shop", folder / "examples" / "shop",
                        ignore=shutil.ignore_patterns(".lakewrap", "target"))
    else:
        folder = request.getfixturevalue("set_up")
    shop = folder / "examples" / "shop"
    for ex in [ex for p, ex in ALL if p == page]:
        proc = None
        for command in ex.commands:
            proc = run(command, folder if "--project" in command or command.startswith("lakewrap init ") else shop)
            assert proc.returncode == 0, f"{ex.page}:{ex.line}: `{command}` exited {proc.returncode}\n{proc.stderr}"
        if ex.output is not None:
            assert proc is not None
            got = [line.rstrip() for line in proc.stdout.splitlines()]
            want = [line.rstrip() for line in ex.output.splitlines()]
            if want and want[-1] == "...":
                got, want = got[:len(want) - 1], want[:-1]
            assert got == want, f"{ex.page}:{ex.line}: the output differs from the page's"
