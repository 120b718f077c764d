"""A pytest plugin for mutation runs (``-p mutation_plugin``, tools/mutation.py).

* Hypothesis runs without its shrink phase, on a fixed seed: a mutant a property test catches fails
  as soon as the first failing example is found, instead of spending most of its run shrinking it,
  and two runs of one mutant agree.
* Each test gets at most ``LAKEWRAP_MUTATION_TEST_SECONDS`` seconds (default 30; SIGALRM): a
  mutant that loops forever (a ``while`` whose condition never turns false) fails its test then,
  not at cosmic-ray's timeout for the whole run.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import Phase, settings

settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate], derandomize=True)
settings.load_profile("mutation")


class TestTooLong(Exception):
    """A test ran past its limit: the mutant loops."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    seconds = int(os.environ.get("LAKEWRAP_MUTATION_TEST_SECONDS", "30"))

    def expired(signum: int, frame: Any) -> None:
        raise TestTooLong(f"{item.nodeid} ran over {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        return (yield)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
