/*
 * hpcvar-amgproxy: an algebraic-multigrid time-stepping proxy on hypre (BoomerAMG + PCG).
 *
 * hpcvar's own small MPI application, written so that every machine can build a real solver from
 * its package registries (Debian: libhypre-dev). It is not one of the applications of Bhatele et
 * al. 2020 (Table I); it has the same shape as AMG 1.1's time-dependent problem: every time step
 * assembles a sparse operator, sets up an AMG preconditioner for it and solves a linear system.
 *
 * The problem: implicit (backward Euler) time steps of the heat equation on a global grid of
 * Px*nx x Py*ny x Pz*nz points, each rank owning one nx x ny x nz box, zero Dirichlet boundary:
 *
 *     (I + c_n L) u_n = u_{n-1},    c_n = dt * kappa_n,  kappa_n = 1 + 0.5 sin(n)
 *
 * L is the 7-point or 27-point Laplacian in grid units (diagonal 6 or 26, -1 for every neighbour
 * inside the domain). The diffusivity changes every step, so every step assembles a new matrix
 * and sets up a new preconditioner, as a time-dependent code does. The matrix is symmetric and
 * its eigenvalues are larger than 1, so the solution's 2-norm must fall from step to step: the
 * physical check beside convergence.
 *
 * Output (rank 0, stdout), a line per event, so that `ts` stamps step boundaries:
 *
 *     hpcvar-amgproxy 1.0 (hypre 2.26.0)
 *     Running with these driver parameters:
 *       (Px, Py, Pz) = (2, 1, 1)
 *       (nx, ny, nz) = (20, 20, 20)
 *       stencil = 27-point
 *       time steps = 6
 *       dt = 10
 *       tolerance = 1e-08
 *       max iterations = 200
 *     Global grid: 40 x 20 x 20 = 16000 unknowns, 2 ranks
 *     Time stepping: 6 steps
 *     Step 1: assembly 0.001 s, setup 0.010 s, solve 0.020 s, step 0.031 s, PCG iterations 7, relative residual 3.1e-09, norm 4.4e+01
 *     ...
 *     Time stepping done: 6 steps, 0.190 s
 *       assembly 0.006 s, setup 0.060 s, solve 0.120 s, PCG iterations 42
 *     Figure of Merit (FOM): unknowns x steps / (setup + solve) = 5.1e+05
 *
 * (times with six decimals). Everything up to "Time stepping:" is written at once, right before
 * the first step's timer starts; each "Step i:" line right after step i's timer stops, and the
 * next step's timer starts right after it, so the lines' timestamps bound the steps. A step's
 * time ("step") covers its assembly, setup and solve and what follows them (the solution's norm,
 * freeing the solver); every time is taken between barriers, so it is the slowest rank's.
 * hpcvar's parser: src/hpcvar/parsers/apps/amgproxy.py.
 *
 * Usage: hpcvar-amgproxy [-n nx ny nz] [-P px py pz] [-stencil 7|27] [-steps N] [-dt DT]
 *                        [-tol TOL] [-maxit N]
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include <HYPRE.h>
#include <HYPRE_IJ_mv.h>
#include <HYPRE_config.h>
#include <HYPRE_parcsr_ls.h>
#include <HYPRE_utilities.h>

#define VERSION "1.0"
#define PROG "hpcvar-amgproxy"
#define PI 3.14159265358979323846

typedef struct {
    int n[3];      /* local box */
    int p[3];      /* process grid (0: chosen by MPI_Dims_create) */
    int stencil;   /* 7 or 27 */
    int steps;
    double dt;
    double tol;
    int maxit;
} options_t;

static void die(const char *fmt, const char *arg)
{
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        fprintf(stderr, PROG ": error: ");
        fprintf(stderr, fmt, arg);
        fputc('\n', stderr);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(2);
}

static int positive_int(const char *text)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v <= 0 || v > 1000000)
        die("expected a positive integer, got '%s'", text);
    return (int)v;
}

