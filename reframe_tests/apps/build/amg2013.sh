#!/usr/bin/env bash
# amg2013.sh SRC_DIR PREFIX -- build AMG 1.1 (LLNL/AMG, the "AMG 1.1" of Table I) from a tree
# fetched by `fetch.sh amg2013 SRC_DIR` and install the executable as PREFIX/bin/amg.
#
# The one build recipe of AMG 1.1: the ReFrame build fixture and containers/amg2013.def both run
# it. AMG's own Makefile system is used (Makefile.include), with its variables overridden on
# the make command line, so the source tree stays pristine.
#
# Environment:
#   MPICC        MPI C compiler wrapper (default mpicc)
#   MAKE_JOBS    parallel make jobs (default 4)
#   AMG_OPENMP   1: build with OpenMP threading (-fopenmp -DHYPRE_USING_OPENMP); default 0,
#                MPI only, as in the paper (64 ranks per node)
#   AMG_CFLAGS   replaces the default compile flags
#                (-O2 -DTIMER_USE_MPI -DHYPRE_NO_GLOBAL_PARTITION -fcommon)
set -eu
set -o pipefail

say() { printf '[hpcvar-build amg2013] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$2
MPICC=${MPICC:-mpicc}
MAKE_JOBS=${MAKE_JOBS:-4}

if [ ! -f "$SRC/Makefile.include" ] || [ ! -f "$SRC/test/amg.c" ]; then
    echo "$SRC does not look like an LLNL/AMG source tree" >&2; exit 1
fi
command -v "$MPICC" >/dev/null 2>&1 || { echo "MPI C compiler '$MPICC' not found" >&2; exit 1; }

# The hypre-derived sources rely on tentative definitions: gcc >= 10 needs -fcommon.
# HYPRE_NO_GLOBAL_PARTITION: assumed partition, recommended upstream for thousands of ranks.
CFLAGS_DEFAULT="-O2 -DTIMER_USE_MPI -DHYPRE_NO_GLOBAL_PARTITION -fcommon"
CFLAGS=${AMG_CFLAGS:-$CFLAGS_DEFAULT}
LFLAGS="-lm"
if [ "${AMG_OPENMP:-0}" = 1 ]; then
    CFLAGS="$CFLAGS -DHYPRE_USING_OPENMP -fopenmp"
    LFLAGS="$LFLAGS -fopenmp"
fi

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"
say "compiler: $MPICC ($("$MPICC" --version 2>/dev/null | head -n 1))"
say "flags:    INCLUDE_CFLAGS='$CFLAGS' INCLUDE_LFLAGS='$LFLAGS'"

run make -C "$SRC" -j "$MAKE_JOBS" CC="$MPICC" INCLUDE_CFLAGS="$CFLAGS" INCLUDE_LFLAGS="$LFLAGS"

[ -x "$SRC/test/amg" ] || { echo "build finished but $SRC/test/amg is missing" >&2; exit 1; }
run mkdir -p "$PREFIX/bin"
run install -m 0755 "$SRC/test/amg" "$PREFIX/bin/amg"
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/amg"
