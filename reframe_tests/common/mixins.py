"""Behaviour every hpcvar ReFrame test shares, as mixins (the cscs-reframe-tests pattern).

* :class:`CampaignRun`: the loggable fields the campaign's perflogs carry (``dataset``,
  ``software``, ``container``), the fixed node count and tasks per node of a dataset
  (64 of 68 cores per node by default, leaving cores for system daemons, as the paper did).
* :class:`TimestampedOutput`: every line the job prints after set-up goes through moreutils
  ``ts '%.s'`` into ``app.out`` as it appears, so step boundaries get wall-clock times that line
  up with monitoring data (``hpcvar.parsers.apps`` reads the file).
* :class:`CounterSampler`: one ``hpcvar sample`` per node alongside the job step, stopped with
  SIGTERM after the run (``node-counters-<host>.csv``).

Tests select partitions by features (``+mpi``, ``+remote``, ``+apptainer``, ``+local``), never by
system name; see config/reframe/settings.py.
"""

import os
import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.typecheck as typ
from reframe.core.builtins import run_after, run_before, variable

from hpcvar.data.rawlayout import APP_OUTPUT, NODE_COUNTERS, NODE_COUNTERS_GLOB
from hpcvar.dev.testbed import node_local_reason

REPO = Path(__file__).resolve().parents[2]

#: The ``hpcvar`` command of the environment ReFrame runs in (the project's .venv), if present.
_HPCVAR = Path(sys.executable).with_name("hpcvar")
HPCVAR = str(_HPCVAR) if _HPCVAR.exists() else "hpcvar"


#: ``HPCVAR_RFM_SIZE``: ``full`` (Table I's inputs, the default), ``toy`` (every input shrunk to
#: seconds of work on 2 ranks per node and, unless ``HPCVAR_RFM_NODES`` says otherwise, one node;
#: the applications may then also run on ``+local`` partitions: this machine, CI) or ``small``
#: (as toy, with larger inputs for the codes whose toy steps are much shorter than a second on
#: 2 nodes of the testbed, so that the links' share of a step shows; each test's ``sized`` says
#: what changes).
SIZES = ("full", "small", "toy")


def run_size() -> str:
    size = os.environ.get("HPCVAR_RFM_SIZE", "full").strip() or "full"
    if size not in SIZES:
        raise ValueError(f"HPCVAR_RFM_SIZE={size!r}: expected one of {', '.join(SIZES)}")
    return size


SIZE = run_size()
#: Shrunk inputs (``toy`` or ``small``): a few ranks, and ``+local`` partitions allowed.
TOY = SIZE != "full"


def sized(full, toy, small=None):
    """The default of a test's input variable for the run size (``-S`` still overrides it):
    ``full`` normally, ``toy`` under ``HPCVAR_RFM_SIZE=toy``, and under ``small`` the ``small``
    value (``toy``'s when a test gives none: its toy input is kept)."""
    if SIZE == "full":
        return full
    return small if SIZE == "small" and small is not None else toy


def node_counts(app: str, default: list[int]) -> list[int]:
    """The node counts a test is parameterised on: Table I's (one node when toy-sized), or
    ``HPCVAR_RFM_NODES``.

    ReFrame's ``-S`` sets variables, not parameters, so the list is read when the test file is
    loaded: ``HPCVAR_RFM_NODES=4,8`` (every app) or ``HPCVAR_RFM_NODES=amg:4,8;milc:2``.
    """
    spec = os.environ.get("HPCVAR_RFM_NODES", "").strip()
    default = sized(default, [1])
    if not spec:
        return default
    if ":" not in spec:
        return [int(n) for n in spec.split(",")]
    for item in spec.split(";"):
        name, _, counts = item.partition(":")
        if name.strip() == app:
            return [int(n) for n in counts.split(",")]
    return default


