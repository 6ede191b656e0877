#!/usr/bin/env bash
# umt.sh SRC_DIR PREFIX -- build UMT 2.0 (LLNL/UMT tag v2.0, "UMT2015 for APEX": Teton with the
# SuOlsonTest driver and .cmg mesh decks; the UMT 2.0 of Table I) from a tree fetched by
# `fetch.sh umt SRC_DIR`, and install
#     PREFIX/bin/SuOlsonTest
#     PREFIX/lib/lib{Infrastructure,TetonUtils,c2k,cmgp}.so   (found through RPATH $ORIGIN/../lib)
#     PREFIX/share/umt/*.cmg                                  (the decks of SRC_DIR/benchmarks)
#
# The one build recipe of UMT: the ReFrame build fixture and containers/umt.def both run it.
# It follows README.APEX: a make.defs in the top directory, `make`, then `make SuOlsonTest` in
# Teton/. UMT 2.0 ships make.defs examples for Intel/Cray/BG-Q only; this script writes one for
# GCC (gfortran) and an MPI's compiler wrappers. The build runs in a copy of SRC_DIR (BUILD_DIR):
# UMT's makefiles build in place and the patches below must not touch the fetched tree.
#
# Patches to the copy (sed, each applied only if its target text is found, checked afterwards):
#   1. Teton/transport/Teton/misc/mpi_param_mod.F90: every .F90 of Teton in the v2.0 tarball is
#      already fpp output (the Intel rule `fpp $< > $*.f90` overwrote the .F90 sources on a
#      case-insensitive file system before they were committed), and this one has Cray MPICH's
#      mpif.h (/opt/cray/mpt/7.3.0/...) pasted in: MPICH's MPI_COMM_WORLD etc. make every
#      Fortran MPI call fail with MPI_ERR_COMM under Open MPI. The pasted block is replaced by
#      `include 'mpif.h'`, so the MPI being built with supplies its own constants (the other
#      Fortran files already `include 'mpif.h'` themselves).
# Extra make prerequisites (not a patch: a second makefile given with -f):
#   2. Teton/transport/Teton/deps misses some module dependencies (QuadratureData_mod is listed
#      as QuadratureData.o; Boundary_mod, ZoneData_mod, UpdateMaterialCoupling and initcomm lack
#      modules they `use`), so a parallel make compiles them before the .mod files exist. The
#      missing edges go into BUILD_DIR/teton-extra-deps.mk. The Teton makefile also builds its
#      subdirectories and, in parallel, the same objects for libInfrastructure from Teton/;
#      the steps below therefore build the subdirectories first, then the libraries.
#
# Environment:
#   MPICC, MPICXX         MPI C and C++ compiler wrappers (default mpicc, mpicxx)
#   MPIF90 (or MPIFC)     MPI Fortran wrapper (default mpif90)
#   MAKE_JOBS             parallel make jobs (default 4)
#   BUILD_DIR             where the tree is copied and built (default
#                         SRC_DIR/_hpcvar_build/umt-<checksum of PREFIX>); emptied first
#   UMT_OPT               optimisation flags (default -O2; upstream's Intel defs use -O3 -no-prec-div)
#   UMT_FLIBS             libraries for linking Fortran MPI code with the C++ linker (default:
#                         from `$MPIF90 --showme:link` (Open MPI) or `$MPIF90 -link_info` (MPICH))
# UMT is built with OpenMP (-fopenmp) as upstream; run it with OMP_NUM_THREADS=1 for MPI only.
set -eu
set -o pipefail

