/*
 * hpcvar-collectives - per-iteration timings of MPI collectives.
 *
 * For every selected collective and message size: W untimed warm-up iterations, then I timed
 * iterations, each preceded by an MPI_Barrier; every rank records the MPI_Wtime() duration of
 * every timed call. At the end rank 0 gathers all per-iteration times and writes one CSV row per
 * (collective, size, iteration):
 *
 *     collective,size_bytes,iteration,max_us,min_us,mean_us,max_rank
 *
 * (max/min/mean over ranks of that iteration's time in microseconds; max_rank is the slowest
 * rank), and prints one summary line per (collective, size) on stdout:
 *
 *     hpcvar-collectives: <collective> size=<bytes> iterations=<I> min_us=<f> median_us=<f> mean_us=<f> max_us=<f>
 *
 * (statistics over iterations of max_us), then "hpcvar-collectives: done rows=<n> file=<path>"
 * once the CSV is complete. Sizes: bcast/reduce/allreduce move size_bytes per rank; alltoall
 * sends size_bytes to every rank. reduce/allreduce sum doubles, so their sizes must be multiples
 * of 8. See ../README.md.
 */
#include "common.h"

#include <unistd.h>

#define PROG "hpcvar-collectives"

enum { BCAST, REDUCE, ALLTOALL, ALLREDUCE, NCOLL };
static const char *const COLL_NAMES[NCOLL] = {"bcast", "reduce", "alltoall", "allreduce"};

static void usage(void)
{
    printf("usage: %s [-s SIZES] [-i ITER] [-w WARMUP] [-c COLLECTIVES] [-o FILE]\n"
           "  -s SIZES        comma-separated message sizes in bytes (default 8,1024,65536)\n"
           "  -i ITER         timed iterations per collective and size (default 100)\n"
           "  -w WARMUP       untimed warm-up iterations (default 10)\n"
           "  -c COLLECTIVES  comma-separated subset of bcast,reduce,alltoall,allreduce (default all)\n"
           "  -o FILE         output CSV (default hpcvar-collectives.csv)\n",
           PROG);
}

static int parse_sizes(const char *arg, long **sizes)
{
    char *copy = strdup(arg), *tok, *save = NULL;
    int n = 0;
    if (!copy)
        hv_die(PROG, "out of memory");
    *sizes = hv_malloc(PROG, (strlen(arg) + 1) * sizeof(long));
    for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        (*sizes)[n++] = hv_parse_long(PROG, "-s", tok, 1);
    free(copy);
    if (n == 0)
        hv_die(PROG, "option -s: no sizes given");
    return n;
}

static void parse_collectives(const char *arg, int *selected)
{
    char *copy = strdup(arg), *tok, *save = NULL;
    int c, any = 0;
    if (!copy)
        hv_die(PROG, "out of memory");
    for (c = 0; c < NCOLL; c++)
        selected[c] = 0;
    for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        for (c = 0; c < NCOLL; c++)
            if (strcmp(tok, COLL_NAMES[c]) == 0)
                break;
        if (c == NCOLL)
            hv_die(PROG, "option -c: unknown collective '%s' (bcast, reduce, alltoall, allreduce)", tok);
        selected[c] = 1;
        any = 1;
    }
    free(copy);
    if (!any)
        hv_die(PROG, "option -c: no collectives given");
}

