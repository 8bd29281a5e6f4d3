"""Deflated stored bytes: event and snapshot state, and the detail view's rows (ADR-0020).

Every blob is a standard zlib stream, written by the library's own
``ZlibCompressor`` with a smaller hash table (below) and read by it unchanged;
the library's mapper hooks take the compressor by its topic. Blobs written
before compression are plain orjson, whose first byte is ``{`` (0x7B); a zlib
stream's first byte is 0x78 (deflate with the default 32 KiB window), so a
reader tells the two apart by that byte and old stores still read.
"""

from __future__ import annotations

import zlib
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


# The standard library's zlib, not zlib-ng: zlib-ng clears 192 KiB of tables per
# stream, which eats its gain on states of a few hundred bytes; it is faster on DTOs
# only, by about 2 % of a create (ADR-0041). Another deflater would change nothing
# for readers: any zlib stream with the default window starts with 0x78.
class SmallBlobZlibCompressor(ZlibCompressor):
    """The library's zlib compressor, tuned for small blobs; it inflates as the library does."""

    def compress(self, data: bytes) -> bytes:
        deflater = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, zlib.MAX_WBITS, MEM_LEVEL
        )
        return deflater.compress(data) + deflater.flush()


COMPRESSOR_TOPIC: Final = get_topic(SmallBlobZlibCompressor)
_ZLIB = SmallBlobZlibCompressor()


def worth_deflating(data: bytes) -> bool:
    return len(data) > PLAIN_LIMIT


def is_compressed(data: bytes) -> bool:
    return data[:1] == bytes((ZLIB_FIRST_BYTE,))


def deflate(data: bytes) -> bytes:
    return _ZLIB.compress(data)


def inflate(data: bytes) -> bytes:
    """``data`` inflated, or as it is when it was stored before compression."""
    return _ZLIB.decompress(data) if is_compressed(data) else data
