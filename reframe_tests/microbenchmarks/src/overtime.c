/*
 * hpcvar-overtime - an Overtime-style network monitor (after Groves, Grant et al., SNL, 2015).
 *
 * Cycles of work phases, each followed by an idle phase of the same length (or of -I seconds):
 *   latency    ping-pong of -L bytes between ranks 2k and 2k+1; an iteration's time is half the
 *              round trip, measured by the even rank
 *   bandwidth  the even rank sends a window of -W messages of -B bytes (MPI_Isend) to its odd
 *              partner, which answers with a 1-byte ack; an iteration's time is window + ack,
 *              measured by the even rank (bandwidth = W*B / time)
 *   allreduce  MPI_Allreduce (sum) of -A bytes of doubles; every rank measures
 *   idle       no communication at all: every rank sleeps until its own end of the preceding
 *              phase plus that phase's duration (Overtime's default), so network counters sampled
 *              in a phase and in the idle phase after it cover equally long windows
 * A work phase starts after an MPI_Barrier and ends after an MPI_Barrier; rank 0 reads
 * MPI_Wtime() and the wall clock (CLOCK_REALTIME) at every phase start and end, so counter
 * samples taken by an external sampler (LDMS, AriesNCL, a cron job) can be attributed to phases
 * by their epoch timestamps. With odd rank counts the last rank idles in latency/bandwidth.
 *
 * Output (rank 0), PREFIX from -o:
 *   PREFIX-phases.csv      index,cycle,phase,follows,iterations,size_bytes,start_epoch_s,end_epoch_s,
 *                          start_wtime_s,end_wtime_s,duration_s
 *   PREFIX-iterations.csv  cycle,phase,iteration,size_bytes,bytes,ranks,max_us,min_us,mean_us
 *                          (per iteration, over the measuring ranks; bytes = bytes one measuring
 *                          rank moved one way in the timed interval)
 * stdout: per work phase
 *   hpcvar-overtime: cycle=<c> phase=<name> size=<bytes> iterations=<n> start_epoch=<s> duration_s=<s> min_us=<f> median_us=<f> max_us=<f>
 * and "hpcvar-overtime: done cycles=<n> phases=<m>" at the end. See ../README.md.
 */
#include "common.h"

#include <unistd.h>

#define PROG "hpcvar-overtime"

enum { P_LATENCY, P_BANDWIDTH, P_ALLREDUCE, NPHASES, P_IDLE = NPHASES };
static const char *const PHASE_NAMES[NPHASES + 1] = {"latency", "bandwidth", "allreduce", "idle"};

struct cfg {
    long iters[NPHASES], size[NPHASES], window;
};

struct dvec {
    double *v;
    size_t n, cap;
};

static void dpush(struct dvec *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 4096;
        d->v = hv_realloc(PROG, d->v, d->cap * sizeof(double));
    }
    d->v[d->n++] = x;
}

/* Phase boundary record kept on rank 0. */
struct phase_rec {
    long cycle, iterations, size;
    int phase, follows;
    double ws, we, es, ee;
    size_t first; /* index of the phase's first per-iteration value */
};

