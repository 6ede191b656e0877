#!/usr/bin/env bash
# milc.sh SRC_DIR PREFIX -- build MILC's su3_rmd (application ks_imp_dyn, R algorithm with
# improved staggered quarks; MILC 7.8.x as in Table I) from a tree fetched by
# `fetch.sh milc SRC_DIR` and install it as PREFIX/bin/su3_rmd.
#
# The one build recipe of MILC: the ReFrame build fixture and containers/milc.def both run it.
# MILC's generic application Makefile is copied into ks_imp_dyn (as upstream documents) and its
# choices are set on the make command line: MPI (MPP=true), no SciDAC/QIO/QMP, no GPU.
#
# Two fixes, both from the build script (the upstream sources stay untouched):
#
# * MPI-3. generic/com_mpi.c:579 calls MPI_Errhandler_create and MPI_Errhandler_set, removed in
#   MPI-3.0; Open MPI >= 4 no longer provides them (its mpi.h turns any use into a compile-time
#   error). ADDDEFINES (MILC's Makefile hook for extra -D flags, appended to CFLAGS) maps them to
#   their MPI-2 replacements, MPI_Comm_create_errhandler / MPI_Comm_set_errhandler, which take
#   the same arguments (MILC's err_func already has the MPI_Comm_errhandler_function signature).
#   -DOMPI_OMIT_MPI1_COMPAT_DECLS=1 tells Open MPI's mpi.h not to declare the removed functions
#   (with the mapping, its poisoned declaration of MPI_Errhandler_create would otherwise become
#   one of MPI_Comm_create_errhandler); other MPIs ignore that macro.
#
# * Parallel make. ks_imp_dyn/Make_template has `target: libmake localmake`, where libmake runs
#   the library makefile and localmake links against ../libraries/{su3,complex}.<prec>.a, files
#   for which the application's makefile has no rule. make -j starts both at once and stops with
#   "No rule to make target '../libraries/su3.1.a', needed by 'localmake'" (every time on a fresh
#   tree, 8 s in). Likewise the rule that forces a clean rebuild (.lastmake.*) deletes
#   quark_action.h and gauge_action.h while make -j may already be copying them in. The
#   application Makefile is our copy of MILC's generic Makefile; two order-only rules appended
#   to it give make the ordering these rules rely on, so make -j is safe (no retry with -j 1).
#
# Environment:
#   MPICC, MPICXX    MPI compiler wrappers (default mpicc, mpicxx)
#   MAKE_JOBS        parallel make jobs (default 4)
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
say "+ appending the parallel-make ordering to ks_imp_dyn/Makefile"
cat >> "$SRC/ks_imp_dyn/Makefile" <<'MAKE'

# --- added by hpcvar's build script (reframe_tests/apps/build/milc.sh): make -j ordering ---
# The libraries exist only once libmake has run; the action headers must be copied only after
# the .lastmake rule has deleted the old ones.
${LIBRARIES}: | libmake
quark_action.h gauge_action.h: | ${LASTMAKE}
MAKE
make_args=(
    su3_rmd
    COMPILER=gnu MPP=true PRECISION="$PRECISION" OMP="$OMP"
    CC="$MPICC" CXX="$MPICXX" OPT="$OPT"
    ADDDEFINES="-DOMPI_OMIT_MPI1_COMPAT_DECLS=1 -DMPI_Errhandler_create=MPI_Comm_create_errhandler -DMPI_Errhandler_set=MPI_Comm_set_errhandler"
    WANTQOP= WANTQIO= WANTQMP= WANTQUDA= WANTQPHIX= WANTQPHIXJ= WANTGRID= WANTFFTW= WANTPRIMME=
)
cd "$SRC/ks_imp_dyn"
run make -j "$MAKE_JOBS" "${make_args[@]}"

[ -x "$SRC/ks_imp_dyn/su3_rmd" ] || { echo "build finished but ks_imp_dyn/su3_rmd is missing" >&2; exit 1; }
run mkdir -p "$PREFIX/bin"
run install -m 0755 "$SRC/ks_imp_dyn/su3_rmd" "$PREFIX/bin/su3_rmd"
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/su3_rmd"