static double positive_double(const char *text)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v > 0.0) || !isfinite(v))
        die("expected a positive number, got '%s'", text);
    return v;
}

static options_t parse_options(int argc, char **argv)
{
    options_t o = {{20, 20, 20}, {0, 0, 0}, 27, 6, 10.0, 1e-8, 200};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int left = argc - i - 1;
        if (!strcmp(a, "-n") && left >= 3) {
            for (int d = 0; d < 3; d++)
                o.n[d] = positive_int(argv[++i]);
        } else if (!strcmp(a, "-P") && left >= 3) {
            for (int d = 0; d < 3; d++)
                o.p[d] = positive_int(argv[++i]);
        } else if (!strcmp(a, "-stencil") && left >= 1) {
            o.stencil = positive_int(argv[++i]);
            if (o.stencil != 7 && o.stencil != 27)
                die("-stencil: expected 7 or 27, got '%s'", argv[i]);
        } else if (!strcmp(a, "-steps") && left >= 1) {
            o.steps = positive_int(argv[++i]);
        } else if (!strcmp(a, "-dt") && left >= 1) {
            o.dt = positive_double(argv[++i]);
        } else if (!strcmp(a, "-tol") && left >= 1) {
            o.tol = positive_double(argv[++i]);
        } else if (!strcmp(a, "-maxit") && left >= 1) {
            o.maxit = positive_int(argv[++i]);
        } else if (!strcmp(a, "-help") || !strcmp(a, "--help")) {
            die("%s", "usage: " PROG " [-n nx ny nz] [-P px py pz] [-stencil 7|27] [-steps N] [-dt DT] "
                      "[-tol TOL] [-maxit N]");
        } else {
            die("unknown or incomplete option '%s' (see -help)", a);
        }
    }
    return o;
}

/* The grid: which rank owns which box, and global row numbers (each rank's rows contiguous). */
typedef struct {
    int n[3], p[3], c[3]; /* local box, process grid, this rank's coordinates in it */
    int g[3];             /* global grid */
    HYPRE_BigInt nlocal, ilower, iupper;
    HYPRE_BigInt *rows;   /* this rank's global row numbers, ilower..iupper */
} grid_t;

static HYPRE_BigInt row_of(const grid_t *g, const int gi[3])
{
    int owner = 0, li[3];
    for (int d = 2; d >= 0; d--) {
        owner = owner * g->p[d] + gi[d] / g->n[d];
        li[d] = gi[d] % g->n[d];
    }
    return (HYPRE_BigInt)owner * g->nlocal + li[0] + (HYPRE_BigInt)g->n[0] * (li[1] + (HYPRE_BigInt)g->n[1] * li[2]);
}

