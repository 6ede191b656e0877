"""What each analysis writes to ``summary.json`` and the report reads back: one typed result per
analysis, the only place where the keys of ``summary.json`` are named.

An analysis builds its result (:class:`Result` subclass) and calls :meth:`Result.write`; the
report calls :meth:`Result.read` on the analysis's output directory and uses attributes, so a
renamed key fails where it is defined, and a ``summary.json`` written by another version of
hpcvar is refused with the file's name instead of being half read. Figures are found through the
result too (``result.path(...)``), never by rebuilding file names.

Results keep the analyses' JSON as it was: fields are declared in the order the analyses write
them, keys an analysis leaves out are left out again (``exclude_unset``), and NaN is written as
null (:func:`clean`).
"""

from __future__ import annotations

import json
import math
import typing
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from hpcvar.util.fileio import atomic_write_json

SUMMARY = "summary.json"


#: Where an analysis run on one dataset (``--only``) writes its result, under its output directory.
PARTS = "parts"


class ResultError(ValueError):
    """A ``summary.json`` that is not what this version of the analysis writes."""


def clean(obj):
    """JSON-safe: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(obj) else float(obj)
    return obj


class Record(BaseModel):
    """A part of a result (one dataset, one table row): no unknown keys."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


class Result(Record):
    """One analysis's ``summary.json``."""

    #: The analysis: its command, and its output directory's name under the workflow's
    #: ``results/analyses/`` (a class attribute: ``analysis`` is a key of several summaries).
    NAME: typing.ClassVar[str] = ""
    #: Fields drawn over every dataset (neighbourhood's Table III): one dataset's part leaves them
    #: empty, and the analysis's ``assemble(result, out_dir)`` draws them over all the parts.
    ACROSS_DATASETS: typing.ClassVar[tuple[str, ...]] = ()
    _dir: Path | None = PrivateAttr(default=None)

    def model_post_init(self, context) -> None:
        # The analysis's name is written even where the result was built without it (it is the
        # field's default): summary.json says whose it is.
        if "analysis" in type(self).model_fields:
            self.__pydantic_fields_set__.add("analysis")

    @classmethod
    def build(cls, summary: dict):
        """The result from the dict an analysis assembled (numpy values and NaN allowed)."""
        return cls.model_validate(clean(summary))

    def dump(self) -> dict:
        return self.model_dump(mode="json", exclude_unset=True)

    def write(self, out_dir: str | Path, part: str | None = None) -> Path:
        """``out_dir/summary.json``; with ``part`` (a dataset analysed alone, one job of the
        workflow's fan-out), ``out_dir/parts/<part>.json``, which :mod:`hpcvar.analyses.assemble`
        merges into the summary."""
        out_dir = Path(out_dir)
        path = out_dir / PARTS / f"{part}.json" if part else out_dir / SUMMARY
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, self.dump())
        self._dir = out_dir
        return path

    @classmethod
    def read(cls, out_dir: str | Path):
        """The result in ``out_dir/summary.json``; None when there is none (the analysis did not
        run); :class:`ResultError` naming the file when it is not this analysis's result."""
        path = Path(out_dir) / SUMMARY
        if not path.is_file():
            return None
        try:
            result = cls.model_validate(json.loads(path.read_text()))
        except json.JSONDecodeError as exc:
            raise ResultError(f"{path}: line {exc.lineno}: not JSON ({exc.msg}); run `hpcvar {cls.NAME}` "
                              "again") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise ResultError(f"{path}: not a {cls.NAME} result of this hpcvar version ({where}: {first['msg']}; "
                              f"{exc.error_count()} problem(s)); run `hpcvar {cls.NAME}` again") from None
        result._dir = Path(out_dir)
        return result

    def path(self, relative: str | Path) -> Path:
        """A file the analysis wrote, from its path relative to the output directory."""
        if self._dir is None:
            raise ValueError(f"{type(self).__name__} was neither read nor written: no output directory")
        return self._dir / relative
