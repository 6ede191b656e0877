/* Is a PMIx fence without data a barrier across the nodes? (tests/test_testbed.py)
 *
 * Open MPI 4.1's MPI_Init calls two fences: one that collects the ranks' connection data (the
 * modex), then one without data as a barrier, after which a rank may send. This program calls them
 * the same way (non-blocking, waited on), and between them rank SLOW_RANK sleeps DELAY_US
 * microseconds. Before the second fence each rank creates a file named after its rank in DIR (a
 * directory every node sees); after it each rank counts the files. A barrier leaves none missing.
 *
 *   srun -N4 --ntasks-per-node=2 --mpi=pmix env DIR=... SLOW_RANK=3 DELAY_US=300000 pmix_fence
 *
 * Prints "rank R: barrier held" or "rank R: left the fence with K of N ranks not in it" and exits
 * 0 or 1.
 */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int active;

static void released(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    if (status != PMIX_SUCCESS) fprintf(stderr, "fence failed: %s\n", PMIx_Error_string(status));
    active = 0;
}

static void fence(pmix_info_t *info, size_t ninfo)
{
    active = 1;
    pmix_status_t rc = PMIx_Fence_nb(NULL, 0, info, ninfo, released, NULL);
    if (rc != PMIX_SUCCESS) {
        fprintf(stderr, "PMIx_Fence_nb: %s\n", PMIx_Error_string(rc));
        exit(2);
    }
    while (active) usleep(100);
}

int main(void)
{
    pmix_proc_t me, job;
    pmix_value_t *size, blob;
    pmix_info_t collect;
    bool yes = true;
    const char *dir = getenv("DIR"), *slow = getenv("SLOW_RANK"), *delay = getenv("DELAY_US");
    char path[4096], data[512];

    if (!dir || PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
        fprintf(stderr, "usage: DIR=shared-dir [SLOW_RANK=r DELAY_US=us] pmix_fence, under a PMIx launcher\n");
        return 2;
    }
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    if (PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &size) != PMIX_SUCCESS) return 2;
    uint32_t n = size->data.uint32;

    /* The modex: some data of every rank, collected. */
    memset(data, 'x', sizeof data - 1);
    data[sizeof data - 1] = '\0';
    PMIX_VALUE_LOAD(&blob, data, PMIX_STRING);
    PMIx_Put(PMIX_GLOBAL, "hpcvar.probe", &blob);
    PMIx_Commit();
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    fence(&collect, 1);

    if (slow && delay && (uint32_t)atoi(slow) == me.rank) usleep((useconds_t)atol(delay));
    snprintf(path, sizeof path, "%s/%s.%u", dir, me.nspace, me.rank);
    FILE *mark = fopen(path, "w");
    if (!mark) {
        perror(path);
        return 2;
    }
    fclose(mark);

    /* The barrier: no data. */
    fence(NULL, 0);

    uint32_t missing = 0;
    for (uint32_t r = 0; r < n; r++) {
        snprintf(path, sizeof path, "%s/%s.%u", dir, me.nspace, r);
        if (access(path, F_OK) != 0) missing++;
    }
    if (missing)
        printf("rank %u: left the fence with %u of %u ranks not in it\n", me.rank, missing, n);
    else
        printf("rank %u: barrier held\n", me.rank);
    PMIx_Finalize(NULL, 0);
    return missing ? 1 : 0;
}