say() { printf '[hpcvar-build umt] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
mkdir -p "$2"
PREFIX=$(cd "$2" && pwd)
MPICC=${MPICC:-mpicc}
MPICXX=${MPICXX:-mpicxx}
MPIF90=${MPIF90:-${MPIFC:-mpif90}}
MAKE_JOBS=${MAKE_JOBS:-4}
# One build tree per install prefix: build fixtures of several environments share one fetch.
BUILD_DIR=${BUILD_DIR:-$SRC/_hpcvar_build/umt-$(printf '%s' "$PREFIX" | cksum | cut -d' ' -f1)}
UMT_OPT=${UMT_OPT:--O2}

if [ ! -f "$SRC/Teton/SuOlsonTest.cc" ] || [ ! -f "$SRC/CMG_CLEAN/src/cmgparse.tab.c" ]; then
    echo "$SRC does not look like a UMT 2.0 (LLNL/UMT v2.0) source tree" >&2; exit 1
fi
for tool in "$MPICC" "$MPICXX" "$MPIF90" make; do
    command -v "$tool" >/dev/null 2>&1 || { echo "'$tool' not found" >&2; exit 1; }
done

say "source:   $SRC"
[ -f "$SRC/.hpcvar-source" ] && say "pinned:   $(cat "$SRC/.hpcvar-source")"
say "prefix:   $PREFIX"
say "build:    $BUILD_DIR"
say "compilers: $MPICC / $MPICXX / $MPIF90 ($("$MPIF90" --version 2>/dev/null | head -n 1))"

# gfortran >= 10 rejects the MPI buffer type/rank mismatches of Teton's mpif.h calls.
FFLAGS_EXTRA=
if "$MPIF90" --version 2>/dev/null | head -n 1 | grep -q 'GNU Fortran'; then
    FFLAGS_EXTRA=-fallow-argument-mismatch
fi

# The Fortran MPI libraries (and libgfortran): SuOlsonTest and the shared libraries are linked by
# the C++ wrapper, which does not know them.
if [ -z "${UMT_FLIBS:-}" ]; then
    if UMT_FLIBS=$("$MPIF90" --showme:link 2>/dev/null); then
        :                                                    # Open MPI
    elif info=$("$MPIF90" -link_info 2>/dev/null); then
        UMT_FLIBS=${info#* }                                 # MPICH: drop the compiler name
    else
        echo "cannot ask $MPIF90 for its link flags; set UMT_FLIBS" >&2; exit 1
    fi
fi
if "$MPIF90" --version 2>/dev/null | head -n 1 | grep -q 'GNU Fortran'; then
    UMT_FLIBS="$UMT_FLIBS -lgfortran"
fi
say "Fortran link flags: $UMT_FLIBS"

# ------------------------------------------------------------------ copy and patch
run rm -rf "$BUILD_DIR"
run mkdir -p "$BUILD_DIR"
(cd "$SRC" && tar -cf - --exclude=./_hpcvar_build .) | (cd "$BUILD_DIR" && tar -xf -)

# Patch 1 (see the header): Cray MPICH's pasted mpif.h -> the MPI's own mpif.h.
param="$BUILD_DIR/Teton/transport/Teton/misc/mpi_param_mod.F90"
run sed -i -e "\\|^# 1 \"[^\"]*/mpif\\.h\" 1|,\\|^# [0-9]* \"misc/mpi_param_mod\\.F90\" 2|c\\      include 'mpif.h'" "$param"
if grep -q 'PARAMETER (MPI_' "$param" || ! grep -q "^ *include 'mpif.h'" "$param"; then
    echo "patch 1 failed: $param still holds pasted MPI constants" >&2; exit 1
fi

# Extra prerequisites 2 (see the header).
cat > "$BUILD_DIR/teton-extra-deps.mk" <<'EOF'
# Module dependencies missing from Teton/transport/Teton/deps (written by hpcvar's umt.sh).
mods/Boundary_mod.o: mods/kind_mod.o
mods/QuadratureData_mod.o: mods/kind_mod.o mods/constant_mod.o
mods/ZoneData_mod.o: mods/Size_mod.o
rt/UpdateMaterialCoupling.o: mods/radconstant_mod.o mods/Material_mod.o mods/constant_mod.o \
	mods/Geometry_mod.o mods/QuadratureList_mod.o mods/ZoneData_mod.o mods/Size_mod.o mods/kind_mod.o
rt/initcomm.o: mods/Size_mod.o
EOF

# make.defs: the variables UMT's makefiles read from it (they include it), set for GCC and the
# MPI wrappers; compilers and flags come from the make command line (UMT_* below).
cat > "$BUILD_DIR/make.defs" <<'EOF'
# Written by hpcvar's umt.sh for GCC/gfortran and MPI compiler wrappers; the UMT_* variables are
# given on the make command line.
CWD          = $(shell pwd)
USE_FAKE_CMG = off
STATIC_LINK  = off
CFLAGS_CMG   =
OPENMP_FLAGS = -fopenmp
FLIBS        = $(UMT_FLIBS) -lm
INCPATH      =

CC   = $(UMT_MPICC)
CXX  = $(UMT_MPICXX)
F90  = $(UMT_MPIF90)
LD   = $(UMT_MPICXX)
LINK = $(UMT_MPICXX)

# MPI everywhere; the C++ bindings of the MPI headers are not wanted.
CPPFLAGS  += -DLINUX -DLinux -DUSE_MPI -DMPICH_SKIP_MPICXX -DOMPI_SKIP_MPICXX
CPPFFLAGS  = -DLINUX -DLinux -Dmpi -DMPI -DUSE_MPI $(OPENMP_FLAGS)

# Shared libraries, position-independent code, optimised with debug symbols; INCPATH is what
# each makefile adds after including this file (so these stay recursively expanded).
CFLAGS    = -g $(UMT_OPT) -w -fPIC $(OPENMP_FLAGS) $(INCPATH)
CXXFLAGS  = -g $(UMT_OPT) -w -fPIC $(OPENMP_FLAGS) $(INCPATH)
F90FLAGS  = -g $(UMT_OPT) -fPIC -cpp $(UMT_FFLAGS_EXTRA) $(CPPFFLAGS) $(INCPATH)
LIB_EXT   = so
LDFLAGS   = -shared -fPIC
LINKFLAGS = $(CXXFLAGS)

PLATFORM_LIBPATH_EXTRAS =
PLATFORM_Infrastructure_EXTRAS = $(OPENMP_FLAGS) $(FLIBS)
PLATFORM_TetonUtils_EXTRAS =
# The installed executable finds the four UMT libraries in PREFIX/lib.
PLATFORM_EXE_EXTRAS = $(OPENMP_FLAGS) -L../CMG_CLEAN/src -L../cmg2Kull/sources -L../Teton \
	-Wl,-rpath,'$$ORIGIN/../lib' -ldl

# Compile rules the makefiles rely on: Fortran preprocessed by the compiler itself (-cpp),
# C++ objects, and the C++ dependency files they include.
%.o: %.F90
	$(F90) $(F90FLAGS) -c -o $@ $<
%.o: %.cc
	$(CXX) $(CXXFLAGS) $(CPPFLAGS) -c -o $@ $<
%.d: %.cc
	$(CXX) $(CPPFLAGS) $(INCPATH) -MM -MF $@ $<
EOF

# ------------------------------------------------------------------ build
vars=(UMT_MPICC="$MPICC" UMT_MPICXX="$MPICXX" UMT_MPIF90="$MPIF90" UMT_OPT="$UMT_OPT"
      UMT_FFLAGS_EXTRA="$FFLAGS_EXTRA" UMT_FLIBS="$UMT_FLIBS")
B=$BUILD_DIR
start=$(date +%s)
run make -C "$B" -j "$MAKE_JOBS" "${vars[@]}" CMG_CLEAN cmg2Kull               # libcmgp, libc2k
run make -C "$B/Teton/transport/Teton" -j "$MAKE_JOBS" "${vars[@]}" \
    -f Makefile -f "$B/teton-extra-deps.mk" all                                 # Fortran Teton
run make -C "$B/Teton" -j "$MAKE_JOBS" "${vars[@]}" subdirs                     # C++ objects
run make -C "$B/Teton" -j "$MAKE_JOBS" "${vars[@]}" SuOlsonTest                 # libs + driver
say "build took $(( $(date +%s) - start )) s"

# ------------------------------------------------------------------ install
[ -x "$B/Teton/SuOlsonTest" ] || { echo "build finished but $B/Teton/SuOlsonTest is missing" >&2; exit 1; }
run mkdir -p "$PREFIX/bin" "$PREFIX/lib" "$PREFIX/share/umt"
run install -m 0755 "$B/Teton/SuOlsonTest" "$PREFIX/bin/SuOlsonTest"
run install -m 0755 "$B/Teton/libInfrastructure.so" "$B/Teton/libTetonUtils.so" \
    "$B/cmg2Kull/sources/libc2k.so" "$B/CMG_CLEAN/src/libcmgp.so" "$PREFIX/lib/"
run install -m 0644 "$B"/benchmarks/*.cmg "$PREFIX/share/umt/"
run install -m 0644 "$B/make.defs" "$PREFIX/share/umt/make.defs"
if ldd "$PREFIX/bin/SuOlsonTest" | grep -q 'not found'; then
    ldd "$PREFIX/bin/SuOlsonTest" >&2
    echo "installed SuOlsonTest does not find its libraries" >&2; exit 1
fi
if [ -f "$SRC/.hpcvar-source" ]; then
    run install -m 0644 "$SRC/.hpcvar-source" "$PREFIX/.hpcvar-source"
fi
say "installed $PREFIX/bin/SuOlsonTest"
