#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMP_NUM_THREADS=1
export GFORTRAN_UNBUFFERED_PRECONNECTED=y
exec 3>&1 > >(ts '%.s' | tee app.out)
HPCVAR_TS_PID=$!
/work/main/.venv/bin/hpcvar sample --out 'node-counters-{hostname}.csv' --interval 1.0 --sources net,infiniband,cxi &
HPCVAR_SAMPLER_PID=$!
for hpcvar_rep in $(seq 1 6); do
mpirun -np 2 stdbuf -oL -eL /tmp/mv/rfmcap/stage/local/default/gnu-openmpi/build_minivite_84e5426f/install/bin/miniVite -n 40000 -t 1E-02
done
kill -TERM $HPCVAR_SAMPLER_PID 2>/dev/null; wait $HPCVAR_SAMPLER_PID || true
exec 1>&3 3>&-
wait $HPCVAR_TS_PID
