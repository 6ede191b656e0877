#!/usr/bin/env bash
# amg2023.sh SRC_DIR PREFIX [HYPRE_SRC] -- build hypre (pinned in sources.yaml, amg2023.deps.hypre)
# and then AMG2023 from a tree fetched by `fetch.sh amg2023 SRC_DIR`; installs hypre into
# PREFIX/hypre and the executable as PREFIX/bin/amg.
#
# The one build recipe of AMG2023: the ReFrame build fixture and containers/amg2023.def both run
# it. hypre comes from, in this order:
#   HYPRE_PREFIX  an existing hypre installation (lib/libHYPRE.* and include/HYPRE.h): not rebuilt
#   HYPRE_SRC     or the third argument: a hypre source tree (`fetch.sh amg2023/hypre DIR`)
#   SRC_DIR/_deps/hypre, where `fetch.sh amg2023 SRC_DIR` puts it
#
# Environment:
#   MPICC, MPICXX  MPI compiler wrappers (default mpicc, mpicxx)
#   MAKE_JOBS      parallel build jobs (default 4)
#   AMG_OPENMP     1: OpenMP in hypre and AMG2023 (default 0, MPI only)
#   HYPRE_FULL     1: build all of hypre; default 0 builds only what AMG2023 links (see below)
#   BUILD_DIR      out-of-source CMake build directory (default SRC_DIR/_hpcvar_build)
set -eu
set -o pipefail

say() { printf '[hpcvar-build amg2023] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
    echo "usage: $0 SRC_DIR PREFIX [HYPRE_SRC]" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
PREFIX=$(cd "$2" && pwd)
MPICC=${MPICC:-mpicc}
MPICXX=${MPICXX:-mpicxx}
MAKE_JOBS=${MAKE_JOBS:-4}
BUILD_DIR=${BUILD_DIR:-$SRC/_hpcvar_build}
OPENMP=${AMG_OPENMP:-0}

if [ ! -f "$SRC/CMakeLists.txt" ] || [ ! -f "$SRC/amg.c" ]; then
    echo "$SRC does not look like an LLNL/AMG2023 source tree" >&2; exit 1
fi
for tool in "$MPICC" "$MPICXX" cmake make; do
    command -v "$tool" >/dev/null 2>&1 || { echo "'$tool' not found" >&2; exit 1; }
done

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"
say "compilers: $MPICC / $MPICXX ($("$MPICC" --version 2>/dev/null | head -n 1))"

# ------------------------------------------------------------------ hypre
if [ -n "${HYPRE_PREFIX:-}" ]; then
    if ! ls "$HYPRE_PREFIX"/lib*/libHYPRE.* >/dev/null 2>&1 || [ ! -f "$HYPRE_PREFIX/include/HYPRE.h" ]; then
        echo "HYPRE_PREFIX=$HYPRE_PREFIX holds no hypre installation" >&2; exit 1
    fi
    say "hypre:    using the installation in $HYPRE_PREFIX (HYPRE_PREFIX)"
else
    HYPRE_SRC=${3:-${HYPRE_SRC:-$SRC/_deps/hypre}}
    [ -x "$HYPRE_SRC/src/configure" ] \
        || { echo "no hypre source tree at $HYPRE_SRC (run: fetch.sh amg2023/hypre $HYPRE_SRC)" >&2; exit 1; }
    HYPRE_SRC=$(cd "$HYPRE_SRC" && pwd)
    HYPRE_PREFIX=$PREFIX/hypre
    say "hypre:    building $HYPRE_SRC into $HYPRE_PREFIX"
    [ -f "$HYPRE_SRC/.hpcvar-source" ] && say "hypre pinned: $(cat "$HYPRE_SRC/.hpcvar-source")"
    hypre_openmp=--without-openmp
    [ "$OPENMP" = 1 ] && hypre_openmp=--with-openmp
    # AMG2023's amg.c uses only the IJ interface, ParCSR matrices/vectors, BoomerAMG and the
    # Krylov solvers (HYPRE_IJ*, HYPRE_ParCSR*, HYPRE_BoomerAMG*, HYPRE_PCG*/GMRES*). hypre's
    # (semi-)structured interfaces (struct_mv, struct_ls, sstruct_mv, sstruct_ls: 178 of its 643
    # C files, a third of its compile time) are never called, so by default they are left out:
    # empty directory lists and object-file lists on the make command line (they reach every
    # sub-make through MAKEFLAGS; the source tree is not edited). libHYPRE.a then holds
    # everything amg.c links against; HYPRE_FULL=1 builds the whole library.
    hypre_make_vars=()
    if [ "${HYPRE_FULL:-0}" != 1 ]; then
        hypre_make_vars=(HYPRE_STRUCT_DIRS= HYPRE_SSTRUCT_DIRS=
                         STRUCTMVFILES= STRUCTLSFILES= SSTRUCTMVFILES= SSTRUCTLSFILES=)
        say "hypre:    IJ/ParCSR/BoomerAMG/Krylov only (HYPRE_FULL=1 builds all of hypre)"
    fi
    (
        cd "$HYPRE_SRC/src"
        run ./configure --prefix="$HYPRE_PREFIX" CC="$MPICC" CXX="$MPICXX" \
            --with-MPI --disable-fortran --disable-bigint "$hypre_openmp"
        run make -j "$MAKE_JOBS" "${hypre_make_vars[@]}"
        run make install "${hypre_make_vars[@]}"
    )
    if [ -f "$HYPRE_SRC/.hpcvar-source" ]; then
        run mkdir -p "$PREFIX/share/hpcvar/deps"
        run install -m 0644 "$HYPRE_SRC/.hpcvar-source" "$PREFIX/share/hpcvar/deps/hypre.hpcvar-source"
    fi
fi

# ------------------------------------------------------------------ AMG2023
# Some AMG2023 commits set LINKER_LANGUAGE CXX on `amg` while project() enables only C;
# enabling CXX right after project() (CMAKE_PROJECT_INCLUDE, CMake >= 3.15) makes every
# pinned commit configure. hypre built with MPI needs nothing else.
mkdir -p "$BUILD_DIR"
printf 'enable_language(CXX)\n' >"$BUILD_DIR/hpcvar-enable-cxx.cmake"
amg_openmp=OFF
[ "$OPENMP" = 1 ] && amg_openmp=ON
run cmake -S "$SRC" -B "$BUILD_DIR" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER="$MPICC" -DCMAKE_CXX_COMPILER="$MPICXX" \
    -DCMAKE_PROJECT_INCLUDE="$BUILD_DIR/hpcvar-enable-cxx.cmake" \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_BINDIR=bin \
    -DHYPRE_PREFIX="$HYPRE_PREFIX" -DAMG_WITH_MPI=ON -DAMG_WITH_OMP="$amg_openmp"
run cmake --build "$BUILD_DIR" --parallel "$MAKE_JOBS"
run cmake --install "$BUILD_DIR"

[ -x "$PREFIX/bin/amg" ] || { echo "build finished but $PREFIX/bin/amg is missing" >&2; exit 1; }
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/amg"
