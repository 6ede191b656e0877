/*
 * hpcvar-aggressor - network traffic that interferes with other jobs, for interference
 * experiments (hpcvar interference run). Two patterns, after the Union/CODES hybrid-workload study:
 *
 *   periodic-allreduce  a compute phase of C seconds, then an MPI_Allreduce of S bytes: the
 *                       gradient exchange of data-parallel ML training (Cosmoflow: 28 MiB every
 *                       129 ms);
 *   uniform-random      a compute phase of C seconds, then M messages of S bytes per rank, each to
 *                       a uniformly random other rank (MPI_Sendrecv over a random shift that
 *                       every rank draws from the same seed, so every rank sends M and receives M).
 *
 * It runs for D seconds (-d; rank 0 decides when, and tells the others at the start of every
 * iteration) or I iterations (-i). The compute phase is a sleep (the node stays free for the
 * victim's ranks). Every rank times its communication phase; at the end rank 0 gathers them and
 * writes one CSV row per iteration:
 *
 *     iteration,start_epoch_s,comm_max_us,comm_min_us,comm_mean_us
 *
 * (start_epoch_s: when rank 0 began the iteration's communication), prints a summary line
 *
 *     hpcvar-aggressor: pattern=<p> size=<bytes> iterations=<n> median_us=<f> mean_us=<f> max_us=<f>
 *
 * (statistics of comm_max_us) and "hpcvar-aggressor: done rows=<n> file=<path>". See ../README.md.
 */
#include "common.h"

#include <unistd.h>

#define PROG "hpcvar-aggressor"

enum { PERIODIC_ALLREDUCE, UNIFORM_RANDOM };

static void usage(void)
{
    printf("usage: %s -p PATTERN [-s BYTES] [-m MESSAGES] [-c COMPUTE_S] [-d SECONDS | -i ITER] [-o FILE]\n"
           "  -p PATTERN   periodic-allreduce | uniform-random\n"
           "  -s BYTES     allreduce size, or size of each message (default 1048576)\n"
           "  -m MESSAGES  uniform-random: messages per rank and iteration (default 4)\n"
           "  -c COMPUTE_S compute phase before each communication phase, seconds (default 0.01)\n"
           "  -d SECONDS   run this long (default 60)\n"
           "  -i ITER      run this many iterations instead\n"
           "  -o FILE      output CSV (default hpcvar-aggressor.csv)\n",
           PROG);
}

/* Same sequence on every rank: xorshift64* seeded by the iteration and the message index. */
static unsigned long long mix(unsigned long long x)
{
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    return x * 0x2545F4914F6CDD1DULL;
}