static void run_once(int coll, long size, int nranks, char *sbuf, char *rbuf)
{
    switch (coll) {
    case BCAST:
        MPI_Bcast(sbuf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case REDUCE:
        MPI_Reduce(sbuf, rbuf, (int)(size / 8), MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        MPI_Alltoall(sbuf, (int)size, MPI_BYTE, rbuf, (int)size, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case ALLREDUCE:
        MPI_Allreduce(sbuf, rbuf, (int)(size / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        break;
    }
    (void)nranks;
}

int main(int argc, char **argv)
{
    const char *sizes_arg = "8,1024,65536", *colls_arg = "bcast,reduce,alltoall,allreduce";
    const char *out = "hpcvar-collectives.csv";
    long iters = 100, warmup = 10, *sizes = NULL, maxsize = 0, rows = 0;
    int nsizes, selected[NCOLL], c, s, opt;
    struct hv_meta meta;
    double *times, *all = NULL;
    char *sbuf, *rbuf;
    FILE *f = NULL;
    size_t bufbytes, k;

    MPI_Init(&argc, &argv);
    while ((opt = getopt(argc, argv, "s:i:w:c:o:h")) != -1) {
        switch (opt) {
        case 's': sizes_arg = optarg; break;
        case 'i': iters = hv_parse_long(PROG, "-i", optarg, 1); break;
        case 'w': warmup = hv_parse_long(PROG, "-w", optarg, 0); break;
        case 'c': colls_arg = optarg; break;
        case 'o': out = optarg; break;
        case 'h': usage(); MPI_Finalize(); return 0;
        default: usage(); hv_die(PROG, "bad command line");
        }
    }
    if (optind != argc)
        hv_die(PROG, "unexpected argument '%s'", argv[optind]);
    nsizes = parse_sizes(sizes_arg, &sizes);
    parse_collectives(colls_arg, selected);
    for (s = 0; s < nsizes; s++) {
        if (sizes[s] > maxsize)
            maxsize = sizes[s];
        if ((selected[REDUCE] || selected[ALLREDUCE]) && sizes[s] % 8 != 0)
            hv_die(PROG, "size %ld: reduce/allreduce sum doubles, sizes must be multiples of 8", sizes[s]);
        if (sizes[s] > 0x7fffffffL)
            hv_die(PROG, "size %ld too large", sizes[s]);
    }

    hv_meta_init(PROG, &meta);
    bufbytes = (size_t)maxsize * (size_t)meta.nranks;
    sbuf = hv_malloc(PROG, bufbytes);
    rbuf = hv_malloc(PROG, bufbytes);
    for (k = 0; k < bufbytes; k++)
        sbuf[k] = (char)(k * 7 + (size_t)meta.rank);
    memset(rbuf, 0, bufbytes);
    if (selected[ALLTOALL] && (double)maxsize * meta.nranks > 0x7fffffffL)
        hv_die(PROG, "alltoall buffer too large");
    times = hv_malloc(PROG, (size_t)iters * sizeof(double));
    if (meta.rank == 0) {
        all = hv_malloc(PROG, (size_t)iters * (size_t)meta.nranks * sizeof(double));
        f = hv_open_csv(PROG, &meta, out, "hpcvar collectives v1");
        fprintf(f, "# iterations=%ld\n# warmup=%ld\n# sizes=%s\n", iters, warmup, sizes_arg);
        fprintf(f, "# collectives=");
        for (c = 0, opt = 0; c < NCOLL; c++)
            if (selected[c])
                fprintf(f, "%s%s", opt++ ? "," : "", COLL_NAMES[c]);
        fprintf(f, "\n# unit=us (microseconds); per iteration: max/min/mean over ranks\n");
        fprintf(f, "collective,size_bytes,iteration,max_us,min_us,mean_us,max_rank\n");
    }

    for (c = 0; c < NCOLL; c++) {
        if (!selected[c])
            continue;
        for (s = 0; s < nsizes; s++) {
            long it;
            for (it = 0; it < warmup; it++) {
                MPI_Barrier(MPI_COMM_WORLD);
                run_once(c, sizes[s], meta.nranks, sbuf, rbuf);
            }
            for (it = 0; it < iters; it++) {
                double t0;
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = MPI_Wtime();
                run_once(c, sizes[s], meta.nranks, sbuf, rbuf);
                times[it] = MPI_Wtime() - t0;
            }
            MPI_Gather(times, (int)iters, MPI_DOUBLE, all, (int)iters, MPI_DOUBLE, 0, MPI_COMM_WORLD);
            if (meta.rank == 0) {
                double *maxes = hv_malloc(PROG, (size_t)iters * sizeof(double));
                struct hv_stats st;
                for (it = 0; it < iters; it++) {
                    double mx = -1.0, mn = 0.0, sum = 0.0;
                    int r, mxr = 0;
                    for (r = 0; r < meta.nranks; r++) {
                        double t = all[(size_t)r * (size_t)iters + (size_t)it] * 1e6;
                        if (t > mx) {
                            mx = t;
                            mxr = r;
                        }
                        if (r == 0 || t < mn)
                            mn = t;
                        sum += t;
                    }
                    maxes[it] = mx;
                    fprintf(f, "%s,%ld,%ld,%.3f,%.3f,%.3f,%d\n", COLL_NAMES[c], sizes[s], it, mx, mn,
                            sum / meta.nranks, mxr);
                    rows++;
                }
                st = hv_summarise(PROG, maxes, (size_t)iters);
                printf("%s: %s size=%ld iterations=%ld min_us=%.3f median_us=%.3f mean_us=%.3f max_us=%.3f\n",
                       PROG, COLL_NAMES[c], sizes[s], iters, st.min, st.median, st.mean, st.max);
                fflush(stdout);
                free(maxes);
            }
        }
    }

    if (meta.rank == 0) {
        hv_close_csv(PROG, f, out);
        printf("%s: done rows=%ld file=%s\n", PROG, rows, out);
        fflush(stdout);
        free(all);
        free(meta.hosts);
    }
    free(times);
    free(sbuf);
    free(rbuf);
    free(sizes);
    MPI_Finalize();
    return 0;
}
