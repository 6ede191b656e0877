#!/usr/bin/env bash
# amgproxy.sh SRC_DIR PREFIX -- build hpcvar's AMG proxy (reframe_tests/apps/amgproxy/src, a copy:
# make builds in it) against the system's hypre and install PREFIX/bin/hpcvar-amgproxy, with its
# provenance in PREFIX/.hpcvar-source:
#     amgproxy <version> hpcvar:reframe_tests/apps/amgproxy/src/amgproxy.c sha256:<hex> hypre <version>
#
# The one build of the proxy: the ReFrame build fixture (build_amgproxy) and the amgproxy image
# (containers/images.yaml) both run it.
#
# Environment:
#   MPICC          MPI C compiler wrapper (default mpicc)
#   MAKE_JOBS      parallel make jobs (default 4)
#   HYPRE_INCLUDE  hypre's headers (default /usr/include/hypre: Debian's and Ubuntu's libhypre-dev)
#   HYPRE_LIBDIR   hypre's library directory, when not on the linker's path (added as rpath)
set -eu
set -o pipefail

say() { printf '[hpcvar-build amgproxy] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$2
MPICC=${MPICC:-mpicc}
MAKE_JOBS=${MAKE_JOBS:-4}
HYPRE_INCLUDE=${HYPRE_INCLUDE:-/usr/include/hypre}

if [ ! -f "$SRC/amgproxy.c" ] || [ ! -f "$SRC/Makefile" ]; then
    echo "$SRC does not look like the AMG proxy's source (amgproxy.c, Makefile)" >&2; exit 1
fi
[ -f "$HYPRE_INCLUDE/HYPRE_config.h" ] || { echo "hypre's headers not found in $HYPRE_INCLUDE (install libhypre-dev or set HYPRE_INCLUDE)" >&2; exit 1; }
command -v "$MPICC" >/dev/null 2>&1 || { echo "MPI C compiler '$MPICC' not found" >&2; exit 1; }

version=$(sed -n 's/^#define VERSION "\(.*\)"/\1/p' "$SRC/amgproxy.c")
hypre=$(sed -n 's/^#define HYPRE_RELEASE_VERSION "\(.*\)"/\1/p' "$HYPRE_INCLUDE/HYPRE_config.h")
digest=$(sha256sum "$SRC/amgproxy.c" | cut -d' ' -f1)
say "source:   $SRC (amgproxy $version, sha256 $digest)"
say "hypre:    $hypre ($HYPRE_INCLUDE)"
say "prefix:   $PREFIX"

options=(CC="$MPICC" HYPRE_INCLUDE="$HYPRE_INCLUDE" PREFIX="$PREFIX")
[ -n "${HYPRE_LIBDIR:-}" ] && options+=(HYPRE_LIBDIR="$HYPRE_LIBDIR")
run make -C "$SRC" -j "$MAKE_JOBS" "${options[@]}" install
[ -x "$PREFIX/bin/hpcvar-amgproxy" ] || { echo "build finished but $PREFIX/bin/hpcvar-amgproxy is missing" >&2; exit 1; }
echo "amgproxy $version hpcvar:reframe_tests/apps/amgproxy/src/amgproxy.c sha256:$digest hypre $hypre" \
    > "$PREFIX/.hpcvar-source"
say "installed $PREFIX/bin/hpcvar-amgproxy"
