/*
 * hpcvar-confidence - pairwise 1-byte MPI_Sendrecv latency distributions, after Confidence's
 * CommTest3 (Settlemyer et al., "Confidence: analyzing performance with empirical probabilities").
 *
 * 1. Timer calibration: every rank calls MPI_Wtime() back to back (-T times); the smallest
 *    difference is that rank's minimum timer cost, timer_min. The calibration differences, minus
 *    timer_min, are binned (kind "timer").
 * 2. Cycles (-n): in each cycle every pair of ranks is measured once, in a round-robin
 *    ("circle method") schedule of N-1 rounds (N rounds for odd N, one rank idle per round): in a
 *    round every rank does -w untimed then -t timed 1-byte MPI_Sendrecv with its partner. Each
 *    timed call gives a one-sided latency (MPI_Wtime difference minus timer_min, clamped at 0) on
 *    both ranks; the pairwise latency of a trial is the mean of the two one-sided latencies.
 *    The smallest pairwise latency of a pair in a cycle is that cycle's pair minimum.
 * 3. Histograms with Confidence's logarithmic bins: bin widths lw_0 = S, lw_i = e^(S*i) - 1
 *    (0 < i < C), S and widths in microseconds (-S, -C); bin i covers [sum_{j<i} lw_j,
 *    sum_{j<=i} lw_j); the last bin also counts everything beyond (its upper edge is written
 *    as "inf"). Python: hpcvar.parsers.microbenchmarks.log_bin_widths / log_bin_edges.
 *
 * Output (rank 0), PREFIX from -o:
 *   PREFIX-hist.csv    kind,rank_a,rank_b,bin,lower_us,upper_us,count   (non-empty bins only)
 *                      kind = timer (rank_a = the rank, rank_b = -1), onesided (rank_a measured
 *                      while talking to rank_b), pairwise and minima (rank_a < rank_b).
 *   PREFIX-minima.csv  cycle,rank_a,rank_b,trials,min_pairwise_us,min_a_us,min_b_us,median_pairwise_us
 *   PREFIX-samples.csv (only with -r) cycle,rank_a,rank_b,trial,a_us,b_us,pairwise_us
 * stdout: one "hpcvar-confidence: ..." summary line per file and a final "hpcvar-confidence: done".
 * See ../README.md.
 */
#include "common.h"

#include <unistd.h>

#define PROG "hpcvar-confidence"

enum { K_TIMER, K_ONESIDED, K_PAIRWISE, K_MINIMA, NKINDS };
static const char *const KIND_NAMES[NKINDS] = {"timer", "onesided", "pairwise", "minima"};

static int nbins;
static double *edges; /* nbins + 1 finite edges, edges[0] = 0 */

static void make_bins(double S, int C)
{
    int i;
    nbins = C;
    edges = hv_malloc(PROG, (size_t)(C + 1) * sizeof(double));
    edges[0] = 0.0;
    for (i = 0; i < C; i++)
        edges[i + 1] = edges[i] + (i == 0 ? S : exp(S * (double)i) - 1.0);
}

