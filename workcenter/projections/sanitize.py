"""Primitives and sanitisers for browser DTOs (read-models.md sections 0 and 2.1).

Everything here is pure: no clock, no I/O, the same input always gives the same
output. Every function returns text that orjson can serialise: a lone surrogate
(which orjson rejects) is replaced by U+FFFD before anything else happens.

The four sanitisers:

- (a) ``sanitize_diagnostic``: truncate, drop URL user info and mask sensitive
  query values (also one hiding a sensitive parameter in its encoded value),
  mask ``name: value`` / ``name=value`` for sensitive names, ``Bearer x`` and
  bare provider tokens (``sk-...``, ``AKIA...``) and PEM private keys, truncate again;
- (b) ``sanitize_diagnostic_paths``: (a), then local paths become ``[path redacted]``;
- (c) ``sanitize_failure``: the fixed sentence when the text looks unsafe, else (a);
- (d) ``failure_reason``: the short, single-line reason shown on rows;
- ``sanitize_personal``: (a), then home directories are redacted (ADR-0013).

``sanitize_waiting_reason`` is this project's addition (ADR-0009): blocker and
waiting reasons may be a Run's error, so they get (b) plus the token test of (c).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import Enum
from types import UnionType
from typing import Any, Literal, TypeGuard, Union, get_args, get_origin
from urllib.parse import unquote
from uuid import UUID

from pydantic import BaseModel

from workcenter.domain.model import event_classes

DIAGNOSTIC_LIMIT = 8 * 1024
UNSAFE_SCAN_CHARS = 16_000
FAILURE_REASON_CHARS = 2_000
ID_LIMIT = 256
MAX_IDS = 64

FAILED_SENTENCE = "The Action failed. Sensitive details were omitted."
WAITING_SENTENCE = "The Action is waiting. Sensitive details were omitted."
PATH_REDACTED = "[path redacted]"
REDACTED_CREDENTIAL = "[redacted credential]"
MASK = "***"

SENSITIVE_NAMES: frozenset[str] = frozenset(
    {
        "apikey", "xapikey", "token", "accesstoken", "refreshtoken", "idtoken",
        "clientsecret", "secret", "signature", "sig", "credential", "password", "passwd",
        "authorization", "proxyauthorization", "auth", "code", "cookie", "setcookie",
    }
)  # fmt: skip
# Stricter than the original (ADR-0009): a name that merely *ends* with one of
# these is sensitive too (GITHUB_TOKEN, db_password, aws_secret_access_key). The short,
# ambiguous names (sig, auth, code) still need an exact match.
_SENSITIVE_SUFFIXES: tuple[str, ...] = (
    "token", "secret", "password", "passwd", "apikey", "credential", "signature",
    "authorization", "cookie", "accesskey", "secretkey", "privatekey",
)  # fmt: skip
# For these the value runs to ";" or the end of the line ("Bearer abc def").
_LINE_VALUE_SUFFIXES: tuple[str, ...] = ("authorization", "cookie")

# --- primitives (sections 0 and 2.1) ---------------------------------------------

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def clean_text(value: object) -> str:
    """``value`` as a string that is valid UTF-8: lone surrogates become U+FFFD."""
    text = value if isinstance(value, str) else str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


# The most UTF-8 bytes a character takes: a byte limit of this many times a bound in
# characters cuts no text the bound takes.
UTF8_MAX = 4


def truncate_utf8(value: object, n: int) -> str:
    """The longest prefix of ``value`` of at most ``n`` UTF-8 bytes that splits no
    character. A falsy value gives ``''``; no marker is added."""
    if not value or n <= 0:
        return ""
    text = value if isinstance(value, str) else str(value)
    if len(text) > n:  # every character takes at least one byte
        text = text[:n]
    text = clean_text(text)
    data = text.encode("utf-8")
    if len(data) <= n:
        return text
    # The cut can only leave an incomplete sequence at the very end; drop it.
    return data[:n].decode("utf-8", "ignore")


def truncate_chars(value: object, n: int) -> str:
    """The first ``n`` code points (where the original cut UTF-16 units)."""
    if not value or n <= 0:
        return ""
    text = value if isinstance(value, str) else str(value)
    return clean_text(text[:n])


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def cnt(value: object) -> int:
    """A finite number >= 0 (as an int), else 0. Booleans and strings are not numbers."""
    if type(value) is int:  # nearly every value: a DTO asks for some 40 of them
        return value if value > 0 else 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return int(value) if value > 0 else 0


def rev(value: object) -> int:
    """A revision or generation: missing, zero, negative or non-numeric become 1."""
    number = cnt(value)
    return number if number >= 1 else 1


def epoch_ms(moment: object) -> int:
    """Milliseconds since the epoch from a payload time (datetime or number); else 0."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return max(0, (moment - _EPOCH) // timedelta(milliseconds=1))
    return cnt(moment)


