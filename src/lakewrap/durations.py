"""Durations as people write them (``30m``, ``6h``, ``1d12h``, ``90s``) and back: shared by the model
header (``-- freshness``, ``-- trigger ... debounce=``) and ``lakewrap.toml`` (``[sources]``)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
HINT = "write a duration such as `30m`, `6h`, `1d` or `1d12h`"


def parse_duration(text: str, *, zero: bool = False) -> int:
    """``text`` in seconds: days, hours, minutes and seconds in that order, without spaces.

    Raises:
        ValueError: not a duration, or 0 when ``zero`` is False (the message says which).
    """
    m = _DURATION.match(text)
    if m is None or not text or not any(m.groups()):
        raise ValueError(f"`{text}` is not a duration")
    d, h, mi, s = (int(g) if g else 0 for g in m.groups())
    total = ((d * 24 + h) * 60 + mi) * 60 + s
    if total <= 0 and not zero:
        raise ValueError("a duration must be positive")
    return total


def render_duration(seconds: float) -> str:
    """``seconds`` as ``1d2h3m4s`` (largest units first, zero units left out; ``0s`` for zero)."""
    left = round(seconds)
    out = ""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"
