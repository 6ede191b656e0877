"""Stable salted pseudonyms for user names (personal data from sacct).

``user-<10 hex>`` = HMAC-SHA256(salt, name): the same user gets the same pseudonym in every
table and every run of the pipeline as long as the salt is the same, and the name cannot be
recovered without the salt. The salt is local configuration: read from ``HPCVAR_SALT`` if set,
else from a salt file (created with 32 random bytes on first use, mode 0600). It is never
written into the dataset or a report.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

import pandas as pd

DEFAULT_SALT_FILE = Path(".hpcvar-salt")

#: What :class:`Pseudonymiser` produces; names of this shape are not pseudonymised twice.
PSEUDONYM = re.compile(r"user-[0-9a-f]{10}")


def load_salt(salt_file: str | Path | None = None) -> bytes:
    env = os.environ.get("HPCVAR_SALT")
    if env:
        return env.encode()
    path = Path(salt_file) if salt_file else DEFAULT_SALT_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    return path.read_text().strip().encode()


class Pseudonymiser:
    def __init__(self, salt: bytes | None, enabled: bool = True):
        if enabled and not salt:
            raise ValueError("anonymisation needs a non-empty salt")
        self.salt, self.enabled = salt, enabled
        self._cache: dict[str, str] = {}

    def __call__(self, name: str | None) -> str | None:
        if name is None or (isinstance(name, float) and pd.isna(name)) or name == "":
            return name
        if not self.enabled:
            return name
        if name not in self._cache:
            digest = hmac.new(self.salt, name.encode(), hashlib.sha256).hexdigest()
            self._cache[name] = f"user-{digest[:10]}"
        return self._cache[name]

    def ensure(self, name: str | None) -> str | None:
        """``name`` as a pseudonym: unchanged when it already is one (a dataset collated with
        anonymisation on), pseudonymised otherwise (one collated with ``--no-anonymise``)."""
        if isinstance(name, str) and PSEUDONYM.fullmatch(name):
            return name
        return self(name)

    def series(self, s: pd.Series) -> pd.Series:
        return s.map(self)