int main(int argc, char **argv)
{
    const char *out = "hpcvar-aggressor.csv", *pattern_arg = NULL;
    long size = 1048576, messages = 4, iters = 0, n = 0, cap = 1024, it, k;
    double compute = 0.01, duration = 60.0, deadline;
    int pattern = -1, opt;
    struct hv_meta meta;
    double *comm, *starts, *all = NULL;
    char *sbuf, *rbuf;
    FILE *f = NULL;

    MPI_Init(&argc, &argv);
    while ((opt = getopt(argc, argv, "p:s:m:c:d:i:o:h")) != -1) {
        switch (opt) {
        case 'p': pattern_arg = optarg; break;
        case 's': size = hv_parse_long(PROG, "-s", optarg, 8); break;
        case 'm': messages = hv_parse_long(PROG, "-m", optarg, 1); break;
        case 'c': compute = hv_parse_double(PROG, "-c", optarg, 0.0); break;
        case 'd': duration = hv_parse_double(PROG, "-d", optarg, 0.0); break;
        case 'i': iters = hv_parse_long(PROG, "-i", optarg, 1); break;
        case 'o': out = optarg; break;
        case 'h': usage(); MPI_Finalize(); return 0;
        default: usage(); hv_die(PROG, "bad command line");
        }
    }
    if (optind != argc)
        hv_die(PROG, "unexpected argument '%s'", argv[optind]);
    if (!pattern_arg)
        hv_die(PROG, "option -p is required (periodic-allreduce or uniform-random)");
    if (strcmp(pattern_arg, "periodic-allreduce") == 0)
        pattern = PERIODIC_ALLREDUCE;
    else if (strcmp(pattern_arg, "uniform-random") == 0)
        pattern = UNIFORM_RANDOM;
    else
        hv_die(PROG, "option -p: unknown pattern '%s' (periodic-allreduce, uniform-random)", pattern_arg);
    if (pattern == PERIODIC_ALLREDUCE && size % 8 != 0)
        hv_die(PROG, "size %ld: the allreduce sums doubles, the size must be a multiple of 8", size);
    if (size > 0x7fffffffL)
        hv_die(PROG, "size %ld too large", size);

    hv_meta_init(PROG, &meta);
    if (pattern == UNIFORM_RANDOM && meta.nranks < 2)
        hv_die(PROG, "uniform-random needs at least 2 ranks");
    sbuf = hv_malloc(PROG, (size_t)size);
    rbuf = hv_malloc(PROG, (size_t)size);
    for (k = 0; k < size; k++)
        sbuf[k] = (char)(k * 13 + meta.rank);
    comm = hv_malloc(PROG, (size_t)cap * sizeof(double));
    starts = hv_malloc(PROG, (size_t)cap * sizeof(double));

    MPI_Barrier(MPI_COMM_WORLD);
    deadline = MPI_Wtime() + duration;
    for (it = 0;; it++) {
        int go = 1;
        double t0;
        if (meta.rank == 0)
            go = iters ? it < iters : MPI_Wtime() < deadline;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (!go)
            break;
        hv_sleep_until(MPI_Wtime() + compute);
        if (n == cap) {
            cap *= 2;
            comm = hv_realloc(PROG, comm, (size_t)cap * sizeof(double));
            starts = hv_realloc(PROG, starts, (size_t)cap * sizeof(double));
        }
        t0 = MPI_Wtime();
        starts[n] = meta.start_epoch + (t0 - meta.start_wtime);
        if (pattern == PERIODIC_ALLREDUCE) {
            MPI_Allreduce(sbuf, rbuf, (int)(size / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        } else {
            for (k = 0; k < messages; k++) {
                int shift = 1 + (int)(mix(((unsigned long long)it << 20) + (unsigned long long)k + 1) %
                                      (unsigned long long)(meta.nranks - 1));
                MPI_Sendrecv(sbuf, (int)size, MPI_BYTE, (meta.rank + shift) % meta.nranks, 7, rbuf, (int)size,
                             MPI_BYTE, (meta.rank - shift + meta.nranks) % meta.nranks, 7, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
            }
        }
        comm[n++] = MPI_Wtime() - t0;
    }

    if (meta.rank == 0) {
        all = hv_malloc(PROG, (size_t)(n ? n : 1) * (size_t)meta.nranks * sizeof(double));
        f = hv_open_csv(PROG, &meta, out, "hpcvar aggressor v1");
        fprintf(f, "# pattern=%s\n# size_bytes=%ld\n# messages=%ld\n# compute_s=%.6f\n# iterations=%ld\n",
                pattern_arg, size, pattern == UNIFORM_RANDOM ? messages : 1L, compute, n);
        fprintf(f, "# unit=us (microseconds); per iteration: communication phase, max/min/mean over ranks\n");
        fprintf(f, "iteration,start_epoch_s,comm_max_us,comm_min_us,comm_mean_us\n");
    }
    MPI_Gather(comm, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (meta.rank == 0) {
        double *maxes = hv_malloc(PROG, (size_t)(n ? n : 1) * sizeof(double));
        struct hv_stats st;
        for (it = 0; it < n; it++) {
            double mx = 0.0, mn = 0.0, sum = 0.0;
            int r;
            for (r = 0; r < meta.nranks; r++) {
                double t = all[(size_t)r * (size_t)n + (size_t)it] * 1e6;
                if (r == 0 || t > mx)
                    mx = t;
                if (r == 0 || t < mn)
                    mn = t;
                sum += t;
            }
            maxes[it] = mx;
            fprintf(f, "%ld,%.6f,%.3f,%.3f,%.3f\n", it, starts[it], mx, mn, sum / meta.nranks);
        }
        st = hv_summarise(PROG, maxes, (size_t)n);
        hv_close_csv(PROG, f, out);
        printf("%s: pattern=%s size=%ld iterations=%ld median_us=%.3f mean_us=%.3f max_us=%.3f\n", PROG,
               pattern_arg, size, n, st.median, st.mean, st.max);
        printf("%s: done rows=%ld file=%s\n", PROG, n, out);
        fflush(stdout);
        free(maxes);
        free(all);
        free(meta.hosts);
    }
    free(comm);
    free(starts);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
