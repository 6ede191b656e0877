#!/usr/bin/env bash
# microbenchmarks.sh SRC_DIR PREFIX -- build hpcvar's MPI microbenchmarks (reframe_tests/
# microbenchmarks/src, a copy: make builds in it) and install them into PREFIX/bin, with their
# provenance in PREFIX/.hpcvar-source:
#     microbenchmarks <first 12 hex> hpcvar:reframe_tests/microbenchmarks/src sha256:<hex>
# where <hex> is the sha256 of `sha256sum Makefile *.c *.h` in the source folder.
#
# The one build of the microbenchmarks: the ReFrame build fixture (build_microbenchmarks) and the
# microbenchmarks image (containers/images.yaml) both run it.
#
# Environment:
#   MPICC      MPI C compiler wrapper (default mpicc)
#   MAKE_JOBS  parallel make jobs (default 4)
set -eu
set -o pipefail

say() { printf '[hpcvar-build microbenchmarks] %s\n' "$*"; }
run() { say "+ $*"; "$@"; }

if [ "$#" -ne 2 ]; then
    echo "usage: $0 SRC_DIR PREFIX" >&2
    exit 2
fi
SRC=$(cd "$1" && pwd)
PREFIX=$2
MPICC=${MPICC:-mpicc}
MAKE_JOBS=${MAKE_JOBS:-4}
PROGRAMS="hpcvar-collectives hpcvar-overtime hpcvar-confidence hpcvar-aggressor"

if [ ! -f "$SRC/collectives.c" ] || [ ! -f "$SRC/Makefile" ]; then
    echo "$SRC does not look like the microbenchmarks' source (collectives.c, Makefile)" >&2; exit 1
fi
command -v "$MPICC" >/dev/null 2>&1 || { echo "MPI C compiler '$MPICC' not found" >&2; exit 1; }

digest=$(cd "$SRC" && sha256sum Makefile ./*.c ./*.h | sha256sum | cut -d' ' -f1)
say "source:   $SRC (sha256 $digest)"
say "prefix:   $PREFIX"
run make -C "$SRC" -j "$MAKE_JOBS" CC="$MPICC"
run mkdir -p "$PREFIX/bin"
for p in $PROGRAMS; do
    run install -m 0755 "$SRC/$p" "$PREFIX/bin/$p"
done
[ -x "$PREFIX/bin/hpcvar-collectives" ] || { echo "$PREFIX/bin/hpcvar-collectives is missing" >&2; exit 1; }
echo "microbenchmarks ${digest:0:12} hpcvar:reframe_tests/microbenchmarks/src sha256:$digest" > "$PREFIX/.hpcvar-source"
say "installed $PROGRAMS into $PREFIX/bin"
