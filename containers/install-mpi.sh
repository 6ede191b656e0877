#!/bin/bash
# Install the image's MPI into /opt/mpi: every recipe in containers/ runs this in %post, with
# its build arguments (apptainer build --build-arg MPI_FAMILY=... ; see containers/README.md).
#
#     install-mpi.sh FAMILY VERSION SHA256|none [MAKE_JOBS]
#
# The MPI must be of the host's family (openmpi, or mpich for MPICH-ABI hosts such as Cray
# MPICH) and talk PMIx to Slurm: srun --mpi=pmix starts the ranks. The tarball's sha256 is
# checked when given, and recorded otherwise; /opt/hpcvar/mpi.txt says what was installed.
set -eu

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 FAMILY VERSION SHA256|none [MAKE_JOBS]" >&2
    exit 2
fi
MPI_FAMILY=$1
MPI_VERSION=$2
MPI_SHA256=$3
MAKE_JOBS=${4:-4}
MPI_PREFIX=/opt/mpi
case "$MPI_FAMILY" in
    openmpi) MPI_URL="https://download.open-mpi.org/release/open-mpi/v${MPI_VERSION%.*}/openmpi-${MPI_VERSION}.tar.bz2" ;;
    mpich) MPI_URL="https://www.mpich.org/static/downloads/${MPI_VERSION}/mpich-${MPI_VERSION}.tar.gz" ;;
    *) echo "MPI_FAMILY must be openmpi or mpich, not '$MPI_FAMILY'" >&2; exit 1 ;;
esac
PMIX_DIR="/usr/lib/$(gcc -print-multiarch)/pmix2"
test -f "$PMIX_DIR/include/pmix.h" || { echo "PMIx headers not found under $PMIX_DIR" >&2; exit 1; }
case "$MPI_FAMILY" in
    openmpi)
        MPI_CONFIGURE=(--with-pmix="$PMIX_DIR" --with-libevent=/usr --with-hwloc=/usr --with-slurm --disable-static) ;;
    mpich)
        MPI_CONFIGURE=(--with-pmix="$PMIX_DIR" --with-pm=no --with-device=ch4:ofi --with-hwloc=/usr --enable-fortran=all
                       FFLAGS=-fallow-argument-mismatch FCFLAGS=-fallow-argument-mismatch) ;;
esac
mkdir -p /tmp/mpi-build
cd /tmp/mpi-build
echo "[hpcvar] MPI: $MPI_FAMILY $MPI_VERSION from $MPI_URL"
curl -fsSL --retry 3 -o mpi.tar "$MPI_URL"
if [ "$MPI_SHA256" != none ]; then
    echo "$MPI_SHA256  mpi.tar" | sha256sum -c -
else
    echo "[hpcvar] MPI tarball sha256 (not pinned, recorded): $(sha256sum mpi.tar | cut -d' ' -f1)"
fi
tar -xf mpi.tar --strip-components=1
./configure --prefix="$MPI_PREFIX" "${MPI_CONFIGURE[@]}"
make -j "$MAKE_JOBS"
make install
echo "$MPI_PREFIX/lib" > /etc/ld.so.conf.d/hpcvar-mpi.conf
ldconfig
cd /
rm -rf /tmp/mpi-build
mkdir -p /opt/hpcvar
printf '%s %s %s\n' "$MPI_FAMILY" "$MPI_VERSION" "$MPI_URL" > /opt/hpcvar/mpi.txt
