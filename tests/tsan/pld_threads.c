/* ThreadSanitizer test of the PLD accountant called from several threads at once (as
 * parallel audit shadows and canary runs do). Built with -fsanitize=thread from the
 * accountant's own sources only (no OpenMP or OpenBLAS, whose uninstrumented thread
 * pools TSan cannot see through), see CMakeLists.txt option DPT_TSAN_TESTS.
 * Each thread evaluates PLD epsilons of different step counts (so each plans transforms
 * of several sizes); every result must equal the single-threaded value exactly, and
 * TSan (halt_on_error) must report nothing. Before FFTW's planner was serialized this
 * crashed with a double free inside the planner. */
#include <dptrain/accounting.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define THREADS 4
#define CALLS 6

static const uint64_t steps_of[CALLS] = {3, 17, 100, 1000, 5, 250};
static double want[CALLS];

typedef struct {
    int id;
    int bad;
    char msg[256];
} job;

static void *worker(void *arg) {
    job *j = arg;
    for (int rep = 0; rep < 3; rep++)
        for (int c = 0; c < CALLS; c++) {
            int k = (c + j->id) % CALLS;
            dpt_pld_options o = {.grid = 1e-3, .max_points = (size_t)2048 << (k % 3)};
            double eps = -1;
            if (dpt_pld_sgm_epsilon_ex(0.01, 1.0, steps_of[k], 1e-5, &o, &eps) != DPT_OK || eps != want[k]) {
                j->bad = 1;
                snprintf(j->msg, sizeof j->msg, "thread %d: steps %llu: eps %.17g, single-threaded %.17g (%s)", j->id,
                         (unsigned long long)steps_of[k], eps, want[k], dpt_last_error());
                return NULL;
            }
        }
    return NULL;
}

int main(void) {
    for (int k = 0; k < CALLS; k++) {
        dpt_pld_options o = {.grid = 1e-3, .max_points = (size_t)2048 << (k % 3)};
        if (dpt_pld_sgm_epsilon_ex(0.01, 1.0, steps_of[k], 1e-5, &o, &want[k]) != DPT_OK) {
            fprintf(stderr, "FAIL: single-threaded PLD: %s\n", dpt_last_error());
            return 1;
        }
    }
    pthread_t th[THREADS];
    job jobs[THREADS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < THREADS; i++) {
        jobs[i].id = i;
        if (pthread_create(&th[i], NULL, worker, &jobs[i]) != 0) {
            fprintf(stderr, "FAIL: pthread_create\n");
            return 1;
        }
    }
    int bad = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (jobs[i].bad) fprintf(stderr, "FAIL: %s\n", jobs[i].msg), bad = 1;
    }
    if (!bad) printf("PLD from %d threads x %d calls: all equal to the single-threaded values\n", THREADS, 3 * CALLS);
    return bad;
}
