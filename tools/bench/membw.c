// Memory-bandwidth floor for decode: how fast can this box stream a 1 GiB buffer?
//
//   gcc -O3 -mavx2 -pthread -o membw tools/bench/membw.c && ./membw [threads...]
//
// For each thread count (default: 1 2) it reports, as best-of-REPS and median-of-REPS:
//   read   - sum of 64-bit words over a 1 GiB buffer, split into one contiguous slice per thread
//            (what a decode step does with the weights: stream them once, read-only);
//   memcpy - memcpy of a 1 GiB buffer into another, one slice per thread (GB/s of bytes copied;
//            the memory traffic is 2x that, 3x with write-allocate).
// The buffers are touched (written) before timing, so no page faults are timed. Threads start
// together on a barrier; the time is from the barrier to the last thread's finish.
// One JSON object on stdout; GB = 1e9 bytes.
//
// -mavx2 only (not -march=native): the hypervisor advertises ISA extensions that fault here.

#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BYTES (1ull << 30)
#define REPS 7
#define MAX_THREADS 64

static uint64_t *src, *dst;
static volatile uint64_t sink;
static pthread_barrier_t start_barrier;

struct job {
    int id, n, op;  // op 0: read, 1: memcpy
    double end;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
    struct job *j = arg;
    size_t words = BYTES / 8, per = words / j->n;
    size_t lo = per * j->id, hi = j->id == j->n - 1 ? words : lo + per;
    pthread_barrier_wait(&start_barrier);
    if (j->op == 0) {
        // 8 independent accumulators so the loop is bandwidth-bound, not add-latency-bound;
        // gcc vectorizes this to AVX2 loads.
        uint64_t a[8] = {0};
        size_t i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int k = 0; k < 8; k++) a[k] += src[i + k];
        for (; i < hi; i++) a[0] += src[i];
        uint64_t s = 0;
        for (int k = 0; k < 8; k++) s += a[k];
        sink += s;
    } else {
        memcpy(dst + lo, src + lo, (hi - lo) * 8);
    }
    j->end = now();
    return NULL;
}

static double run(int n, int op) {
    pthread_t t[MAX_THREADS];
    struct job jobs[MAX_THREADS];
    pthread_barrier_init(&start_barrier, NULL, n + 1);
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct job){.id = i, .n = n, .op = op};
        pthread_create(&t[i], NULL, worker, &jobs[i]);
    }
    pthread_barrier_wait(&start_barrier);
    double t0 = now(), end = t0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        if (jobs[i].end > end) end = jobs[i].end;
    }
    pthread_barrier_destroy(&start_barrier);
    return BYTES / (end - t0) / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int counts[16] = {1, 2}, nc = 2;
    if (argc > 1) {
        nc = 0;
        for (int i = 1; i < argc && nc < 16; i++) {
            int v = atoi(argv[i]);
            if (v >= 1 && v <= MAX_THREADS) counts[nc++] = v;
        }
    }
    src = aligned_alloc(4096, BYTES);
    dst = aligned_alloc(4096, BYTES);
    if (!src || !dst) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < BYTES / 8; i++) src[i] = i;
    memset(dst, 1, BYTES);
    printf("{\"buffer_bytes\": %llu, \"reps\": %d, \"results\": [", BYTES, REPS);
    for (int c = 0; c < nc; c++) {
        for (int op = 0; op < 2; op++) {
            double gbs[REPS];
            run(counts[c], op);  // warm-up
            for (int r = 0; r < REPS; r++) gbs[r] = run(counts[c], op);
            qsort(gbs, REPS, sizeof gbs[0], cmp);
            printf("%s{\"threads\": %d, \"op\": \"%s\", \"best_gb_s\": %.2f, \"median_gb_s\": %.2f}",
                   c || op ? ", " : "", counts[c], op ? "memcpy" : "read", gbs[REPS - 1], gbs[REPS / 2]);
        }
    }
    printf("]}\n");
    return 0;
}
