#!/usr/bin/env bash
# mpip.sh SRC_DIR PREFIX -- build mpiP 3.5 (LLNL/mpiP) from a tree fetched by
# `fetch.sh mpip SRC_DIR` and install the shared library as PREFIX/lib/libmpiP.so, which the
# application tests preload (LD_PRELOAD) into the ranks of a run when `-S mpip=...` asks for it.
#
# Built without libunwind and binutils (call sites are reported by address; the per-routine
# aggregate table that hpcvar's mpi_profile keeps does not need source lookup). mpiP's make
# runs make-wrappers.py, which reads LOGNAME (unset in CI containers and some batch jobs).
#
# Environment:
#   MPICC       MPI C compiler wrapper (default mpicc)
#   MPIF90      MPI Fortran compiler wrapper for the Fortran wrappers (default mpif90;
#               built without Fortran support when it is missing)
#   MAKE_JOBS   parallel make jobs (default 4)
set -eu
set -o pipefail

say() { printf '[hpcvar-build mpip] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$(mkdir -p "$2" && cd "$2" && pwd)
MPICC=${MPICC:-mpicc}
MPIF90=${MPIF90:-mpif90}
MAKE_JOBS=${MAKE_JOBS:-4}
export LOGNAME=${LOGNAME:-${USER:-hpcvar}}

if [ ! -f "$SRC/mpiPi.c" ] || [ ! -x "$SRC/configure" ]; then
    echo "$SRC does not look like an LLNL/mpiP source tree" >&2; exit 1
fi
command -v "$MPICC" >/dev/null 2>&1 || { echo "MPI C compiler '$MPICC' not found" >&2; exit 1; }

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"
fortran=(--with-f77="$MPIF90")
command -v "$MPIF90" >/dev/null 2>&1 || { say "no $MPIF90: without Fortran wrappers"; fortran=(--disable-fortranxlate); }

# Out-of-tree builds are not supported by mpiP's makefiles: build in a copy.
BUILD=$(mktemp -d "${TMPDIR:-/tmp}/hpcvar-mpip.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
cp -R "$SRC/." "$BUILD/"
cd "$BUILD"
run ./configure --prefix="$PREFIX" --with-cc="$MPICC" "${fortran[@]}" --disable-libunwind --disable-bfd
run make -j "$MAKE_JOBS" shared
[ -f libmpiP.so ] || { echo "build finished but libmpiP.so is missing" >&2; exit 1; }
run mkdir -p "$PREFIX/lib"
run install -m 0755 libmpiP.so "$PREFIX/lib/libmpiP.so"
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/lib/libmpiP.so"
