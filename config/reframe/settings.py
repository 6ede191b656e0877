"""ReFrame site configuration for hpcvar's suite (reframe_tests/).

Systems (pick one with ``--system``; the first whose ``hostnames`` match is the default):

* ``generic-slurm``: a template for a production Slurm cluster with Apptainer. Adapt it through
  environment variables rather than edits: ``HPCVAR_RFM_HOSTNAMES`` (regex of login nodes),
  ``HPCVAR_RFM_ACCESS`` (sbatch options, e.g. ``--partition=regular --account=m1234``),
  ``HPCVAR_RFM_CORES_PER_NODE`` (default 68, as Cori KNL) and ``HPCVAR_RFM_MAX_JOBS``.
  Features: ``mpi``, ``slurm``, ``remote`` and the container runtimes of ``HPCVAR_RFM_CONTAINERS``.
* ``local-slurm``: the single-node Slurm cluster that ``hpcvar dev slurm up`` starts on this
  machine (partition ``HPCVAR_RFM_LOCAL_PARTITION``, default ``debug``).
* ``testbed``: the multi-node cluster of ``hpcvar dev slurm up --nodes N --groups G`` (nodes in
  network namespaces, a dragonfly of shaped links): srun with PMIx, Open MPI over TCP on the data
  network. Feature ``testbed``.
* ``local``: this machine, no scheduler, ``mpirun`` (OpenMPI; oversubscribed, root allowed).
  Feature ``local``: the microbenchmarks run here for real; the applications (feature ``remote``)
  do not.

Container runs (``-S image=...``, reframe_tests/common/containers.py) need a partition with the
runtime's feature: ``charliecloud`` (``ch-run``; the dev clusters and ``local``: Debian's
charliecloud package) or ``apptainer``. ``generic-slurm`` has those of ``HPCVAR_RFM_CONTAINERS``
(default ``apptainer``; e.g. ``apptainer,charliecloud``). Under srun the image's Open MPI wires
up through Slurm's PMIx (``PMIX_MCA_gds=hash``: the image does not see the PMIx server's
shared-memory store, whose lock file would otherwise print an error per rank).

Everything ReFrame writes goes under ``HPCVAR_RFM_PREFIX`` (default ``<repo>/results/reframe``):
stage and output directories, perflogs (``perflogs/<system>/<partition>/<test>.log``, the
campaign's raw perflogs), JSON run reports, and the results database ``results.db`` that
``reframe --list-stored-sessions`` and ``--performance-compare`` read.
"""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PREFIX = os.environ.get("HPCVAR_RFM_PREFIX", str(REPO / "results" / "reframe"))


def _env(name, default):
    return os.environ.get(name, default)


def _logfile():
    # ReFrame opens its log before it creates any directory of its own.
    os.makedirs(PREFIX, exist_ok=True)
    return f"{PREFIX}/reframe.log"


# OpenMPI on a laptop-sized machine: allow root (containers, CI) and more ranks than cores.
OPENMPI_LOCAL = [
    ["OMPI_ALLOW_RUN_AS_ROOT", "1"],
    ["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"],
    ["OMPI_MCA_rmaps_base_oversubscribe", "1"],
    ["PRTE_MCA_rmaps_default_mapping_policy", ":oversubscribe"],
]

# The testbed's networks (src/hpcvar/dev/testbed.py): data 10.77.<group>.0/24, management 10.78.0.0/24.
TESTBED_MPI = [
    ["OMPI_MCA_pml", "ob1"],
    ["OMPI_MCA_btl", "tcp,self"],
    ["OMPI_MCA_btl_tcp_if_include", "10.77.0.0/16"],
    ["OMPI_MCA_oob_tcp_if_include", "10.78.0.0/24"],
    ["OMPI_MCA_hwloc_base_binding_policy", "none"],
    # Every node shares this host's two cores: waiting ranks yield them instead of spinning.
    ["OMPI_MCA_mpi_yield_when_idle", "1"],
    # A rank that dies (it did in MPI_Init until the testbed's PMIx fences were made barriers:
    # src/hpcvar/dev/slurm.py, MPI_CONF) leaves its peers waiting for it until the time limit:
    # end the whole step at once, so the test fails in seconds and says why.
    ["SLURM_KILL_BAD_EXIT", "1"],
]

#: Container platforms by the runtime feature a partition carries.
CONTAINER_PLATFORMS = {
    # Each rank's ch-run has a user namespace of its own: Open MPI's shared-memory single copy
    # (CMA) cannot cross them, and says so once per run unless told not to try.
    "charliecloud": {"type": "Charliecloud", "env_vars": [["PMIX_MCA_gds", "hash"],
                                                          ["OMPI_MCA_btl_vader_single_copy_mechanism", "none"]]},
    "apptainer": {"type": "Apptainer", "env_vars": [["PMIX_MCA_gds", "hash"]]},
}
SITE_CONTAINERS = [c.strip() for c in _env("HPCVAR_RFM_CONTAINERS", "apptainer").split(",") if c.strip()]


def _dev_cluster_partition(features: list[str], max_jobs: int, mpi_env: list) -> dict:
    """The partition of `hpcvar dev slurm up`'s clusters (single node or testbed)."""
    return {
        "name": "debug",
        "scheduler": "slurm",
        "launcher": "srun",
        "sched_options": {"use_nodes_option": True},
        "access": [f"--partition={_env('HPCVAR_RFM_LOCAL_PARTITION', 'debug')}"],
        "environs": ["gnu-openmpi"],
        "features": [*features, "charliecloud"],
        "container_platforms": [CONTAINER_PLATFORMS["charliecloud"]],
        "max_jobs": max_jobs,
        "processor": {"num_cpus": os.cpu_count()},
        "env_vars": [*OPENMPI_LOCAL, *mpi_env, ["SLURM_MPI_TYPE", "pmix"]],
        "time_limit": "10m",
    }


