#!/usr/bin/env bash
# milc.sh SRC_DIR PREFIX -- build MILC's su3_rmd (application ks_imp_dyn, R algorithm with
# improved staggered quarks; MILC 7.8.x as in Table I) from a tree fetched by
# `fetch.sh milc SRC_DIR` and install it as PREFIX/bin/su3_rmd.
#
# The one build recipe of MILC: the ReFrame build fixture and containers/milc.def both run it.
# MILC's generic application Makefile is copied into ks_imp_dyn (as upstream documents) and its
# choices are set on the make command line: MPI (MPP=true), no SciDAC/QIO/QMP, no GPU.
#
# Environment:
#   MPICC, MPICXX    MPI compiler wrappers (default mpicc, mpicxx)
#   MAKE_JOBS        parallel make jobs (default 4). MILC builds its libraries through
#                    recursive makes; if a parallel build fails it is retried once with -j 1.
#   MILC_PRECISION   1 (single, the Makefile's default) or 2 (double); default 1
#   MILC_OPT         optimisation flags (default "-O3 -fcommon"; -fcommon for gcc >= 10)
#   MILC_OMP         true: OpenMP (default empty: MPI only, as in the paper)
set -eu
set -o pipefail

say() { printf '[hpcvar-build milc] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$2
MPICC=${MPICC:-mpicc}
MPICXX=${MPICXX:-mpicxx}
MAKE_JOBS=${MAKE_JOBS:-4}
PRECISION=${MILC_PRECISION:-1}
OPT=${MILC_OPT:--O3 -fcommon}
OMP=${MILC_OMP:-}

if [ ! -f "$SRC/Makefile" ] || [ ! -d "$SRC/ks_imp_dyn" ] || [ ! -d "$SRC/libraries" ]; then
    echo "$SRC does not look like a milc_qcd source tree" >&2; exit 1
fi
command -v "$MPICC" >/dev/null 2>&1 || { echo "MPI C compiler '$MPICC' not found" >&2; exit 1; }

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "version:  $(grep -h 'define MILC_CODE_VERSION' "$SRC/include/config.h" 2>/dev/null | head -n 1)"
say "prefix:   $PREFIX"
say "compiler: $MPICC ($("$MPICC" --version 2>/dev/null | head -n 1))"

run cp "$SRC/Makefile" "$SRC/ks_imp_dyn/Makefile"
make_args=(
    su3_rmd
    COMPILER=gnu MPP=true PRECISION="$PRECISION" OMP="$OMP"
    CC="$MPICC" CXX="$MPICXX" OPT="$OPT"
    WANTQOP= WANTQIO= WANTQMP= WANTQUDA= WANTQPHIX= WANTQPHIXJ= WANTGRID= WANTFFTW= WANTPRIMME=
)
cd "$SRC/ks_imp_dyn"
if ! run make -j "$MAKE_JOBS" "${make_args[@]}"; then
    if [ "$MAKE_JOBS" != 1 ]; then
        say "parallel build failed; retrying with -j 1"
        run make -j 1 "${make_args[@]}"
    else
        exit 1
    fi
fi

[ -x "$SRC/ks_imp_dyn/su3_rmd" ] || { echo "build finished but ks_imp_dyn/su3_rmd is missing" >&2; exit 1; }
run mkdir -p "$PREFIX/bin"
run install -m 0755 "$SRC/ks_imp_dyn/su3_rmd" "$PREFIX/bin/su3_rmd"
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/su3_rmd"
