"""A real Slurm cluster with job accounting on this machine, from Debian's packages (``hpcvar dev slurm``):
one node (the default), or with ``--nodes N --groups G`` several nodes in network namespaces wired
as a small dragonfly (:mod:`hpcvar.dev.testbed`, docs/testbed.md).

``up`` starts, in this order, each as a background daemon with a pid file, waiting until it is
ready: ``munged`` (its own key and socket), ``mariadbd`` (its own datadir, socket and loopback
port), ``slurmdbd``, ``slurmctld`` and ``slurmd``. It creates the accounting database and its
user, registers the cluster, the account ``hpcvar`` and, as users of it, ``root`` and a second,
unprivileged Unix user (created on demand, default ``hpcvar-aggressor``) so that jobs can run
under two different users. ``down`` cancels every job and stops the daemons in reverse order;
``status`` shows each daemon and ``sinfo``.

Everything lives under one state directory (``$HPCVAR_SLURM_DIR``, default
``/var/tmp/hpcvar-slurm``): configs in ``etc/``, logs in ``log/``, pid files in ``run/``,
Slurm's state and spool in ``spool/``, MariaDB in ``mysql/``, munge in ``munge/``, and
``jobs/`` (mode 1777) for job output. Slurm's commands find the cluster through
``SLURM_CONF=<dir>/etc/slurm.conf``; ``--link-etc`` also points ``/etc/slurm/slurm.conf`` at it.
No systemd and no cgroups are needed (``proctrack/linuxproc``, ``task/none``). See
docs/slurm-dev-cluster.md.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpcvar.dev import testbed as tb
from hpcvar.dev.linksampler import store_files
from hpcvar.util.fileio import atomic_path

DEFAULT_DIR = "/var/tmp/hpcvar-slurm"
ENV_DIR = "HPCVAR_SLURM_DIR"
CLUSTER = "hpcvar"
ACCOUNT = "hpcvar"
PARTITION = "debug"
DEFAULT_EXTRA_USER = "hpcvar-aggressor"
SLURM_USER = "slurm"
MUNGE_USER = "munge"
MYSQL_USER = "mysql"
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
PORTS = {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819, "mariadb": 16819}
ETC_LINK = Path("/etc/slurm/slurm.conf")

# Executables the cluster needs, and the Debian package that ships each.
REQUIRED = {
    "munged": "munge", "munge": "munge", "mungekey": "munge",
    "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-client", "mariadb-admin": "mariadb-client",
    "slurmdbd": "slurmdbd", "slurmctld": "slurmctld", "slurmd": "slurmd",
    "sacctmgr": "slurm-client", "sbatch": "slurm-client", "srun": "slurm-client", "sinfo": "slurm-client",
    "squeue": "slurm-client", "scancel": "slurm-client", "scontrol": "slurm-client", "sacct": "slurm-client",
    "runuser": "util-linux", "useradd": "passwd",
}
# slurmdbd's MySQL/MariaDB storage plugin is a package of its own.
PLUGIN_GLOBS = {"accounting_storage_mysql.so": "slurm-wlm-mysql-plugin"}
PLUGIN_DIRS = ["/usr/lib/*/slurm-wlm", "/usr/lib/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/*/slurm", "/usr/lib/slurm"]
# Slurm's mpi/pmix plugin dlopens the unversioned libpmix.so (package libpmix-dev).
PMIX_LIBS = ["/usr/lib/*/pmix2/lib/libpmix.so", "/usr/lib/*/libpmix.so", "/usr/lib64/libpmix.so"]

DAEMONS = ["munged", "mariadb", "slurmdbd", "slurmctld", "slurmd"]
NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,30}$")


class SlurmDevError(RuntimeError):
    """The cluster could not be started or stopped; the message says why and what to look at."""


class MissingPackages(SlurmDevError):
    pass


@dataclass(frozen=True)
class Layout:
    """Where everything lives under the state directory."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def plugstack_conf(self) -> Path:
        return self.etc / "plugstack.conf"

    @property
    def mpi_conf(self) -> Path:
        """Slurm's PMIx plugin settings (mpi.conf beside slurm.conf); see :data:`MPI_CONF`."""
        return self.etc / "mpi.conf"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munge.socket.2"

    @property
    def mysql(self) -> Path:
        return self.root / "mysql"

    @property
    def mysql_socket(self) -> Path:
        return self.mysql / "mysqld.sock"

    @property
    def ctld_state(self) -> Path:
        return self.root / "spool" / "slurmctld"

    @property
    def slurmd_spool(self) -> Path:
        return self.root / "spool" / "slurmd"

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def info(self) -> Path:
        return self.root / "cluster.json"

    @property
    def topology_conf(self) -> Path:
        return self.etc / "topology.conf"

    @property
    def topology_map(self) -> Path:
        """hpcvar's map of the testbed's wiring (``--topology`` of imports, experiments)."""
        return self.etc / "testbed-topology.yaml"

    @property
    def node_exec(self) -> Path:
        return self.root / "bin" / "node-exec"

    @property
    def ldms(self) -> Path:
        """The testbed's link counters, an LDMS store_csv store (``campaign.ldms``)."""
        return self.root / "ldms"

    def pid_file(self, daemon: str) -> Path:
        return {"munged": self.munge / "munged.pid", "mariadb": self.mysql / "mariadbd.pid"}.get(
            daemon, self.run / f"{daemon}.pid")

    def log_file(self, daemon: str) -> Path:
        return {"munged": self.munge / "munged.log"}.get(daemon, self.log / f"{daemon}.log")


