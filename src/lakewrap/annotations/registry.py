"""The keyword and test-kind registry, extensible by plugins through entry points.

Core keywords are registered by :mod:`lakewrap.annotations.keywords`. A plugin package adds its own
by exposing a callable in the ``lakewrap.plugins`` entry-point group::

    # pyproject.toml of the plugin
    [project.entry-points."lakewrap.plugins"]
    mine = "my_plugin:register"

    # my_plugin.py
    def register(registry):
        @registry.keyword("owner", usage="owner <team>", summary="the owning team")
        def owner(ann, header):
            header.extensions["owner"] = ann.positional[0].value

The callable receives the :class:`Registry`; a plugin keyword stores what it parsed in
``header.extensions``, which reaches :attr:`lakewrap.spec.ModelSpec.extensions`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakewrap.annotations.keywords import register_core
from lakewrap.annotations.scripts import register_scripts, script_params
from lakewrap.annotations.service import register_service
from lakewrap.errors import ConfigError

if TYPE_CHECKING:
    from lakewrap.annotations.header import Header
    from lakewrap.annotations.lexer import Annotation, Arg

KeywordHandler = Callable[["Annotation", "Header"], None]
TestParser = Callable[["Annotation", "tuple[Arg, ...]", "Header"], "dict[str, Any]"]

ENTRY_POINT_GROUP = "lakewrap.plugins"


@dataclass(frozen=True)
class KeywordDef:
    """A header keyword: its handler and the text shown in errors and docs."""

    name: str
    handle: KeywordHandler
    usage: str
    summary: str
    repeatable: bool = False


@dataclass(frozen=True)
class TestKindDef:
    """A ``-- test`` kind: parses its arguments into a plain dict."""

    __test__ = False

    name: str
    parse: TestParser
    usage: str
    summary: str


@dataclass
class Registry:
    """Keywords and test kinds known to the parser."""

    keywords: dict[str, KeywordDef] = field(default_factory=dict)
    test_kinds: dict[str, TestKindDef] = field(default_factory=dict)
    script_functions: dict[str, Callable[..., Any]] = field(default_factory=dict)  # script kinds' functions
    plugins_loaded: bool = False

    def keyword(
        self, name: str, *, usage: str, summary: str, repeatable: bool = False
    ) -> Callable[[KeywordHandler], KeywordHandler]:
        """Decorator registering a keyword handler under ``name``."""

        def register(fn: KeywordHandler) -> KeywordHandler:
            if name in self.keywords:
                raise ConfigError(f"annotation keyword `{name}` is registered twice")
            self.keywords[name] = KeywordDef(name, fn, usage, summary, repeatable)
            return fn

        return register

    def test_kind(self, name: str, *, usage: str, summary: str) -> Callable[[TestParser], TestParser]:
        """Decorator registering a ``-- test`` kind under ``name``."""

        def register(fn: TestParser) -> TestParser:
            if name in self.test_kinds:
                raise ConfigError(f"test kind `{name}` is registered twice")
            self.test_kinds[name] = TestKindDef(name, fn, usage, summary)
            return fn

        return register

    def script_test(self, name: str, *, usage: str | None = None, summary: str | None = None,
                    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``-- test <name> [key=value ...]`` whose rows go to the decorated
        ``function(relation, **args)`` (:mod:`lakewrap.scripttests`, ``docs/tests.md``)."""

        shown = usage or f"{name} [key=value ...]"

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            from lakewrap.compilers import checks

            def parse(ann: Annotation, args: tuple[Arg, ...], header: Header) -> dict[str, Any]:
                return {"params": script_params(ann, args, shown)}

            doc = (fn.__doc__ or name).strip().splitlines()[0]
            self.test_kind(name, usage=shown, summary=summary or doc)(parse)
            checks.register_kind(name)  # its statement: the relation the function reads
            self.script_functions[name] = fn
            return fn

        return register

    def load_plugins(self) -> None:
        """Run every ``lakewrap.plugins`` entry point once."""
        if self.plugins_loaded:
            return
        self.plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()(self)
            except Exception as exc:  # a broken plugin must say which one it is
                raise ConfigError(
                    f"plugin `{ep.name}` ({ep.value}) failed to register: {exc}",
                    hint=f"fix or uninstall the package providing the `{ENTRY_POINT_GROUP}` entry point",
                ) from exc


_DEFAULT: Registry | None = None


def default_registry() -> Registry:
    """The process-wide registry: core keywords plus installed plugins."""
    global _DEFAULT
    if _DEFAULT is None:
        registry = Registry()
        register_core(registry)
        register_service(registry)  # freshness, schedule, trigger
        register_scripts(registry)  # hooks and script tests
        registry.load_plugins()
        _DEFAULT = registry
    return _DEFAULT
