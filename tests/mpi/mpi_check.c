/* MPI check for urxe under UCX: ping-pong with data verification, allreduce, alltoall.
 *
 *   mpi_check [ITERS] [--lat | --pp SIZE]
 *
 * Every rank pairs with rank^1 for the ping-pong (an odd last rank skips it); each message
 * carries a pattern derived from (iteration, size, sender) that the receiver checks. Then
 * MPI_Allreduce (sum, max) and MPI_Alltoall with per-pair values, each checked against the
 * closed form. Prints "mpi_check: OK ranks=N" on rank 0 and exits 0 only if every rank agrees.
 * --pp SIZE: a ping-pong of SIZE-byte messages between ranks 0 and 1 (ITERS/10+1 verified
 * warm-up round trips, then ITERS timed ones); rank 0 prints "mpi_check: pingpong SIZE B x
 * ITERS: X MB/s one-way, ..." (2 * ITERS * SIZE bytes over the time).
 * --lat: only the 8-byte ping-pong between ranks 0 and 1, timed per round trip; rank 0 prints
 * "mpi_check: lat8 one-way median X us average Y us". */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int iter, int size, int sender, int i) {
    return (unsigned char)(iter * 131 + size * 7 + sender * 29 + i * 17 + (i >> 8));
}

static int pingpong(int rank, int peer, int iters, int size, unsigned char *buf) {
    int bad = 0;
    int first = rank < peer;
    for (int it = 0; it < iters; ++it) {
        if (first) {
            for (int i = 0; i < size; ++i) buf[i] = pattern(it, size, rank, i);
            MPI_Send(buf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
            MPI_Recv(buf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < size; ++i) bad += buf[i] != pattern(it, size, peer, i);
        } else {
            MPI_Recv(buf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < size; ++i) bad += buf[i] != pattern(it, size, peer, i);
            for (int i = 0; i < size; ++i) buf[i] = pattern(it, size, rank, i);
            MPI_Send(buf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
        }
    }
    return bad;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* 8-byte ping-pong: one-way latency in us, median (*med) and average (return value). */
static double lat8(int rank, int peer, int iters, double *med) {
    char b[8] = {0};
    int first = rank < peer;
    double *rtt = malloc((size_t)iters * sizeof *rtt);
    if (!rtt) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int it = -(iters / 10 + 1); it < iters; ++it) { /* negative: warm-up */
        double t0 = MPI_Wtime();
        if (first) {
            MPI_Send(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(b, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
        }
        if (it >= 0) rtt[it] = MPI_Wtime() - t0;
    }
    double sum = 0;
    for (int i = 0; i < iters; ++i) sum += rtt[i];
    qsort(rtt, (size_t)iters, sizeof *rtt, cmp_double);
    *med = rtt[iters / 2] * 1e6 / 2.0;
    free(rtt);
    return sum * 1e6 / (2.0 * iters);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int iters = argc > 1 ? atoi(argv[1]) : 20;
    int lat_only = argc > 2 && strcmp(argv[2], "--lat") == 0;
    if (iters < 1) iters = 1;
    int peer = rank ^ 1;
    long bad = 0;

    /* --pp SIZE: a ping-pong of SIZE-byte messages (verified), one-way bandwidth in MB/s. */
    if (argc > 3 && strcmp(argv[2], "--pp") == 0) {
        int size = atoi(argv[3]);
        if (size < 1 || size > (1 << 24)) size = 1 << 20;
        unsigned char *pbuf = malloc((size_t)size);
        if (!pbuf) MPI_Abort(MPI_COMM_WORLD, 2);
        long pbad = 0;
        double t = 0.0;
        if (peer < n) {
            pbad += pingpong(rank, peer, iters / 10 + 1, size, pbuf); /* warm-up, verified */
            MPI_Barrier(MPI_COMM_WORLD);
            /* timed: the transfers alone (filling and checking 1 MiB would time the CPU) */
            double t0 = MPI_Wtime();
            for (int it = 0; it < iters; ++it) {
                if (rank < peer) {
                    MPI_Send(pbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
                    MPI_Recv(pbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(pbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(pbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
                }
            }
            t = MPI_Wtime() - t0;
        }
        if (rank == 0)
            printf("mpi_check: pingpong %d B x %d: %.1f MB/s one-way, %.1f us per round trip, warm-up %s\n", size, iters,
                   2.0 * iters * (double)size / t / 1e6, t * 1e6 / iters, pbad ? "BAD DATA" : "verified");
        free(pbuf);
        MPI_Finalize();
        return pbad ? 1 : 0;
    }

    if (lat_only) {
        double med = 0.0, avg = peer < n ? lat8(rank, peer, iters, &med) : 0.0;
        if (rank == 0) printf("mpi_check: lat8 one-way median %.2f us average %.2f us (%d iterations)\n", med, avg, iters);
        MPI_Finalize();
        return 0;
    }

    static const int sizes[] = {1, 8, 1000, 4096, 65536, 1 << 20};
    unsigned char *buf = malloc(1 << 20);
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);
    if (peer < n)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) bad += pingpong(rank, peer, iters, sizes[s], buf);
    free(buf);
    if (bad) fprintf(stderr, "mpi_check: rank %d: ping-pong: %ld bad bytes\n", rank, bad);

    /* Allreduce: sum of (rank+1)*k over ranks = k*n(n+1)/2; max of rank*k = (n-1)*k. */
    enum { K = 4096 };
    long *in = malloc(K * sizeof *in), *sum = malloc(K * sizeof *sum), *mx = malloc(K * sizeof *mx);
    if (!in || !sum || !mx) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int k = 0; k < K; ++k) in[k] = (long)(rank + 1) * k;
    MPI_Allreduce(in, sum, K, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < K; ++k) in[k] = (long)rank * k;
    MPI_Allreduce(in, mx, K, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    long ar_bad = 0;
    for (int k = 0; k < K; ++k) {
        ar_bad += sum[k] != (long)k * n * (n + 1) / 2;
        ar_bad += mx[k] != (long)(n - 1) * k;
    }
    if (ar_bad) fprintf(stderr, "mpi_check: rank %d: allreduce: %ld wrong elements\n", rank, ar_bad);
    bad += ar_bad;
    free(in); free(sum); free(mx);

    /* Alltoall: rank r sends block j = {r*1000+j, ...} of M ints; receives block i from rank i. */
    enum { M = 1024 };
    int *snd = malloc((size_t)n * M * sizeof *snd), *rcv = malloc((size_t)n * M * sizeof *rcv);
    if (!snd || !rcv) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int j = 0; j < n; ++j)
        for (int m = 0; m < M; ++m) snd[j * M + m] = rank * 1000000 + j * 1000 + m;
    MPI_Alltoall(snd, M, MPI_INT, rcv, M, MPI_INT, MPI_COMM_WORLD);
    long a2a_bad = 0;
    for (int i = 0; i < n; ++i)
        for (int m = 0; m < M; ++m) a2a_bad += rcv[i * M + m] != i * 1000000 + rank * 1000 + m;
    if (a2a_bad) fprintf(stderr, "mpi_check: rank %d: alltoall: %ld wrong elements\n", rank, a2a_bad);
    bad += a2a_bad;
    free(snd); free(rcv);

    long total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0) printf("mpi_check: OK ranks=%d\n", n);
        else printf("mpi_check: FAILED ranks=%d bad=%ld\n", n, total);
    }
    MPI_Finalize();
    return total == 0 ? 0 : 1;
}