def state_dir(path: str | Path | None = None) -> Path:
    return Path(path or os.environ.get(ENV_DIR) or DEFAULT_DIR).absolute()


def slurm_env(layout: Layout) -> dict[str, str]:
    """The environment Slurm's commands need to find this cluster."""
    env = dict(os.environ)
    env["SLURM_CONF"] = str(layout.slurm_conf)
    return env


# ---------------------------------------------------------------------------------------------
# Small helpers


def _run(cmd: list[str], layout: Layout | None = None, check: bool = True, timeout: float = 60,
         input: str | None = None) -> subprocess.CompletedProcess:
    env = slurm_env(layout) if layout else None
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise SlurmDevError(f"`{' '.join(cmd)}` did not finish within {timeout:.0f} s") from exc
    if check and proc.returncode != 0:
        raise SlurmDevError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
                            f"{(proc.stderr or proc.stdout).strip()}")
    return proc


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"
    return "\n".join(text[-lines:]) if text else "(empty)"


def _daemon_failure(layout: Layout, daemon: str, reason: str) -> SlurmDevError:
    log = layout.log_file(daemon)
    return SlurmDevError(f"{daemon} failed to start: {reason}\n"
                         f"--- last lines of its log file {log} ---\n{_tail(log)}\n--- end of {log} ---")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool:
    """A live, non-zombie process (reaps it first if it is our own child)."""
    if not pid:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True


def daemon_pid(layout: Layout, daemon: str) -> int | None:
    """The daemon's pid if its pid file names a live process, else None."""
    pid = _read_pid(layout.pid_file(daemon))
    return pid if _alive(pid) else None


def _wait_until(check: Callable[[], tuple[bool, str]], timeout: float, layout: Layout, daemon: str,
                what: str) -> None:
    """Poll ``check`` (gently) until it succeeds; fail naming the daemon's log if it died or timed out."""
    deadline = time.monotonic() + timeout
    grace = time.monotonic() + 5  # daemons that fork need a moment to write their pid file
    delay, detail = 0.2, ""
    while True:
        ok, detail = check()
        if ok:
            return
        if time.monotonic() > grace and daemon_pid(layout, daemon) is None:
            raise _daemon_failure(layout, daemon, f"the process is not running (waiting for {what}; {detail})")
        if time.monotonic() > deadline:
            raise _daemon_failure(layout, daemon, f"not ready after {timeout:.0f} s (waiting for {what}; {detail})")
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def _uid(name: str) -> int:
    return pwd.getpwnam(name).pw_uid