def bounded_id(value: object) -> str:
    return truncate_utf8(value, ID_LIMIT)


def ids(values: Iterable[object], limit: int = MAX_IDS) -> list[str]:
    """``ids(x)`` of section 2.5: the first ``limit`` ids, each <= 256 bytes."""
    kept: list[str] = []
    for value in values:
        if len(kept) >= limit:
            break
        kept.append(bounded_id(value))
    return kept


# --- names and patterns ------------------------------------------------------------


def _normalise_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", unquote(name).lower())


def is_sensitive_name(name: str) -> bool:
    key = _normalise_name(name)
    return key in SENSITIVE_NAMES or key.endswith(_SENSITIVE_SUFFIXES)


def _runs_to_line_end(name: str) -> bool:
    return _normalise_name(name).endswith(_LINE_VALUE_SUFFIXES)


# A name, an optional closing quote, then ":" or "=". The look-behind anchors the
# name at a word start and the possessive quantifiers keep every scan linear.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z0-9_.\-]++)[\"']?[ \t]*+(?P<sep>[:=])[ \t]*+"
)
_STATUS_BEFORE = re.compile(r"(?i)(?:status|error)[ \t]+\Z")
_PLAIN_VALUE_END = re.compile(r"[\s\"',;&)\]}<>]")
_LINE_VALUE_END = re.compile(r"[;\r\n]")
_NEWLINE = re.compile(r"[\r\n]")

_URL = re.compile(
    r"(?<![A-Za-z0-9])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*+)://(?P<rest>[^\s<>\"'`]*+)"
)
_QUERY_PAIR = re.compile(r"(?P<name>[^=&;#?]+)=(?P<value>[^&;#]*)")
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer)[ \t]+[^\s\"',;]+")
_BEARER_OR_BASIC = re.compile(r"(?i)(?<![A-Za-z0-9])(?:bearer|basic)[ \t]+[^\s\"',;]+")

