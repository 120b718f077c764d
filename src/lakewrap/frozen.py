"""Frozen records: the typed values lakewrap passes around (specs, plans, compiled plans, config).

They are standard-library dataclasses, frozen and keyword-only, so a run that finds its models in
the cache never imports pydantic: its import and the schemas of lakewrap's ~30 classes were
~90 ms of a 0.5 s one-model ``lakewrap run`` (``docs/architecture.md``, "Records").

What people write is still validated by pydantic, at load time: :meth:`Frozen.validate` builds a
``TypeAdapter`` for the class on first use, which coerces (lists to tuples, strings to enums),
checks types and ``Literal`` tags, forbids unknown keys and reports located errors. Rules that span
fields live in ``__post_init__``, so they hold however a record is built; constraints of one field
are :class:`Meta` annotations, which only pydantic reads. Records lakewrap wrote itself (the
compile cache) come back through :meth:`Frozen.decode`, which rebuilds nested records from their
JSON form without validating them again.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, TypeVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover
    from typing_extensions import dataclass_transform

R = TypeVar("R", bound="Frozen")
_Decode = Callable[[Any], Any]


class Meta:
    """pydantic ``Field`` arguments for one field, read only when pydantic validates.

    ``Annotated[int | None, Meta(ge=0)]`` is ``Field(ge=0)``; ``Meta(discriminator="kind")`` tags a
    union; ``Meta(check=fn)`` runs ``fn(value)`` after the field's type is validated (a
    ``ValueError`` becomes a located validation error of that field).
    """

    def __init__(self, *, check: Callable[[Any], Any] | None = None, **field: Any) -> None:
        self.check = check
        self.field = field

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic import AfterValidator, Field

        extra: list[Any] = [Field(**self.field)] if self.field else []
        if self.check is not None:
            extra.append(AfterValidator(self.check))
        return handler.generate_schema(typing.Annotated[(source, *extra)])


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(dataclasses.field,))
class Frozen:
    """Base of every record: each subclass is a frozen, keyword-only dataclass; no unknown fields."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # set on each subclass
    _names: ClassVar[tuple[str, ...]]  # its fields' names, in order

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # dataclasses generates the methods it writes from source text (~0.1 ms of exec each):
        # __init__, __setattr__ and __delattr__ per class; __repr__, __eq__ and __hash__ are the
        # base's, which saves ~10 ms of every process's start (30 classes).
        dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)(cls)
        cls._names = tuple(f.name for f in dataclasses.fields(cls))

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names)
        return f"{type(self).__qualname__}({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    @classmethod
    def validate(cls: type[R], data: Any) -> R:
        """Validate input (a dict, as parsed from TOML or JSON) with pydantic.

        Raises:
            pydantic.ValidationError: with the location of every problem.
        """
        return typing.cast(R, _adapter(cls).validate_python(data))

    @classmethod
    def validate_json(cls: type[R], text: str | bytes) -> R:
        """:meth:`validate` for a JSON text."""
        return typing.cast(R, _adapter(cls).validate_json(text))

    @classmethod
    def decode(cls: type[R], data: dict[str, Any]) -> R:
        """Rebuild a record from :meth:`dump`'s output, without validating (lakewrap wrote it).

        Nested records may be given as records already. ``__post_init__`` rules still run.
        """
        decode = _DECODERS.get(cls) or _record_decoder(cls)
        return typing.cast(R, decode(data))

    def dump(self, *, exclude: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
        """The record as JSON values, fields in declaration order (tuples as lists, datetimes ISO 8601)."""
        return {name: plain(getattr(self, name)) for name in self._names if name not in exclude}

    def dump_json(self, *, indent: int | None = None) -> str:
        """:meth:`dump` as JSON text (UTF-8 characters as they are)."""
        return json.dumps(self.dump(), indent=indent, ensure_ascii=False,
                          separators=None if indent is not None else (",", ":"))

    def replace(self: R, **changes: Any) -> R:
        """A copy with ``changes`` applied (``__post_init__`` rules run on the copy)."""
        return dataclasses.replace(self, **changes)


_ADAPTERS: dict[type, Any] = {}
_DECODERS: dict[type, _Decode] = {}


def _adapter(cls: type) -> Any:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import TypeAdapter

        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


_ATOMS = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """``value`` as JSON values: records as dicts, tuples as lists, enums as their values, datetimes ISO 8601."""
    if type(value) in _ATOMS:  # most values: first, by exact type (a str enum is not one)
        return value
    if isinstance(value, Frozen):
        return value.dump()
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    return value


# --- decoding -------------------------------------------------------------------------------------


def _record_decoder(cls: type[Frozen]) -> _Decode:
    hints = typing.get_type_hints(cls, include_extras=True)  # resolves the string annotations
    fields = [(f.name, _value_decoder(hints[f.name])) for f in dataclasses.fields(cls)]

    def decode(data: Any) -> Any:
        if isinstance(data, cls):
            return data
        return cls(**{name: data[name] if dec is None else dec(data[name]) for name, dec in fields if name in data})

    _DECODERS[cls] = decode
    return decode


def _value_decoder(tp: Any) -> _Decode | None:
    """How to turn the JSON value of type ``tp`` back into its Python value; None: it is that value.

    An ``Annotated`` type is decoded as the type it annotates, unless one of its annotations has a
    ``decode`` function (a union tagged by something the type cannot name, e.g. ``config.LakeConfig``).
    """
    if typing.get_origin(tp) is typing.Annotated:
        hook = next((m.decode for m in tp.__metadata__ if callable(getattr(m, "decode", None))), None)
        return hook if hook is not None else _value_decoder(typing.get_args(tp)[0])
    if isinstance(tp, type):
        if issubclass(tp, Frozen):
            return lambda v: tp.decode(v)
        if issubclass(tp, Enum):
            return tp
        if issubclass(tp, datetime):
            return lambda v: v if isinstance(v, datetime) else datetime.fromisoformat(v)
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _value_decoder(args[0])
            return tuple if item is None else (lambda v: tuple(item(x) for x in v))
        return tuple
    if origin is dict:
        value = _value_decoder(args[1])
        return None if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    if origin in (typing.Union, types.UnionType):
        return _union_decoder([a for a in args if a is not type(None)])
    return None  # Literal, Any, str, int, ...


def _union_decoder(members: list[Any]) -> _Decode | None:
    tagged = {m.__dataclass_fields__["kind"].default: m for m in members
              if isinstance(m, type) and issubclass(m, Frozen) and "kind" in m.__dataclass_fields__}
    if len(tagged) > 1:  # a tagged union of records: pick the member by its ``kind``
        return lambda v: v if v is None or isinstance(v, Frozen) else tagged[v["kind"]].decode(v)
    pairs = [(m, _value_decoder(m)) for m in members]
    lists = [d for m, d in pairs if d is not None and typing.get_origin(m) is tuple]
    scalars = [d for m, d in pairs if d is not None and typing.get_origin(m) is not tuple]
    if not lists and not scalars:
        return None

    def decode(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, list):
            return lists[0](v) if lists else v
        return scalars[0](v) if scalars else v

    return decode