def _chown(path: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def _mkdir(path: Path, mode: int = 0o755, owner: str = "root") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    _chown(path, owner)
    path.chmod(mode)
    return path


def _touch(path: Path, owner: str, mode: int = 0o640) -> None:
    path.touch(exist_ok=True)
    _chown(path, owner)
    path.chmod(mode)


def _write(path: Path, text: str, owner: str = "root", mode: int = 0o644) -> None:
    with atomic_path(path) as tmp:  # owner and mode set before the file appears
        tmp.write_text(text)
        _chown(tmp, owner)
        tmp.chmod(mode)


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


# ---------------------------------------------------------------------------------------------
# Checks


def check_prerequisites() -> None:
    """Root, and every executable and plugin installed; else a clear error with the apt-get line."""
    if os.geteuid() != 0:
        raise SlurmDevError("must run as root: it starts system daemons (munged, mariadbd, slurmdbd, "
                            "slurmctld, slurmd) and creates a Unix user")
    missing: dict[str, str] = {}
    for exe, package in REQUIRED.items():
        if not shutil.which(exe, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            missing[exe] = package
    for plugin, package in PLUGIN_GLOBS.items():
        if not any(glob.glob(os.path.join(d, plugin)) for d in PLUGIN_DIRS):
            missing[plugin] = package
    for user, package in ((SLURM_USER, "slurm-client"), (MUNGE_USER, "munge"), (MYSQL_USER, "mariadb-server")):
        try:
            pwd.getpwnam(user)
        except KeyError:
            missing[f"user {user}"] = package
    if missing:
        packages = sorted(set(missing.values()))
        raise MissingPackages(
            "missing: " + ", ".join(f"{k} (package {v})" for k, v in missing.items())
            + f"\nInstall them with:  apt-get install -y {' '.join(packages)}"
            + "\n(or run ./setup.sh, which installs everything in apt-packages.txt)")


def _sbin(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or name


# ---------------------------------------------------------------------------------------------
# Configuration


def _node_hardware() -> dict[str, str]:
    """``slurmd -C``'s view of this host: CPUs, Boards, SocketsPerBoard, CoresPerSocket, ThreadsPerCore, RealMemory."""
    proc = _run([_sbin("slurmd"), "-C"], check=True)
    first = proc.stdout.strip().splitlines()[0]
    fields = dict(item.split("=", 1) for item in first.split() if "=" in item)
    keep = ["CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory"]
    hw = {k: fields[k] for k in keep if k in fields}
    if "CPUs" not in hw:
        raise SlurmDevError(f"cannot read the node's hardware from `slurmd -C`: {proc.stdout!r}")
    return hw


def slurm_conf_text(layout: Layout, node: str, hardware: dict[str, str], spec: tb.TestbedSpec | None = None) -> str:
    """slurm.conf of the single-node cluster (``node`` is this host), or with ``spec`` of the
    testbed: the controller on this host (``node``) at the head's management address, one slurmd
    per node namespace (its spool, pid and log files named after it), topology/tree by group."""
    hw = " ".join(f"{k}={v}" for k, v in hardware.items())
    if spec is None:
        header = "# Single-node development cluster with accounting; no cgroups, no systemd."
        ctld, nodes, all_nodes = "127.0.0.1", f"NodeName={node} NodeAddr=127.0.0.1 {hw} State=UNKNOWN", node
        slurmd = f"""SlurmdSpoolDir={layout.slurmd_spool}
# Node-local scratch (PMIx's per-job directories): /tmp, which a container image sees (ch-run
# binds it); under the state directory, an image's Open MPI found no session directory.
TmpFS=/tmp
SlurmdPidFile={layout.pid_file('slurmd')}
SlurmdLogFile={layout.log_file('slurmd')}"""
        extra, lln = "SlurmdTimeout=60", ""
    else:
        header = (f"# {spec.nodes} nodes in network namespaces on this host, {spec.groups} groups (docs/testbed.md); "
                  "no cgroups, no systemd.")
        ctld, all_nodes = tb.HEAD_IP, tb._hostlist(spec.node_names)
        nodes = "\n".join(f"NodeName={n} NodeAddr={spec.mgmt_ip(n)} {hw} State=UNKNOWN" for n in spec.node_names)
        slurmd = f"""SlurmdSpoolDir={layout.root}/spool/slurmd-%n
# Every node has a /tmp of its own (PMIx's per-job directories).
TmpFS=/tmp
SlurmdPidFile={layout.run}/slurmd-%n.pid
SlurmdLogFile={layout.log}/slurmd-%n.log"""
        extra = """# A switch per group (topology.conf): --switches=1 keeps a job in one group.
TopologyPlugin=topology/tree
# A node whose slurmd stops answering is DOWN after 10 s and its jobs end NODE_FAIL (not requeued:
# a campaign records the failure).
SlurmdTimeout=10
JobRequeue=0"""
        # Least loaded nodes first: a job's placement follows the other users' jobs (groups
        # spanned or not), as on a busy machine, instead of always the first free nodes.
        lln = " LLN=YES"
    return f"""\
# Generated by `hpcvar dev slurm up` (src/hpcvar/dev/slurm.py), rewritten on every `up`.
{header}
ClusterName={CLUSTER}
SlurmctldHost={node}({ctld})
SlurmUser={SLURM_USER}
SlurmdUser=root
SlurmctldPort={PORTS['slurmctld']}
SlurmdPort={PORTS['slurmd']}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={layout.munge_socket}
StateSaveLocation={layout.ctld_state}
{slurmd}
SlurmctldPidFile={layout.pid_file('slurmctld')}
SlurmctldLogFile={layout.log_file('slurmctld')}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={layout.plugstack_conf}
# Process tracking and task launch without cgroups (works in containers).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Accounting through slurmdbd (MariaDB behind it).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={PORTS['slurmdbd']}
# The munge socket for connections to slurmdbd (AuthInfo covers only the rest).
AccountingStoragePass={layout.munge_socket}
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# Scheduling.
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# Short waits so that cancelled and timed-out jobs end quickly.
KillWait=2
OverTimeLimit=0
InactiveLimit=0
MinJobAge=300
SlurmctldTimeout=60
{extra}
MailProg=/bin/true
{nodes}
# Up to two jobs share each core: on a small machine a campaign's job and another user's job must
# be able to run at the same time, as on a busy production machine.
PartitionName={PARTITION} Nodes={all_nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:2{lln}
"""


#: mpi.conf of a multi-node cluster. Slurm's PMIx plugin completes a fence that collects no data
#: (PMIx_Fence used as a barrier: Open MPI 4.1 ends MPI_Init with one) over a tree of the step's
#: nodes built by Slurm's reverse_tree_info(), which since Slurm 20.11 returns "no parent, no
#: children" on every node when TreeWidth (50) exceeds the step's node count (slurm 30af622a52, meant
#: for slurmd's message fan-out). Each node then completes the fence alone: processes leave it
#: while others have not entered it. Open MPI's fast ranks left MPI_Init and sent their first message
#: to a rank still in its modex fence, whose PML had not set its handlers: a call through a null
#: pointer (tag 0x41, ob1's match header; docs/testbed.md). The ring algorithm, which Slurm already
#: uses for fences that collect data, is a barrier across the nodes (tests/test_testbed.py).
MPI_CONF = """\
# Generated by `hpcvar dev slurm up` (src/hpcvar/dev/slurm.py: MPI_CONF), rewritten on every `up`.
# Every PMIx fence over the ring of nodes: the tree fence completes on each node alone when the
# step has fewer nodes than TreeWidth, so a fence without data is no barrier (docs/testbed.md).
PMIxCollFence=ring
"""


def slurmdbd_conf_text(layout: Layout, node: str, password: str) -> str:
    return f"""\
# Generated by `hpcvar dev slurm up` (src/hpcvar/dev/slurm.py), rewritten on every `up`.
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
DbdHost={node}
DbdAddr=127.0.0.1
DbdPort={PORTS['slurmdbd']}
SlurmUser={SLURM_USER}
LogFile={layout.log_file('slurmdbd')}
PidFile={layout.pid_file('slurmdbd')}
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={PORTS['mariadb']}
StorageUser={DB_USER}
StoragePass={password}
StorageLoc={DB_NAME}
"""


def _spec_of(info: dict) -> tb.TestbedSpec | None:
    """The testbed's shape a cluster was started with; None for the single-node cluster."""
    return tb.TestbedSpec(**info["testbed"]) if info.get("testbed") else None


def daemons_of(info: dict) -> list[str]:
    """The daemons of a cluster in start order: one slurmd per node and the link sampler on a testbed."""
    spec = _spec_of(info)
    if spec is None:
        return list(DAEMONS)
    return [*DAEMONS[:-1], *(f"slurmd-{n}" for n in spec.node_names), "linksampler"]


def _load_info(layout: Layout) -> dict:
    try:
        return json.loads(layout.info.read_text())
    except (OSError, ValueError):
        return {}


def _save_info(layout: Layout, info: dict) -> None:
    _write(layout.info, json.dumps(info, indent=1) + "\n", mode=0o600)


def prepare(layout: Layout, info: dict) -> None:
    """Directories (with the owners each daemon needs), munge key, configs."""
    _mkdir(layout.root, 0o755)
    _mkdir(layout.etc, 0o755)
    _mkdir(layout.log, 0o755, SLURM_USER)  # slurmdbd and slurmctld chdir there
    _mkdir(layout.run, 0o755, SLURM_USER)
    _mkdir(layout.root / "spool", 0o755)
    _mkdir(layout.ctld_state, 0o700, SLURM_USER)
    _mkdir(layout.slurmd_spool, 0o755)
    _mkdir(layout.jobs, 0o1777)
    _mkdir(layout.munge, 0o755, MUNGE_USER)  # munged insists: socket dir executable by all
    _mkdir(layout.mysql, 0o750, MYSQL_USER)
    key = layout.munge / "munge.key"
    if not key.exists():
        if Path("/etc/munge/munge.key").is_file():
            shutil.copyfile("/etc/munge/munge.key", key)
        else:
            _run([_sbin("mungekey"), "--create", f"--keyfile={key}"])
    _chown(key, MUNGE_USER)
    key.chmod(0o600)
    for daemon, owner in (("slurmctld", SLURM_USER), ("slurmdbd", SLURM_USER), ("slurmd", "root"),
                          ("mariadb", MYSQL_USER)):
        _touch(layout.log_file(daemon), owner)
    node = info["node"]
    spec = _spec_of(info)
    if spec is None:
        _write(layout.slurm_conf, slurm_conf_text(layout, node, info["hardware"]), mode=0o644)
        layout.topology_conf.unlink(missing_ok=True)
        layout.mpi_conf.unlink(missing_ok=True)  # one node: a node's own fence is the whole fence
    else:
        _write(layout.slurm_conf, slurm_conf_text(layout, node, info["hardware"], spec), mode=0o644)
        _write(layout.topology_conf, tb.slurm_topology_conf(spec))
        _write(layout.mpi_conf, MPI_CONF)
        import yaml

        _write(layout.topology_map, "# hpcvar's map of the testbed (src/hpcvar/dev/testbed.py: topology_map)\n"
               + yaml.safe_dump(tb.topology_map(spec), sort_keys=False))
        _mkdir(layout.ldms, 0o755)
    _write(layout.slurmdbd_conf, slurmdbd_conf_text(layout, node, info["db_password"]), owner=SLURM_USER,
           mode=0o600)
    if not layout.plugstack_conf.exists():
        _write(layout.plugstack_conf, "# no SPANK plugins in the dev cluster\n")


# ---------------------------------------------------------------------------------------------
# Daemons


def _start_munged(layout: Layout, timeout: float) -> None:
    sock = layout.munge_socket
    _run(["runuser", "-u", MUNGE_USER, "--", _sbin("munged"), f"--socket={sock}",
          f"--key-file={layout.munge / 'munge.key'}", f"--pid-file={layout.pid_file('munged')}",
          f"--log-file={layout.log_file('munged')}", f"--seed-file={layout.munge / 'munged.seed'}"],
         check=False)

    def ready():
        proc = _run(["munge", "-n", "-S", str(sock)], check=False)
        return proc.returncode == 0, proc.stderr.strip()
    _wait_until(ready, timeout, layout, "munged", "a munge credential")


def _mysql_client(layout: Layout, sql: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["mariadb", "--no-defaults", "-uroot", f"--socket={layout.mysql_socket}", "-N", "-B", "-e", sql],
                check=check)


def _start_mariadb(layout: Layout, timeout: float, password: str) -> None:
    if not (layout.mysql / "mysql").is_dir():
        proc = _run([_sbin("mariadb-install-db"), "--no-defaults", f"--user={MYSQL_USER}",
                     f"--datadir={layout.mysql}", "--auth-root-authentication-method=socket", "--skip-test-db"],
                    check=False, timeout=180)
        if proc.returncode != 0:
            layout.log_file("mariadb").write_text(proc.stdout + proc.stderr)
            raise _daemon_failure(layout, "mariadb", "mariadb-install-db failed")
    _check_port(layout, "mariadb")
    log = open(layout.log_file("mariadb"), "ab")
    subprocess.Popen(
        [_sbin("mariadbd"), "--no-defaults", f"--user={MYSQL_USER}", f"--datadir={layout.mysql}",
         f"--socket={layout.mysql_socket}", f"--pid-file={layout.pid_file('mariadb')}",
         f"--log-error={layout.log_file('mariadb')}", f"--port={PORTS['mariadb']}", "--bind-address=127.0.0.1",
         # slurmdbd's recommended InnoDB settings (Slurm's accounting docs)
         "--innodb-buffer-pool-size=256M", "--innodb-log-file-size=64M", "--innodb-lock-wait-timeout=900"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=layout.root, start_new_session=True)
    log.close()

    def ready():
        proc = _run(["mariadb-admin", "--no-defaults", "-uroot", f"--socket={layout.mysql_socket}", "ping"],
                    check=False)
        return proc.returncode == 0, (proc.stderr or proc.stdout).strip()
    _wait_until(ready, timeout, layout, "mariadb", "`mariadb-admin ping`")
    quoted = password.replace("\\", "\\\\").replace("'", "\\'")
    statements = [f"CREATE DATABASE IF NOT EXISTS {DB_NAME}"]
    for host in ("localhost", "127.0.0.1"):
        statements += [f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{host}' IDENTIFIED BY '{quoted}'",
                       f"ALTER USER '{DB_USER}'@'{host}' IDENTIFIED BY '{quoted}'",
                       f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{host}'"]
    _mysql_client(layout, "; ".join(statements))


def _port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _check_port(layout: Layout, daemon: str) -> None:
    port = PORTS[daemon]
    if _port_in_use(port):
        raise _daemon_failure(layout, daemon, f"port {port} on 127.0.0.1 is already in use by another process "
                                              "(a system Slurm or MariaDB? `ss -ltnp` shows which)")


def _start_slurm_daemon(layout: Layout, daemon: str) -> None:
    _check_port(layout, daemon)
    proc = _run([_sbin(daemon)], layout, check=False)
    if proc.returncode != 0:
        raise _daemon_failure(layout, daemon, f"`{daemon}` exited {proc.returncode}: "
                                              f"{(proc.stderr or proc.stdout).strip()}")


def _sacctmgr(layout: Layout, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["sacctmgr", *args], layout, check=check)


def _start_slurmdbd(layout: Layout, timeout: float) -> None:
    _start_slurm_daemon(layout, "slurmdbd")

    def ready():
        proc = _sacctmgr(layout, "-n", "-P", "show", "cluster", "format=cluster", check=False)
        return proc.returncode == 0, (proc.stderr or proc.stdout).strip()
    _wait_until(ready, timeout, layout, "slurmdbd", "`sacctmgr show cluster`")


def _first_job_id(layout: Layout) -> int | None:
    """Without saved controller state, job ids would start again at 1 and meet the accounting
    database's old jobs of the same ids (sacct -j would report those): the next free id."""
    if (layout.ctld_state / "job_state").exists():
        return None
    proc = _run(["sacct", "-X", "-a", "-n", "-P", "-o", "JobIDRaw", "-S", "1970-01-01", "-E", "now"], layout,
                check=False, timeout=120)
    ids = [int(t) for t in proc.stdout.split() if t.isdigit()]
    return max(ids) + 1 if ids else None


def _start_slurmctld(layout: Layout, timeout: float) -> None:
    first = _first_job_id(layout)
    if first is not None:
        text = layout.slurm_conf.read_text()
        _write(layout.slurm_conf, re.sub(r"^FirstJobId=\d+\n", "", text, flags=re.M) + f"FirstJobId={first}\n")
    _start_slurm_daemon(layout, "slurmctld")

    def ready():
        proc = _run(["scontrol", "ping"], layout, check=False)
        return "UP" in proc.stdout, (proc.stdout or proc.stderr).strip()
    _wait_until(ready, timeout, layout, "slurmctld", "`scontrol ping`")


def node_state(layout: Layout, node: str) -> str:
    proc = _run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], layout, check=False)
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else ""


USABLE = {"idle", "mixed", "allocated", "completing"}


def _start_slurmd(layout: Layout, node: str, timeout: float) -> None:
    _start_slurm_daemon(layout, "slurmd")

    def ready():
        state = node_state(layout, node)
        if state.startswith(("drain", "down")) and not state.endswith("*"):
            reason = _run(["sinfo", "-h", "-N", "-n", node, "-o", "%E"], layout, check=False).stdout.strip()
            raise _daemon_failure(layout, "slurmd", f"node {node} is {state}: {reason}")
        return state in USABLE, f"node {node} is {state or 'not listed'}"
    _wait_until(ready, timeout, layout, "slurmd", f"`sinfo` to show node {node} idle")


def _start_node_slurmd(layout: Layout, node: str, timeout: float) -> None:
    """slurmd of one testbed node, inside the node (its namespaces, /tmp, hosts and /sys)."""
    daemon = f"slurmd-{node}"
    proc = _run([str(layout.node_exec), node, _sbin("slurmd"), "-N", node], layout, check=False)
    if proc.returncode != 0:
        raise _daemon_failure(layout, daemon, f"`slurmd -N {node}` exited {proc.returncode}: "
                                              f"{(proc.stderr or proc.stdout).strip()}")

    def ready():
        state = node_state(layout, node)
        if state.startswith(("drain", "down")) and not state.endswith("*"):
            _run(["scontrol", "update", f"nodename={node}", "state=resume"], layout, check=False)
        return state in USABLE, f"node {node} is {state or 'not listed'}"
    _wait_until(ready, timeout, layout, daemon, f"`sinfo` to show node {node} idle")


def _start_linksampler(layout: Layout, timeout: float) -> None:
    earlier = set(store_files(layout.ldms))
    log = open(layout.log_file("linksampler"), "ab")
    proc = subprocess.Popen([sys.executable, "-m", "hpcvar.dev.linksampler", "--state", str(layout.root),
                             "--store", str(layout.ldms)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            cwd=layout.root, start_new_session=True)
    log.close()
    layout.pid_file("linksampler").write_text(f"{proc.pid}\n")

    def ready():
        # Rows in the file this sampler opened: an earlier run's file (the one before a `down`)
        # already has rows, and a probe started on those would compare two networks' counters.
        mine = [p for p in store_files(layout.ldms) if p not in earlier]
        return any(p.stat().st_size > 0 for p in mine), "no rows in this sampler's link store file yet"
    _wait_until(ready, timeout, layout, "linksampler", f"rows in a new file of {layout.ldms}")


def ensure_user(name: str) -> bool:
    """Create the unprivileged Unix user if absent; True if created."""
    if not NAME_RE.match(name):
        raise SlurmDevError(f"invalid user name {name!r}")
    try:
        pwd.getpwnam(name)
        return False
    except KeyError:
        pass
    _run([_sbin("useradd"), "--create-home", "--user-group", "--shell", "/bin/sh",
          "--comment", "hpcvar dev Slurm cluster, second job owner", name])
    return True


def ensure_accounts(layout: Layout, users: list[str]) -> None:
    """Cluster, account and user associations in slurmdbd (each only if missing)."""
    clusters = _sacctmgr(layout, "-n", "-P", "show", "cluster", "format=cluster").stdout.split()
    if CLUSTER not in clusters:
        _sacctmgr(layout, "-i", "add", "cluster", CLUSTER)
    accounts = _sacctmgr(layout, "-n", "-P", "show", "account", "format=account").stdout.split()
    if ACCOUNT not in accounts:
        _sacctmgr(layout, "-i", "add", "account", ACCOUNT, f"Cluster={CLUSTER}",
                  "Description=hpcvar dev cluster", "Organization=hpcvar")
    for user in users:
        assoc = _sacctmgr(layout, "-n", "-P", "show", "assoc", "where", f"user={user}", f"account={ACCOUNT}",
                          f"cluster={CLUSTER}", "format=user").stdout.split()
        if user not in assoc:
            extra = [] if user == "root" else [f"DefaultAccount={ACCOUNT}"]
            _sacctmgr(layout, "-i", "add", "user", user, f"Account={ACCOUNT}", f"Cluster={CLUSTER}", *extra)


def _link_etc(layout: Layout, info: dict, out) -> None:
    if ETC_LINK.is_symlink() and Path(os.readlink(ETC_LINK)) == layout.slurm_conf:
        return
    if ETC_LINK.exists() or ETC_LINK.is_symlink():
        out(f"note: {ETC_LINK} exists and is not ours; left alone (use SLURM_CONF)")
        return
    ETC_LINK.parent.mkdir(parents=True, exist_ok=True)
    ETC_LINK.symlink_to(layout.slurm_conf)
    info["etc_link"] = str(ETC_LINK)
    out(f"linked {ETC_LINK} -> {layout.slurm_conf}")


def _unlink_etc(layout: Layout, info: dict, out) -> None:
    if ETC_LINK.is_symlink() and Path(os.readlink(ETC_LINK)) == layout.slurm_conf:
        ETC_LINK.unlink()
        out(f"removed {ETC_LINK}")
    info.pop("etc_link", None)


def _all_running(layout: Layout, info: dict) -> bool:
    return all(daemon_pid(layout, d) for d in daemons_of(info))


# ---------------------------------------------------------------------------------------------
# Commands


def up(path: str | Path | None = None, extra_user: str | list[str] = DEFAULT_EXTRA_USER, link_etc: bool = False,
       timeout: float = 60, out=print, testbed: tb.TestbedSpec | None = None) -> int:
    """Start whatever is not running yet; return 0 when every node is usable. ``testbed``: the
    multi-node cluster of that shape (None: the single-node cluster)."""
    t0 = time.monotonic()
    check_prerequisites()
    if testbed is not None:
        tb.check_privileges()
    layout = Layout(state_dir(path))
    extra = [extra_user] if isinstance(extra_user, str) else list(extra_user)
    for user in extra:
        if ensure_user(user):
            out(f"created Unix user {user}")
    info = _load_info(layout)
    users = sorted(set(info.get("users", [])) | {"root", *extra})
    wanted = testbed.as_dict() if testbed else None
    running = [d for d in daemons_of(info) if daemon_pid(layout, d)]
    if info.get("hardware") and info.get("testbed") != wanted and running:
        raise SlurmDevError(f"a cluster of another shape is running ({_shape(info.get('testbed'))}; asked for "
                            f"{_shape(wanted)}): `hpcvar dev slurm down` first")
    if running and _all_running(layout, info) and (testbed is None or tb.is_built(testbed)):
        ensure_accounts(layout, users)
        info["users"] = users
        if link_etc:
            _link_etc(layout, info, out)
        if testbed is not None:
            fixed = tb.bring_links_up(testbed)
            if fixed:
                out(f"links set up again: {', '.join(fixed)}")
        _save_info(layout, info)
        out(f"Slurm dev cluster already running ({_shape(wanted)}; state dir {layout.root}); users: {', '.join(users)}")
        out(f"export SLURM_CONF={layout.slurm_conf}")
        return 0
    info.setdefault("db_password", secrets.token_urlsafe(18))
    info["node"] = short_hostname()
    info["hardware"] = _node_hardware()
    info["users"] = users
    info["testbed"] = wanted
    _mkdir(layout.root, 0o755)
    _save_info(layout, info)
    if testbed is not None:
        t = time.monotonic()
        if not tb.is_built(testbed):
            # A half-built or stale network (a crash, another shape): rebuilt from nothing, after
            # stopping the slurmds and the sampler that live in or read its namespaces.
            for daemon in daemons_of(info)[len(DAEMONS) - 1:]:
                _stop(layout, daemon, timeout, lambda _: None)
            tb.teardown(layout.root)
            tb.build(testbed, layout.root, info["node"])
            out(f"network: {testbed.nodes} nodes in {testbed.groups} groups, global links {testbed.global_rate}, "
                f"node links {testbed.node_rate}, {testbed.routing} routing ({time.monotonic() - t:.1f} s)")
        else:
            fixed = tb.bring_links_up(testbed)
            if fixed:
                out(f"links set up again: {', '.join(fixed)}")
        layout.node_exec.parent.mkdir(parents=True, exist_ok=True)
        _write(layout.node_exec, tb.node_exec_script(layout.root), mode=0o755)
    prepare(layout, info)
    steps = [
        ("munged", lambda: _start_munged(layout, timeout)),
        ("mariadb", lambda: _start_mariadb(layout, timeout, info["db_password"])),
        ("slurmdbd", lambda: (_start_slurmdbd(layout, timeout), ensure_accounts(layout, users))),
        ("slurmctld", lambda: _start_slurmctld(layout, timeout)),
    ]
    if testbed is None:
        steps.append(("slurmd", lambda: _start_slurmd(layout, info["node"], timeout)))
    else:
        steps += [(f"slurmd-{n}", lambda n=n: _start_node_slurmd(layout, n, timeout)) for n in testbed.node_names]
        steps.append(("linksampler", lambda: _start_linksampler(layout, timeout)))
    for daemon, start in steps:
        pid = daemon_pid(layout, daemon)
        if pid:
            out(f"{daemon}: already running (pid {pid})")
            if daemon == "slurmdbd":
                ensure_accounts(layout, users)
            continue
        t = time.monotonic()
        try:
            start()
        except SlurmDevError as exc:
            raise SlurmDevError(f"{exc}\nThe daemons already started are left running for inspection "
                                "(`hpcvar dev slurm status`); `hpcvar dev slurm down` stops them.") from exc
        out(f"{daemon}: started (pid {daemon_pid(layout, daemon)}, {time.monotonic() - t:.1f} s)")
    if link_etc:
        _link_etc(layout, info, out)
    _save_info(layout, info)
    if not any(glob.glob(d) for d in PMIX_LIBS):
        out("note: `srun --mpi=pmix` needs libpmix.so: apt-get install -y libpmix-dev")
    where = (f"node {info['node']} ({info['hardware']['CPUs']} CPUs)" if testbed is None else
             f"nodes {tb._hostlist(testbed.node_names)} in {testbed.groups} groups (map {layout.topology_map}, "
             f"link counters {layout.ldms})")
    out(f"Slurm dev cluster '{CLUSTER}' up in {time.monotonic() - t0:.1f} s: {where}, partition {PARTITION}, "
        f"users {', '.join(users)}; state dir {layout.root}")
    out(f"export SLURM_CONF={layout.slurm_conf}")
    return 0


def _shape(testbed: dict | None) -> str:
    return "single node" if not testbed else f"{testbed['nodes']} nodes in {testbed['groups']} groups"


def _stop(layout: Layout, daemon: str, timeout: float, out) -> None:
    pid = daemon_pid(layout, daemon)
    if pid is None:
        layout.pid_file(daemon).unlink(missing_ok=True)
        out(f"{daemon}: not running")
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        out(f"{daemon}: did not stop within {timeout:.0f} s, killed (pid {pid}); see {layout.log_file(daemon)}")
        time.sleep(0.5)
    else:
        out(f"{daemon}: stopped (pid {pid})")
    layout.pid_file(daemon).unlink(missing_ok=True)


def cancel_all(layout: Layout, timeout: float = 20) -> int:
    """scancel every job and wait until the queue is empty; the number of jobs cancelled."""
    jobs = _run(["squeue", "-h", "-o", "%i"], layout, check=False).stdout.split()
    if jobs:
        _run(["scancel", *jobs], layout, check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _run(["squeue", "-h", "-t", "all", "-o", "%T"], layout, check=False).stdout.split()
        if not [s for s in left if s in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")]:
            break
        time.sleep(0.5)
    return len(jobs)


def down(path: str | Path | None = None, purge: bool = False, timeout: float = 30, out=print) -> int:
    """Cancel every job, stop every daemon in reverse order and, on a testbed, take the network
    down: nothing is left behind (namespaces, links, mounts, processes), also after a crash."""
    if os.geteuid() != 0:
        raise SlurmDevError("must run as root")
    layout = Layout(state_dir(path))
    info = _load_info(layout)
    if daemon_pid(layout, "slurmctld"):
        n = cancel_all(layout)
        if n:
            out(f"cancelled {n} job(s)")
    for daemon in reversed(daemons_of(info)):
        _stop(layout, daemon, timeout, out)
    removed = tb.teardown(layout.root)
    if removed:
        out(f"network: removed {len([r for r in removed if r.startswith('netns')])} namespaces"
            + (f", {HOST_LINK_NOTE}" if any(r.startswith("link") for r in removed) else ""))
    _unlink_etc(layout, info, out)
    if purge:
        shutil.rmtree(layout.root, ignore_errors=True)
        out(f"removed {layout.root}")
    elif layout.root.is_dir():
        _save_info(layout, info)
        out(f"state kept in {layout.root} (`down --purge` removes it)")
    return 0


HOST_LINK_NOTE = f"the host's management port {tb.HOST_IF}"


def status(path: str | Path | None = None, out=print) -> int:
    """Each daemon's state and sinfo; 0 when all run, 3 otherwise."""
    layout = Layout(state_dir(path))
    out(f"state dir: {layout.root}" + ("" if layout.root.is_dir() else " (absent)"))
    running = 0
    info = _load_info(layout)
    daemons = daemons_of(info)
    if _spec_of(info):
        out(f"testbed: {_shape(info['testbed'])}, map {layout.topology_map}, link counters {layout.ldms}")
    for daemon in daemons:
        pid = daemon_pid(layout, daemon)
        stale = not pid and layout.pid_file(daemon).exists()
        running += bool(pid)
        out(f"  {daemon:10s} " + (f"running (pid {pid})" if pid else "stopped" + (" (stale pid file)" if stale else ""))
            + f"   log: {layout.log_file(daemon)}")
    if daemon_pid(layout, "slurmctld") and shutil.which("sinfo"):
        out(_run(["sinfo"], layout, check=False).stdout.rstrip())
        out(f"export SLURM_CONF={layout.slurm_conf}")
    return 0 if running == len(daemons) else 3


def set_routing(path: str | Path | None, routing: str, out=print) -> int:
    """Switch a running testbed between minimal and Valiant routing."""
    layout = Layout(state_dir(path))
    info = _load_info(layout)
    spec = _spec_of(info)
    if spec is None or not tb.is_built(spec):
        raise SlurmDevError("no testbed is up (`hpcvar dev slurm up --nodes N --groups G`)")
    tb.set_routing(spec, routing)
    info["testbed"] = {**info["testbed"], "routing": routing}
    _save_info(layout, info)
    _write(layout.topology_map, "# hpcvar's map of the testbed (src/hpcvar/dev/testbed.py: topology_map)\n"
           + __import__("yaml").safe_dump(tb.topology_map(tb.TestbedSpec(**info["testbed"])), sort_keys=False))
    out(f"routing between groups: {routing}")
    return 0


def command(args) -> int:
    """``hpcvar dev slurm up|down|status`` (argparse namespace from hpcvar.cli)."""
    def out(text: str) -> None:
        print(text, flush=True)

    try:
        if args.action == "up":
            spec = None
            if args.nodes is not None or args.groups is not None:
                spec = tb.TestbedSpec(nodes=args.nodes or 6, groups=args.groups or 2, global_rate=args.global_rate,
                                      node_rate=args.node_rate, global_delay_ms=args.global_delay_ms,
                                      node_delay_ms=args.node_delay_ms, routing=args.routing)
            return up(args.dir, extra_user=args.extra_user or [DEFAULT_EXTRA_USER], link_etc=args.link_etc,
                      timeout=args.timeout, out=out,
                      testbed=spec)
        if args.action == "routing":
            return set_routing(args.dir, args.routing, out=out)
        if args.action == "down":
            return down(args.dir, purge=args.purge, out=out)
        return status(args.dir, out=out)
    except MissingPackages as exc:
        print(f"hpcvar dev slurm {args.action}: {exc}", file=sys.stderr)
        return 2
    except (SlurmDevError, tb.TestbedError) as exc:
        print(f"hpcvar dev slurm {args.action}: {exc}", file=sys.stderr)
        return 1
