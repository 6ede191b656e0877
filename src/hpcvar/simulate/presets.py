"""Simulator presets: the size of the machine, the campaign and the planted effects.

Every knob is a field here, so scale is configuration: ``hpcvar simulate --preset paper
--set days=60`` changes a field without touching code.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class DatasetSpec:
    """One of "our" datasets (the paper's Table I)."""

    app: str            # amg | milc | minivite | umt
    nodes: int
    input: str
    steps: int
    step_s: float       # mean duration of a regular step (seconds)
    warmup_steps: int = 0
    warmup_s: float = 0.0
    mpi_fraction: float = 0.5
    #: Counters (Table II abbreviations) whose congestion component drives this dataset's deviation.
    drivers: tuple[str, ...] = ()
    sensitivity: float = 0.6      # step-time change per unit of planted congestion
    io_sensitivity: float = 0.0   # step-time change per unit of (lagged) I/O-router traffic
    runs_per_day: tuple[int, int] = (1, 2)
    only_once: bool = False       # a single run (the long MILC run of Figure 12)

    @property
    def name(self) -> str:
        suffix = "-long" if self.only_once else ""
        return f"{self.app}-{self.nodes}{suffix}"


TABLE_I = (
    DatasetSpec("amg", 128, "-P 32 16 16 -n 32 32 32 -problem 2", 20, 14.0, mpi_fraction=0.76,
                drivers=("PT_RB_STL_RQ", "PT_RB_2X_USG"), sensitivity=0.55),
    DatasetSpec("amg", 512, "-P 32 32 32 -n 32 32 32 -problem 2", 20, 18.0, mpi_fraction=0.82,
                drivers=("RT_RB_STL",), sensitivity=0.65),
    DatasetSpec("milc", 128, "n128_large.in", 80, 6.0, warmup_steps=20, warmup_s=1.5, mpi_fraction=0.89,
                drivers=("RT_RB_STL", "PT_CB_STL_RS"), sensitivity=0.6, io_sensitivity=0.35),
    DatasetSpec("milc", 512, "n512_large.in", 80, 7.0, warmup_steps=20, warmup_s=1.8, mpi_fraction=0.89,
                drivers=("RT_RB_STL", "PT_CB_STL_RS"), sensitivity=0.6, io_sensitivity=0.35),
    DatasetSpec("minivite", 128, "-f nlpkkt240.bin -t 1E-02 -i 6", 6, 55.0, mpi_fraction=0.98,
                drivers=("PT_FLIT_VC0", "RT_FLIT_TOT"), sensitivity=0.75),
    DatasetSpec("umt", 128, "custom_8k.cmg 4 2 4 4 4 0.04", 7, 45.0, mpi_fraction=0.30,
                drivers=("PT_RB_STL_RQ",), sensitivity=0.7),
)

LONG_MILC = DatasetSpec("milc", 128, "n128_long.in", 620, 6.0, warmup_steps=20, warmup_s=1.5,
                        mpi_fraction=0.89, drivers=("RT_RB_STL", "PT_CB_STL_RS"), sensitivity=0.6,
                        io_sensitivity=0.35, only_once=True)


@dataclass(frozen=True)
class Preset:
    name: str
    system: str = "dragonfly-sim"
    # Topology (Aries-like: groups of rows x cols routers, nodes per router).
    groups: int = 34
    rows: int = 6
    cols: int = 16
    nodes_per_router: int = 4
    io_groups: int = 5              # groups that host I/O (LNET) routers
    io_routers_per_group: int = 4
    # Dragonfly+ islands: consecutive groups per island (0: none, every group its own island);
    # the paper preset's 34 groups make five islands of 6 and one of 4.
    groups_per_island: int = 6
    # Campaign.
    start: str = "2018-12-01T00:00:00"
    days: int = 150
    datasets: tuple[DatasetSpec, ...] = TABLE_I
    extra_datasets: tuple[DatasetSpec, ...] = ()
    campaign_user: str = "varstudy"
    # Background workload.
    users: int = 120
    large_users: int = 30           # users whose jobs exceed the neighbourhood threshold
    culprits_per_dataset: tuple[int, int] = (2, 3)
    culprit_pool: int = 8           # culprits are drawn from this many large users
    culprit_coverage: tuple[float, float] = (0.12, 0.35)  # share of time a culprit has a large job up
    utilisation: float = 0.72
    # Noise: step-time log-noise and counter log-noise.
    noise: float = 0.03
    counter_noise: float = 0.06
    # LDMS: sample interval (s), monitored compute routers besides the I/O ones, margin around runs.
    ldms_interval: float = 5.0
    ldms_sys_routers: int = 48
    ldms_margin_s: float = 30.0
    ranks_per_node: int = 64
    # Share of runs profiled with mpiP (every k-th run of each dataset). A 512-node run's report
    # lists 32,768 ranks (~13 MB), so campaigns profile a sample of runs rather than all of them.
    mpip_fraction: float = 1.0
    # Collectives microbenchmark runs (simulate/microbench.py): nodes per run (0: none), runs per
    # day, timed iterations per operation; and the day (0-based) of a planted system upgrade that
    # changes the shape of their latency distribution but not its mean (-1: no upgrade).
    microbenchmark_nodes: int = 16
    microbenchmark_runs_per_day: int = 4
    microbenchmark_iterations: int = 200
    upgrade_day: int = -1

    @property
    def all_datasets(self) -> tuple[DatasetSpec, ...]:
        return self.datasets + self.extra_datasets

    @property
    def num_nodes(self) -> int:
        return self.groups * self.rows * self.cols * self.nodes_per_router


PRESETS = {
    # The main job's default: all six datasets on a smaller machine over two weeks (~130 runs).
    "demo": Preset("demo", groups=12, rows=4, cols=12, io_groups=2, io_routers_per_group=2, groups_per_island=3,
                   days=15, users=36, large_users=12, culprit_pool=4, ldms_interval=10.0, ldms_sys_routers=24,
                   mpip_fraction=0.34, upgrade_day=10),
    # The paper's scale: Cori-like machine, >= 1,200 runs, plus one 620-step MILC run.
    "paper": Preset("paper", extra_datasets=(LONG_MILC,), mpip_fraction=0.05, ldms_interval=10.0, upgrade_day=100,
                    ldms_sys_routers=24),
}


def get_preset(name: str, overrides: dict | None = None) -> Preset:
    """A preset by name, with ``overrides`` (field -> value, values coerced to the field's type)."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
    preset = PRESETS[name]
    if not overrides:
        return preset
    types = {f.name: type(getattr(preset, f.name)) for f in fields(preset)}
    bad = sorted(set(overrides) - set(types))
    if bad:
        raise KeyError(f"unknown preset fields {bad}; settable: {sorted(k for k, t in types.items() if t in (int, float, str))}")
    coerced = {k: types[k](v) for k, v in overrides.items()}
    return replace(preset, **coerced)


def upgrade_windows(name: str, overrides: dict | None = None) -> tuple[str, str] | None:
    """The date ranges before and after the preset's planted upgrade, as ``hpcvar compare
    --before/--after`` takes them (``START..END``, whole days, inclusive): from the campaign's first
    day to the day before ``upgrade_day``, and from that day to the last. None when the preset
    plants no upgrade inside the campaign or runs no microbenchmark (whose latencies it changes)."""
    import datetime as dt

    p = get_preset(name, overrides)
    if not 0 < p.upgrade_day < p.days or p.microbenchmark_nodes == 0:
        return None
    first = dt.date.fromisoformat(p.start[:10])
    upgrade = first + dt.timedelta(days=p.upgrade_day)
    last = first + dt.timedelta(days=p.days - 1)
    return f"{first}..{upgrade - dt.timedelta(days=1)}", f"{upgrade}..{last}"


__all__ = ["DatasetSpec", "Preset", "PRESETS", "TABLE_I", "LONG_MILC", "get_preset", "upgrade_windows"]
