"""Per-node counter samples written by ``hpcvar sample`` (one file per node), and per-step deltas.

Format, version 1 (long: one row per counter and sample)::

    # hpcvar node counters v1
    # hostname: nid001234
    # hpcvar_version: 0.1.0
    # interval_s: 1
    # start_epoch: 1712345678.000123
    # sysfs_root: /sys
    # sources_present: net,cxi
    # sources_absent: infiniband
    # source net: present: devices=hsn0,lo counters=16
    # source infiniband: absent: no /sys/class/infiniband
    # source cxi: present: devices=cxi0 counters=24
    # units: ...
    epoch,source,device,counter,value
    1712345678.000301,net,hsn0,rx_bytes,123456789
    1712345678.000123,cxi,cxi0,hni_rx_paused_0,4242
    ...
    # end: epoch=1712345999.5 samples=322 rows=12880 reason=SIGTERM cpu_s=0.41 read_errors=0

``epoch`` is the sample's wall-clock time (for ``cxi`` rows the NIC's own timestamp from the
telemetry file); ``value`` is the counter's *cumulative* value (an unsigned integer), not a
change. Comment lines before the header are ``# key: value`` metadata. The ``# end:`` trailer is
written when the sampler stops cleanly (signal or duration); a file without it was cut off (the
job was killed), which :func:`read` reports as ``complete = False``. A last line without its
newline is a line the sampler was writing when it died: :func:`read` drops it and says so
(``attrs["truncated"]``, and ``describe`` shows it), or raises with ``strict=True``; it is never
dropped silently. Any other malformed row is a :class:`ParseError` naming the line.

Long rather than wide, because rows stay self-describing when a device disappears mid-job or a
value cannot be read in one sample, and the ``cxi`` rows carry their own timestamps; the cost is
size (about 40 bytes per value: 16 counters at 1 s are ~2.3 MB per node-hour).

:func:`step_deltas` turns the samples of all nodes into per-step counter changes in the shape
``counters.csv`` v1 expects (:mod:`hpcvar.parsers.counters`), and :func:`write_step_counters`
writes them with that module's writer.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from hpcvar.parsers import counters, ldms
from hpcvar.parsers.errors import ParseError
from hpcvar.sampler.layout import COLUMNS, MAGIC, UNITS

__all__ = ["COLUMNS", "KIND", "MAGIC", "UNITS", "describe", "read", "sniff", "step_deltas",
           "write_step_counters"]

KIND = "node_counters"
_END = "# end:"
_KV = re.compile(r"(\w+)=(\S+)")
_ROW = re.compile(r"-?\d+(\.\d+)?,[^,]+,[^,]+,[^,]+,\d+")
#: InfiniBand data counters count 4-byte words: step deltas convert them to bytes.
IB_WORD_COUNTERS = ("port_xmit_data", "port_rcv_data")


def sniff(head: str, name: str) -> bool:
    return head.startswith(MAGIC)


def read(path: str | Path, strict: bool = False) -> pd.DataFrame:
    """The samples as a long table ``epoch, node, source, device, counter, value``.

    ``value`` is uint64, ``epoch`` float64; ``node`` is the file's ``hostname``. ``attrs`` holds
    ``meta`` (the ``# key: value`` lines), ``end`` (the trailer's fields, None without one),
    ``complete`` (trailer present) and ``truncated`` (``{"line", "text"}`` of a dropped partial
    last line, else None). ``strict=True`` makes a truncated last line a ParseError.
    """
    path = Path(path)
    data = path.read_bytes()
    if not data.startswith(MAGIC.encode()):
        raise ParseError(path, f"expected first line {MAGIC!r}", 1)
    truncated = None
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        line_no = data.count(b"\n", 0, cut) + 1
        text = data[cut:].decode("utf-8", errors="replace")
        if strict:
            raise ParseError(path, f"truncated last line (no newline at end of file): {text[:60]!r}", line_no)
        truncated = {"line": line_no, "text": text}
        data = data[:cut]
    lines = data.split(b"\n")[:-1]
    meta: dict[str, str] = {}
    header_idx = None
    for i, raw in enumerate(lines):
        if not raw.startswith(b"#"):
            header_idx = i
            break
        key, sep, value = raw[1:].decode("utf-8", errors="replace").strip().partition(":")
        if sep and i:
            meta[key.strip()] = value.strip()
    if header_idx is None:
        raise ParseError(path, f"no header row (expected {','.join(COLUMNS)!r})", len(lines) or 1)
    header = lines[header_idx].decode("utf-8", errors="replace").strip()
    if header != ",".join(COLUMNS):
        raise ParseError(path, f"expected header {','.join(COLUMNS)!r}, found {header[:80]!r}", header_idx + 1)
    end = None
    last = len(lines)
    if last > header_idx + 1 and lines[-1].startswith(_END.encode()):
        end = dict(_KV.findall(lines[-1].decode("utf-8", errors="replace")))
        last -= 1
    for i in range(header_idx + 1, last):
        if lines[i].startswith(b"#"):
            raise ParseError(path, "comment line inside the data (expected rows, '# end:' only last)", i + 1)
    frame = _parse_rows(path, lines, header_idx, last)
    frame.insert(1, "node", pd.array([meta.get("hostname", path.stem)] * len(frame), dtype="str"))
    frame.attrs.update(meta=meta, end=end, complete=end is not None, truncated=truncated)
    return frame


def _parse_rows(path: Path, lines: list[bytes], header_idx: int, last: int) -> pd.DataFrame:
    body = b"\n".join(lines[header_idx + 1:last]) + (b"\n" if last > header_idx + 1 else b"")
    types = {"epoch": pa.float64(), "source": pa.string(), "device": pa.string(), "counter": pa.string(),
             "value": pa.uint64()}
    if not body:
        return pa.table({n: pa.array([], t) for n, t in types.items()}).to_pandas()
    try:
        table = pacsv.read_csv(io.BytesIO(body), pacsv.ReadOptions(column_names=list(COLUMNS)),
                               pacsv.ParseOptions(ignore_empty_lines=False),
                               pacsv.ConvertOptions(column_types=types, null_values=[],
                                                    strings_can_be_null=False))
    except pa.ArrowInvalid as exc:
        for i in range(header_idx + 1, last):
            text = lines[i].decode("utf-8", errors="replace")
            if not _ROW.fullmatch(text) or int(text.rsplit(",", 1)[1]) >= 2**64:
                raise ParseError(path, f"expected a row 'epoch,source,device,counter,value' with a "
                                       f"non-negative integer value, found {text[:80]!r}", i + 1) from exc
        raise ParseError(path, f"unreadable rows: {exc}", header_idx + 2) from exc
    frame = table.to_pandas()
    if len(frame) and not np.isfinite(frame["epoch"].to_numpy()).all():
        row = int(np.flatnonzero(~np.isfinite(frame["epoch"].to_numpy()))[0])
        raise ParseError(path, "epoch must be a finite number", header_idx + 2 + row)
    return frame


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(float(epoch), tz=timezone.utc).isoformat()


def describe(path: str | Path) -> dict:
    frame = read(path)
    attrs = frame.attrs
    meta = attrs["meta"]
    figures: dict[str, object] = {
        "hostname": meta.get("hostname"),
        "interval_s": float(meta["interval_s"]) if "interval_s" in meta else None,
        "sources_present": meta.get("sources_present", ""),
        "sources_absent": meta.get("sources_absent", ""),
        "series": int(frame.groupby(["source", "device", "counter"]).ngroups) if len(frame) else 0,
        "samples": int(frame.loc[frame["source"] != "cxi", "epoch"].nunique()) if len(frame) else 0,
        "complete": attrs["complete"],
    }
    if attrs["end"]:
        figures["stopped_by"] = attrs["end"].get("reason")
        if "cpu_s" in attrs["end"] and "samples" in attrs["end"]:
            figures["cpu_ms_per_sample"] = round(1e3 * float(attrs["end"]["cpu_s"])
                                                 / max(int(attrs["end"]["samples"]), 1), 3)
    if attrs["truncated"]:
        figures["truncated_last_line"] = f"line {attrs['truncated']['line']} dropped (no newline: cut off)"
    span = [_iso(frame["epoch"].min()), _iso(frame["epoch"].max())] if len(frame) else None
    return {"kind": KIND, "format_version": "1", "records": int(len(frame)), "time_span": span,
            "figures": figures}


# ------------------------------------------------------------------------------ step deltas


def _column(source: str, counter: str) -> tuple[str, int]:
    """counters.csv column name and the factor to its unit (IB data words -> bytes)."""
    if source == "infiniband" and counter in IB_WORD_COUNTERS:
        return f"{source}.{counter}_bytes", 4
    return f"{source}.{counter}", 1


def step_deltas(samples: pd.DataFrame | Sequence[pd.DataFrame], steps: pd.DataFrame, *,
                counter_bits: int = 64, wrap_fraction: float = ldms.WRAP_FRACTION,
                exclude_devices: Sequence[str] = ("lo",), sources: Sequence[str] | None = None) -> pd.DataFrame:
    """Per-step counter changes, summed over nodes and devices.

    ``samples``: :func:`read` tables (one per node, or concatenated; ``node`` tells nodes
    apart). ``steps``: columns ``step``, ``start``, ``end`` in epoch seconds (the ``steps`` of
    :func:`hpcvar.parsers.apps.read` for ``ts '%.s'``-stamped output).

    Each series (node, source, device, counter) is made continuous first: a decrease is a wrap
    when the previous value lies in the top ``wrap_fraction`` of a ``counter_bits`` counter and a
    reset (counting from 0) otherwise, exactly as :func:`hpcvar.parsers.ldms.iter_deltas` decides
    (it reuses that function's delta rule); resets are listed in ``attrs["resets"]`` as
    :class:`hpcvar.parsers.ldms.Reset`. The cumulative count is then interpolated linearly at each
    step's start and end. Returns ``step`` plus one float column per ``<source>.<counter>``
    (InfiniBand ``port_*_data`` as ``..._data_bytes``, times 4); a step that a series' samples do
    not cover (starts before its first or ends after its last sample) is NaN in that column and
    listed in ``attrs["uncovered"]``. Devices in ``exclude_devices`` (loopback by default) and
    sources not in ``sources`` are left out.
    """
    frame = samples if isinstance(samples, pd.DataFrame) else pd.concat(list(samples), ignore_index=True)
    missing = {"step", "start", "end"} - set(steps.columns)
    if missing:
        raise ValueError(f"steps needs columns step, start, end; missing {sorted(missing)}")
    start = steps["start"].to_numpy(dtype=float)
    end = steps["end"].to_numpy(dtype=float)
    if not (np.isfinite(start).all() and np.isfinite(end).all()) or (end < start).any():
        raise ValueError("steps need finite start <= end epochs (timestamped application output)")
    if "node" not in frame.columns:
        frame = frame.assign(node="")
    keep = ~frame["device"].isin(list(exclude_devices))
    if sources is not None:
        keep &= frame["source"].isin(list(sources))
    frame = frame[keep]
    out: dict[str, np.ndarray] = {}
    resets: list[ldms.Reset] = []
    uncovered: list[dict] = []
    wraps = 0
    for (node, source, device, counter), series in frame.groupby(["node", "source", "device", "counter"],
                                                                 sort=True):
        series = series.sort_values("epoch", kind="stable").drop_duplicates("epoch", keep="last")
        t = series["epoch"].to_numpy(dtype=float)
        value = series["value"].to_numpy(dtype=np.uint64)
        delta, wrapped, reset = ldms.counter_delta(value[1:], value[:-1].copy(), counter_bits, wrap_fraction)
        wraps += int(wrapped.sum())
        for i in np.flatnonzero(reset):
            resets.append(ldms.Reset(str(node), float(t[i + 1]), float(t[i]), (f"{source}/{device}/{counter}",)))
        cumulative = np.concatenate([[0], np.cumsum(delta, dtype=np.uint64)]).astype(float)
        name, factor = _column(source, counter)
        change = (np.interp(end, t, cumulative) - np.interp(start, t, cumulative)) * factor
        outside = (start < t[0]) | (end > t[-1])
        change[outside] = np.nan
        if outside.any():
            uncovered.append({"node": node, "series": f"{source}/{device}/{counter}",
                              "steps": steps["step"].to_numpy()[outside].tolist()})
        out[name] = out[name] + change if name in out else change
    result = pd.DataFrame({"step": steps["step"].to_numpy(), **dict(sorted(out.items()))})
    result.attrs.update(resets=resets, uncovered=uncovered, wraps=wraps)
    return result


def write_step_counters(path: str | Path, deltas: pd.DataFrame, comment: str = "") -> None:
    """Write :func:`step_deltas` as ``counters.csv`` v1 (values rounded to whole counts)."""
    names = [c for c in deltas.columns if c != "step"]
    values = deltas[names].to_numpy(dtype=float)
    if not np.isfinite(values).all():
        bad = deltas.loc[~np.isfinite(values).all(axis=1), "step"].tolist()
        raise ValueError(f"steps {bad[:10]} are not covered by every node's samples (NaN): "
                         "counters.csv needs a value for every step")
    counters.write(path, deltas["step"].to_numpy(), {n: deltas[n].to_numpy() for n in names}, comment)