site_configuration = {
    "systems": [
        {
            "name": "generic-slurm",
            "descr": "Template: a Slurm cluster with Apptainer (adapt with HPCVAR_RFM_* variables)",
            "hostnames": [_env("HPCVAR_RFM_HOSTNAMES", r"^$(?!)")],
            "modules_system": "nomod",
            "prefix": PREFIX,
            "partitions": [
                {
                    "name": "compute",
                    "descr": "Compute nodes",
                    "scheduler": "slurm",
                    "launcher": "srun",
                    "sched_options": {"use_nodes_option": True},
                    "access": _env("HPCVAR_RFM_ACCESS", "").split(),
                    "environs": ["gnu-openmpi", "gnu-mpich"],
                    "features": ["mpi", "slurm", "remote", *SITE_CONTAINERS],
                    "container_platforms": [CONTAINER_PLATFORMS[c] for c in SITE_CONTAINERS],
                    "max_jobs": int(_env("HPCVAR_RFM_MAX_JOBS", "8")),
                    "processor": {"num_cpus": int(_env("HPCVAR_RFM_CORES_PER_NODE", "68"))},
                    "time_limit": "1h",
                }
            ],
        },
        {
            "name": "local-slurm",
            "descr": "The single-node Slurm cluster of `hpcvar dev slurm up` (CI)",
            "hostnames": [_env("HPCVAR_RFM_LOCAL_SLURM_HOSTNAMES", r"^$(?!)")],
            "modules_system": "nomod",
            "prefix": PREFIX,
            # Debian's OpenMPI wires up through Slurm's PMIx plugin.
            "partitions": [_dev_cluster_partition(["mpi", "slurm", "local"], 2, [])],
        },
        {
            "name": "testbed",
            "descr": "The multi-node cluster of `hpcvar dev slurm up --nodes N --groups G` (docs/testbed.md)",
            "hostnames": [_env("HPCVAR_RFM_TESTBED_HOSTNAMES", r"^$(?!)")],
            "modules_system": "nomod",
            "prefix": PREFIX,
            # Open MPI over TCP on the data network (the shaped dragonfly), its out-of-band
            # traffic and PMIx on the management network.
            "partitions": [_dev_cluster_partition(["mpi", "slurm", "local", "testbed"], 4, TESTBED_MPI)],
        },
        {
            "name": "local",
            "descr": "This machine: no scheduler, mpirun",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "prefix": PREFIX,
            "partitions": [
                {
                    "name": "default",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "environs": ["gnu-openmpi"],
                    "features": ["mpi", "local", "charliecloud"],
                    "container_platforms": [{"type": "Charliecloud"}],
                    "max_jobs": 1,
                    "processor": {"num_cpus": os.cpu_count()},
                    "env_vars": OPENMPI_LOCAL,
                }
            ],
        },
    ],
    "environments": [
        {"name": "gnu-openmpi", "cc": "mpicc", "cxx": "mpicxx", "ftn": "mpif90",
         "features": ["mpi", "openmpi"], "extras": {"mpi_family": "openmpi"}},
        {"name": "gnu-mpich", "cc": "mpicc", "cxx": "mpicxx", "ftn": "mpif90",
         "features": ["mpi", "mpich"], "extras": {"mpi_family": "mpich"}},
    ],
    "general": [
        {
            "check_search_path": [str(REPO / "reframe_tests")],
            "check_search_recursive": True,
            "report_file": f"{PREFIX}/reports/run-report-{{sessionid}}.json",
            "keep_stage_files": True,
        }
    ],
    # One results database for all campaign rounds (each round has its own HPCVAR_RFM_PREFIX).
    "storage": [{"enable": True, "sqlite_db_file": os.environ.get("HPCVAR_RFM_DB", f"{PREFIX}/results.db")}],
    "logging": [
        {
            "level": "debug",
            "handlers": [
                {"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"},
                {"type": "file", "name": _logfile(), "level": "debug",
                 "format": "[%(asctime)s] %(levelname)s: %(check_info)s: %(message)s", "append": True},
            ],
            "handlers_perflog": [
                {
                    # The campaign's raw perflogs (hpcvar.parsers.reframe reads this 4.x format):
                    # one line per test case, provenance in `software`/`container`, the run's
                    # dataset name and node list for collation.
                    "type": "filelog",
                    "prefix": "%(check_system)s/%(check_partition)s",
                    "basedir": f"{PREFIX}/perflogs",
                    "level": "info",
                    "format": (
                        "%(check_job_completion_time)s|reframe %(version)s|%(check_display_name)s|"
                        "%(check_system)s|%(check_partition)s|%(check_environ)s|%(check_jobid)s|"
                        "%(check_result)s|%(check_job_nodelist)s|%(check_num_tasks)s|"
                        "%(check_num_tasks_per_node)s|%(check_dataset)s|%(check_software)s|"
                        "%(check_container)s|%(check_perfvalues)s"
                    ),
                    "format_perfvars": "%(check_perf_value)s|%(check_perf_unit)s|%(check_perf_ref)s|"
                                       "%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|",
                    "append": True,
                }
            ],
        }
    ],
}