_PATH = re.compile(
    r"(?i:file:/[^\s\"'<>`]*)"  # file: URLs
    r"|\\\\[^\s\\/\"'<>|`]+[\\/][^\s\"'<>|`]*"  # UNC \\server\share
    r"|(?<![A-Za-z0-9])[A-Za-z]:[\\/][^\s\"'<>|`]*"  # drive C:\ or C:/
    # POSIX /abs/path or ~/path, not inside a URL or a relative path.
    r"|(?<![A-Za-z0-9_.~:/\\<\-])~?/[^\s\"'<>()\[\]{},;`/*][^\s\"'<>()\[\]{},;`]*"
)
# Home directories name a person: /home/alice, /Users/bob, C:\\Users\\carol, /root,
# ~/notes and ~dave/notes (not inside a URL's path or a longer word).
_HOME_PATH = re.compile(
    r"(?<![A-Za-z0-9_.])(?:[A-Za-z]:)?[\\/](?i:home|users)[\\/][^\s\"'<>|`\\/]+[^\s\"'<>|`]*"
    r"|(?<![A-Za-z0-9_.])/root(?![A-Za-z0-9_.\-])[^\s\"'<>|`]*"
    r"|(?<![A-Za-z0-9_.~])~[A-Za-z0-9_.\-]*[\\/][^\s\"'<>|`]*"
)
_PROVIDER_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_\-]{8,}|github_pat_[A-Za-z0-9_]{8,}"
    r"|gh[a-z]_[A-Za-z0-9]{8,}|xox[a-z]-[A-Za-z0-9\-]{8,}|AKIA[0-9A-Z]{12,}"
    # Google's, Groq's, Hugging Face's and GitLab's keys, and JSON web tokens (ADR-0137).
    r"|AIza[A-Za-z0-9_\-]{20,}|gsk_[A-Za-z0-9]{16,}|hf_[A-Za-z0-9]{16,}"
    r"|glpat-[A-Za-z0-9_\-]{16,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)"
)
# A PEM private key, its armour included, to its end or the text's (found by acceptance
# testing: it was shown whole, ADR-0142).
_PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?"
    r"(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]{32,}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _value_span(text: str, start: int, line: bool) -> tuple[int, int]:
    """The span of an assigned value starting at ``start`` (inside quotes when quoted)."""
    if start < len(text) and text[start] in "\"'":
        end = text.find(text[start], start + 1)
        end = len(text) if end == -1 else end
        newline = _NEWLINE.search(text, start + 1, end)
        return start + 1, end if newline is None else newline.start()
    found = (_LINE_VALUE_END if line else _PLAIN_VALUE_END).search(text, start)
    return start, found.start() if found else len(text)


def _assignments(text: str) -> Iterable[tuple[int, int]]:
    """Value spans of sensitive assignments, left to right (they may overlap: an
    assignment inside another's value can reach further, as in ``a=token: x``)."""
    if ":" not in text and "=" not in text:
        return
    for match in _ASSIGNMENT.finditer(text):
        name = match.group("name")
        if not is_sensitive_name(name):
            continue
        if (
            match.group("sep") == ":"
            and _normalise_name(name) == "code"
            and _STATUS_BEFORE.search(text, max(0, match.start() - 32), match.start())
        ):
            continue  # "status code: 500", "Error code: 500" are not credentials
        begin, end = _value_span(text, match.end(), _runs_to_line_end(name))
        if end > begin:
            yield begin, end


def _mask_assignments(text: str) -> str:
    parts: list[str] = []
    position = 0
    for begin, end in _assignments(text):
        if end <= position:
            continue  # wholly inside a value masked already
        parts += [text[position : max(begin, position)], MASK]
        position = end
    parts.append(text[position:])
    return "".join(parts)


def has_credential_assignment(text: str) -> bool:
    return next(iter(_assignments(text)), None) is not None


def _split_url(rest: str) -> tuple[str, str, str]:
    """authority, path, then query and fragment (with their leading ? or #)."""
    cut = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if found != -1:
            cut = min(cut, found)
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    split = len(tail)
    for mark in "?#":
        found = tail.find(mark)
        if found != -1:
            split = min(split, found)
    return authority, tail[:split], tail[split:]


_DECODE_ROUNDS = 3
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_NESTED_PAIR_SPLIT = re.compile(r"[?#&;]")


def _nests_credential(value: str) -> bool:
    """Whether a query value, decoded up to three times, carries a sensitive-named
    parameter of its own (``next=%2Fcb%3Faccess_token%3Dx``), or is still encoded
    after the third round (so what it hides cannot be told)."""
    for _ in range(_DECODE_ROUNDS):
        if _holds_sensitive_pair(value):
            return True
        if not _PERCENT_ESCAPE.search(value):
            return False
        value = unquote(value)
    return _holds_sensitive_pair(value) or bool(_PERCENT_ESCAPE.search(value))


def _holds_sensitive_pair(text: str) -> bool:
    for pair in _NESTED_PAIR_SPLIT.split(text):
        name, sep, value = pair.partition("=")
        if sep and value and is_sensitive_name(name):
            return True
    return False


