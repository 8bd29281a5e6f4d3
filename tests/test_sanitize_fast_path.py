"""The sanitisers' fast path changes no result: wherever ``passes_unchanged`` lets a
text through, the full path of every sanitiser it guards returns that same text."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from workcenter.projections import sanitize as s

GUARDED: tuple[Callable[[object, int], str], ...] = (
    s.sanitize_diagnostic,
    s.sanitize_diagnostic_paths,
    s.sanitize_personal,
)

# Pieces that reach every branch the fast path must rule out: assignments of sensitive
# and harmless names, percent-encoded names, URLs, paths, provider tokens, Bearer,
# non-ASCII and lone surrogates, and plain words between them.
PIECES = st.sampled_from(
    [
        "token", "Token", "api_key", "apikey", "password", "secret", "code", "auth", "sig",
        "status", "design", "Implement", "name", "GITHUB_TOKEN", "db-password", "%74oken",
        "%", ":", "=", ": ", " = ", '"', "'", "://", "https://x.io/a?token=1", "/home/alice",
        "~/notes", "C:\\Users\\bob", "/tmp/x", "\\\\srv\\share", "sk-abcdefgh12345678",
        "AKIAABCDEFGHIJKLMNOP", "xoxb-12345678", "ghp_abcdefgh1234", "Bearer abc", "basic x",
        "BEARER", "a1b2c3d4e5f6a1b2c3d4e5f6a1b2c3d4e5", "é", "\ud800", "\t", "\n", " ", ";",
        "Complete benchmark work item", "500", "x", "-", ".", "%74oken=abc", "token=abc",
        "password: x", "Stage: ", "status code: 500", "my_secret = 1",
        "accessKey: abc", "privatekey=x",
    ]
)  # fmt: skip
TEXTS = st.one_of(
    st.lists(PIECES, max_size=12).map("".join),
    st.text(max_size=80),
    st.text(alphabet="abcdekotnsipwr:=%/_- ", max_size=60),
)
LIMITS = st.sampled_from([0, 1, 8, 40, 256, s.DIAGNOSTIC_LIMIT])


@settings(max_examples=1000, deadline=None)
@given(text=TEXTS, limit=LIMITS)
@example(text="Bearer abc", limit=s.DIAGNOSTIC_LIMIT)
@example(text="Step: accessKey = abc", limit=s.DIAGNOSTIC_LIMIT)
@example(text="Stage: privatekey: abc", limit=s.DIAGNOSTIC_LIMIT)
def test_fast_path_gives_the_full_paths_result(text: str, limit: int) -> None:
    fast = [sanitize(text, limit) for sanitize in GUARDED]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(s, "passes_unchanged", lambda value, limit: False)
        full = [sanitize(text, limit) for sanitize in GUARDED]
    assert fast == full
    if s.passes_unchanged(text, limit):
        assert full == [text] * len(GUARDED)


@pytest.mark.parametrize(
    "text",
    [
        "Completed work is completed",
        "Implement: Complete benchmark work item number 7",
        "status: ready, retries = 3",
    ],
)
def test_plain_text_takes_the_fast_path(text: str) -> None:
    assert s.passes_unchanged(text, s.DIAGNOSTIC_LIMIT)


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("password: hunter2", s.DIAGNOSTIC_LIMIT),  # a sensitive name assigned
        ("aws.accessKey = abc", s.DIAGNOSTIC_LIMIT),  # a sensitive suffix assigned
        ("see https://x.io/?q=1", s.DIAGNOSTIC_LIMIT),  # a URL
        ("under /home/alice", s.DIAGNOSTIC_LIMIT),  # a path
        ("key sk-abcdefgh12345678", s.DIAGNOSTIC_LIMIT),  # a provider token
        ("Bearer abc", s.DIAGNOSTIC_LIMIT),
        ("café", s.DIAGNOSTIC_LIMIT),  # not ASCII: bytes and characters differ
        ("longer than the limit", 8),  # truncated
        (b"bytes", s.DIAGNOSTIC_LIMIT),  # not a str
    ],
)
def test_text_that_may_change_takes_the_full_path(text: object, limit: int) -> None:
    assert not s.passes_unchanged(text, limit)


def test_masking_still_happens_behind_a_harmless_looking_prefix() -> None:
    assert s.sanitize_diagnostic("Implement: token=abc") == "Implement: token=***"
    assert s.sanitize_personal("Stage: read ~/notes") == "Stage: read [path redacted]"
