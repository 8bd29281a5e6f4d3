"""The index of decisions (docs/adr/README.md) lists every ADR by its number and title,
in order, and names the next number (a new contributor found 143 ADRs and no index)."""

from __future__ import annotations

import re
from pathlib import Path

ADR = Path(__file__).parent.parent / "docs" / "adr"


def test_the_index_lists_every_decision_and_the_next_number() -> None:
    decisions = []
    for path in sorted(ADR.glob("[0-9][0-9][0-9][0-9]-*.md")):
        heading = path.read_text().splitlines()[0]
        found = re.fullmatch(r"# ADR-(\d{4}): (.+)", heading)
        assert found and found.group(1) == path.name[:4], (path.name, heading)
        decisions.append(f"- [{found.group(1)}]({path.name}): {found.group(2)}")
    index = (ADR / "README.md").read_text()
    listed = [line for line in index.splitlines() if line.startswith("- [")]
    assert listed == decisions, "docs/adr/README.md is not the list of the ADRs"
    following = int(decisions[-1][3:7]) + 1
    assert f"The next number: {following:04d}." in index
