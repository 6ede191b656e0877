"""Can this machine run (or build) images, and if not, why: the container runtime's own
requirements, checked before anything is started, each failure saying what to install or set."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: Programs a Charliecloud build needs, and the Debian/Ubuntu package each comes from.
BUILD_TOOLS = {"mmdebstrap": "mmdebstrap", "ch-run": "charliecloud", "ch-convert": "charliecloud",
               "mksquashfs": "squashfs-tools"}


def problems(runtime: str, *, need_user: bool = True, proc: str | Path = "/proc") -> list[str]:
    """What keeps ``runtime`` (``charliecloud`` or ``apptainer``) from starting here; empty when
    nothing does. ``need_user``: ch-run refuses to start without ``$USER`` (the suite's job
    scripts set it themselves, so ReFrame's checks leave it out)."""
    out = []
    if runtime == "apptainer":
        if shutil.which("apptainer") is None:
            out.append("apptainer not found on PATH: install Apptainer (apptainer.org), or run the store's "
                       "Charliecloud images (-S image=NAME) instead")
        return out
    if runtime != "charliecloud":
        raise ValueError(f"unknown container runtime {runtime!r}: charliecloud or apptainer")
    if shutil.which("ch-run") is None:
        out.append("ch-run not found on PATH: install Charliecloud (Debian/Ubuntu: apt-get install charliecloud "
                   "squashfuse; ./setup.sh does)")
    if need_user and not os.environ.get("USER"):
        out.append("$USER is not set: ch-run refuses to start without it (export USER=$(id -un))")
    max_ns = _read(Path(proc, "sys/user/max_user_namespaces"))
    if max_ns == "0":
        out.append("user namespaces are disabled (/proc/sys/user/max_user_namespaces is 0): ch-run needs them; "
                   "enable them with `sysctl -w user.max_user_namespaces=15000` (as root)")
    if os.geteuid() != 0 and _read(Path(proc, "sys/kernel/unprivileged_userns_clone")) == "0":
        out.append("unprivileged user namespaces are disabled (/proc/sys/kernel/unprivileged_userns_clone is 0): "
                   "ch-run needs them; enable them with `sysctl -w kernel.unprivileged_userns_clone=1` (as root)")
    return out


def build_problems() -> list[str]:
    """What keeps ``hpcvar containers build`` from running here."""
    out = [f"{tool} not found on PATH: install {package} (apt-get install {package}; ./setup.sh does)"
           for tool, package in BUILD_TOOLS.items() if shutil.which(tool) is None]
    return out + [p for p in problems("charliecloud") if "not found on PATH" not in p]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
