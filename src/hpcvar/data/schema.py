"""The tidy dataset's schema: tables, columns, types, keys, and what each column means.

This module is the single definition; ``docs/dataset.md`` is generated from it
(``hpcvar schema --markdown``) and :mod:`hpcvar.data.dataset` validates every table against it
before anything is written.

All times are UTC. Every table is keyed by ``run_id`` (plus its own key columns), so tables
join like LLNL Thicket's profile key: one row of ``runs`` per run, many rows elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    doc: str
    nullable: bool = True


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name, type_, doc, nullable=True):
    return Column(name, type_, doc, nullable)


_IMPORTED = " Null for runs imported from tables (hpcvar import-neighbourhood)."

RUNS = Table(
    "runs",
    "One row per run of one of our datasets (one job).",
    ("run_id",),
    (
        _c("run_id", pa.string(), "Stable run identifier: `<system>-<job id>`.", False),
        _c("system", pa.string(), "System name from the campaign's system.yaml.", False),
        _c("app", pa.string(), "Application: amg, milc, minivite, umt, amgproxy (hpcvar's AMG proxy), or a microbenchmark name.", False),
        _c("dataset", pa.string(), "Dataset = app + node count + input, e.g. `milc-128`.", False),
        _c("input", pa.string(), "Application input (command-line parameters or input deck)."),
        _c("num_nodes", pa.int32(), "Nodes allocated to the run. Null for runs imported from tables without a node "
                                "count (hpcvar import-neighbourhood)."),
        _c("job_id", pa.string(), "Slurm job id. Null for runs imported from tables without one (hpcvar "
                                 "import-neighbourhood)."),
        _c("user", pa.string(), "Submitting user, pseudonymised (salted HMAC) unless anonymisation is off."),
        _c("submit", TS, "Job submit time (sacct Submit)."),
        _c("start", TS, "Job start time (sacct Start).", False),
        _c("end", TS, "Job end time (sacct End).", False),
        _c("total_time_s", pa.float64(), "Sum of per-step durations (the paper's run time t_r). Microbenchmarks: the "
                                          "sum of their timed operations, each the slowest rank's (collectives, "
                                          "over-time phases, aggressor iterations), or the job's wall time when "
                                          "they time none back to back (Confidence minima).", False),
        _c("elapsed_s", pa.float64(), "Wall time of the whole job from sacct Elapsed."),
        _c("num_steps", pa.int32(), "Number of time steps recorded." + _IMPORTED),
        _c("state", pa.string(), "Slurm state of the job (COMPLETED, FAILED, TIMEOUT, CANCELLED...)." + _IMPORTED),
        _c("node_list", pa.list_(pa.string()), "Expanded list of the job's nodes." + _IMPORTED),
        _c("num_routers", pa.int32(), "Distinct routers the job's nodes attach to (NUM_ROUTERS)." + _IMPORTED),
        _c("num_groups", pa.int32(), "Distinct dragonfly groups of the job's nodes (NUM_GROUPS)." + _IMPORTED),
        _c("locality", pa.string(), "Placement class: single-router, single-group, min-groups, fragmented."
                                    + _IMPORTED),
        _c("locality_dfplus", pa.string(), "Dragonfly+ locality class: same-group, same-island (several groups of one "
                                           "island) or different-islands; without islands in the topology every group "
                                           "is its own island, so same-island cannot occur. Null only in parts "
                                           "collated before the column existed."),
        _c("bg_traffic", pa.float64(), "Background traffic estimate b = (N_c/N_t)(N'_c/N_a)100 in [0, 100] at the "
                                       "job's start (Salimi Beni 2022; hpcvar.system.background); null without sacct "
                                       "(ReFrame's local scheduler) and in parts collated before the column existed."),
        _c("bg_nodes_alloc", pa.int32(), "N_a: nodes of all other jobs running at the job's start, with "
                                         "multiplicity (a node shared by two jobs counts twice); null without sacct."),
        _c("bg_nodes_comm", pa.int32(), "N'_c: nodes of those jobs that communicate (run on >= 2 nodes), with "
                                        "multiplicity; null without sacct."),
        _c("bg_nodes_comm_unique", pa.int32(), "N_c: distinct nodes of the communicating jobs; null without sacct."),
        _c("system_nodes", pa.int32(), "N_t: compute nodes of the system (topology nodes with role compute); "
                                       "null only in parts collated before the column existed."),
        _c("software", pa.string(), "Software provenance: source version or build spec."),
        _c("container", pa.string(), "The container image the run ran in, as NAME@sha256:DIGEST (the sha256 of "
                                     "the image file or directory that ran), else null (bare metal)."),
        _c("raw_dir", pa.string(), "Run directory the row was collated from, relative to the raw campaign dir."),
    ),
)

STEPS = Table(
    "steps",
    "One row per run and time step (loop iteration) of the application.",
    ("run_id", "step"),
    (
        _c("run_id", pa.string(), "Run identifier (see runs).", False),
        _c("step", pa.int32(), "1-based step index.", False),
        _c("start", TS, "Step start (from the timestamped application output)."),
        _c("end", TS, "Step end."),
        _c("duration_s", pa.float64(), "Step duration in seconds: end - start of the timestamped output, "
                                         "else the application's own figure.", False),
        _c("reported_s", pa.float64(), "The application's own printed time for the step (its timer: AMG's "
                                         "solve time, MILC's trajectory time, ...); null where it prints none."),
    ),
)

STEP_COUNTERS = Table(
    "step_counters",
    "Change of each network counter over each step, summed over the routers serving the job's nodes.",
    ("run_id", "step", "counter"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("step", pa.int32(), "1-based step index.", False),
        _c("counter", pa.string(), "Table II abbreviation, e.g. RT_RB_STL, PT_FLIT_TOT (derived ones included); a "
                                   "node sampler's counter (net_tx_bytes, ...); or a link counter of a router "
                                   "that is not Aries (GL_QUEUED_US, ...: docs/counters.md).", False),
        _c("value", pa.float64(), "Counter change over the step.", False),
    ),
)

SYSTEM_COUNTERS = Table(
    "system_counters",
    "LDMS system-wide counters per run and step, averaged per router over two router sets: `io` "
    "(routers serving I/O nodes) and `sys` (routers with none of the job's nodes).",
    ("run_id", "step", "scope", "counter"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("step", pa.int32(), "1-based step index.", False),
        _c("scope", pa.string(), "`io` or `sys`.", False),
        _c("counter", pa.string(), "Table II abbreviation, or a link counter (docs/counters.md).", False),
        _c("value", pa.float64(), "Mean change per router over the step's window.", False),
        _c("num_routers", pa.int32(), "Routers of the scope that reported in the window.", False),
    ),
)

MPI_PROFILE = Table(
    "mpi_profile",
    "mpiP profile per run: one row per MPI routine, with the run's application and MPI time.",
    ("run_id", "routine"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("routine", pa.string(), "MPI routine as mpiP names it (Allreduce, Waitall, ...).", False),
        _c("time_s", pa.float64(), "Time in the routine, summed over ranks (mpiP aggregate).", False),
        _c("calls", pa.int64(), "Number of calls summed over ranks, when mpiP reports it."),
        _c("mpi_pct", pa.float64(), "Share of MPI time in this routine (%)."),
        _c("app_time_s", pa.float64(), "Application time summed over ranks (mpiP `*` AppTime).", False),
        _c("mpi_time_s", pa.float64(), "MPI time summed over ranks (mpiP `*` MPITime).", False),
        _c("ntasks", pa.int32(), "MPI tasks in the profile.", False),
    ),
)

NEIGHBOURHOOD = Table(
    "neighbourhood",
    "Every other job whose execution overlapped a run (from sacct of all users).",
    ("run_id", "job_id", "user"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("job_id", pa.string(), "The other job's Slurm id; `*` in rows imported from a table of users and node "
                                  "counts (hpcvar import-neighbourhood): all the user's jobs alongside the run, "
                                  "their nodes summed.", False),
        _c("user", pa.string(), "The other job's user, pseudonymised unless anonymisation is off.", False),
        _c("num_nodes", pa.int32(), "The other job's node count.", False),
        _c("overlap_s", pa.float64(), "Seconds both jobs were running." + _IMPORTED),
        _c("shared_groups", pa.int32(), "Dragonfly groups holding nodes of both jobs." + _IMPORTED),
        _c("shared_routers", pa.int32(), "Routers serving nodes of both jobs." + _IMPORTED),
        _c("start", TS, "The other job's start (sacct Start); null only in parts collated before the column "
                        "existed."),
        _c("end", TS, "The other job's end (sacct End); null while it was still running when sacct was asked, "
                      "and in parts collated before the column existed."),
    ),
)

LATENCY = Table(
    "latency",
    "Every timed operation of the MPI microbenchmarks (reframe_tests/microbenchmarks): the raw "
    "samples latency distributions and regression checks are computed from.",
    ("run_id", "benchmark", "operation", "size_bytes", "pair", "cycle", "iteration"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("benchmark", pa.string(), "`collectives`, `overtime`, `confidence` or `aggressor`.", False),
        _c("operation", pa.string(), "bcast, reduce, alltoall, allreduce (collectives); latency, bandwidth, "
                                     "allreduce (overtime phases); pairwise_min (confidence); periodic-allreduce, "
                                     "uniform-random (aggressor).", False),
        _c("size_bytes", pa.int64(), "Message size in bytes (1 for confidence).", False),
        _c("pair", pa.string(), "`<rank a>-<rank b>` for confidence pairs; empty otherwise.", False),
        _c("cycle", pa.int32(), "Overtime/confidence cycle (0 for collectives).", False),
        _c("iteration", pa.int32(), "0-based timed iteration within the cycle (0 for a pair's cycle minimum).",
           False),
        _c("value_us", pa.float64(), "The slowest rank's time for the operation (collectives, overtime, the "
                                     "aggressor's communication phase) or the pair's minimum pairwise latency in "
                                     "the cycle (confidence), microseconds.", False),
        _c("start_epoch_s", pa.float64(), "When the operation started (seconds since 1970, UTC), for benchmarks "
                                          "that record it (aggressor); null otherwise."),
    ),
)

LATENCY_HISTOGRAMS = Table(
    "latency_histograms",
    "Confidence's log-binned histograms (bin widths S, e^{S*i} - 1): pairwise and one-sided "
    "latencies per rank pair, per-cycle minima, and the timer-cost calibration.",
    ("run_id", "kind", "pair", "bin"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("kind", pa.string(), "`timer`, `onesided`, `pairwise` or `minima`.", False),
        _c("pair", pa.string(), "`<rank a>-<rank b>`; the rank for the timer histogram.", False),
        _c("bin", pa.int32(), "Bin index.", False),
        _c("lower_us", pa.float64(), "Bin lower edge, microseconds.", False),
        _c("upper_us", pa.float64(), "Bin upper edge (inf for the last bin), microseconds.", False),
        _c("count", pa.int64(), "Samples in the bin.", False),
    ),
)

RUN_COUNTERS = Table(
    "run_counters",
    "Counters over the whole run, for runs without time steps (the microbenchmarks): `job` from the "
    "node samplers of the run's nodes (`hpcvar sample`, summed over nodes and devices, loopback left "
    "out), `io` and `sys` from LDMS as in `system_counters`.",
    ("run_id", "scope", "counter"),
    (
        _c("run_id", pa.string(), "Run identifier.", False),
        _c("scope", pa.string(), "`job` (node samplers, and link counters of the job's routers), `io` or `sys` "
                                 "(LDMS).", False),
        _c("counter", pa.string(), "`<source>.<counter>` for `job` (e.g. `net.tx_bytes`, "
                                   "`infiniband.port_xmit_wait`); the Table II abbreviation for `io`/`sys`.", False),
        _c("value", pa.float64(), "Change over the window: summed over nodes (`job`), mean per router (`io`, "
                                  "`sys`).", False),
        _c("seconds", pa.float64(), "Length of the window: the span every node's samples cover (`job`), the job "
                                    "(`io`, `sys`).", False),
        _c("sources", pa.int32(), "Nodes (`job`) or routers (`io`, `sys`) that reported.", False),
    ),
)

TABLES: dict[str, Table] = {t.name: t for t in (RUNS, STEPS, STEP_COUNTERS, SYSTEM_COUNTERS, MPI_PROFILE, NEIGHBOURHOOD,
                                                LATENCY, LATENCY_HISTOGRAMS, RUN_COUNTERS)}


class SchemaError(ValueError):
    """A table does not match its schema (missing column, wrong type, null key, duplicate key)."""


def conform(table: Table, df: pd.DataFrame, origin: str = "") -> pa.Table:
    """Check ``df`` against ``table``'s schema and return it as an Arrow table in schema order.

    Raises :class:`SchemaError` naming the table, the column and (for duplicates/nulls) a
    offending key, so the user knows exactly what was wrong.
    """
    where = f"{table.name}{f' from {origin}' if origin else ''}"
    missing = [c for c in table.column_names if c not in df.columns]
    required_missing = [c.name for c in table.columns if c.name in missing and not c.nullable]
    if required_missing:
        raise SchemaError(f"{where}: missing required columns {required_missing}")
    extra = sorted(set(df.columns) - set(table.column_names))
    if extra:
        raise SchemaError(f"{where}: unknown columns {extra} (schema: {table.column_names})")
    df = df.copy()
    for c in missing:
        df[c] = None
    for col in table.columns:
        if not col.nullable and df[col.name].isna().any():
            bad = df.loc[df[col.name].isna(), list(table.key)].head(1).to_dict("records")
            raise SchemaError(f"{where}: column {col.name!r} must not be null (first offending key: {bad})")
    dup = df.duplicated(list(table.key), keep=False)
    if dup.any():
        bad = df.loc[dup, list(table.key)].head(1).to_dict("records")
        raise SchemaError(f"{where}: duplicate key {list(table.key)} = {bad}")
    arrays = []
    for col in table.columns:
        try:
            arrays.append(_to_arrow(df[col.name], col.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise SchemaError(f"{where}: column {col.name!r}: {exc}") from exc
    return pa.Table.from_arrays(arrays, schema=table.arrow_schema)


def _to_arrow(values: pd.Series, type_: pa.DataType) -> pa.Array:
    if pa.types.is_timestamp(type_):
        # Naive values are taken as UTC; aware ones converted. Microsecond resolution by schema.
        ts = pd.to_datetime(values, utc=True)
        return pa.array(ts.dt.tz_convert(None).to_numpy(), type=pa.timestamp("us")).cast(type_)
    return pa.array(values, type=type_, from_pandas=True)


def markdown() -> str:
    """The schema as Markdown (the body of docs/dataset.md)."""
    out = ["# The tidy dataset", "",
           "Generated from `src/hpcvar/data/schema.py` by `hpcvar schema --markdown`; do not edit by hand.", "",
           "Stored as Parquet under `<dataset dir>/<table>/part-*.parquet` (one part per collation "
           "round, never rewritten). All times are UTC. Read a table with "
           "`hpcvar.data.dataset.Dataset(path).read('runs')` or `pandas.read_parquet('<dir>/runs')`.", ""]
    for t in TABLES.values():
        out += [f"## `{t.name}`", "", t.doc, "", f"Key: `{', '.join(t.key)}`", "",
                "| column | type | null | meaning |", "|---|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {'yes' if c.nullable else 'no'} | {c.doc} |" for c in t.columns]
        out.append("")
    return "\n".join(out)
