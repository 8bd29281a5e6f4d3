"""Build the preset dictionary that deflated blobs are compressed against (ADR-0072).

Run once; its output is committed and never changes, since every blob deflated with it
names it by its Adler-32 and needs it to be read. A new dictionary is a new file beside
the old ones (readers keep them all)::

    .venv/bin/python scripts/build_deflate_dictionary.py workcenter/adapters/deflate/2.bin

The samples are the detail DTOs of the demo's scenario and of a few linear items run
to done, on a fresh store, as stored. Deflate finds repeats within 32 KiB of the text
it is compressing; the dictionary is text placed before it, so the most typical
samples (the small items) go last, nearest.
"""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

from workcenter.adapters.cli import cli
from workcenter.adapters.compression import inflate
from workcenter.application import WorkCenter

LIMIT = 32 * 1024 - 262  # what zlib's window can reach before the data


def samples(path: Path) -> list[bytes]:
    result = CliRunner().invoke(cli, ["--db", str(path), "demo"])
    if result.exit_code != 0:
        raise SystemExit(result.output)
    with WorkCenter.open(path) as wc:
        for i in range(3):
            wc.create_work_item(
                title=f"Sample item {i}",
                goal="A goal in a sentence or two",
                acceptance_criteria=["The suite passes", "The change is reviewed"],
                mode="linear",
                stages=("implement", "review"),
                start=True,
            )
        while (claim := wc.claim_next("sample-worker")) is not None:
            wc.renew_lease(claim)
            wc.finish_run(
                claim,
                {
                    "outcome": "completed",
                    "summary": "Done as briefed",
                    "evidence": ["pytest: 48 passed"],
                    "acceptanceChecks": [
                        {"criterion": "The suite passes", "status": "passed", "evidence": "ok"},
                        {"criterion": "The change is reviewed", "status": "passed",
                         "evidence": "ok"},
                    ],
                },
            )  # fmt: skip
    con = sqlite3.connect(path)
    details = [inflate(bytes(row[0])) for row in con.execute("SELECT dto FROM dv_details")]
    con.close()
    return details


def main() -> None:
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        details = samples(Path(tmp) / "sample.db")
    text = b"".join(sorted(details, key=len, reverse=True))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(text[-LIMIT:])
    print(f"{out}: {min(len(text), LIMIT)} bytes from {len(details)} detail DTOs")


if __name__ == "__main__":
    main()
