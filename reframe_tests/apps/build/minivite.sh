#!/usr/bin/env bash
# minivite.sh SRC_DIR PREFIX -- build miniVite 1.0 (ECP-ExaGraph/miniVite tag v1.0, the version of
# Table I) from a tree fetched by `fetch.sh minivite SRC_DIR` and install it as PREFIX/bin/miniVite
# (release 1.0 names its executable dspl, later releases miniVite: both names are installed).
# Later releases (v1.1, v1.2, ...) build with the same script.
#
# The one build recipe of miniVite: the ReFrame build fixture and containers/minivite.def both
# run it. miniVite's own Makefile is used, with CXX/CXXFLAGS/OPTFLAGS set on the command line (the
# variables Spack's minivite package sets; upstream's OPTFLAGS carry Intel-only -xHost -qopenmp).
# The build runs in a copy of the sources (BUILD_DIR): the Makefile builds in place and the patch
# below must not touch the fetched tree.
#
# Patch to the copy (sed, checked afterwards):
#   dspl.hpp: every `default(none)` OpenMP clause becomes `default(shared)`. miniVite 1.0 reads
#   const locals and const parameters (nv, vsz, csz, base, me) inside `default(none)` regions
#   without listing them. OpenMP <= 4.0 made const variables predetermined shared, so GCC < 9
#   accepted that; OpenMP 4.5 dropped the rule and GCC >= 9 stops with
#   "dspl.hpp:1323: 'nv' not specified in enclosing 'parallel'" (11 such errors). Upstream fixed
#   it the same way in v1.1 (commit 23476d9 "fixed some issues that caused the code to crash for
#   latest versions of LLVM and GCC": default(none) -> default(shared) in 15 of the 20 clauses).
#   The change is behaviour-neutral: the variables it affects are const and read-only, shared as
#   GCC < 9 shared them, and in a region whose variables are all listed explicitly the default
#   clause has no effect. It is applied to any tree that has such clauses: v1.1 and later keep 5,
#   which compile either way and are unchanged in behaviour by it too.
#
# Environment:
#   MPICXX           MPI C++ compiler wrapper (default mpicxx)
#   MAKE_JOBS        parallel make jobs (default 4; miniVite is one translation unit)
#   BUILD_DIR        where the sources are copied and built (default SRC_DIR/_hpcvar_build/minivite);
#                    emptied first
#   MINIVITE_OPT     optimisation flags (default -O3, upstream's)
#   MINIVITE_FLAGS   compile definitions (default: the -D flags of the tree's own Makefile OPTFLAGS,
#                    v1.0: -DCHECK_NUM_EDGES -DPRINT_EXTRA_NEDGES, v1.2: -DPRINT_DIST_STATS; e.g.
#                    add -DUSE_32_BIT_GRAPH for graphs below 2^31 vertices)
# OpenMP is required by miniVite's sources and always enabled (-fopenmp); run with
# OMP_NUM_THREADS=1 for MPI only.
set -eu
set -o pipefail

say() { printf '[hpcvar-build minivite] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
PREFIX=$(cd "$2" && pwd)
MPICXX=${MPICXX:-mpicxx}
MAKE_JOBS=${MAKE_JOBS:-4}
BUILD_DIR=${BUILD_DIR:-$SRC/_hpcvar_build/minivite}
OPT=${MINIVITE_OPT:--O3}

if [ ! -f "$SRC/Makefile" ] || [ ! -f "$SRC/main.cpp" ] || [ ! -f "$SRC/dspl.hpp" ]; then
    echo "$SRC does not look like a miniVite source tree" >&2; exit 1
fi
command -v "$MPICXX" >/dev/null 2>&1 || { echo "MPI C++ compiler '$MPICXX' not found" >&2; exit 1; }
if [ -z "${MINIVITE_FLAGS+set}" ]; then
    # The -D words of the Makefile's `OPTFLAGS = ...` line, up to its first comment.
    MINIVITE_FLAGS=$(sed -n 's/^OPTFLAGS *= *//p' "$SRC/Makefile" | head -n 1 | cut -d'#' -f1 \
                     | tr -s ' \t' '\n' | grep '^-D' | tr '\n' ' ' || true)
fi

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "build:    $BUILD_DIR"
say "prefix:   $PREFIX"
say "compiler: $MPICXX ($("$MPICXX" --version 2>/dev/null | head -n 1))"
say "defines:  ${MINIVITE_FLAGS:-(none)}"

run rm -rf "$BUILD_DIR"
run mkdir -p "$BUILD_DIR"
run cp "$SRC/Makefile" "$SRC"/*.cpp "$SRC"/*.hpp "$BUILD_DIR/"

clauses=$(grep -c 'default(none)' "$BUILD_DIR/dspl.hpp" || true)
if [ "$clauses" -gt 0 ]; then
    say "+ patch dspl.hpp: default(none) -> default(shared) in $clauses OpenMP clauses (GCC >= 9, see header)"
    sed -i 's/default(none)/default(shared)/g' "$BUILD_DIR/dspl.hpp"
    if grep -q 'default(none)' "$BUILD_DIR/dspl.hpp"; then
        echo "patching dspl.hpp failed: default(none) still present" >&2; exit 1
    fi
fi

start=$(date +%s.%N)
run make -C "$BUILD_DIR" -j "$MAKE_JOBS" CXX="$MPICXX" \
    CXXFLAGS="-std=c++11 -g $OPT -fopenmp -I. $MINIVITE_FLAGS" OPTFLAGS="$OPT -fopenmp"
say "compiled in $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"

exe=
for candidate in miniVite dspl; do
    if [ -x "$BUILD_DIR/$candidate" ]; then exe=$BUILD_DIR/$candidate; break; fi
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
