#!/usr/bin/env bash
# The one set-up command: Debian packages (when run as root or with sudo) and the hpcvar Python
# package with all its pinned dependencies in ./.venv. Safe to re-run.
#   HPCVAR_SKIP_APT=1 ./setup.sh   skips the Debian packages (e.g. without root).
set -euo pipefail
cd "$(dirname "$0")"

if [ "${HPCVAR_SKIP_APT:-0}" != 1 ] && command -v apt-get >/dev/null; then
  packages=$(grep -v '^#' apt-packages.txt | xargs)
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  missing=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' $packages 2>/dev/null | awk '$2!="installed"{print $1}'; \
            for p in $packages; do dpkg-query -W "$p" >/dev/null 2>&1 || echo "$p"; done)
  if [ -n "$(echo "$missing" | xargs)" ]; then
    echo "setup: installing Debian packages: $(echo "$missing" | sort -u | xargs)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $(echo "$missing" | sort -u | xargs)
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first and exactly pinned: the CPU build of 2.13.0 is what the machines provide.
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test,docs]"
# Snakemake profiles: `snakemake --profile slurm` looks in ~/.config/snakemake/ (and the current
# directory); link ours there unless the user already has a profile of that name.
profiles_dir="${XDG_CONFIG_HOME:-$HOME/.config}/snakemake"
mkdir -p "$profiles_dir"
for p in profiles/*/; do
  name=$(basename "$p")
  [ -e "$profiles_dir/$name" ] || ln -s "$(pwd)/$p" "$profiles_dir/$name"
done

echo "setup: done. Main job: .venv/bin/snakemake --cores 2   Tests: .venv/bin/python -m pytest"