/* Bin of a value in microseconds: lower <= x < upper; the last bin is open-ended. */
static int bin_of(double x)
{
    int lo = 0, hi = nbins - 1;
    if (!(x >= 0.0))
        return 0;
    while (lo < hi) { /* largest i with edges[i] <= x */
        int mid = (lo + hi + 1) / 2;
        if (edges[mid] <= x)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Partner of rank i in round r (circle method over P' = nranks rounded up to even), or -1. */
static int partner_of(int i, int r, int nranks)
{
    int pp = nranks + (nranks % 2), m = pp - 1, p;
    if (i == pp - 1)
        p = (int)(((long)r * (pp / 2)) % m);
    else {
        p = ((r - i) % m + m) % m;
        if (p == i)
            p = pp - 1;
    }
    return p >= nranks ? -1 : p;
}

/* Growable array of doubles (records sent to rank 0 at the end). */
struct dvec {
    double *v;
    size_t n, cap;
};

static void dpush(struct dvec *d, double x)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 1024;
        d->v = hv_realloc(PROG, d->v, d->cap * sizeof(double));
    }
    d->v[d->n++] = x;
}

/* Rank 0 gets every rank's records, in rank order, and hands them to emit(). */
static void collect(const struct dvec *d, int rank, int nranks, int width, void (*emit)(const double *, void *),
                    void *ctx)
{
    int r;
    if (rank != 0) {
        long n = (long)d->n;
        MPI_Send(&n, 1, MPI_LONG, 0, 1, MPI_COMM_WORLD);
        if (n)
            MPI_Send(d->v, (int)n, MPI_DOUBLE, 0, 2, MPI_COMM_WORLD);
        return;
    }
    for (r = 0; r < nranks; r++) {
        long n = 0, k;
        double *buf;
        if (r == 0) {
            n = (long)d->n;
            buf = d->v;
        } else {
            MPI_Recv(&n, 1, MPI_LONG, r, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            buf = hv_malloc(PROG, (size_t)n * sizeof(double));
            if (n)
                MPI_Recv(buf, (int)n, MPI_DOUBLE, r, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        for (k = 0; k + width <= n; k += width)
            emit(buf + k, ctx);
        if (r != 0)
            free(buf);
    }
}

static void emit_hist(const double *rec, void *ctx)
{
    FILE *f = ctx;
    int b = (int)rec[3];
    fprintf(f, "%s,%d,%d,%d,%.6f,", KIND_NAMES[(int)rec[0]], (int)rec[1], (int)rec[2], b, edges[b]);
    if (b == nbins - 1)
        fprintf(f, "inf,");
    else
        fprintf(f, "%.6f,", edges[b + 1]);
    fprintf(f, "%.0f\n", rec[4]);
}

static void emit_minima(const double *rec, void *ctx)
{
    fprintf((FILE *)ctx, "%d,%d,%d,%d,%.6f,%.6f,%.6f,%.6f\n", (int)rec[0], (int)rec[1], (int)rec[2], (int)rec[3],
            rec[4], rec[5], rec[6], rec[7]);
}

static void emit_sample(const double *rec, void *ctx)
{
    fprintf((FILE *)ctx, "%d,%d,%d,%d,%.17g,%.17g,%.17g\n", (int)rec[0], (int)rec[1], (int)rec[2], (int)rec[3], rec[4],
            rec[5], rec[6]);
}

/* Append the non-empty bins of one histogram as (kind, a, b, bin, count) records. */
static void push_hist(struct dvec *d, int kind, int a, int b, const long long *h)
{
    int i;
    for (i = 0; i < nbins; i++)
        if (h[i]) {
            dpush(d, kind);
            dpush(d, a);
            dpush(d, b);
            dpush(d, i);
            dpush(d, (double)h[i]);
        }
}

static void usage(void)
{
    printf("usage: %s [-n CYCLES] [-t TRIALS] [-w WARMUP] [-T TIMER_SAMPLES] [-S BIN_SIZE_US] [-C BINS]\n"
           "          [-o PREFIX] [-r]\n"
           "  -n CYCLES         cycles; every pair is measured once per cycle (default 10)\n"
           "  -t TRIALS         timed 1-byte MPI_Sendrecv per pair per cycle (default 200)\n"
           "  -w WARMUP         untimed MPI_Sendrecv before them (default 10)\n"
           "  -T TIMER_SAMPLES  back-to-back MPI_Wtime differences for calibration (default 100000)\n"
           "  -S BIN_SIZE_US    log-bin size parameter S in microseconds (default 0.05)\n"
           "  -C BINS           number of bins C (default 256)\n"
           "  -o PREFIX         output prefix (default hpcvar-confidence)\n"
           "  -r                also write every sample to PREFIX-samples.csv (small runs only)\n",
           PROG);
}

int main(int argc, char **argv)
{
    long cycles = 10, trials = 200, warmup = 10, tsamples = 100000, cyc, k;
    double S = 0.05, timer_min, *tbuf, *mine, *theirs, *pair, *all_tmin = NULL;
    int C = 256, raw = 0, opt, round, nrounds, r;
    const char *prefix = "hpcvar-confidence";
    char *path;
    struct hv_meta meta;
    long long *h_timer, *h_one, *h_pair, *h_min;
    struct dvec hist = {0}, minima = {0}, samples = {0};
    char sbyte = 1, rbyte = 0;
    FILE *f;

    MPI_Init(&argc, &argv);
    while ((opt = getopt(argc, argv, "n:t:w:T:S:C:o:rh")) != -1) {
        switch (opt) {
        case 'n': cycles = hv_parse_long(PROG, "-n", optarg, 1); break;
        case 't': trials = hv_parse_long(PROG, "-t", optarg, 1); break;
        case 'w': warmup = hv_parse_long(PROG, "-w", optarg, 0); break;
        case 'T': tsamples = hv_parse_long(PROG, "-T", optarg, 1); break;
        case 'S': S = hv_parse_double(PROG, "-S", optarg, 1e-9); break;
        case 'C': C = (int)hv_parse_long(PROG, "-C", optarg, 2); break;
        case 'o': prefix = optarg; break;
        case 'r': raw = 1; break;
        case 'h': usage(); MPI_Finalize(); return 0;
        default: usage(); hv_die(PROG, "bad command line");
        }
    }
    if (optind != argc)
        hv_die(PROG, "unexpected argument '%s'", argv[optind]);
    if (C > 100000 || S * (C - 1) > 700.0)
        hv_die(PROG, "bins overflow: need S*(C-1) <= 700 and C <= 100000 (S=%g, C=%d)", S, C);
    make_bins(S, C);
    hv_meta_init(PROG, &meta);
    if (meta.nranks < 2)
        hv_die(PROG, "needs at least 2 ranks");
    path = hv_malloc(PROG, strlen(prefix) + 32);

    /* 1. timer calibration */
    tbuf = hv_malloc(PROG, (size_t)(tsamples + 1) * sizeof(double));
    for (k = 0; k <= tsamples; k++)
        tbuf[k] = MPI_Wtime();
    timer_min = 1e30;
    for (k = 0; k < tsamples; k++) {
        tbuf[k] = tbuf[k + 1] - tbuf[k];
        if (tbuf[k] < timer_min)
            timer_min = tbuf[k];
    }
    h_timer = calloc((size_t)C, sizeof(long long));
    h_one = calloc((size_t)C * (size_t)meta.nranks, sizeof(long long));
    h_pair = calloc((size_t)C * (size_t)meta.nranks, sizeof(long long));
    h_min = calloc((size_t)C * (size_t)meta.nranks, sizeof(long long));
    if (!h_timer || !h_one || !h_pair || !h_min)
        hv_die(PROG, "out of memory for histograms");
    for (k = 0; k < tsamples; k++)
        h_timer[bin_of((tbuf[k] - timer_min) * 1e6)]++;
    free(tbuf);
    if (meta.rank == 0)
        all_tmin = hv_malloc(PROG, (size_t)meta.nranks * sizeof(double));
    MPI_Gather(&timer_min, 1, MPI_DOUBLE, all_tmin, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);

    /* 2. cycles of pairwise rounds */
    mine = hv_malloc(PROG, (size_t)trials * sizeof(double));
    theirs = hv_malloc(PROG, (size_t)trials * sizeof(double));
    pair = hv_malloc(PROG, (size_t)trials * sizeof(double));
    nrounds = meta.nranks + (meta.nranks % 2) - 1;
    for (cyc = 0; cyc < cycles; cyc++) {
        for (round = 0; round < nrounds; round++) {
            int peer = partner_of(meta.rank, round, meta.nranks);
            MPI_Barrier(MPI_COMM_WORLD);
            if (peer < 0)
                continue;
            for (k = 0; k < warmup; k++)
                MPI_Sendrecv(&sbyte, 1, MPI_BYTE, peer, 7, &rbyte, 1, MPI_BYTE, peer, 7, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
            for (k = 0; k < trials; k++) {
                double t0 = MPI_Wtime(), t1;
                MPI_Sendrecv(&sbyte, 1, MPI_BYTE, peer, 8, &rbyte, 1, MPI_BYTE, peer, 8, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
                t1 = MPI_Wtime();
                mine[k] = (t1 - t0 - timer_min) * 1e6;
                if (mine[k] < 0.0)
                    mine[k] = 0.0;
                h_one[(size_t)peer * C + bin_of(mine[k])]++;
            }
            /* the lower rank of the pair gets the partner's one-sided samples */
            if (meta.rank < peer) {
                double mn = 1e300, mna = 1e300, mnb = 1e300;
                struct hv_stats st;
                MPI_Recv(theirs, (int)trials, MPI_DOUBLE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (k = 0; k < trials; k++) {
                    pair[k] = 0.5 * (mine[k] + theirs[k]);
                    h_pair[(size_t)peer * C + bin_of(pair[k])]++;
                    if (pair[k] < mn)
                        mn = pair[k];
                    if (mine[k] < mna)
                        mna = mine[k];
                    if (theirs[k] < mnb)
                        mnb = theirs[k];
                    if (raw) {
                        dpush(&samples, (double)cyc);
                        dpush(&samples, meta.rank);
                        dpush(&samples, peer);
                        dpush(&samples, (double)k);
                        dpush(&samples, mine[k]);
                        dpush(&samples, theirs[k]);
                        dpush(&samples, pair[k]);
                    }
                }
                h_min[(size_t)peer * C + bin_of(mn)]++;
                st = hv_summarise(PROG, pair, (size_t)trials);
                dpush(&minima, (double)cyc);
                dpush(&minima, meta.rank);
                dpush(&minima, peer);
                dpush(&minima, (double)trials);
                dpush(&minima, mn);
                dpush(&minima, mna);
                dpush(&minima, mnb);
                dpush(&minima, st.median);
            } else {
                MPI_Send(mine, (int)trials, MPI_DOUBLE, peer, 9, MPI_COMM_WORLD);
            }
        }
    }

    /* 3. histograms as records, then everything to rank 0 */
    push_hist(&hist, K_TIMER, meta.rank, -1, h_timer);
    for (r = 0; r < meta.nranks; r++)
        if (r != meta.rank)
            push_hist(&hist, K_ONESIDED, meta.rank, r, h_one + (size_t)r * C);
    for (r = meta.rank + 1; r < meta.nranks; r++) {
        push_hist(&hist, K_PAIRWISE, meta.rank, r, h_pair + (size_t)r * C);
        push_hist(&hist, K_MINIMA, meta.rank, r, h_min + (size_t)r * C);
    }

    f = NULL;
    if (meta.rank == 0) {
        sprintf(path, "%s-hist.csv", prefix);
        f = hv_open_csv(PROG, &meta, path, "hpcvar confidence histogram v1");
        fprintf(f, "# cycles=%ld\n# trials=%ld\n# warmup=%ld\n# message_bytes=1\n# timer_samples=%ld\n", cycles,
                trials, warmup, tsamples);
        fprintf(f, "# bin_size_us=%.17g\n# nbins=%d\n# timer_min_us=", S, C);
        for (r = 0; r < meta.nranks; r++)
            fprintf(f, "%s%.6f", r ? "," : "", all_tmin[r] * 1e6);
        fprintf(f, "\n# unit=us (microseconds); bins: widths lw_0=S, lw_i=exp(S*i)-1; last bin open-ended\n");
        fprintf(f, "kind,rank_a,rank_b,bin,lower_us,upper_us,count\n");
    }
    collect(&hist, meta.rank, meta.nranks, 5, emit_hist, f);
    if (meta.rank == 0) {
        hv_close_csv(PROG, f, path);
        printf("%s: histograms file=%s bin_size_us=%g nbins=%d\n", PROG, path, S, C);
        sprintf(path, "%s-minima.csv", prefix);
        f = hv_open_csv(PROG, &meta, path, "hpcvar confidence minima v1");
        fprintf(f, "# cycles=%ld\n# trials=%ld\n# timer_min_us=", cycles, trials);
        for (r = 0; r < meta.nranks; r++)
            fprintf(f, "%s%.6f", r ? "," : "", all_tmin[r] * 1e6);
        fprintf(f, "\n# unit=us (microseconds)\n");
        fprintf(f, "cycle,rank_a,rank_b,trials,min_pairwise_us,min_a_us,min_b_us,median_pairwise_us\n");
    }
    collect(&minima, meta.rank, meta.nranks, 8, emit_minima, f);
    if (meta.rank == 0) {
        hv_close_csv(PROG, f, path);
        printf("%s: minima file=%s pairs=%d cycles=%ld trials=%ld\n", PROG, path,
               meta.nranks * (meta.nranks - 1) / 2, cycles, trials);
    }
    if (raw) {
        if (meta.rank == 0) {
            sprintf(path, "%s-samples.csv", prefix);
            f = hv_open_csv(PROG, &meta, path, "hpcvar confidence samples v1");
            fprintf(f, "# cycles=%ld\n# trials=%ld\n# unit=us (microseconds), timer_min subtracted, full double precision\n", cycles,
                    trials);
            fprintf(f, "cycle,rank_a,rank_b,trial,a_us,b_us,pairwise_us\n");
        }
        collect(&samples, meta.rank, meta.nranks, 7, emit_sample, f);
        if (meta.rank == 0) {
            hv_close_csv(PROG, f, path);
            printf("%s: samples file=%s\n", PROG, path);
        }
    }

    /* stdout summary: smallest pair minimum of the run, largest per-rank timer_min */
    {
        double lmin = 1e300, gmin = 0.0, tmin_max = 0.0;
        size_t i;
        for (i = 0; i + 8 <= minima.n; i += 8)
            if (minima.v[i + 4] < lmin)
                lmin = minima.v[i + 4];
        MPI_Reduce(&lmin, &gmin, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
        MPI_Reduce(&timer_min, &tmin_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (meta.rank == 0) {
            printf("%s: ranks=%d cycles=%ld trials=%ld min_pairwise_us=%.4f timer_min_us=%.4f\n", PROG,
                   meta.nranks, cycles, trials, gmin, tmin_max * 1e6);
            printf("%s: done\n", PROG);
            fflush(stdout);
        }
    }

    free(h_timer);
    free(h_one);
    free(h_pair);
    free(h_min);
    free(mine);
    free(theirs);
    free(pair);
    free(hist.v);
    free(minima.v);
    free(samples.v);
    free(path);
    free(edges);
    free(all_tmin);
    free(meta.hosts);
    MPI_Finalize();
    return 0;
}
