#!/usr/bin/env bash
# umt.sh SRC_DIR PREFIX [CONDUIT_SRC] -- build conduit (pinned in sources.yaml,
# umt.deps.conduit) and then UMT from a tree fetched by `fetch.sh umt SRC_DIR`; installs conduit
# into PREFIX/conduit and UMT's test_driver into PREFIX/bin.
#
# The one build recipe of UMT: the ReFrame build fixture and containers/umt.def both run it.
# It follows upstream's build_and_run_umt.sh of the pinned commit: static conduit with MPI and
# Fortran, then UMT's CMake project in src/ with CONDUIT_ROOT. MFEM support is disabled
# (ENABLE_MFEM=OFF): the tests use test_driver's built-in blueprint mesh (-B local).
# conduit comes from, in this order:
#   CONDUIT_PREFIX  an existing conduit installation (lib/cmake/conduit): not rebuilt
#   CONDUIT_SRC     or the third argument: a conduit source tree with blt
#                   (`fetch.sh umt/conduit DIR`)
#   SRC_DIR/_deps/conduit, where `fetch.sh umt SRC_DIR` puts it
#
# Environment:
#   MPICC, MPICXX, MPIFC  MPI compiler wrappers (default mpicc, mpicxx, mpif90)
#   MAKE_JOBS             parallel build jobs (default 4)
#   UMT_OPENMP            1: ENABLE_OPENMP=ON (default 0, MPI only)
#   BUILD_DIR             CMake build directory root (default SRC_DIR/_hpcvar_build)
# Needs CMake >= 3.21 (conduit 0.9).
set -eu
set -o pipefail

say() { printf '[hpcvar-build umt] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
    echo "usage: $0 SRC_DIR PREFIX [CONDUIT_SRC]" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
PREFIX=$(cd "$2" && pwd)
MPICC=${MPICC:-mpicc}
MPICXX=${MPICXX:-mpicxx}
MPIFC=${MPIFC:-mpif90}
MAKE_JOBS=${MAKE_JOBS:-4}
BUILD_DIR=${BUILD_DIR:-$SRC/_hpcvar_build}

[ -f "$SRC/src/CMakeLists.txt" ] || { echo "$SRC does not look like an LLNL/UMT source tree" >&2; exit 1; }
for tool in "$MPICC" "$MPICXX" "$MPIFC" cmake make; do
    command -v "$tool" >/dev/null 2>&1 || { echo "'$tool' not found" >&2; exit 1; }
done

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"
say "compilers: $MPICC / $MPICXX / $MPIFC ($("$MPIFC" --version 2>/dev/null | head -n 1))"

# gfortran >= 10 rejects the MPI argument type mismatches in Teton unless told otherwise.
FFLAGS_EXTRA=
if "$MPIFC" --version 2>/dev/null | head -n 1 | grep -q 'GNU Fortran'; then
    FFLAGS_EXTRA=-fallow-argument-mismatch
fi

# ------------------------------------------------------------------ conduit
if [ -n "${CONDUIT_PREFIX:-}" ]; then
    ls -d "$CONDUIT_PREFIX"/lib*/cmake/conduit >/dev/null 2>&1 \
        || { echo "CONDUIT_PREFIX=$CONDUIT_PREFIX holds no conduit installation" >&2; exit 1; }
    say "conduit:  using the installation in $CONDUIT_PREFIX (CONDUIT_PREFIX)"
else
    CONDUIT_SRC=${3:-${CONDUIT_SRC:-$SRC/_deps/conduit}}
    [ -f "$CONDUIT_SRC/src/CMakeLists.txt" ] \
        || { echo "no conduit source tree at $CONDUIT_SRC (run: fetch.sh umt/conduit $CONDUIT_SRC)" >&2; exit 1; }
    [ -f "$CONDUIT_SRC/src/blt/SetupBLT.cmake" ] \
        || { echo "$CONDUIT_SRC has no blt submodule (use the src-with-blt tarball or --recurse-submodules)" >&2; exit 1; }
    CONDUIT_SRC=$(cd "$CONDUIT_SRC" && pwd)
    CONDUIT_PREFIX=$PREFIX/conduit
    say "conduit:  building $CONDUIT_SRC into $CONDUIT_PREFIX"
    [ -f "$CONDUIT_SRC/.hpcvar-source" ] && say "conduit pinned: $(cat "$CONDUIT_SRC/.hpcvar-source")"
    run cmake -S "$CONDUIT_SRC/src" -B "$BUILD_DIR/conduit" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$CONDUIT_PREFIX" \
        -DCMAKE_C_COMPILER="$MPICC" -DCMAKE_CXX_COMPILER="$MPICXX" -DCMAKE_Fortran_COMPILER="$MPIFC" \
        -DBUILD_SHARED_LIBS=OFF -DENABLE_TESTS=OFF -DENABLE_EXAMPLES=OFF -DENABLE_DOCS=OFF \
        -DENABLE_FORTRAN=ON -DENABLE_MPI=ON -DENABLE_PYTHON=OFF -DENABLE_UTILS=OFF \
        -DENABLE_RELAY_WEBSERVER=OFF
    run cmake --build "$BUILD_DIR/conduit" --parallel "$MAKE_JOBS"
    run cmake --install "$BUILD_DIR/conduit"
    if [ -f "$CONDUIT_SRC/.hpcvar-source" ]; then
        run mkdir -p "$PREFIX/share/hpcvar/deps"
        run install -m 0644 "$CONDUIT_SRC/.hpcvar-source" "$PREFIX/share/hpcvar/deps/conduit.hpcvar-source"
    fi
fi

# ------------------------------------------------------------------ UMT
umt_openmp=OFF
[ "${UMT_OPENMP:-0}" = 1 ] && umt_openmp=ON
run cmake -S "$SRC/src" -B "$BUILD_DIR/umt" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$PREFIX" \
    -DCMAKE_C_COMPILER="$MPICC" -DCMAKE_CXX_COMPILER="$MPICXX" -DCMAKE_Fortran_COMPILER="$MPIFC" \
    -DCMAKE_Fortran_FLAGS="$FFLAGS_EXTRA" \
    -DCONDUIT_ROOT="$CONDUIT_PREFIX" -DENABLE_MFEM=OFF -DENABLE_OPENMP="$umt_openmp"
run cmake --build "$BUILD_DIR/umt" --parallel "$MAKE_JOBS"
run cmake --install "$BUILD_DIR/umt"

[ -x "$PREFIX/bin/test_driver" ] || { echo "build finished but $PREFIX/bin/test_driver is missing" >&2; exit 1; }
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/test_driver"