/* Run one work phase; append one value per iteration (us, or NaN if this rank does not measure). */
static void run_phase(int ph, const struct cfg *c, int rank, int nranks, char *sbuf, char *rbuf,
                      MPI_Request *reqs, struct dvec *out, long iters)
{
    int partner = (rank % 2 == 0) ? rank + 1 : rank - 1;
    int active = partner < nranks, even = rank % 2 == 0;
    long it, w;
    char ack = 0;
    for (it = 0; it < iters; it++) {
        double t0, t = NAN;
        switch (ph) {
        case P_LATENCY:
            if (!active)
                break;
            if (even) {
                t0 = MPI_Wtime();
                MPI_Send(sbuf, (int)c->size[ph], MPI_BYTE, partner, 1, MPI_COMM_WORLD);
                MPI_Recv(rbuf, (int)c->size[ph], MPI_BYTE, partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t = 0.5 * (MPI_Wtime() - t0) * 1e6;
            } else {
                MPI_Recv(rbuf, (int)c->size[ph], MPI_BYTE, partner, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(sbuf, (int)c->size[ph], MPI_BYTE, partner, 1, MPI_COMM_WORLD);
            }
            break;
        case P_BANDWIDTH:
            if (!active)
                break;
            if (even) {
                t0 = MPI_Wtime();
                for (w = 0; w < c->window; w++)
                    MPI_Isend(sbuf, (int)c->size[ph], MPI_BYTE, partner, 2, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall((int)c->window, reqs, MPI_STATUSES_IGNORE);
                MPI_Recv(&ack, 1, MPI_BYTE, partner, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t = (MPI_Wtime() - t0) * 1e6;
            } else {
                for (w = 0; w < c->window; w++)
                    MPI_Irecv(rbuf + (size_t)w * (size_t)c->size[ph], (int)c->size[ph], MPI_BYTE, partner, 2,
                              MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall((int)c->window, reqs, MPI_STATUSES_IGNORE);
                MPI_Send(&ack, 1, MPI_BYTE, partner, 3, MPI_COMM_WORLD);
            }
            break;
        case P_ALLREDUCE:
            t0 = MPI_Wtime();
            MPI_Allreduce(sbuf, rbuf, (int)(c->size[ph] / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            t = (MPI_Wtime() - t0) * 1e6;
            break;
        }
        if (out)
            dpush(out, t);
    }
}

static void usage(void)
{
    printf("usage: %s [-n CYCLES | -d SECONDS] [-p PHASES] [-l N] [-L BYTES] [-b N] [-B BYTES] [-W N]\n"
           "          [-a N] [-A BYTES] [-I SECONDS] [-o PREFIX]\n"
           "  -n CYCLES   cycles of all phases (default 2)\n"
           "  -d SECONDS  instead: run whole cycles until SECONDS have passed (at least one)\n"
           "  -p PHASES   comma-separated subset of latency,bandwidth,allreduce (default all, in that order)\n"
           "  -l N, -L B  latency: iterations (default 1000), message bytes (default 8)\n"
           "  -b N, -B B  bandwidth: iterations (default 20), message bytes (default 1048576)\n"
           "  -W N        bandwidth: messages in flight per iteration (default 8)\n"
           "  -a N, -A B  allreduce: iterations (default 500), bytes, a multiple of 8 (default 8)\n"
           "  -I SECONDS  fixed idle-phase length (default: the length of the preceding phase)\n"
           "  -o PREFIX   output prefix (default hpcvar-overtime)\n",
           PROG);
}

int main(int argc, char **argv)
{
    struct cfg c = {{1000, 20, 500}, {8, 1048576, 8}, 8};
    long cycles = 2, cyc, nrec = 0, caprec = 0, it;
    double duration = 0.0, idle_fixed = 0.0, t_begin;
    int selected[NPHASES] = {1, 1, 1}, opt, ph, r, more = 1;
    const char *prefix = "hpcvar-overtime", *phases_arg = "latency,bandwidth,allreduce";
    char *path, *sbuf, *rbuf;
    size_t bufbytes;
    MPI_Request *reqs;
    struct hv_meta meta;
    struct dvec vals = {0};
    struct phase_rec *recs = NULL;

    MPI_Init(&argc, &argv);
    while ((opt = getopt(argc, argv, "n:d:p:l:L:b:B:W:a:A:I:o:h")) != -1) {
        switch (opt) {
        case 'n': cycles = hv_parse_long(PROG, "-n", optarg, 1); break;
        case 'd': duration = hv_parse_double(PROG, "-d", optarg, 0.0); break;
        case 'p': phases_arg = optarg; break;
        case 'l': c.iters[P_LATENCY] = hv_parse_long(PROG, "-l", optarg, 1); break;
        case 'L': c.size[P_LATENCY] = hv_parse_long(PROG, "-L", optarg, 0); break;
        case 'b': c.iters[P_BANDWIDTH] = hv_parse_long(PROG, "-b", optarg, 1); break;
        case 'B': c.size[P_BANDWIDTH] = hv_parse_long(PROG, "-B", optarg, 1); break;
        case 'W': c.window = hv_parse_long(PROG, "-W", optarg, 1); break;
        case 'a': c.iters[P_ALLREDUCE] = hv_parse_long(PROG, "-a", optarg, 1); break;
        case 'A': c.size[P_ALLREDUCE] = hv_parse_long(PROG, "-A", optarg, 8); break;
        case 'I': idle_fixed = hv_parse_double(PROG, "-I", optarg, 0.0); break;
        case 'o': prefix = optarg; break;
        case 'h': usage(); MPI_Finalize(); return 0;
        default: usage(); hv_die(PROG, "bad command line");
        }
    }
    if (optind != argc)
        hv_die(PROG, "unexpected argument '%s'", argv[optind]);
    {
        char *copy = strdup(phases_arg), *tok, *save = NULL;
        int any = 0;
        if (!copy)
            hv_die(PROG, "out of memory");
        for (ph = 0; ph < NPHASES; ph++)
            selected[ph] = 0;
        for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            for (ph = 0; ph < NPHASES && strcmp(tok, PHASE_NAMES[ph]) != 0; ph++)
                ;
            if (ph == NPHASES)
                hv_die(PROG, "option -p: unknown phase '%s' (latency, bandwidth, allreduce)", tok);
            selected[ph] = any = 1;
        }
        free(copy);
        if (!any)
            hv_die(PROG, "option -p: no phases given");
    }
    if (c.size[P_ALLREDUCE] % 8 != 0)
        hv_die(PROG, "option -A: allreduce sums doubles, size must be a multiple of 8");
    if ((double)c.size[P_BANDWIDTH] * (double)c.window > 0x7fffffffL || c.size[P_LATENCY] > 0x7fffffffL ||
        c.size[P_ALLREDUCE] > 0x7fffffffL)
        hv_die(PROG, "message sizes too large");

    hv_meta_init(PROG, &meta);
    bufbytes = (size_t)c.size[P_BANDWIDTH] * (size_t)c.window;
    if ((size_t)c.size[P_LATENCY] > bufbytes)
        bufbytes = (size_t)c.size[P_LATENCY];
    if ((size_t)c.size[P_ALLREDUCE] > bufbytes)
        bufbytes = (size_t)c.size[P_ALLREDUCE];
    sbuf = hv_malloc(PROG, bufbytes);
    rbuf = hv_malloc(PROG, bufbytes);
    memset(sbuf, 1, bufbytes);
    memset(rbuf, 0, bufbytes);
    reqs = hv_malloc(PROG, (size_t)c.window * sizeof(MPI_Request));
    path = hv_malloc(PROG, strlen(prefix) + 32);

    /* warm-up, not recorded: a few iterations of every selected phase */
    for (ph = 0; ph < NPHASES; ph++)
        if (selected[ph])
            run_phase(ph, &c, meta.rank, meta.nranks, sbuf, rbuf, reqs, NULL, c.iters[ph] < 10 ? c.iters[ph] : 10);

    MPI_Barrier(MPI_COMM_WORLD);
    t_begin = MPI_Wtime();
    for (cyc = 0; more; cyc++) {
        for (ph = 0; ph < NPHASES; ph++) {
            double ws, we, es, ee, wi, ei, idle;
            size_t first = vals.n;
            if (!selected[ph])
                continue;
            MPI_Barrier(MPI_COMM_WORLD);
            ws = MPI_Wtime();
            es = hv_epoch();
            run_phase(ph, &c, meta.rank, meta.nranks, sbuf, rbuf, reqs, &vals, c.iters[ph]);
            MPI_Barrier(MPI_COMM_WORLD);
            we = MPI_Wtime();
            ee = hv_epoch();
            /* idle: no communication; each rank sleeps as long as its own view of the phase */
            idle = idle_fixed > 0.0 ? idle_fixed : we - ws;
            hv_sleep_until(we + idle);
            wi = MPI_Wtime();
            ei = hv_epoch();
            if (meta.rank == 0) {
                struct phase_rec w = {cyc, c.iters[ph], c.size[ph], ph, -1, ws, we, es, ee, first};
                struct phase_rec i = {cyc, 0, 0, P_IDLE, ph, we, wi, ee, ei, first};
                struct hv_stats st;
                double *v;
                if (nrec + 2 > caprec) {
                    caprec = caprec ? 2 * caprec : 64;
                    recs = hv_realloc(PROG, recs, (size_t)caprec * sizeof(*recs));
                }
                recs[nrec++] = w;
                recs[nrec++] = i;
                /* rank 0 measures in every phase, so its own times summarise the phase on stdout */
                v = vals.v + first;
                st = hv_summarise(PROG, v, (size_t)c.iters[ph]);
                printf("%s: cycle=%ld phase=%s size=%ld iterations=%ld start_epoch=%.6f duration_s=%.6f "
                       "min_us=%.3f median_us=%.3f max_us=%.3f\n",
                       PROG, cyc, PHASE_NAMES[ph], c.size[ph], c.iters[ph], es, we - ws, st.min, st.median, st.max);
                fflush(stdout);
            }
        }
        if (duration > 0.0) { /* between cycles, after an idle phase: continue? (rank 0 decides) */
            more = MPI_Wtime() - t_begin < duration;
            MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
        } else {
            more = cyc + 1 < cycles;
        }
    }

    /* every rank recorded the same number of values; rank 0 gathers them */
    {
        double *all = NULL;
        FILE *f;
        long n = (long)vals.n, k;
        if (meta.rank == 0)
            all = hv_malloc(PROG, (size_t)n * (size_t)meta.nranks * sizeof(double));
        MPI_Gather(vals.v, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (meta.rank == 0) {
            const char *meta_fmt = "# cycles=%ld\n# phases=%s\n# latency_iterations=%ld\n# latency_bytes=%ld\n"
                                   "# bandwidth_iterations=%ld\n# bandwidth_bytes=%ld\n# bandwidth_window=%ld\n"
                                   "# allreduce_iterations=%ld\n# allreduce_bytes=%ld\n# idle=%s\n";
            char idle_desc[64];
            if (idle_fixed > 0.0)
                snprintf(idle_desc, sizeof(idle_desc), "%.6f", idle_fixed);
            else
                snprintf(idle_desc, sizeof(idle_desc), "same");
            sprintf(path, "%s-phases.csv", prefix);
            f = hv_open_csv(PROG, &meta, path, "hpcvar overtime phases v1");
            fprintf(f, meta_fmt, cyc, phases_arg, c.iters[0], c.size[0], c.iters[1], c.size[1], c.window, c.iters[2],
                    c.size[2], idle_desc);
            fprintf(f, "# times: epoch = CLOCK_REALTIME seconds, wtime = MPI_Wtime seconds (rank 0)\n");
            fprintf(f, "index,cycle,phase,follows,iterations,size_bytes,start_epoch_s,end_epoch_s,start_wtime_s,"
                       "end_wtime_s,duration_s\n");
            for (k = 0; k < nrec; k++) {
                const struct phase_rec *p = &recs[k];
                fprintf(f, "%ld,%ld,%s,%s,%ld,%ld,%.6f,%.6f,%.9f,%.9f,%.9f\n", k, p->cycle, PHASE_NAMES[p->phase],
                        p->follows >= 0 ? PHASE_NAMES[p->follows] : "", p->iterations, p->size, p->es, p->ee, p->ws,
                        p->we, p->we - p->ws);
            }
            hv_close_csv(PROG, f, path);

            sprintf(path, "%s-iterations.csv", prefix);
            f = hv_open_csv(PROG, &meta, path, "hpcvar overtime iterations v1");
            fprintf(f, meta_fmt, cyc, phases_arg, c.iters[0], c.size[0], c.iters[1], c.size[1], c.window, c.iters[2],
                    c.size[2], idle_desc);
            fprintf(f, "# unit=us (microseconds); per iteration over the measuring ranks\n");
            fprintf(f, "cycle,phase,iteration,size_bytes,bytes,ranks,max_us,min_us,mean_us\n");
            for (k = 0; k < nrec; k++) {
                const struct phase_rec *p = &recs[k];
                long bytes = p->phase == P_BANDWIDTH ? p->size * c.window : p->size;
                if (p->phase == P_IDLE)
                    continue;
                for (it = 0; it < p->iterations; it++) {
                    double mx = 0.0, mn = 0.0, sum = 0.0;
                    int cnt = 0;
                    for (r = 0; r < meta.nranks; r++) {
                        double t = all[(size_t)r * (size_t)n + p->first + (size_t)it];
                        if (isnan(t))
                            continue;
                        if (!cnt || t > mx)
                            mx = t;
                        if (!cnt || t < mn)
                            mn = t;
                        sum += t;
                        cnt++;
                    }
                    fprintf(f, "%ld,%s,%ld,%ld,%ld,%d,%.3f,%.3f,%.3f\n", p->cycle, PHASE_NAMES[p->phase], it, p->size,
                            bytes, cnt, mx, mn, cnt ? sum / cnt : 0.0);
                }
            }
            hv_close_csv(PROG, f, path);
            printf("%s: done cycles=%ld phases=%ld\n", PROG, cyc, nrec);
            fflush(stdout);
            free(all);
        }
    }

    free(vals.v);
    free(recs);
    free(sbuf);
    free(rbuf);
    free(reqs);
    free(path);
    free(meta.hosts);
    MPI_Finalize();
    return 0;
}
