"""The mutation targets of ``tools/mutation.py`` still fit the code (docs/testing.md, "Mutation
testing"): every module and test file exists, every restricted function is found and every hand
mutant's text occurs exactly once. The mutation runs are not in CI (minutes to hours); this check is,
so a refactor that moves a module, renames a guard function or rewrites a hand mutant's line fails
here instead of at the next mutation run. ``tools/`` is not a package: the tool is loaded by path."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lakewrap_mutation_tool", ROOT / "tools" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is made
    spec.loader.exec_module(module)
    return module


mutation = _tool()


@pytest.mark.parametrize("name", list(mutation.TARGETS))
def test_every_mutation_target_fits_the_code(name: str) -> None:
    mutation.check(name, mutation.TARGETS[name])


def test_every_target_with_hand_mutants_is_a_target() -> None:
    assert set(mutation.HAND) <= set(mutation.TARGETS)
    assert all(mutation.HAND[name] for name in mutation.HAND)


def _copy(files: set[str], dest: Path) -> None:
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)


def _files(name: str) -> set[str]:
    target = mutation.TARGETS[name]
    return {*target.modules, *target.tests, *(m for m, _, _ in mutation.HAND.get(name, ()))}


def test_the_check_refuses_a_moved_module_a_renamed_function_and_a_changed_hand_text(tmp_path: Path) -> None:
    """The check can fail: on a copy of the files it reads, each kind of drift is named."""
    name = "commit-lookup"  # restricted functions and hand mutants both
    target = mutation.TARGETS[name]
    _copy(_files(name), tmp_path)
    mutation.check(name, target, tmp_path)  # the copy fits

    module, functions = next(iter(target.only.items()))
    path = tmp_path / module
    text = path.read_text()
    function = functions[0].split("/")[0].split(".")[-1]
    path.write_text(text.replace(f"def {function}(", f"def {function}_renamed("))
    with pytest.raises(SystemExit, match=f"no function {functions[0].split('/')[0]}"):
        mutation.check(name, target, tmp_path)
    path.write_text(text)

    hand_module, old, _ = mutation.HAND[name][0]
    hand_text = (tmp_path / hand_module).read_text()
    (tmp_path / hand_module).write_text(hand_text.replace(old, old + " " + old, 1))
    with pytest.raises(SystemExit, match="occurs 2 times"):
        mutation.check(name, target, tmp_path)
    (tmp_path / hand_module).write_text(hand_text)

    (tmp_path / target.tests[0]).unlink()
    with pytest.raises(SystemExit, match=f"{target.tests[0]} does not exist"):
        mutation.check(name, target, tmp_path)
