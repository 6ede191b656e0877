"""The one error type every reader raises for bad input.

A ``ParseError`` always names the file and, where it makes sense, the 1-based line, and says
what was expected, so a user can open the file at that line and see the problem.
"""

from __future__ import annotations

from pathlib import Path


class ParseError(ValueError):
    """Bad input in a raw file: truncated, wrong format, malformed row, missing field."""

    def __init__(self, path: str | Path, message: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")

    def as_dict(self) -> dict:
        return {"file": self.path, "line": self.line, "error": self.message}


class TruncatedOutput(ParseError):
    """An application output that ends mid-run (the job was killed mid-step, the node died): the
    reason, and the steps the application completed before it (``completed``: one dict per step
    with ``step``, ``start``, ``end``, ``duration_s``, ``reported_s``), which the quarantine keeps."""

    def __init__(self, path: str | Path, message: str, line: int | None = None,
                 completed: list[dict] | None = None):
        super().__init__(path, message, line)
        self.completed = completed or []

    def as_dict(self) -> dict:
        return {**super().as_dict(), "completed_steps": self.completed}