def _mask_pair(match: re.Match[str]) -> str:
    value = match.group("value")
    if value and (is_sensitive_name(match.group("name")) or _nests_credential(value)):
        return f"{match.group('name')}={MASK}"
    return match.group(0)


def _scrub_url(match: re.Match[str]) -> str:
    authority, path, rest = _split_url(match.group("rest"))
    return f"{match.group('scheme')}://{authority}{path}{_QUERY_PAIR.sub(_mask_pair, rest)}"


def _cut_url(match: re.Match[str]) -> str:
    authority, path, _ = _split_url(match.group("rest"))
    if authority.startswith("["):
        host = authority.split("]", 1)[0] + "]"
    else:
        host = authority.split(":", 1)[0]
    return f"{match.group('scheme')}://{host}{path}"


# Cheap substring tests first: a pattern cannot match without its anchor characters.
def _may_hold_url(text: str) -> bool:
    return "://" in text


def _may_hold_path(text: str) -> bool:
    return "/" in text or "\\" in text


def _may_hold_bearer(text: str) -> bool:
    lowered = text.lower()
    return "bearer" in lowered or "basic" in lowered


def _may_hold_token(text: str) -> bool:
    """Whether ``text`` holds what every token ``_PROVIDER_TOKEN`` finds holds (the fast
    path's anchors hold these too: ``_has_anchor``)."""
    return (
        "_" in text
        or "sk-" in text
        or "xox" in text
        or "AKIA" in text
        or "AIza" in text
        or "eyJ" in text
        or "glpat-" in text
        or "PRIVATE KEY" in text
    )


def _has_mixed_run(text: str) -> bool:
    for match in _ALNUM_RUN.finditer(text):
        run = match.group(0)
        if any(c.isdigit() for c in run) and any(c.isalpha() for c in run):
            return True
    return False


def has_secret_token(text: str) -> bool:
    """A provider-style token or a run of >= 32 mixed letters and digits."""
    head = text[:UNSAFE_SCAN_CHARS]
    return (
        _may_hold_token(head) and bool(_PROVIDER_TOKEN.search(head) or _PRIVATE_KEY.search(head))
    ) or _has_mixed_run(head)


def is_unsafe(text: str) -> bool:
    """The unsafe test of (c): a token, a long mixed run or any absolute path in the
    first 16,000 characters."""
    head = text[:UNSAFE_SCAN_CHARS]
    if has_secret_token(head):
        return True
    return _may_hold_path(head) and bool(_PATH.search(head) or _HOME_PATH.search(head))


def redact_paths(text: str) -> str:
    """Every absolute path, a home directory in any context included (``</home/a>``)."""
    if not _may_hold_path(text):
        return text
    return _HOME_PATH.sub(PATH_REDACTED, _PATH.sub(PATH_REDACTED, text))


def redact_home_paths(text: str) -> str:
    return _HOME_PATH.sub(PATH_REDACTED, text) if _may_hold_path(text) else text


# --- the fast path -------------------------------------------------------------------
#
# Most text a DTO shows (titles, goals, criteria, objectives) holds nothing any step of
# (a), (b) or sanitize_personal changes, and the detail view sanitises it again at every
# save. A text passes them unchanged when it is ASCII within the limit (no truncation,
# no surrogate), holds no anchor of the URL, path, token and Bearer patterns, and its
# ":" or "=" (if any) can assign no sensitive name: every name the assignment pattern
# finds is, once normalised, a contiguous run of the text's letters and digits, so a
# text whose letters and digits contain no sensitive name or suffix has none (a name
# the pattern finds holds no "%", so decoding it changes nothing).


def _has_anchor(value: str) -> bool:
    """Whether ``value`` holds an anchor: a path's separator, what every token holds
    (``_may_hold_token``), or Bearer or Basic in any case. Tests of substrings, not one
    regular expression: a third of its time on the short texts a DTO holds, where each
    provider's prefix added to the expression cost every such text more (ADR-0137)."""
    if "/" in value or "\\" in value or _may_hold_token(value):
        return True
    lowered = value.lower()
    return "bearer" in lowered or "basic" in lowered