class CampaignRun(rfm.RegressionTestPlugin):
    #: The dataset this run belongs to (``<app>-<nodes>``, as in the campaign's dataset table).
    dataset = variable(str, value="", loggable=True)
    #: Application name and version (and the source commit when built from git).
    software = variable(str, value="", loggable=True)
    #: Container image and its sha256 digest, empty when run bare-metal.
    container = variable(str, value="", loggable=True)
    #: MPI ranks per node; 64 of KNL's 68 cores by default, 2 when toy-sized (-S tasks_per_node=N).
    tasks_per_node = variable(int, value=sized(64, 2))
    #: Slurm/launcher options added to the job (e.g. -S extra_job_options=--switches=1).
    extra_job_options = variable(typ.List[str], value=[])

    @run_after("init")
    def _set_dataset(self):
        if not self.dataset and hasattr(self, "app_name") and hasattr(self, "num_nodes"):
            self.dataset = f"{self.app_name}-{self.num_nodes}"

    @run_after("setup")
    def _set_tasks(self):
        if hasattr(self, "num_nodes"):
            self.num_tasks_per_node = self.tasks_per_node
            self.num_tasks = self.num_nodes * self.tasks_per_node
        self.job.options += self.extra_job_options

    @run_after("setup")
    def _nodes_see_the_stage(self):
        # Refused before the job is submitted: under /tmp, the testbed's jobs would start in
        # their node's own /tmp, where slurmstepd only logs "couldn't chdir".
        if "testbed" in self.current_partition.features:
            reason = node_local_reason(self.stagedir)
            if reason:
                raise OSError(f"stage directory {self.stagedir}: {reason} (set HPCVAR_RFM_PREFIX, or run from a "
                              "checkout outside /tmp)")


class TimestampedOutput(rfm.RegressionTestPlugin):
    #: The timestamped copy of the job's standard output (what the parsers read).
    timed_output = variable(str, value=APP_OUTPUT)

    @run_before("run")
    def _timestamp_output(self):
        # Bash process substitution: stdout of everything after this line goes through `ts`
        # live, so the launch line itself stays untouched (container platforms rewrite it).
        self.prerun_cmds = [f"exec 3>&1 > >(ts '%.s' | tee {self.timed_output})", "HPCVAR_TS_PID=$!",
                            *self.prerun_cmds]
        self.postrun_cmds = [*self.postrun_cmds, "exec 1>&3 3>&-", "wait $HPCVAR_TS_PID"]
        self.keep_files += [self.timed_output]


#: The job step name of the node samplers.
SAMPLER_STEP = "hpcvar-sampler"


class CounterSampler(rfm.RegressionTestPlugin):
    #: typ.Bool, not bool: -S sample_counters=false must turn it off (ReFrame converts bool("false") to True)
    sample_counters = variable(typ.Bool, value=True)
    #: Seconds between samples (the sampler's overhead is measured in benchmarks/bench_sampler.py).
    sample_interval = variable(float, value=1.0)
    sample_sources = variable(str, value="net,infiniband,cxi,psi")
    hpcvar = variable(str, value=HPCVAR)

    @run_before("run")
    def _start_sampler(self):
        if not self.sample_counters:
            return
        cmd = (f"{self.hpcvar} sample --out '{NODE_COUNTERS}' "
               f"--interval {self.sample_interval} --sources {self.sample_sources}")
        stop = "kill -TERM $HPCVAR_SAMPLER_PID 2>/dev/null"
        if self.current_partition.scheduler.registered_name == "slurm":
            # One sampler per node, sharing the allocation with the job step: --ntasks too, or srun
            # takes the job's task count and starts several samplers per node on the same file.
            cmd = (f"srun --overlap --job-name={SAMPLER_STEP} --nodes=$SLURM_JOB_NUM_NODES "
                   f"--ntasks=$SLURM_JOB_NUM_NODES --ntasks-per-node=1 {cmd}")
            # srun kills its tasks when it gets SIGTERM itself: the samplers get it from Slurm, so
            # they take a last sample and write their end line.
            stop = (f"scancel --signal=TERM $(squeue -h -s -j $SLURM_JOB_ID -o '%i %j' | "
                    f"awk '$2 == \"{SAMPLER_STEP}\" {{print $1}}') 2>/dev/null")
        nodes = "$SLURM_JOB_NUM_NODES" if self.current_partition.scheduler.registered_name == "slurm" else "1"
        # The job starts once every sampler has written its first sample (at most 30 s, and not
        # once the samplers are gone), so the samples cover the first step too.
        wait = (f"for i in $(seq 150); do [ $(ls {NODE_COUNTERS_GLOB} 2>/dev/null | wc -l) -ge {nodes} ] && break; "
                "kill -0 $HPCVAR_SAMPLER_PID 2>/dev/null || break; sleep 0.2; done")
        self.prerun_cmds += [f"{cmd} &", "HPCVAR_SAMPLER_PID=$!", wait]
        self.keep_files += [NODE_COUNTERS_GLOB]
        self.postrun_cmds += [f"{stop}; wait $HPCVAR_SAMPLER_PID || true"]
