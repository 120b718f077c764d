"""The redactor's rules one at a time, on its pure functions (fast: the mutation target ``redaction``).

``tests/test_redaction.py`` proves end to end that no canary reaches any channel; this file pins
each rule of ``lakewrap.redact`` so that a change to one of them fails a test of its own: which
variables are secrets (named here, not read from the module, so dropping one from
``SECRET_ENV`` fails), the length below which only the value as written is masked, each derived
form, the base64 characters that depend only on the secret at every byte offset, the longest form
masked first, the project's path made relative, and which leaves of a JSON tree are redacted.
"""

from __future__ import annotations

import base64
import secrets
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from lakewrap import redact as redaction

# the variables lakewrap takes credentials from (docs/security.md, "Redaction")
CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "PGPASSWORD",
               "LAKEWRAP_ICEBERG_TOKEN")


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*CREDENTIALS, *redaction.SECRET_ENV):
        monkeypatch.delenv(name, raising=False)


def value(prefix: str = "v") -> str:
    return f"{prefix}{secrets.token_hex(5)}/{secrets.token_hex(3)}+{secrets.token_hex(3)} x"


def test_every_credential_variable_is_a_secret_each_with_its_own_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A distinct value in each variable, all set at once: every one is masked (one redaction cannot
    hide another, since no value contains another)."""
    values = {name: value(f"c{i}") for i, name in enumerate(CREDENTIALS)}
    for name, v in values.items():
        monkeypatch.setenv(name, v)
    assert redaction.secret_values() == frozenset(values.values())
    for name, v in values.items():
        assert redaction.redact(f"[{v}]") == "[***]", name
    text = " | ".join(values.values())
    assert redaction.redact(text) == " | ".join(["***"] * len(values))


@pytest.mark.parametrize("name", CREDENTIALS)
def test_each_credential_variable_alone_is_masked(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    v = value()
    monkeypatch.setenv(name, v)
    assert redaction.redact(f"error: {v}; {v[::-1]}") == "error: ***; ***"


def test_extra_values_count_and_unset_or_empty_ones_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", "")
    assert redaction.secret_values([None, "", "given-secret"]) == frozenset({"given-secret"})
    assert redaction.secret_values() == frozenset()
    # nothing to hide: the text comes back unchanged (an empty secret would match everywhere)
    assert redaction.redact("plain text", extra=[None, ""]) == "plain text"
    assert redaction.redact("a given-secret here", extra=["given-secret"]) == "a *** here"


def test_a_value_shorter_than_six_characters_is_masked_only_as_written() -> None:
    assert redaction.MIN_DERIVED == 6  # the length docs/security.md states
    assert redaction.forms("ab/c+") == {"ab/c+"}
    assert redaction.redact("ab/c+ +c/ba 61622f632b", extra=["ab/c+"]) == "*** +c/ba 61622f632b"
    six = "ab/c+d"
    assert redaction.forms(six) >= {six, "d+c/ba", "ab%2Fc%2Bd", "ab/c%2Bd", six.encode().hex()}
    assert redaction.redact(f"{six[::-1]} {six.encode().hex().upper()}", extra=[six]) == "*** ***"


@pytest.mark.parametrize("form", ["written", "upper", "reversed", "url", "url-keep-slash", "url-plus", "hex",
                                  "HEX", "base64", "base64-urlsafe"])
def test_each_derived_form_alone_is_masked(form: str) -> None:
    secret = "?>?>?> a/b"  # base64 "Pz4/Pj8+IGEvYg==" has both + and /; url-encoding changes ' ' and '/'
    raw = secret.encode()
    shown = {"written": secret, "upper": secret.upper(), "reversed": secret[::-1],
             "url": quote(secret, safe=""), "url-keep-slash": quote(secret), "url-plus": quote_plus(secret),
             "hex": raw.hex(), "HEX": raw.hex().upper(), "base64": base64.b64encode(raw).decode(),
             "base64-urlsafe": base64.urlsafe_b64encode(raw).decode()}[form]
    assert redaction.redact(f"<{shown}>", extra=[secret]) == "<***>", shown


def dependent_span(prefix: int, length: int) -> tuple[int, int]:
    """The base64 characters of a text that depend only on the ``length`` bytes after ``prefix``
    bytes: a character covers bits 6i..6i+6, the secret bits 8*prefix..8*(prefix+length)."""
    inside = [i for i in range(0, 4 * (prefix + length)) if 6 * i >= 8 * prefix and 6 * i + 6 <= 8 * (prefix + length)]
    return inside[0], inside[-1] + 1


@pytest.mark.parametrize("prefix", range(7))
@pytest.mark.parametrize("length", [6, 7, 8])
def test_base64_inside_a_longer_text_is_masked_exactly_where_it_depends_on_the_secret(prefix: int,
                                                                                     length: int) -> None:
    secret = "s3Cr&t!#"[:length]
    for before, after in ((b"\xff" * prefix, b"\xff\xfe"), (b"\x01" * prefix, b"zz")):
        encoded = base64.b64encode(before + secret.encode() + after).decode()
        start, end = dependent_span(prefix, length)
        assert redaction.redact(encoded, extra=[secret]) == encoded[:start] + "***" + encoded[end:], (prefix, before)


@pytest.mark.parametrize("length", [6, 7, 8])
def test_a_whole_base64_text_is_masked_as_one(length: int) -> None:
    """The standalone encoding (with its padding) is longer than the in-text characters it starts
    with: the longest form is masked first, so no padded tail is left showing."""
    secret = "Pa55w0rd"[:length]
    for text in (base64.b64encode(secret.encode()).decode(), base64.urlsafe_b64encode(secret.encode()).decode()):
        assert redaction.redact(f"[{text}]", extra=[secret]) == "[***]", text


def test_a_form_is_masked_in_any_case_and_the_rest_of_the_text_is_kept() -> None:
    assert redaction.redact("Hello HUNTER2x and hunter2X!", extra=["hunter2x"]) == "Hello *** and ***!"
    assert redaction.redact("nothing secret here: 42, /a/b+c", extra=["hunter2x"]) == "nothing secret here: 42, /a/b+c"


def test_the_project_path_is_made_relative(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    uri = root.as_uri()
    text = f"at {root}/models/a.sql, in {root}; see {uri}/target/x.json or {uri}"
    assert redaction.redact(text, roots=[root]) == "at models/a.sql, in .; see target/x.json or ."
    assert redaction.redact(text) == text


def test_a_json_tree_is_redacted_in_its_strings_keys_and_other_leaves() -> None:
    secret = "tree-secret"

    def text(s: str) -> str:
        return redaction.redact(s, extra=[secret])

    tree = {"k": [secret, ("x", f"a {secret}")], secret: 1, "n": [7, 2.5, True, None], "b": secret.encode(),
            "plain": b"bytes"}
    out = redaction.redact_value(tree, text)
    assert out == {"k": ["***", ["x", "a ***"]], "***": 1, "n": [7, 2.5, True, None], "b": "b'***'",
                   "plain": b"bytes"}
    assert out["plain"] is tree["plain"]  # a leaf without a secret is the value itself, not its text
    assert isinstance(out["n"][2], bool) and isinstance(out["n"][0], int) and not isinstance(out["n"][1], str)


def test_a_number_whose_text_is_a_secret_is_masked_in_a_sample() -> None:
    """A numeric password (PGPASSWORD=20240607) selected into a failing test's sample: the number's
    text shows the secret, so it becomes its redacted text (other numbers stay numbers)."""
    secret = "20240607"

    def text(s: str) -> str:
        return redaction.redact(s, extra=[secret])

    out = redaction.redact_value([{"n": 20240607, "f": 20240607.25, "neg": -20240607, "ok": 42, "x": 1.5}], text)
    assert out == [{"n": "***", "f": "***.25", "neg": "-***", "ok": 42, "x": 1.5}]
    assert type(out[0]["ok"]) is int and type(out[0]["x"]) is float


def test_a_leaf_shows_a_secret_when_its_redacted_text_differs() -> None:
    """Whether a leaf of another type shows a secret is decided by comparing its text with the
    redacted text: equal (not merely the same object) keeps the value, any difference masks it."""
    secret = "#hunter22"  # '#' sorts before the mask's '*'

    def text(s: str) -> str:
        return redaction.redact(s, extra=[secret])

    assert redaction.redact_value([secret.encode()], text) == ["b'***'"]
    copying = [b"plain", 7]
    assert redaction.redact_value(copying, lambda s: s[:1] + s[1:]) == copying  # an equal copy: nothing shown
