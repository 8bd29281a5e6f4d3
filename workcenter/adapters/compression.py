"""Deflated stored bytes: event and snapshot state, and the detail view's rows (ADR-0020).

Every blob is a standard zlib stream, written by the library's own
``ZlibCompressor`` with a smaller hash table (below); the detail view's rows are
deflated against a preset dictionary (ADR-0072). Blobs written before compression
are plain orjson, whose first byte is ``{`` (0x7B); a zlib stream's first byte is
0x78 (deflate with the default 32 KiB window), with or without a dictionary, so a
reader tells the two apart by that byte and old stores still read.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Final

from eventsourcing.compressor import ZlibCompressor
from eventsourcing.utils import get_topic

ZLIB_FIRST_BYTE: Final = 0x78
# zlib's default memLevel 8 allocates and clears a 256 KiB hash table per call, which
# for blobs of a few hundred bytes costs more than the deflating: 55 us against 21 us
# at 5, for the same output size (ADR-0020). The window stays 32 KiB, so streams keep
# their 0x78 first byte.
MEM_LEVEL: Final = 5
# A state this short (an item started or resumed: its time and actor, 79 bytes) is
# stored as it is: deflating saves it two bytes at most, as the stream's header,
# checksum and code tables cost about what matching gains, for a fixed cost of about
# 85,000 instructions (ADR-0038). Readers tell plain from deflated by the first byte.
PLAIN_LIMIT: Final = 100


# The preset dictionaries (ADR-0072), by the Adler-32 that a stream deflated against
# one names in its header. A detail DTO repeats little within itself but much across
# items (its keys and skeleton): deflated against samples of others, it takes about a
# third of the bytes. Events would take four fifths, but priming a deflater costs
# more than they save (ADR-0072), so they are deflated alone. A dictionary never
# changes once blobs name it; a new one is a new file, and readers keep every one.
DICTIONARY_DIR: Final = Path(__file__).with_name("deflate")
DICTIONARIES: Final = {
    zlib.adler32(data): data
    for data in (path.read_bytes() for path in sorted(DICTIONARY_DIR.glob("*.bin")))
}
CURRENT_DICTIONARY: Final = (DICTIONARY_DIR / "1.bin").read_bytes()
_FDICT: Final = 0x20  # the header's flag: a dictionary's Adler-32 follows it
# Priming a deflater hashes the whole dictionary (about 10 us); copying a primed one
# copies its tables, which costs less than the bytes it saves take to write.
_PRIMED: Final = zlib.compressobj(
    zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, zlib.MAX_WBITS, MEM_LEVEL, zdict=CURRENT_DICTIONARY
)


# The standard library's zlib, not zlib-ng: zlib-ng clears 192 KiB of tables per
# stream, which eats its gain on states of a few hundred bytes; it is faster on DTOs
# only, by about 2 % of a create (ADR-0041). Another deflater would change nothing
# for readers: any zlib stream with the default window starts with 0x78.
class SmallBlobZlibCompressor(ZlibCompressor):
    """The library's zlib compressor, tuned for small blobs; it inflates streams with
    or without a preset dictionary."""

    def compress(self, data: bytes) -> bytes:
        deflater = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, zlib.MAX_WBITS, MEM_LEVEL
        )
        return deflater.compress(data) + deflater.flush()

    def decompress(self, data: bytes) -> bytes:
        if len(data) < 6 or not data[1] & _FDICT:
            return zlib.decompress(data)
        named = int.from_bytes(data[2:6], "big")
        dictionary = DICTIONARIES.get(named)
        if dictionary is None:
            # As any blob zlib cannot read: the store's readers report it as corrupt.
            raise zlib.error(f"deflated against dictionary {named:#010x}, which is not known")
        # The deflate data alone, after the header: zlib's own reader would first
        # check the dictionary's Adler-32 (a fifth of a detail read); the header named
        # it, and the data's own checksum, the stream's last four bytes, is checked here.
        inflater = zlib.decompressobj(-zlib.MAX_WBITS, zdict=dictionary)
        plain = inflater.decompress(data[6:]) + inflater.flush()
        if not inflater.eof or inflater.unused_data != zlib.adler32(plain).to_bytes(4, "big"):
            raise zlib.error("incomplete, truncated or altered stream")
        return plain


COMPRESSOR_TOPIC: Final = get_topic(SmallBlobZlibCompressor)
_ZLIB = SmallBlobZlibCompressor()


def worth_deflating(data: bytes) -> bool:
    return len(data) > PLAIN_LIMIT


def is_compressed(data: bytes) -> bool:
    return data[:1] == bytes((ZLIB_FIRST_BYTE,))


def deflate(data: bytes) -> bytes:
    """A detail DTO deflated against the current dictionary."""
    deflater = _PRIMED.copy()
    return deflater.compress(data) + deflater.flush()


def inflate(data: bytes) -> bytes:
    """``data`` inflated, or as it is when it was stored before compression."""
    return _ZLIB.decompress(data) if is_compressed(data) else data
