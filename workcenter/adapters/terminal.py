"""Text a person's terminal can print safely: no control sequences, no rich markup.

Anything a user, a Coordinator or an executor wrote (a title, a criterion, an
error) may carry ``ESC [31m``, BEL, NUL, other C0 or C1 controls or bidi overrides:
printed raw they recolour, retitle or rewrite the terminal, or make text read
backwards. ``safe`` turns each into a visible escape (``\\x1b``, ``\\u202e``), and
``text`` wraps the result in a rich ``Text`` so ``[red]`` or ``[link=...]`` in it
prints literally instead of being read as markup.

JSON output is escaped differently: the encoder already writes C0 controls as
``\\u00XX``, and ``escape_json`` does the same for DEL, C1 and bidi controls,
which stays valid JSON that decodes to the very same strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rich.text import Text

# C0, DEL and C1 controls, lone surrogates, and the invisible marks that reorder
# text (LRM/RLM, bidi embeddings, overrides and isolates).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# In JSON text these characters only occur inside strings, so escaping them there
# changes nothing a decoder sees.
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe(value: object) -> str:
    """``value`` as one printable string: every control character made visible."""
    return _UNSAFE.sub(_visible, value if isinstance(value, str) else str(value))


def text(value: object, style: str = "") -> Text:
    """``safe(value)`` as rich ``Text``: printed literally, never parsed as markup."""
    return Text(safe(value), style=style)


def safe_data(data: Any) -> Any:
    """JSON data with every string (keys included) made ``safe``, for rich's print_json."""
    if isinstance(data, str):
        return safe(data)
    if isinstance(data, Mapping):
        return {safe(key): safe_data(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [safe_data(value) for value in data]
    return data


def escape_json(serialised: str) -> str:
    """Serialised JSON with DEL, C1 and bidi controls written as ``\\uXXXX`` escapes."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group(0)):04x}", serialised)
