"""The provenance an Iceberg commit carries in its snapshot summary, beside lakewrap's state keys.

A pyiceberg commit changes one table, so nothing outside its snapshot summary is atomic with the
data. Besides run, model, partition, pins and ``sql_sha256`` (``substrates/iceberg/commit.py``), each
commit records here:

* ``params``: the values bound to the plan's parameters (JSON), as DuckLake's ``extra_info`` does;
* ``statements``: the executed statements and commit operations, as JSON compressed with zlib and
  encoded in base64, when that stays under :data:`MAX_STATEMENTS` characters; otherwise
  ``statements_omitted`` says how large they were (``explain`` then shows ``sql_sha256`` only);
* ``restored_from`` etc.: whatever the caller passes as ``provenance`` (JSON).

The summary is part of every later ``metadata.json`` of the table, hence the cap. See
``docs/provenance.md`` (Iceberg).
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from lakewrap.compilers.artifacts import CompiledPlan

# The largest encoded statements kept in a summary (characters of base64).
MAX_STATEMENTS = 32_768


def encode(payload: dict[str, Any]) -> str:
    """JSON, zlib-compressed, base64-encoded."""
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def decode(text: str) -> dict[str, Any]:
    out = json.loads(zlib.decompress(base64.b64decode(text)).decode())
    assert isinstance(out, dict)
    return out


def params_of(compiled: CompiledPlan) -> dict[str, str]:
    """Every parameter value the plan binds (statements and commit operations)."""
    out = {k: v.value for st in compiled.statements for k, v in st.params.items()}
    out.update({k: v.value for op in compiled.commits for k, v in op.params.items()})
    return out


def record(compiled: CompiledPlan, provenance: dict[str, Any] | None = None) -> dict[str, str]:
    """The summary properties (without the ``lakewrap.`` prefix) that make a commit explainable."""
    out = {"params": json.dumps(params_of(compiled), sort_keys=True)}
    payload = {"statements": [s.dump(exclude={"params"}) for s in compiled.statements],
               "commits": [op.dump() for op in compiled.commits]}
    text = encode(payload)
    if len(text) <= MAX_STATEMENTS:
        out["statements"] = text
    else:
        out["statements_omitted"] = f"{len(text)} characters encoded, over the {MAX_STATEMENTS} kept in a summary"
    for key, value in (provenance or {}).items():
        out[key] = json.dumps(value, sort_keys=True)
    return out