_SENSITIVE_FRAGMENT = re.compile(
    "|".join(sorted({*SENSITIVE_NAMES, *_SENSITIVE_SUFFIXES}, key=lambda w: (-len(w), w)))
)
_NOT_ALNUM = re.compile(r"[^a-z0-9]")


def passes_unchanged(value: object, limit: int) -> TypeGuard[str]:
    """Whether ``sanitize_diagnostic``, ``sanitize_diagnostic_paths`` and
    ``sanitize_personal`` would all return ``value`` itself: True only when that is
    certain (a False says nothing)."""
    if type(value) is not str or len(value) > limit or not value.isascii():
        return False
    if _has_anchor(value):
        return False
    if ":" not in value and "=" not in value:
        return True
    return _SENSITIVE_FRAGMENT.search(_NOT_ALNUM.sub("", value.lower())) is None


# --- sanitisers ----------------------------------------------------------------------


def sanitize_diagnostic(value: object, limit: int = DIAGNOSTIC_LIMIT) -> str:
    """(a): truncate, scrub URLs, mask sensitive assignments, Bearer and bare provider
    tokens, truncate again."""
    if passes_unchanged(value, limit):
        return value
    text = truncate_utf8(value, limit)
    if not text:
        return ""
    # A key first: named (``private_key: -----BEGIN...``), its armour was masked as the
    # name's value and its body left whole (found by acceptance testing, ADR-0142).
    if "PRIVATE KEY" in text:
        text = _PRIVATE_KEY.sub(MASK, text)
    if _may_hold_url(text):
        text = _URL.sub(_scrub_url, text)
    text = _mask_assignments(text)
    if _may_hold_bearer(text):
        text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    if _may_hold_token(text):
        text = _PROVIDER_TOKEN.sub(MASK, text)
    return truncate_utf8(text, limit)


def sanitize_diagnostic_paths(value: object, limit: int = DIAGNOSTIC_LIMIT) -> str:
    """(b): (a), then file URLs, UNC, drive and POSIX absolute paths are redacted."""
    if passes_unchanged(value, limit):
        return value
    return truncate_utf8(redact_paths(sanitize_diagnostic(value, limit)), limit)


def sanitize_personal(value: object, limit: int = DIAGNOSTIC_LIMIT) -> str:
    """(a), then home directories (which name a person) become ``[path redacted]``.

    For the user's own words in a DTO and for everything printed on a terminal
    (ADR-0013): other paths stay, as they are usually the subject (an endpoint to
    fix, the file a worker failed on), yet no credential and no person's home
    directory is shown."""
    if passes_unchanged(value, limit):
        return value
    return truncate_utf8(redact_home_paths(sanitize_diagnostic(value, limit)), limit)


def sanitize_failure(
    value: object, limit: int = DIAGNOSTIC_LIMIT, *, sentence: str = FAILED_SENTENCE
) -> str:
    """(c) strict failure: the fixed sentence when the text is unsafe, else (a).

    The limit is capped at 16,000 bytes, so whatever (a) keeps was scanned."""
    if not value:
        return ""
    text = clean_text(value)
    if is_unsafe(text):
        return sentence
    return sanitize_diagnostic(text, min(limit, UNSAFE_SCAN_CHARS))


def failure_reason(value: object) -> str:
    """(d) the failure reason of a row: short, single line, never a credential.

    Only the first 16,000 characters are read: the window the unsafe test scans,
    so shortening URLs cannot pull unscanned text into the result."""
    if not value:
        return ""
    text = truncate_chars(value, UNSAFE_SCAN_CHARS)
    if is_unsafe(text):
        return FAILED_SENTENCE
    if _may_hold_url(text):
        text = _URL.sub(_cut_url, text)
    if has_credential_assignment(text):
        return FAILED_SENTENCE
    if _may_hold_bearer(text):
        text = _BEARER_OR_BASIC.sub(REDACTED_CREDENTIAL, text)
    text = _CONTROL.sub(" ", text).strip()
    return text[:FAILURE_REASON_CHARS].rstrip()


