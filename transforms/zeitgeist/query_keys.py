"""How a search query becomes the key Zeitgeist counts it under.

The key extractor is the consumer's choice in MillWheel: "Britney  Spears"
and "britney spears" are one trend for most uses, but not for all.
"""

import re
import unicodedata
from collections.abc import Callable

_SPACES = re.compile(r"\s+")


def exact(query: str) -> str:
    return query


def trim(query: str) -> str:
    """Leading and trailing whitespace removed, inner runs collapsed."""
    return _SPACES.sub(" ", query).strip()


def fold(query: str) -> str:
    """`trim`, then Unicode NFKC and case folding: the default."""
    return trim(unicodedata.normalize("NFKC", query)).casefold()


NORMALIZERS: dict[str, Callable[[str], str]] = {
    "exact": exact,
    "trim": trim,
    "fold": fold,
}


def normalizer(name: str) -> Callable[[str], str]:
    """The normaliser called `name`, with a clear error for unknown names."""
    try:
        return NORMALIZERS[name]
    except KeyError:
        choices = ", ".join(NORMALIZERS)
        raise ValueError(
            f"unknown query normalization {name!r}; expected one of: {choices}"
        ) from None
