#!/usr/bin/env bash
# minivite.sh SRC_DIR PREFIX -- build miniVite 1.0 (the version of Table I) from a tree fetched
# by `fetch.sh minivite SRC_DIR` and install it as PREFIX/bin/miniVite (release 1.0 names its
# executable dspl; later releases miniVite: both names are installed).
#
# The one build recipe of miniVite: the ReFrame build fixture and containers/minivite.def both
# run it. miniVite's Makefile is used with CXX/CXXFLAGS/OPTFLAGS set on the command line (the
# same variables Spack's minivite package sets).
#
# Environment:
#   MPICXX           MPI C++ compiler wrapper (default mpicxx)
#   MAKE_JOBS        parallel make jobs (default 4)
#   MINIVITE_FLAGS   extra compile definitions (default -DPRINT_DIST_STATS; e.g. add
#                    -DUSE_32_BIT_GRAPH for graphs below 2^31 vertices)
# OpenMP is required by miniVite's sources and always enabled (-fopenmp).
set -eu
set -o pipefail

say() { printf '[hpcvar-build minivite] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$2
MPICXX=${MPICXX:-mpicxx}
MAKE_JOBS=${MAKE_JOBS:-4}
EXTRA=${MINIVITE_FLAGS:--DPRINT_DIST_STATS}

if [ ! -f "$SRC/Makefile" ] || [ ! -f "$SRC/main.cpp" ]; then
    echo "$SRC does not look like a miniVite source tree" >&2; exit 1
fi
command -v "$MPICXX" >/dev/null 2>&1 || { echo "MPI C++ compiler '$MPICXX' not found" >&2; exit 1; }

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"
say "compiler: $MPICXX ($("$MPICXX" --version 2>/dev/null | head -n 1))"

run make -C "$SRC" -j "$MAKE_JOBS" CXX="$MPICXX" \
    CXXFLAGS="-std=c++11 -g -O3 -fopenmp -I. $EXTRA" OPTFLAGS="-fopenmp" LDFLAGS="-fopenmp"

exe=
for candidate in miniVite dspl; do
    if [ -x "$SRC/$candidate" ]; then exe=$SRC/$candidate; break; fi
done
[ -n "$exe" ] || { echo "build finished but neither miniVite nor dspl was produced" >&2; exit 1; }
run mkdir -p "$PREFIX/bin"
run install -m 0755 "$exe" "$PREFIX/bin/miniVite"
if [ "$(basename "$exe")" = dspl ]; then
    run ln -sf miniVite "$PREFIX/bin/dspl"
fi
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/miniVite (built as $(basename "$exe"))"
