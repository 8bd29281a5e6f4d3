"""Evidence, outputs and acceptance checks: the durable proof a Run reports.

Normalisation follows lifecycle.md sections 1.4 to 1.6 exactly. Invalid items
are dropped silently; the caller never sees an error for them.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Literal, cast, get_args
from urllib.parse import unquote, urlsplit

from workcenter.domain.model import Immutable

EvidenceKind = Literal["text", "tool", "test", "file", "link", "pr", "commit"]
EvidenceStatus = Literal["completed", "passed", "failed", "error", "pending"]
OutputKind = Literal["file", "link", "pr", "commit"]
CheckStatus = Literal["passed", "failed", "deferred", "not_applicable"]

NEGATIVE_STATUSES: frozenset[str] = frozenset({"failed", "error", "pending"})
MAX_ITEMS = 50


class EvidenceItem(Immutable):
    kind: EvidenceKind
    label: str
    ref: str | None = None
    status: EvidenceStatus | None = None

    @property
    def is_negative(self) -> bool:
        return self.status in NEGATIVE_STATUSES


class AcceptanceCheck(Immutable):
    criterion: str
    status: CheckStatus
    evidence: str


_EVIDENCE_KINDS: frozenset[str] = frozenset(get_args(EvidenceKind))
_EVIDENCE_STATUSES: frozenset[str] = frozenset(get_args(EvidenceStatus))
_OUTPUT_KINDS: frozenset[str] = frozenset(get_args(OutputKind))
_CHECK_STATUSES: frozenset[str] = frozenset(get_args(CheckStatus))

MAX_LABEL = 500
MAX_REF = 1_000
MAX_CHECK_EVIDENCE = 1_000
_DECODE_ROUNDS = 3


def _clip(text: str, limit: int) -> str:
    # Trimming again after the cut keeps normalisation idempotent: a cut can
    # expose trailing whitespace that a second pass would otherwise remove.
    return text.strip()[:limit].rstrip()


def _items(raw: object) -> Iterator[object]:
    if isinstance(raw, list | tuple):
        yield from raw


def _evidence_item(raw: object) -> EvidenceItem | None:
    if isinstance(raw, str):
        label = _clip(raw, MAX_LABEL)
        return EvidenceItem(kind="text", label=label) if label else None
    if not isinstance(raw, Mapping):
        return None
    tool = raw.get("tool")
    if isinstance(tool, str):
        # The tool form wins over any kind/label the same object carries.
        tool_name = _clip(tool, MAX_LABEL)
        if not tool_name:
            return None
        status: EvidenceStatus = "error" if raw.get("isError") is True else "completed"
        return EvidenceItem(kind="tool", label=tool_name, status=status)
    kind, label_raw = raw.get("kind"), raw.get("label")
    if not isinstance(kind, str) or kind not in _EVIDENCE_KINDS or not isinstance(label_raw, str):
        return None
    label = _clip(label_raw, MAX_LABEL)
    if not label:
        return None
    ref, status_raw = raw.get("ref"), raw.get("status")
    # ref and status are optional decorations: a bad one is ignored rather
    # than costing the whole item. A status is looked up only once it is a string: a
    # list or an object is no key of the set (the lookup would raise TypeError).
    known = isinstance(status_raw, str) and status_raw in _EVIDENCE_STATUSES
    return EvidenceItem(
        kind=cast(EvidenceKind, kind),
        label=label,
        ref=(_clip(ref, MAX_REF) or None) if isinstance(ref, str) else None,
        status=cast(EvidenceStatus, status_raw) if known else None,
    )


def normalize_evidence(raw: object) -> tuple[EvidenceItem, ...]:
    """Section 1.4: the first ``MAX_ITEMS`` valid items, invalid ones dropped."""
    kept: list[EvidenceItem] = []
    for entry in _items(raw):
        item = _evidence_item(entry)
        if item is not None:
            kept.append(item)
            if len(kept) == MAX_ITEMS:
                break
    return tuple(kept)


# --- ref canonicalisation (section 1.5) ------------------------------------

_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_NESTED_SPLIT = re.compile(r"[?#&;]")
_SCHEME_PREFIX = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_SECRET_WORDS = (
    "token", "apikey", "secret", "sig", "credential", "password", "auth", "code", "cookie",
)  # fmt: skip
_HEX_COMMIT = re.compile(r"[0-9A-Fa-f]{7,64}")
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{")
_PR_NUMBER = r"[1-9][0-9]*"
_SEG = r"[^/]+"
# GitLab's "-" separator is not a group or project, so "/p/-/merge_requests/1" has no project.
_GITLAB_SEG = r"(?!-/)[^/]+"
_PR_PATHS = tuple(
    re.compile(pattern)
    for pattern in (
        rf"/{_SEG}/{_SEG}/pull/{_PR_NUMBER}",  # GitHub (and Enterprise)
        rf"(?:/{_GITLAB_SEG})+/{_GITLAB_SEG}/(?:-/)?merge_requests/{_PR_NUMBER}",  # GitLab
        rf"/{_SEG}/{_SEG}/pull-requests/{_PR_NUMBER}",  # Bitbucket Cloud
        rf"/projects/{_SEG}/repos/{_SEG}/pull-requests/{_PR_NUMBER}",  # Bitbucket Server
        rf"/{_SEG}/{_SEG}/_git/{_SEG}/pullrequest/{_PR_NUMBER}",  # Azure DevOps
    )
)


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def _canonical_file(ref: str) -> str | None:
    path = ref.replace("\\", "/")
    if _has_control(path) or _PERCENT_ESCAPE.search(path):
        return None
    # A scheme prefix also covers drive letters ("C:"), so one test refuses both.
    if path.startswith("/") or _SCHEME_PREFIX.match(path):
        return None
    while path.startswith("./"):
        path = path[2:]
    # Leading whitespace would be trimmed away on the next normalisation pass,
    # silently naming a different file.
    if path != path.lstrip():
        return None
    if any(segment in ("", ".", "..") for segment in path.split("/")):
        return None
    return path


def _secret_word(name: str) -> bool:
    squashed = re.sub(r"[^a-z0-9]", "", name.lower())
    return any(word in squashed for word in _SECRET_WORDS)


def _names_secret(text: str) -> bool:
    """Whether any ``name=value`` pair of ``text`` (split at ``? # & ;``) has a secret name."""
    return any(pair and _secret_word(pair.partition("=")[0]) for pair in _NESTED_SPLIT.split(text))


def _hides_secret(section: str) -> bool:
    # Whole query and fragment sections are decoded, values included, so a
    # parameter nested in an encoded value (next=%2Fcb%3Ftoken%3Dx) is seen like
    # a top-level one. A bounded number of rounds defeats double encoding
    # without letting an attacker make us loop; anything still encoded after
    # them is refused, since what it hides cannot be told.
    for _ in range(_DECODE_ROUNDS):
        if _names_secret(section):
            return True
        if not _PERCENT_ESCAPE.search(section):
            return False
        section = unquote(section)
    return _names_secret(section) or bool(_PERCENT_ESCAPE.search(section))


def _canonical_link(ref: str) -> str | None:
    # urlsplit silently drops tabs and newlines and browsers read a backslash
    # as "/", so both would let the parsed URL differ from the one displayed.
    if _has_control(ref) or any(ch.isspace() or ch == "\\" for ch in ref):
        return None
    try:
        parts = urlsplit(ref)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return None
    if _hides_secret(parts.query) or _hides_secret(parts.fragment):
        return None
    # Scheme and host are case-insensitive: lowercasing them lets duplicates
    # collapse. Everything after the authority is kept byte for byte.
    authority_end = len(parts.scheme) + 3 + len(parts.netloc)
    if ref[len(parts.scheme) : len(parts.scheme) + 3] != "://":
        return None
    return f"{scheme}://{parts.netloc.lower()}{ref[authority_end:]}"


def _canonical_pr(ref: str) -> str | None:
    link = _canonical_link(ref)
    if link is None or "?" in link or "#" in link:
        return None
    path = urlsplit(link).path
    return link if any(shape.fullmatch(path) for shape in _PR_PATHS) else None


def _canonical_commit(ref: str) -> str | None:
    if _HEX_COMMIT.fullmatch(ref):
        return ref.lower()
    segments = ref.split("/")
    if segments[0] != "refs" or len(segments) < 3 or _REF_FORBIDDEN.search(ref):
        return None
    if ref.endswith(".") or _has_control(ref):
        return None
    for segment in segments:
        if not segment or segment.startswith(".") or segment.endswith(".lock"):
            return None
    return ref


def canonical_ref(kind: str, ref: str) -> str | None:
    """The canonical form of an output ref, or None when it is not valid for ``kind``."""
    ref = ref.strip()
    if kind == "file":
        return _canonical_file(ref)
    if kind == "link":
        return _canonical_link(ref)
    if kind == "pr":
        return _canonical_pr(ref)
    if kind == "commit":
        return _canonical_commit(ref)
    return None


def normalize_outputs(raw: object) -> tuple[EvidenceItem, ...]:
    """Section 1.5: valid, canonical, de-duplicated outputs, at most ``MAX_ITEMS``."""
    kept: list[EvidenceItem] = []
    seen: set[tuple[str, str]] = set()
    for entry in _items(raw):
        item = _evidence_item(entry)
        if item is None or item.kind not in _OUTPUT_KINDS or item.ref is None:
            continue
        ref = canonical_ref(item.kind, item.ref)
        if ref is None or (item.kind, ref) in seen:
            continue
        seen.add((item.kind, ref))
        kept.append(item.model_copy(update={"ref": ref}))
        if len(kept) == MAX_ITEMS:
            break
    return tuple(kept)


# --- acceptance checks (section 1.6) ---------------------------------------


def _check(raw: object) -> AcceptanceCheck | None:
    if not isinstance(raw, Mapping):
        return None
    criterion, status, evidence = raw.get("criterion"), raw.get("status"), raw.get("evidence")
    # A status of another type is malformed like its neighbours (and no key of the
    # set: looking a list up would raise TypeError).
    if not isinstance(criterion, str) or not isinstance(evidence, str):
        return None
    if not isinstance(status, str) or status not in _CHECK_STATUSES:
        return None
    evidence = _clip(evidence, MAX_CHECK_EVIDENCE)
    if not evidence:
        return None
    return AcceptanceCheck(
        criterion=criterion.strip(), status=cast(CheckStatus, status), evidence=evidence
    )


def normalize_checks(raw: object) -> tuple[AcceptanceCheck, ...]:
    """Section 1.6: malformed checks are dropped; the count mismatch then shows."""
    return tuple(check for entry in _items(raw) if (check := _check(entry)) is not None)


def checks_match_criteria(checks: tuple[AcceptanceCheck, ...], criteria: tuple[str, ...]) -> bool:
    """read-models 1.2 "valid checks": one well-formed check per criterion, in order."""
    if len(checks) != len(criteria):
        return False
    return all(
        check.criterion == criterion
        and check.status in _CHECK_STATUSES
        and bool(check.evidence.strip())
        for check, criterion in zip(checks, criteria, strict=True)
    )


def is_contradictory(
    error: str | None,
    review_decision: str | None,
    evidence: tuple[EvidenceItem, ...],
    outputs: tuple[EvidenceItem, ...],
) -> bool:
    """read-models 1.2: the Run's own record argues against its success."""
    if error or review_decision == "changes_requested":
        return True
    return any(item.is_negative for item in (*evidence, *outputs))
