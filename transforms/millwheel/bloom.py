"""A small Bloom filter over bytes, stored as bytes so it fits in Beam state.

MillWheel checks every incoming record id against a Bloom filter before
touching the backing store: "not in the filter" proves the record is new, so
only possible duplicates pay for an exact lookup. This filter is that fast
path. It never forgets (no deletion); owners that expire ids rebuild it from
the ids they keep.

Hashing is blake2b, so a filter built in one process gives the same answers
in another (Python's ``hash`` is salted per process and would not).
"""

from __future__ import annotations

import hashlib
import math


class BloomFilter:
    """A set of byte strings with false positives and no false negatives.

    ``num_bits`` and ``num_hashes`` fix the layout; ``bits`` restores a filter
    saved with ``to_bytes``. Two filters agree only if built with the same
    layout.
    """

    def __init__(self, num_bits: int, num_hashes: int, bits: bytes | None = None):
        if num_bits <= 0 or num_hashes <= 0:
            raise ValueError(
                f"num_bits and num_hashes must be positive, got {num_bits}, "
                f"{num_hashes}"
            )
        size = (num_bits + 7) // 8
        if bits is not None and len(bits) != size:
            raise ValueError(
                f"{len(bits)} bytes do not hold a {num_bits}-bit filter ({size} bytes)"
            )
        self.num_bits = num_bits
        self.num_hashes = num_hashes
        self._bits = bytearray(bits) if bits is not None else bytearray(size)

    @classmethod
    def for_capacity(cls, capacity: int, false_positive_rate: float) -> BloomFilter:
        """A filter sized to hold ``capacity`` items at ``false_positive_rate``.

        Uses the textbook optimum m = -n ln p / (ln 2)^2 bits and
        k = (m / n) ln 2 hashes. Past ``capacity`` the filter still works; its
        false-positive rate just rises.
        """
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        if not 0.0 < false_positive_rate < 1.0:
            raise ValueError(
                f"false_positive_rate must be in (0, 1), got {false_positive_rate}"
            )
        num_bits = math.ceil(
            -capacity * math.log(false_positive_rate) / math.log(2) ** 2
        )
        num_hashes = max(1, round(num_bits / capacity * math.log(2)))
        return cls(num_bits, num_hashes)

    def _positions(self, item: bytes) -> list[int]:
        # Double hashing (h1 + i * h2) from one 128-bit digest: k independent
        # enough positions for the price of one hash.
        digest = hashlib.blake2b(item, digest_size=16).digest()
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:], "little") | 1
        return [(h1 + i * h2) % self.num_bits for i in range(self.num_hashes)]

    def add(self, item: bytes) -> None:
        """Insert ``item``."""
        for pos in self._positions(item):
            self._bits[pos >> 3] |= 1 << (pos & 7)

    def __contains__(self, item: bytes) -> bool:
        """False means ``item`` was never added; True means it may have been."""
        return all(
            self._bits[pos >> 3] & (1 << (pos & 7)) for pos in self._positions(item)
        )

    def to_bytes(self) -> bytes:
        """The bit array, to store in state; restore with the same layout."""
        return bytes(self._bits)