/* (I + c L) with L the stencil's Laplacian; returns the number of nonzeros on this rank. */
static HYPRE_BigInt assemble(const grid_t *g, int stencil, double c, HYPRE_IJMatrix *A, HYPRE_ParCSRMatrix *parA)
{
    const int reach = 1;
    int width = stencil == 27 ? 27 : 7;
    HYPRE_BigInt *cols = malloc(sizeof *cols * width);
    double *vals = malloc(sizeof *vals * width);
    HYPRE_Int *sizes = malloc(sizeof *sizes * g->nlocal);
    HYPRE_BigInt nnz = 0;
    if (!cols || !vals || !sizes)
        die("%s", "out of memory");
    for (HYPRE_BigInt r = 0; r < g->nlocal; r++)
        sizes[r] = width;
    HYPRE_IJMatrixCreate(MPI_COMM_WORLD, g->ilower, g->iupper, g->ilower, g->iupper, A);
    HYPRE_IJMatrixSetObjectType(*A, HYPRE_PARCSR);
    HYPRE_IJMatrixSetRowSizes(*A, sizes);
    HYPRE_IJMatrixInitialize(*A);
    int li[3], gi[3];
    for (li[2] = 0; li[2] < g->n[2]; li[2]++)
        for (li[1] = 0; li[1] < g->n[1]; li[1]++)
            for (li[0] = 0; li[0] < g->n[0]; li[0]++) {
                for (int d = 0; d < 3; d++)
                    gi[d] = g->c[d] * g->n[d] + li[d];
                HYPRE_BigInt row = row_of(g, gi);
                HYPRE_Int ncols = 0;
                int neighbours = 0;
                for (int dz = -reach; dz <= reach; dz++)
                    for (int dy = -reach; dy <= reach; dy++)
                        for (int dx = -reach; dx <= reach; dx++) {
                            int off = abs(dx) + abs(dy) + abs(dz);
                            if (off == 0 || (stencil == 7 && off > 1))
                                continue;
                            neighbours++;
                            int ni[3] = {gi[0] + dx, gi[1] + dy, gi[2] + dz};
                            if (ni[0] < 0 || ni[1] < 0 || ni[2] < 0 || ni[0] >= g->g[0] || ni[1] >= g->g[1] ||
                                ni[2] >= g->g[2])
                                continue; /* zero Dirichlet boundary */
                            cols[ncols] = row_of(g, ni);
                            vals[ncols] = -c;
                            ncols++;
                        }
                cols[ncols] = row;
                vals[ncols] = 1.0 + c * neighbours;
                ncols++;
                nnz += ncols;
                HYPRE_IJMatrixSetValues(*A, 1, &ncols, &row, cols, vals);
            }
    HYPRE_IJMatrixAssemble(*A);
    HYPRE_IJMatrixGetObject(*A, (void **)parA);
    free(cols);
    free(vals);
    free(sizes);
    return nnz;
}

/* A vector of this rank's rows holding ``values``. */
static void make_vector(const grid_t *g, const double *values, HYPRE_IJVector *v, HYPRE_ParVector *par)
{
    HYPRE_IJVectorCreate(MPI_COMM_WORLD, g->ilower, g->iupper, v);
    HYPRE_IJVectorSetObjectType(*v, HYPRE_PARCSR);
    HYPRE_IJVectorInitialize(*v);
    HYPRE_IJVectorSetValues(*v, (HYPRE_Int)g->nlocal, g->rows, values);
    HYPRE_IJVectorAssemble(*v);
    HYPRE_IJVectorGetObject(*v, (void **)par);
}