def sanitize_waiting_reason(value: object, limit: int = DIAGNOSTIC_LIMIT) -> str:
    """Blocker and waiting reasons (ADR-0009): the waiting sentence when the text holds
    a token, else (b). A reason can be a Run's error, so (a) alone is not enough."""
    if not value:
        return ""
    text = truncate_chars(value, UNSAFE_SCAN_CHARS)
    if has_secret_token(text):
        return WAITING_SENTENCE
    return sanitize_diagnostic_paths(text, min(limit, UNSAFE_SCAN_CHARS))


# --- typed records (audit payloads, goal progress) -----------------------------------
#
# A record is JSON data (a model dumped in JSON mode) walked together with its type.
# Free text gets ``sanitize_personal``; a value from a closed set (a Literal, a
# number, a flag, an id, a time) is kept as it is, whatever its field is called: a
# stop ``code`` such as ``work_item_tokens_exhausted`` is a fact, not a credential.
# Only in free-form mappings, where the keys are data, does a sensitive key mask its
# value (a text or a number: a PIN is a number).

RECORD_TEXT_LIMIT = 64 * 1024
_CLOSED_TYPES: tuple[type, ...] = (bool, int, float, UUID, datetime, Enum, type(None))


def _is_closed(schema: Any) -> bool:
    if get_origin(schema) is Literal:
        return True
    if get_origin(schema) in (Union, UnionType):
        return all(_is_closed(arm) for arm in get_args(schema))
    return isinstance(schema, type) and issubclass(schema, _CLOSED_TYPES)


def _optional_arm(schema: Any) -> Any:
    """``X | None`` -> X; any other union of open types -> Any."""
    if get_origin(schema) not in (Union, UnionType):
        return schema
    arms = [arm for arm in get_args(schema) if arm is not type(None)]
    open_arms = [arm for arm in arms if not _is_closed(arm)]
    return arms[0] if len(arms) == 1 else open_arms[0] if len(open_arms) == 1 else Any


def _item_schema(schema: Any, index: int) -> Any:
    args = get_args(schema)
    if not args:
        return Any
    if get_origin(schema) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return args[index] if index < len(args) else Any
    return args[0]


def _free_mapping(data: Mapping[str, Any], values: Any) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for key, value in data.items():
        secret_shaped = isinstance(value, str | int | float) and not isinstance(value, bool)
        if secret_shaped and is_sensitive_name(str(key)) and not _is_closed(values):
            shown[key] = MASK
        else:
            shown[key] = sanitize_record(value, values)
    return shown


def sanitize_record(data: Any, schema: Any = Any) -> Any:
    """``data`` with its free text through ``sanitize_personal`` and its closed-set
    values as they are.

    ``schema`` is the type ``data`` was dumped from (a pydantic model class, a
    ``Literal``, ``tuple[X, ...]``, ``dict[str, X]``...); ``Any`` treats every
    string as free text and every mapping as free-form."""
    if data is None or _is_closed(schema):
        return data
    schema = _optional_arm(schema)
    if isinstance(data, str):
        return sanitize_personal(data, RECORD_TEXT_LIMIT)
    if isinstance(schema, type) and issubclass(schema, BaseModel) and isinstance(data, Mapping):
        fields = schema.model_fields
        return {
            key: sanitize_record(value, fields[key].annotation if key in fields else Any)
            for key, value in data.items()
        }
    if isinstance(data, Mapping):
        args = get_args(schema)
        return _free_mapping(data, args[1] if len(args) == 2 else Any)
    if isinstance(data, list | tuple):
        return [sanitize_record(value, _item_schema(schema, i)) for i, value in enumerate(data)]
    return data


def sanitize_event_payload(event_type: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """An audit row's payload for a person: the event class named ``event_type`` says
    which fields are closed-set; an unknown type is free-form throughout."""
    schema: Any = event_classes().get(event_type, Any)
    shown = sanitize_record(payload, schema)
    return shown if isinstance(shown, dict) else {}
