"""File names made from data: test, variable, benchmark and routing names -> safe path parts."""

from __future__ import annotations

import re


def slug(*parts, sep: str = "-", keep: str = r"\w.-", max_len: int | None = None, empty: str = "") -> str:
    """``parts`` joined by ``_``, each run of characters outside ``keep`` (the body of a regex
    character class) replaced by ``sep``, ``sep`` stripped from both ends, cut to ``max_len``;
    ``empty`` when nothing is left.

    The defaults name the distributions analysis's figures, which the report finds again by
    rebuilding the same names: ``slug("Allreduce", "max us", 8) == "Allreduce_max-us_8"``.
    """
    text = re.sub(f"[^{keep}]+", sep, "_".join(str(p) for p in parts)).strip(sep)
    if max_len is not None:
        text = text[:max_len]
    return text or empty