static double norm2(const grid_t *g, const double *u)
{
    double local = 0.0, global = 0.0;
    for (HYPRE_BigInt r = 0; r < g->nlocal; r++)
        local += u[r] * u[r];
    MPI_Allreduce(&local, &global, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sqrt(global);
}

static double now(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    return MPI_Wtime();
}

/* Rank 0's parameters and the start of the time stepping, in one write(2), right before the
 * first step's timer starts. Under srun, a line written while the one before it still waits for
 * its delayed acknowledgement (40 ms) on the way to srun waits with it; the first step's start
 * line came a few milliseconds after the parameters and was stamped up to 40 ms late. Written
 * at once, nothing of it waits behind an earlier line. Rank 0 alone: a failure aborts the job
 * (MPI_Abort), as the other ranks are already in the first step's barrier. */
static void write_start(const options_t *o, const grid_t *g, HYPRE_BigInt unknowns, int size)
{
    char *text = NULL;
    size_t length = 0;
    FILE *block = open_memstream(&text, &length);
    if (block) {
        fprintf(block, PROG " " VERSION " (hypre " HYPRE_RELEASE_VERSION ")\n");
        fprintf(block, "Running with these driver parameters:\n");
        fprintf(block, "  (Px, Py, Pz) = (%d, %d, %d)\n", g->p[0], g->p[1], g->p[2]);
        fprintf(block, "  (nx, ny, nz) = (%d, %d, %d)\n", g->n[0], g->n[1], g->n[2]);
        fprintf(block, "  stencil = %d-point\n", o->stencil);
        fprintf(block, "  time steps = %d\n", o->steps);
        fprintf(block, "  dt = %g\n", o->dt);
        fprintf(block, "  tolerance = %g\n", o->tol);
        fprintf(block, "  max iterations = %d\n", o->maxit);
        fprintf(block, "Global grid: %d x %d x %d = %lld unknowns, %d ranks\n", g->g[0], g->g[1], g->g[2],
                (long long)unknowns, size);
        fprintf(block, "Time stepping: %d steps\n", o->steps);
    }
    if (!block || ferror(block) || fclose(block) != 0) {
        fprintf(stderr, PROG ": error: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fflush(stdout);
    for (size_t done = 0; done < length;) {
        ssize_t n = write(STDOUT_FILENO, text + done, length - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fprintf(stderr, PROG ": error: cannot write to standard output: %s\n", strerror(errno));
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        done += (size_t)n;
    }
    free(text);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    options_t o = parse_options(argc, argv);

    grid_t g;
    if (o.p[0] == 0) {
        int dims[3] = {0, 0, 0};
        MPI_Dims_create(size, 3, dims);
        memcpy(o.p, dims, sizeof dims);
    }
    if (o.p[0] * o.p[1] * o.p[2] != size) {
        char msg[128];
        snprintf(msg, sizeof msg, "-P %d %d %d is %d ranks, but the job has %d", o.p[0], o.p[1], o.p[2],
                 o.p[0] * o.p[1] * o.p[2], size);
        die("%s", msg);
    }
    memcpy(g.n, o.n, sizeof g.n);
    memcpy(g.p, o.p, sizeof g.p);
    g.c[0] = rank % g.p[0];
    g.c[1] = (rank / g.p[0]) % g.p[1];
    g.c[2] = rank / (g.p[0] * g.p[1]);
    for (int d = 0; d < 3; d++)
        g.g[d] = g.n[d] * g.p[d];
    g.nlocal = (HYPRE_BigInt)g.n[0] * g.n[1] * g.n[2];
    g.ilower = rank * g.nlocal;
    g.iupper = g.ilower + g.nlocal - 1;
    g.rows = malloc(sizeof *g.rows * g.nlocal);
    if (!g.rows)
        die("%s", "out of memory");
    for (HYPRE_BigInt r = 0; r < g.nlocal; r++)
        g.rows[r] = g.ilower + r;
    HYPRE_BigInt unknowns = (HYPRE_BigInt)size * g.nlocal;

    HYPRE_Init();

    /* u_0: one period of a sine in every direction (zero on the boundary). */
    double *u = malloc(sizeof *u * g.nlocal);
    double *zero = calloc((size_t)g.nlocal, sizeof *zero);
    if (!u || !zero)
        die("%s", "out of memory");
    {
        int li[3];
        HYPRE_BigInt r = 0;
        for (li[2] = 0; li[2] < g.n[2]; li[2]++)
            for (li[1] = 0; li[1] < g.n[1]; li[1]++)
                for (li[0] = 0; li[0] < g.n[0]; li[0]++, r++) {
                    double v = 100.0;
                    for (int d = 0; d < 3; d++)
                        v *= sin(PI * (g.c[d] * g.n[d] + li[d] + 1) / (g.g[d] + 1));
                    u[r] = v;
                }
    }

    double total[4] = {0, 0, 0, 0}; /* assembly, setup, solve, step */
    long long iterations_total = 0;
    int failed = 0;
    if (rank == 0)
        write_start(&o, &g, unknowns, size);
    for (int step = 1; step <= o.steps; step++) {
        double c = o.dt * (1.0 + 0.5 * sin((double)step));
        HYPRE_IJMatrix A;
        HYPRE_ParCSRMatrix parA;
        HYPRE_IJVector b, x;
        HYPRE_ParVector parb, parx;
        HYPRE_Solver pcg, amg;

        double t0 = now();
        assemble(&g, o.stencil, c, &A, &parA);
        make_vector(&g, u, &b, &parb);
        make_vector(&g, zero, &x, &parx);
        double t1 = now();

        HYPRE_ParCSRPCGCreate(MPI_COMM_WORLD, &pcg);
        HYPRE_PCGSetMaxIter(pcg, o.maxit);
        HYPRE_PCGSetTol(pcg, o.tol);
        HYPRE_PCGSetTwoNorm(pcg, 1);
        HYPRE_PCGSetPrintLevel(pcg, 0);
        HYPRE_PCGSetLogging(pcg, 1);
        HYPRE_BoomerAMGCreate(&amg);
        HYPRE_BoomerAMGSetPrintLevel(amg, 0);
        HYPRE_BoomerAMGSetCoarsenType(amg, 10);  /* HMIS */
        HYPRE_BoomerAMGSetInterpType(amg, 6);    /* extended+i */
        HYPRE_BoomerAMGSetPMaxElmts(amg, 4);
        HYPRE_BoomerAMGSetStrongThreshold(amg, o.stencil == 27 ? 0.5 : 0.25);
        HYPRE_BoomerAMGSetRelaxType(amg, 6);     /* symmetric hybrid Gauss-Seidel: PCG needs symmetry */
        HYPRE_BoomerAMGSetNumSweeps(amg, 1);
        HYPRE_BoomerAMGSetTol(amg, 0.0);
        HYPRE_BoomerAMGSetMaxIter(amg, 1);
        HYPRE_PCGSetPrecond(pcg, (HYPRE_PtrToSolverFcn)HYPRE_BoomerAMGSolve,
                            (HYPRE_PtrToSolverFcn)HYPRE_BoomerAMGSetup, amg);
        HYPRE_ParCSRPCGSetup(pcg, parA, parb, parx);
        double t2 = now();

        HYPRE_ParCSRPCGSolve(pcg, parA, parb, parx);
        double t3 = now();

        HYPRE_Int its = 0;
        double residual = 0.0;
        HYPRE_PCGGetNumIterations(pcg, &its);
        HYPRE_PCGGetFinalRelativeResidualNorm(pcg, &residual);
        HYPRE_IJVectorGetValues(x, (HYPRE_Int)g.nlocal, g.rows, u);
        double norm = norm2(&g, u);
        HYPRE_BoomerAMGDestroy(amg);
        HYPRE_ParCSRPCGDestroy(pcg);
        HYPRE_IJVectorDestroy(x);
        HYPRE_IJVectorDestroy(b);
        HYPRE_IJMatrixDestroy(A);
        double t4 = now(); /* the step: everything since t0, so consecutive step lines bound it */
        if (!(residual <= o.tol))
            failed = 1;
        total[0] += t1 - t0;
        total[1] += t2 - t1;
        total[2] += t3 - t2;
        total[3] += t4 - t0;
        iterations_total += its;
        if (rank == 0) {
            printf("Step %d: assembly %.6f s, setup %.6f s, solve %.6f s, step %.6f s, PCG iterations %d, "
                   "relative residual %.6e, norm %.6e\n",
                   step, t1 - t0, t2 - t1, t3 - t2, t4 - t0, (int)its, residual, norm);
            fflush(stdout);
        }
    }
    if (rank == 0) {
        printf("Time stepping done: %d steps, %.6f s\n", o.steps, total[3]);
        printf("  assembly %.6f s, setup %.6f s, solve %.6f s, PCG iterations %lld\n", total[0], total[1],
               total[2], iterations_total);
        printf("Figure of Merit (FOM): unknowns x steps / (setup + solve) = %.6e\n",
               (double)unknowns * o.steps / (total[1] + total[2]));
        if (failed)
            printf("Warning: a step did not converge to the tolerance %g\n", o.tol);
        fflush(stdout);
    }
    free(u);
    free(zero);
    free(g.rows);
    HYPRE_Finalize();
    MPI_Finalize();
    return failed ? 1 : 0;
}
