#!/usr/bin/env bash
# imb.sh SRC_DIR PREFIX -- build IMB-MPI1 of the Intel MPI Benchmarks (intel/mpi-benchmarks,
# tag IMB-v2021.11) from a tree fetched by `fetch.sh imb SRC_DIR` into PREFIX/bin/IMB-MPI1: the
# independent reference the suite's collectives microbenchmark is compared with
# (benchmarks/bench_imb_reference.py).
#
# IMB's makefile defaults to Intel's compilers and builds with -Werror; the MPI C++ bindings
# header of Open MPI (mpi/cxx/*.h, deprecated and unused by IMB) fails -Wcast-function-type
# under GCC >= 8, so it is skipped with OMPI_SKIP_MPICXX (MPICH_SKIP_MPICXX for MPICH).
# IMB's own -O0 stays: it times MPI calls, not computation.
#
# Environment:
#   MPICC, MPICXX  MPI compiler wrappers (default mpicc, mpicxx)
#   MAKE_JOBS      parallel make jobs (default 4)
set -eu
set -o pipefail

say() { printf '[hpcvar-build imb] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$(mkdir -p "$2" && cd "$2" && pwd)
MPICC=${MPICC:-mpicc}
MPICXX=${MPICXX:-mpicxx}
MAKE_JOBS=${MAKE_JOBS:-4}

if [ ! -f "$SRC/src_cpp/Makefile" ] || [ ! -d "$SRC/src_c" ]; then
    echo "$SRC does not look like an intel/mpi-benchmarks source tree" >&2; exit 1
fi
command -v "$MPICXX" >/dev/null 2>&1 || { echo "MPI C++ compiler '$MPICXX' not found" >&2; exit 1; }
say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"

# IMB builds inside its tree (objects next to the sources): build in a copy.
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/hpcvar-imb.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
cp -R "$SRC/." "$BUILD/"
run make -C "$BUILD" -j "$MAKE_JOBS" IMB-MPI1 CC="$MPICC" CXX="$MPICXX" \
    CPPFLAGS="-DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX"
run mkdir -p "$PREFIX/bin"
run install -m 0755 "$BUILD/IMB-MPI1" "$PREFIX/bin/IMB-MPI1"
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/IMB-MPI1"
