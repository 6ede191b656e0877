/*
 * common.h - helpers shared by the hpcvar MPI microbenchmarks (header-only).
 *
 * Every CSV file the benchmarks write starts with
 *
 *     # hpcvar <benchmark> v1
 *     # nranks=<N>
 *     # hosts=<host of rank 0>,<host of rank 1>,...
 *     # mpi_library=<MPI_Get_library_version, newlines replaced by spaces>
 *     # start_epoch=<seconds since 1970-01-01 UTC when MPI_Init returned, microsecond precision>
 *     # start_wtime=<MPI_Wtime() at the same moment>
 *     # wtick=<MPI_Wtick()>
 *     # <benchmark-specific key>=<value>
 *     ...
 *     <header row>
 *
 * followed by data rows. Metadata lines are "# key=value" (split at the first '=').
 */
#ifndef HPCVAR_COMMON_H
#define HPCVAR_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

/* Seconds since the epoch (CLOCK_REALTIME), as a double. */
static inline double hv_epoch(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Print a message on stderr (prefixed with the program and rank) and abort the whole job. */
static inline void hv_die(const char *prog, const char *fmt, ...)
{
    int rank = -1;
    int initialized = 0;
    va_list ap;
    MPI_Initialized(&initialized);
    if (initialized)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "%s: error (rank %d): ", prog, rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    if (initialized)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static inline void *hv_malloc(const char *prog, size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        hv_die(prog, "out of memory allocating %zu bytes", n);
    return p;
}

static inline void *hv_realloc(const char *prog, void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        hv_die(prog, "out of memory allocating %zu bytes", n);
    return q;
}

/* Parse a positive integer option value (>= minimum) or die. */
static inline long hv_parse_long(const char *prog, const char *opt, const char *s, long minimum)
{
    char *end = NULL;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < minimum)
        hv_die(prog, "option %s: expected an integer >= %ld, got '%s'", opt, minimum, s);
    return v;
}

static inline double hv_parse_double(const char *prog, const char *opt, const char *s, double minimum)
{
    char *end = NULL;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= minimum) || !isfinite(v))
        hv_die(prog, "option %s: expected a number >= %g, got '%s'", opt, minimum, s);
    return v;
}

static inline int hv_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Summary of n values: min, median, mean, max (values are not modified). */
struct hv_stats {
    double min, median, mean, max;
};

static inline struct hv_stats hv_summarise(const char *prog, const double *v, size_t n)
{
    struct hv_stats s = {0.0, 0.0, 0.0, 0.0};
    double *c, sum = 0.0;
    size_t i;
    if (n == 0)
        return s;
    c = hv_malloc(prog, n * sizeof(double));
    for (i = 0; i < n; i++) {
        c[i] = v[i];
        sum += v[i];
    }
    qsort(c, n, sizeof(double), hv_cmp_double);
    s.min = c[0];
    s.max = c[n - 1];
    s.median = (n % 2) ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    s.mean = sum / (double)n;
    free(c);
    return s;
}

/* Sleep until MPI_Wtime() >= target: nanosleep until 200 us before it (the kernel's timer slack
 * makes nanosleep overshoot by ~50-100 us), then spin on MPI_Wtime() for the rest. */
static inline void hv_sleep_until(double target)
{
    for (;;) {
        double left = target - MPI_Wtime() - 200e-6;
        struct timespec ts;
        if (left <= 0.0)
            break;
        ts.tv_sec = (time_t)left;
        ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
        if (ts.tv_nsec > 999999999L)
            ts.tv_nsec = 999999999L;
        nanosleep(&ts, NULL);
    }
    while (MPI_Wtime() < target)
        ;
}

/* Job-wide metadata, collected collectively (every rank must call hv_meta_init). */
struct hv_meta {
    int rank, nranks;
    double start_epoch, start_wtime;
    char library[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    char *hosts; /* rank 0 only: comma-separated host of every rank, in rank order */
};

static inline void hv_meta_init(const char *prog, struct hv_meta *m)
{
    char name[MPI_MAX_PROCESSOR_NAME + 1];
    char *all = NULL;
    int len = 0, i, j;
    size_t used = 0;

    memset(m, 0, sizeof(*m));
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->nranks);
    m->start_wtime = MPI_Wtime();
    m->start_epoch = hv_epoch();

    MPI_Get_library_version(m->library, &len);
    m->library[len < 0 ? 0 : (len > MPI_MAX_LIBRARY_VERSION_STRING ? MPI_MAX_LIBRARY_VERSION_STRING : len)] = '\0';
    for (i = 0; m->library[i]; i++)
        if (m->library[i] == '\n' || m->library[i] == '\r' || m->library[i] == '\t')
            m->library[i] = ' ';
    while (i > 0 && m->library[i - 1] == ' ')
        m->library[--i] = '\0';

    memset(name, 0, sizeof(name));
    MPI_Get_processor_name(name, &len);
    for (i = 0; name[i]; i++) /* keep the hosts list parseable */
        if (name[i] == ',' || name[i] == '\n' || name[i] == '\r')
            name[i] = '_';
    if (m->rank == 0)
        all = hv_malloc(prog, (size_t)m->nranks * (MPI_MAX_PROCESSOR_NAME + 1));
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME + 1, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (m->rank == 0) {
        m->hosts = hv_malloc(prog, (size_t)m->nranks * (MPI_MAX_PROCESSOR_NAME + 1) + 1);
        for (i = 0; i < m->nranks; i++) {
            const char *h = all + (size_t)i * (MPI_MAX_PROCESSOR_NAME + 1);
            if (i)
                m->hosts[used++] = ',';
            for (j = 0; h[j] && j < MPI_MAX_PROCESSOR_NAME; j++)
                m->hosts[used++] = h[j];
        }
        m->hosts[used] = '\0';
        free(all);
    }
}

/* Open an output file on rank 0 and write the magic line and the common metadata. */
static inline FILE *hv_open_csv(const char *prog, const struct hv_meta *m, const char *path, const char *magic)
{
    FILE *f = fopen(path, "w");
    if (!f)
        hv_die(prog, "cannot open %s for writing: %s", path, strerror(errno));
    fprintf(f, "# %s\n", magic);
    fprintf(f, "# nranks=%d\n", m->nranks);
    fprintf(f, "# hosts=%s\n", m->hosts ? m->hosts : "");
    fprintf(f, "# mpi_library=%s\n", m->library);
    fprintf(f, "# start_epoch=%.6f\n", m->start_epoch);
    fprintf(f, "# start_wtime=%.9f\n", m->start_wtime);
    fprintf(f, "# wtick=%.3g\n", MPI_Wtick());
    return f;
}

static inline void hv_close_csv(const char *prog, FILE *f, const char *path)
{
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
        hv_die(prog, "error writing %s", path);
}

#endif /* HPCVAR_COMMON_H */
