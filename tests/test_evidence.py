"""Normalisation of evidence, outputs and acceptance checks (lifecycle.md 1.4-1.6)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workcenter.domain.evidence import (
    MAX_ITEMS,
    AcceptanceCheck,
    EvidenceItem,
    canonical_ref,
    checks_match_criteria,
    is_contradictory,
    normalize_checks,
    normalize_evidence,
    normalize_outputs,
)

# --- evidence items (1.4) ---------------------------------------------------


@pytest.mark.parametrize("raw", [None, "text", 3, {"kind": "text", "label": "x"}, b"ab"])
def test_evidence_input_that_is_not_a_list_gives_nothing(raw: object) -> None:
    assert normalize_evidence(raw) == ()


def test_evidence_accepts_a_tuple_as_well_as_a_list() -> None:
    assert normalize_evidence(("a",)) == (EvidenceItem(kind="text", label="a"),)


def test_string_item_becomes_trimmed_text_and_blank_strings_are_dropped() -> None:
    assert normalize_evidence(["  ran the tests  ", "", "   \n\t"]) == (
        EvidenceItem(kind="text", label="ran the tests"),
    )


@pytest.mark.parametrize(
    ("is_error", "status"),
    [
        (True, "error"),
        (False, "completed"),
        (None, "completed"),
        ("true", "completed"),
        (1, "completed"),
    ],
)
def test_tool_item_status_depends_only_on_is_error_being_true(
    is_error: object, status: str
) -> None:
    raw: dict[str, object] = {"tool": " bash ", "isError": is_error}
    expected = EvidenceItem.model_validate({"kind": "tool", "label": "bash", "status": status})
    assert normalize_evidence([raw]) == (expected,)


def test_tool_item_without_is_error_is_completed() -> None:
    assert normalize_evidence([{"tool": "grep"}]) == (
        EvidenceItem(kind="tool", label="grep", status="completed"),
    )


def test_tool_form_wins_over_kind_and_label_and_ignores_ref() -> None:
    raw = {"tool": "edit", "kind": "file", "label": "x", "ref": "a.py", "status": "failed"}
    assert normalize_evidence([raw]) == (
        EvidenceItem(kind="tool", label="edit", status="completed"),
    )


def test_tool_item_with_blank_name_is_dropped() -> None:
    assert normalize_evidence([{"tool": "  "}]) == ()


def test_non_string_tool_falls_back_to_the_kind_rules() -> None:
    assert normalize_evidence([{"tool": 5, "kind": "test", "label": "unit"}]) == (
        EvidenceItem(kind="test", label="unit"),
    )
    assert normalize_evidence([{"tool": 5}]) == ()


@pytest.mark.parametrize("kind", ["text", "tool", "test", "file", "link", "pr", "commit"])
def test_every_known_kind_is_accepted(kind: str) -> None:
    (item,) = normalize_evidence([{"kind": kind, "label": "L"}])
    assert item.kind == kind
    assert item.label == "L"
    assert item.ref is None
    assert item.status is None


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "note", "label": "x"},
        {"kind": "TEXT", "label": "x"},
        {"kind": "text"},
        {"kind": "text", "label": "   "},
        {"kind": "text", "label": 3},
        {"label": "x"},
        {"kind": None, "label": "x"},
        7,
        None,
        ["text", "x"],
    ],
)
def test_invalid_items_are_dropped_silently(raw: object) -> None:
    assert normalize_evidence([raw, "kept"]) == (EvidenceItem(kind="text", label="kept"),)


def test_label_is_trimmed_then_cut_to_500_characters() -> None:
    (item,) = normalize_evidence([{"kind": "text", "label": "  " + "a" * 600 + "  "}])
    assert item.label == "a" * 500
    (exact,) = normalize_evidence(["b" * 500])
    assert exact.label == "b" * 500


def test_cut_that_exposes_trailing_whitespace_is_trimmed_again() -> None:
    (item,) = normalize_evidence(["a" * 499 + " " + "b" * 10])
    assert item.label == "a" * 499


def test_ref_is_trimmed_cut_to_1000_and_blank_ref_is_none() -> None:
    items = normalize_evidence(
        [
            {"kind": "file", "label": "a", "ref": "  src/a.py  "},
            {"kind": "file", "label": "b", "ref": "r" * 1200},
            {"kind": "file", "label": "c", "ref": "   "},
            {"kind": "file", "label": "d", "ref": 42},
        ]
    )
    assert [i.ref for i in items] == ["src/a.py", "r" * 1000, None, None]


@pytest.mark.parametrize("status", ["completed", "passed", "failed", "error", "pending"])
def test_known_status_is_kept(status: str) -> None:
    (item,) = normalize_evidence([{"kind": "test", "label": "t", "status": status}])
    assert item.status == status


@pytest.mark.parametrize("status", ["ok", "PASSED", "", None, 1, "deferred", ["passed"], {}])
def test_unknown_status_is_dropped_but_the_item_kept(status: object) -> None:
    (item,) = normalize_evidence([{"kind": "test", "label": "t", "status": status}])
    assert item.status is None


def test_at_most_50_items_are_kept_and_they_are_the_first_valid_ones() -> None:
    raw: list[object] = [None, ""] + [f"item {i}" for i in range(MAX_ITEMS + 1)]
    items = normalize_evidence(raw)
    assert MAX_ITEMS == 50
    assert len(items) == 50
    assert items[0].label == "item 0"
    assert items[-1].label == "item 49"


def test_evidence_keeps_duplicates() -> None:
    assert len(normalize_evidence(["same", "same"])) == 2


# --- canonical refs (1.5) ---------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("src/a.py", "src/a.py"),
        ("./src/a.py", "src/a.py"),
        ("././src/a.py", "src/a.py"),
        ("src\\a.py", "src/a.py"),
        (".\\src\\a.py", "src/a.py"),
        ("a", "a"),
        (".hidden/x", ".hidden/x"),
        ("a/b..c/d", "a/b..c/d"),
        ("100%/done", "100%/done"),
        ("src/a:b.txt", "src/a:b.txt"),
        ("  docs/readme.md ", "docs/readme.md"),
    ],
)
def test_file_ref_accepted(ref: str, expected: str) -> None:
    assert canonical_ref("file", ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "../a",
        "a/../b",
        "a/..",
        "a/./b",
        ".",
        "./",
        "./..",
        "a//b",
        "a/",
        "/etc/passwd",
        "\\\\server\\share",
        "C:/x",
        "c:\\x",
        "C:x",
        "file:///etc/passwd",
        "https://x.com/a",
        "x://y",
        "mailto:a",
        "a%2fb",
        "%2e%2e/a",
        "a/b%41",
        "a\x00b",
        "a\nb",
        "a\x7fb",
        "a\x85b",
        "./ a",
    ],
)
def test_file_ref_refused(ref: str) -> None:
    assert canonical_ref("file", ref) is None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("https://x.com/a", "https://x.com/a"),
        ("http://x.com", "http://x.com"),
        ("HTTPS://X.COM/Path?q=1#Frag", "https://x.com/Path?q=1#Frag"),
        ("https://x.com:8443/a?page=2&sort=asc", "https://x.com:8443/a?page=2&sort=asc"),
        ("https://x.com/a#section-2", "https://x.com/a#section-2"),
        ("https://x.com/a?", "https://x.com/a?"),
        ("https://[::1]:8080/a", "https://[::1]:8080/a"),
        ("https://x.com/a@b", "https://x.com/a@b"),
        ("https://x.com/?q=token", "https://x.com/?q=token"),
    ],
)
def test_link_ref_accepted(ref: str, expected: str) -> None:
    assert canonical_ref("link", ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "ftp://x.com/a",
        "javascript:alert(1)",
        "x.com/a",
        "//x.com/a",
        "https:///a",
        "https:x.com",
        "https://user:pw@x.com/a",
        "https://user@x.com/a",
        "https://x.com\\@evil.com/",
        "https://x.com:99999/",
        "https://x.com:port/",
        "https://[::1/",
        "https://x.com/a b",
        "https://x.com/\ta",
        "https://x.com/a\nb",
    ],
)
def test_link_ref_refused_for_shape(ref: str) -> None:
    assert canonical_ref("link", ref) is None


@pytest.mark.parametrize(
    "param",
    [
        "access_token=1",
        "token",
        "Token=1",
        "api_key=1",
        "API-KEY=1",
        "apiKey=1",
        "client_secret=1",
        "sig=1",
        "X-Amz-Signature=1",
        "credential=1",
        "password=1",
        "auth=1",
        "authorization=1",
        "code=1",
        "cookie=1",
        "acc%65ss_token=1",
        "acc%2565ss_token=1",
        "acc%252565ss_token=1",
        "%25252541=1",
        "%2525252541=1",
    ],
)
@pytest.mark.parametrize("separator", ["?", "?a=1&", "?a=1;", "#", "#x=1&"])
def test_link_with_secret_or_still_encoded_parameter_is_refused(param: str, separator: str) -> None:
    assert canonical_ref("link", f"https://x.com/{separator}{param}") is None


def test_three_decoding_rounds_are_enough_for_a_harmless_name() -> None:
    assert canonical_ref("link", "https://x.com/?%252541=1") is not None
    assert canonical_ref("link", "https://x.com/?p%2561ge=1") is not None


def test_secret_word_in_a_value_or_path_is_not_a_secret_name() -> None:
    assert canonical_ref("link", "https://x.com/token/a?q=password") is not None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("https://github.com/o/r/pull/7", "https://github.com/o/r/pull/7"),
        ("https://GitHub.com/o/r/pull/1234", "https://github.com/o/r/pull/1234"),
        ("https://ghe.corp.example/o/r/pull/3", "https://ghe.corp.example/o/r/pull/3"),
        ("https://gitlab.com/g/p/-/merge_requests/5", "https://gitlab.com/g/p/-/merge_requests/5"),
        (
            "https://gitlab.com/g/s/t/p/-/merge_requests/5",
            "https://gitlab.com/g/s/t/p/-/merge_requests/5",
        ),
        (
            "https://gitlab.example/g/p/merge_requests/5",
            "https://gitlab.example/g/p/merge_requests/5",
        ),
        ("https://bitbucket.org/w/r/pull-requests/9", "https://bitbucket.org/w/r/pull-requests/9"),
        (
            "https://bb.corp/projects/P/repos/r/pull-requests/9",
            "https://bb.corp/projects/P/repos/r/pull-requests/9",
        ),
        (
            "https://dev.azure.com/org/proj/_git/repo/pullrequest/12",
            "https://dev.azure.com/org/proj/_git/repo/pullrequest/12",
        ),
        ("http://localhost:3000/o/r/pull/1", "http://localhost:3000/o/r/pull/1"),
    ],
)
def test_pr_ref_accepted(ref: str, expected: str) -> None:
    assert canonical_ref("pr", ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "https://github.com/o/r/pull/0",
        "https://github.com/o/r/pull/-1",
        "https://github.com/o/r/pull/07",
        "https://github.com/o/r/pull/x",
        "https://github.com/o/r/pull/٣",
        "https://github.com/o/r/pull/7/",
        "https://github.com/o/r/pull/7/files",
        "https://github.com/o/r/pulls/7",
        "https://github.com/o/r/issues/7",
        "https://github.com/r/pull/7",
        "https://github.com/o/r/pull/7?diff=split",
        "https://github.com/o/r/pull/7?",
        "https://github.com/o/r/pull/7#issuecomment-1",
        "https://github.com/o/r/pull/7#",
        "https://user:pw@github.com/o/r/pull/7",
        "ftp://github.com/o/r/pull/7",
        "github.com/o/r/pull/7",
        "https://gitlab.com/p/-/merge_requests/5",
        "https://gitlab.com/-/-/merge_requests/5",
        "https://bitbucket.org/w/r/pull-requests/0",
        "https://dev.azure.com/org/proj/_git/repo/pullrequest/0",
        "https://dev.azure.com/org/proj/repo/pullrequest/12",
    ],
)
def test_pr_ref_refused(ref: str) -> None:
    assert canonical_ref("pr", ref) is None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("abc123f", "abc123f"),
        ("ABC123F", "abc123f"),
        ("a" * 40, "a" * 40),
        ("0123456789abcdef" * 4, "0123456789abcdef" * 4),
        ("refs/heads/main", "refs/heads/main"),
        ("refs/heads/feature/x-1", "refs/heads/feature/x-1"),
        ("refs/tags/v1.0", "refs/tags/v1.0"),
        ("refs/remotes/origin/HEAD", "refs/remotes/origin/HEAD"),
    ],
)
def test_commit_ref_accepted(ref: str, expected: str) -> None:
    assert canonical_ref("commit", ref) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "abc12",
        "abc123",
        "a" * 65,
        "abc123g",
        "abc1\n23f",
        "main",
        "heads/main",
        "refs/main",
        "refs/heads/",
        "refs//main",
        "refs/heads//main",
        "refs/heads/a..b",
        "refs/heads/a b",
        "refs/heads/a\tb",
        "refs/heads/a\x7fb",
        "refs/heads/a~1",
        "refs/heads/a^",
        "refs/heads/a:b",
        "refs/heads/a?",
        "refs/heads/a*",
        "refs/heads/a[b",
        "refs/heads/a\\b",
        "refs/heads/.hidden",
        "refs/heads/x.lock",
        "refs/heads/main.",
        "refs/heads/a@{1}",
        "Refs/heads/main",
    ],
)
def test_commit_ref_refused(ref: str) -> None:
    assert canonical_ref("commit", ref) is None


@pytest.mark.parametrize("kind", ["text", "tool", "test", "other", ""])
def test_canonical_ref_refuses_kinds_without_refs(kind: str) -> None:
    assert canonical_ref(kind, "src/a.py") is None


# --- outputs (1.5) ----------------------------------------------------------


def _out(kind: str, ref: object, label: str = "L", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "label": label, "ref": ref, **extra}


def test_outputs_keep_only_output_kinds_with_a_valid_canonical_ref() -> None:
    outputs = normalize_outputs(
        [
            _out("file", "./src/a.py", status="completed"),
            _out("link", "https://x.com/docs"),
            _out("pr", "https://github.com/o/r/pull/7"),
            _out("commit", "ABCDEF1"),
            _out("text", "src/b.py"),
            _out("test", "src/c.py"),
            {"tool": "bash"},
            "plain text",
            _out("file", None),
            _out("file", "   "),
            _out("file", "../escape"),
            _out("link", "https://x.com/?access_token=1"),
            _out("pr", "https://github.com/o/r/pull/0"),
            _out("commit", "abc12"),
        ]
    )
    assert outputs == (
        EvidenceItem(kind="file", label="L", ref="src/a.py", status="completed"),
        EvidenceItem(kind="link", label="L", ref="https://x.com/docs"),
        EvidenceItem(kind="pr", label="L", ref="https://github.com/o/r/pull/7"),
        EvidenceItem(kind="commit", label="L", ref="abcdef1"),
    )


def test_outputs_drop_duplicates_by_kind_and_canonical_ref_keeping_the_first() -> None:
    outputs = normalize_outputs(
        [
            _out("file", "src/a.py", label="first"),
            _out("file", "./src/a.py", label="second"),
            _out("file", "src\\a.py", label="third"),
            _out("commit", "abcdef1", label="c1"),
            _out("commit", "ABCDEF1", label="c2"),
            _out("link", "https://github.com/o/r/pull/7", label="as link"),
            _out("pr", "https://github.com/o/r/pull/7", label="as pr"),
        ]
    )
    assert [(o.kind, o.label) for o in outputs] == [
        ("file", "first"),
        ("commit", "c1"),
        ("link", "as link"),
        ("pr", "as pr"),
    ]


def test_outputs_cap_at_50_counted_after_filtering() -> None:
    raw: list[object] = [_out("file", "../bad")] * 10
    raw += [_out("file", f"f{i}.txt") for i in range(MAX_ITEMS + 1)]
    outputs = normalize_outputs(raw)
    assert len(outputs) == 50
    assert outputs[0].ref == "f0.txt"
    assert outputs[-1].ref == "f49.txt"


def test_outputs_non_list_gives_nothing() -> None:
    assert normalize_outputs({"kind": "file", "label": "x", "ref": "a"}) == ()


# --- acceptance checks (1.6) ------------------------------------------------


def _chk(criterion: object = "c", status: object = "passed", evidence: object = "e") -> object:
    return {"criterion": criterion, "status": status, "evidence": evidence}


@pytest.mark.parametrize("status", ["passed", "failed", "deferred", "not_applicable"])
def test_check_statuses_accepted(status: str) -> None:
    (check,) = normalize_checks([_chk(status=status)])
    assert check.status == status


def test_check_fields_are_trimmed_and_evidence_cut_to_1000() -> None:
    (check,) = normalize_checks([_chk(criterion="  tests pass ", evidence="  " + "e" * 1200)])
    assert check == AcceptanceCheck(criterion="tests pass", status="passed", evidence="e" * 1000)


@pytest.mark.parametrize(
    "raw",
    [
        _chk(status="ok"),
        _chk(status="PASSED"),
        _chk(status=None),
        _chk(status=["passed"]),
        _chk(status={"passed": 1}),
        _chk(evidence=""),
        _chk(evidence="   "),
        _chk(evidence=None),
        _chk(evidence=3),
        _chk(criterion=None),
        _chk(criterion=1),
        {"criterion": "c", "status": "passed"},
        "c: passed",
        None,
    ],
)
def test_malformed_checks_are_dropped(raw: object) -> None:
    assert normalize_checks([raw, _chk(criterion="kept")]) == (
        AcceptanceCheck(criterion="kept", status="passed", evidence="e"),
    )


def test_checks_non_list_gives_nothing() -> None:
    assert normalize_checks(_chk()) == ()
    assert normalize_checks(None) == ()


def test_checks_match_criteria_in_order() -> None:
    criteria = ("a", "b")
    checks = normalize_checks([_chk("a"), _chk("b", "not_applicable")])
    assert checks_match_criteria(checks, criteria)
    assert checks_match_criteria((), ())


@pytest.mark.parametrize(
    "raw",
    [
        [_chk("a")],
        [_chk("a"), _chk("b"), _chk("c")],
        [_chk("b"), _chk("a")],
        [_chk("a"), _chk("B")],
        [_chk("a"), _chk("b", evidence="  ")],
        [_chk("a"), _chk("b", status="maybe")],
    ],
)
def test_checks_that_do_not_match_criteria(raw: list[object]) -> None:
    assert not checks_match_criteria(normalize_checks(raw), ("a", "b"))


def test_checks_match_refuses_hand_built_blank_evidence() -> None:
    check = AcceptanceCheck(criterion="a", status="passed", evidence=" ")
    assert not checks_match_criteria((check,), ("a",))


# --- contradiction (read-models 1.2) ----------------------------------------


def _item(status: str | None, kind: str = "test") -> EvidenceItem:
    return EvidenceItem.model_validate({"kind": kind, "label": "x", "status": status})


def test_clean_run_is_not_contradictory() -> None:
    fine = (_item(None), _item("passed"), _item("completed"))
    assert not is_contradictory(None, "approved", fine, (_item(None, "file"),))
    assert not is_contradictory("", None, (), ())


@pytest.mark.parametrize("status", ["failed", "error", "pending"])
def test_negative_evidence_or_output_is_contradictory(status: str) -> None:
    assert is_contradictory(None, None, (_item(status),), ())
    assert is_contradictory(None, None, (), (_item(status, "file"),))


def test_error_or_changes_requested_is_contradictory() -> None:
    assert is_contradictory("boom", None, (), ())
    assert is_contradictory(None, "changes_requested", (), ())


# --- properties -------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "  ", " a ", "x" * 499 + " y", "z" * 1001]
)
_ref = _text | st.sampled_from(
    [
        "./src/a.py",
        "src\\b.py",
        "../c",
        "HTTPS://X.com/p?q=1",
        "https://x.com/?token=1",
        "https://github.com/o/r/pull/7",
        "https://gitlab.com/g/p/-/merge_requests/2",
        "ABCDEF1234",
        "refs/heads/main",
        "  ./ d",
    ]
)
_kind = st.sampled_from(["text", "tool", "test", "file", "link", "pr", "commit", "x"])
_status = st.none() | st.sampled_from(["completed", "passed", "failed", "error", "pending", "?"])
_raw_item = st.one_of(
    _text,
    st.builds(lambda t, e: {"tool": t, "isError": e}, _text, st.sampled_from([True, False, 1])),
    st.builds(
        lambda k, lab, r, s: {"kind": k, "label": lab, "ref": r, "status": s},
        _kind,
        _text,
        st.none() | _ref,
        _status,
    ),
    st.none(),
    st.integers(),
)
_raw_list = st.lists(_raw_item, max_size=60)


@given(_raw_list)
def test_normalize_evidence_is_idempotent(raw: list[object]) -> None:
    once = normalize_evidence(raw)
    assert normalize_evidence([item.model_dump() for item in once]) == once
    assert len(once) <= MAX_ITEMS
    assert all(item.label and len(item.label) <= 500 for item in once)
    assert all(item.ref is None or 0 < len(item.ref) <= 1000 for item in once)


@given(_raw_list)
def test_normalize_outputs_is_idempotent(raw: list[object]) -> None:
    once = normalize_outputs(raw)
    assert normalize_outputs([item.model_dump() for item in once]) == once
    assert len({(o.kind, o.ref) for o in once}) == len(once)
    for item in once:
        assert item.ref is not None
        assert canonical_ref(item.kind, item.ref) == item.ref


@given(st.sampled_from(["file", "link", "pr", "commit"]), _ref)
def test_canonical_ref_is_a_fixed_point(kind: str, ref: str) -> None:
    canonical = canonical_ref(kind, ref)
    if canonical is not None:
        assert canonical_ref(kind, canonical) == canonical


@given(
    st.lists(
        st.builds(
            lambda c, s, e: {"criterion": c, "status": s, "evidence": e},
            _text,
            st.sampled_from(["passed", "failed", "deferred", "not_applicable", "nope"]),
            _text,
        )
        | st.none(),
        max_size=10,
    )
)
def test_normalize_checks_is_idempotent(raw: list[object]) -> None:
    once = normalize_checks(raw)
    assert normalize_checks([check.model_dump() for check in once]) == once
    criteria = tuple(check.criterion for check in once)
    assert checks_match_criteria(once, criteria)


def test_canonical_ref_trims_surrounding_whitespace_like_the_item_rules() -> None:
    assert canonical_ref("commit", " abc123f\n") == "abc123f"
    assert canonical_ref("link", "https://x.com/a\n") == "https://x.com/a"


# Any JSON value (and a few Python ones a caller may pass) in any field of an item: the
# rules above drop or ignore it; nothing escapes as an exception (a list or an object
# as a status once raised TypeError, unhashable, from a set lookup).
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_any_field = _json | st.sampled_from(["text", "file", "passed", "error", "src/a.py", (1, 2)])
_field_names = st.sampled_from(
    ["kind", "label", "ref", "status", "tool", "isError", "criterion", "evidence"]
)
_any_entry = _json | st.dictionaries(_field_names, _any_field, max_size=8)


@given(st.lists(_any_entry, max_size=6) | _json)
def test_normalisers_drop_any_json_they_cannot_use_and_never_raise(raw: object) -> None:
    for item in (*normalize_evidence(raw), *normalize_outputs(raw)):
        assert isinstance(item, EvidenceItem)
    for check in normalize_checks(raw):
        assert isinstance(check, AcceptanceCheck)
