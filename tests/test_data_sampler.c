/* Samplers: statistical tests of the batch-size law (Poisson: Binomial(n, q); with
 * rejection: Binomial conditioned on |B| >= min_batch), per-index inclusion frequency,
 * shuffle coverage, and bit-identical resume through get_state/set_state.
 * Statistical bounds are 5 to 6 standard errors, so a correct sampler fails with
 * probability below 1e-6 per check (and the seeds are fixed, so runs are reproducible). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dptrain/data.h"
#include "testutil.h"

static double binom_logpmf(size_t n, size_t k, double q) {
    return lgamma((double)n + 1) - lgamma((double)k + 1) - lgamma((double)(n - k) + 1) +
           (double)k * log(q) + (double)(n - k) * log1p(-q);
}

static void test_poisson(void) {
    const size_t n = 1000, T = 4000;
    const double q = 0.05;
    dpt_sampler *s;
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, n, 0, q, 0, 42, &s));
    CHECK(dpt_sampler_steps_per_epoch(s) == 20);
    static uint32_t idx[1000];
    static long freq[1000];
    double sum = 0, sum2 = 0;
    int sorted_ok = 1, epochs_ok = 1;
    for (size_t t = 0; t < T; t++) {
        size_t b;
        CHECK_OK(dpt_sampler_next(s, idx, &b));
        sum += (double)b;
        sum2 += (double)b * (double)b;
        for (size_t i = 0; i < b; i++) {
            freq[idx[i]]++;
            if (i && idx[i] <= idx[i - 1]) sorted_ok = 0; /* distinct indices */
        }
        if (dpt_sampler_epoch_ended(s) != ((t + 1) % 20 == 0)) epochs_ok = 0;
    }
    CHECK(sorted_ok);
    CHECK(epochs_ok);
    CHECK(dpt_sampler_epoch(s) == T / 20);
    double mean = sum / T, var = (sum2 - T * mean * mean) / (T - 1);
    double mu = q * n, sig2 = q * (1 - q) * n;
    /* mean: s.e. sqrt(sig2 / T); variance: s.e. ~ sig2 sqrt(2 / (T - 1)) */
    CHECK_CLOSE(mean, mu, 5 * sqrt(sig2 / T), 0);
    CHECK_CLOSE(var, sig2, 5 * sig2 * sqrt(2.0 / (T - 1)), 0);
    /* each index included with frequency q: count ~ Binomial(T, q) */
    double sd_f = sqrt(T * q * (1 - q));
    long lo = freq[0], hi = freq[0];
    double chi2 = 0;
    for (size_t i = 0; i < n; i++) {
        lo = freq[i] < lo ? freq[i] : lo;
        hi = freq[i] > hi ? freq[i] : hi;
        chi2 += (freq[i] - T * q) * (freq[i] - T * q) / (T * q * (1 - q));
    }
    CHECK(lo >= T * q - 6 * sd_f && hi <= T * q + 6 * sd_f);
    /* chi-square with n degrees of freedom: mean n, sd sqrt(2n) */
    CHECK_CLOSE(chi2, (double)n, 5 * sqrt(2.0 * n), 0);
    dpt_sampler_free(s);
    /* independence: neighbours (i, i+1) and (i, i+2) are included together with
       probability q^2 (a gap-sampling error would correlate them), and example 0 and the
       last one are included at rate q like the others */
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, n, 0, 0.3, 0, 43, &s));
    static uint8_t in[1000];
    double pair1 = 0, pair2 = 0, first = 0, last = 0;
    const size_t T3 = 3000;
    for (size_t t = 0; t < T3; t++) {
        size_t b;
        CHECK_OK(dpt_sampler_next(s, idx, &b));
        memset(in, 0, sizeof in);
        for (size_t i = 0; i < b; i++) in[idx[i]] = 1;
        for (size_t i = 0; i + 2 < n; i++) pair1 += in[i] & in[i + 1], pair2 += in[i] & in[i + 2];
        first += in[0], last += in[n - 1];
    }
    double m_pairs = T3 * (n - 2) * 0.09; /* counts are sums of weakly dependent indicators */
    CHECK_CLOSE(pair1, m_pairs, 6 * sqrt(3 * m_pairs), 0);
    CHECK_CLOSE(pair2, m_pairs, 6 * sqrt(3 * m_pairs), 0);
    CHECK_CLOSE(first, T3 * 0.3, 5 * sqrt(T3 * 0.21), 0);
    CHECK_CLOSE(last, T3 * 0.3, 5 * sqrt(T3 * 0.21), 0);
    dpt_sampler_free(s);

    /* small q n: empty batches happen, with probability (1-q)^n */
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, 100, 0, 0.005, 0, 7, &s));
    CHECK(dpt_sampler_steps_per_epoch(s) == 200);
    size_t empties = 0, T2 = 2000;
    for (size_t t = 0; t < T2; t++) {
        size_t b;
        CHECK_OK(dpt_sampler_next(s, idx, &b));
        empties += b == 0;
    }
    double p0 = pow(1 - 0.005, 100);
    CHECK(empties > 0);
    CHECK_CLOSE((double)empties / T2, p0, 5 * sqrt(p0 * (1 - p0) / T2), 0);
    dpt_sampler_free(s);

    /* q = 1: every example every step; batch larger than q n is never truncated */
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, 50, 0, 1.0, 0, 1, &s));
    size_t b;
    CHECK_OK(dpt_sampler_next(s, idx, &b));
    CHECK(b == 50 && idx[49] == 49);
    dpt_sampler_free(s);
}

static void test_reject(void) {
    const size_t n = 200, m = 10, T = 4000;
    const double q = 0.05; /* E|B| = 10 = min_batch: about 45% of draws are rejected */
    dpt_sampler *s;
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON_REJECT, n, 0, q, m, 3, &s));
    static uint32_t idx[200];
    static long hist[201];
    int all_ge = 1;
    for (size_t t = 0; t < T; t++) {
        size_t b;
        CHECK_OK(dpt_sampler_next(s, idx, &b));
        if (b < m) all_ge = 0;
        hist[b]++;
    }
    CHECK(all_ge);
    /* exact law of |B| given |B| >= m */
    double pacc = 0, pk[201];
    for (size_t k = 0; k <= n; k++) pk[k] = exp(binom_logpmf(n, k, q));
    for (size_t k = m; k <= n; k++) pacc += pk[k];
    double cm = 0, c2 = 0;
    for (size_t k = m; k <= n; k++) {
        cm += k * pk[k] / pacc;
        c2 += (double)k * k * pk[k] / pacc;
    }
    double cvar = c2 - cm * cm, emp = 0;
    for (size_t k = 0; k <= n; k++) emp += (double)k * hist[k];
    emp /= T;
    CHECK_CLOSE(emp, cm, 5 * sqrt(cvar / T), 0);
    /* chi-square over bins m..m+7 and a tail bin (expected counts >= ~60) */
    double chi2 = 0, tail_p = 1, tail_obs = T;
    int bins = 0;
    for (size_t k = m; k < m + 8; k++) {
        double e = T * pk[k] / pacc;
        chi2 += (hist[k] - e) * (hist[k] - e) / e;
        tail_p -= pk[k] / pacc;
        tail_obs -= hist[k];
        bins++;
    }
    chi2 += (tail_obs - T * tail_p) * (tail_obs - T * tail_p) / (T * tail_p);
    bins++;
    /* dof = bins - 1 = 8: P(chi2_8 > 35) < 3e-5 */
    if (chi2 > 35) fprintf(stderr, "reject sampler chi2 = %g over %d bins\n", chi2, bins);
    CHECK(chi2 < 35);
    /* rejections: geometric, mean (1 - pacc) / pacc per accepted batch */
    double rej_mean = (1 - pacc) / pacc, rej_var = (1 - pacc) / (pacc * pacc);
    CHECK_CLOSE((double)dpt_sampler_rejections(s) / T, rej_mean, 5 * sqrt(rej_var / T), 0);
    dpt_sampler_free(s);

    /* min_batch 0 is plain Poisson; min_batch > n refused; impossible min_batch errors */
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_POISSON_REJECT, 10, 0, 0.5, 11, 1, &s),
                 DPT_EINVAL);
    CHECK_ERR_HAS("minimum batch 11");
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON_REJECT, 40, 0, 1e-9, 40, 1, &s));
    size_t b;
    CHECK_STATUS(dpt_sampler_next(s, idx, &b), DPT_ERANGE);
    CHECK_ERR_HAS("redraws");
    dpt_sampler_free(s);
}

static void test_shuffle_full(void) {
    const size_t n = 103, B = 10;
    dpt_sampler *s;
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_SHUFFLE, n, B, 0, 0, 11, &s));
    CHECK(dpt_sampler_steps_per_epoch(s) == 11);
    uint32_t idx[103], first[103];
    int cover_ok = 1, size_ok = 1, end_ok = 1;
    for (int e = 0; e < 3; e++) {
        int seen[103] = {0};
        size_t pos = 0;
        for (size_t t = 0; t < 11; t++) {
            size_t b;
            CHECK_OK(dpt_sampler_next(s, idx, &b));
            if (b != (t < 10 ? B : 3)) size_ok = 0; /* last batch: 103 - 100 = 3 */
            if (dpt_sampler_epoch_ended(s) != (t == 10)) end_ok = 0;
            for (size_t i = 0; i < b; i++) {
                if (idx[i] >= n || seen[idx[i]]++) cover_ok = 0;
                if (e == 0) first[pos] = idx[i];
                pos++;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (seen[i] != 1) cover_ok = 0;
    }
    CHECK(cover_ok);
    CHECK(size_ok);
    CHECK(end_ok);
    CHECK(dpt_sampler_epoch(s) == 3 && dpt_sampler_step(s) == 33);
    int identity = 1;
    for (size_t i = 0; i < n; i++) identity &= first[i] == i;
    CHECK(!identity);
    dpt_sampler_free(s);
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_SHUFFLE, 10, 11, 0, 0, 1, &s), DPT_EINVAL);
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_SHUFFLE, 10, 0, 0, 0, 1, &s), DPT_EINVAL);
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_POISSON, 10, 0, 0.0, 0, 1, &s), DPT_EINVAL);
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_POISSON, 10, 0, 1.5, 0, 1, &s), DPT_EINVAL);
    CHECK_ERR_HAS("q = 1.5");
    /* q so small that round(1/q) steps per epoch overflow size_t (it crashed: SIGFPE, % 0) */
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_POISSON, 10, 1, 1e-20, 0, 1, &s), DPT_EINVAL);
    CHECK_ERR_HAS("below 2^-53");
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, 10, 1, 0x1p-53, 0, 1, &s));
    CHECK(dpt_sampler_steps_per_epoch(s) == ((size_t)1 << 53));
    dpt_sampler_free(s);
    CHECK_STATUS(dpt_sampler_new(DPT_SAMPLER_FULL, 0, 0, 0, 0, 1, &s), DPT_EINVAL);

    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_FULL, 5, 0, 0, 0, 1, &s));
    CHECK(dpt_sampler_steps_per_epoch(s) == 1);
    size_t b;
    CHECK_OK(dpt_sampler_next(s, idx, &b));
    CHECK(b == 5 && idx[0] == 0 && idx[4] == 4 && dpt_sampler_epoch_ended(s));
    dpt_sampler_free(s);
}

/* Run `a` for k steps, save, restore into a sampler built with a different seed, and
 * compare the next `more` batches with `a`'s. */
static void check_resume(dpt_sampler_kind kind, size_t n, size_t B, double q, size_t m,
                         size_t k, size_t more) {
    dpt_sampler *a, *c;
    CHECK_OK(dpt_sampler_new(kind, n, B, q, m, 99, &a));
    CHECK_OK(dpt_sampler_new(kind, n, B, q, m, 12345, &c));
    uint32_t *ia = dpt_alloc(n, sizeof(uint32_t), "ia"), *ic = dpt_alloc(n, sizeof(uint32_t), "ic");
    size_t ba, bc;
    for (size_t t = 0; t < k; t++) CHECK_OK(dpt_sampler_next(a, ia, &ba));
    dpt_sampler_state st;
    dpt_sampler_get_state(a, &st);
    CHECK_OK(dpt_sampler_set_state(c, &st));
    int same = 1;
    for (size_t t = 0; t < more; t++) {
        CHECK_OK(dpt_sampler_next(a, ia, &ba));
        CHECK_OK(dpt_sampler_next(c, ic, &bc));
        if (ba != bc || memcmp(ia, ic, ba * sizeof(uint32_t)) != 0 ||
            dpt_sampler_epoch_ended(a) != dpt_sampler_epoch_ended(c))
            same = 0;
    }
    if (!same) fprintf(stderr, "resume differs: kind %d after %zu steps\n", (int)kind, k);
    CHECK(same);
    CHECK(dpt_sampler_step(a) == dpt_sampler_step(c) && dpt_sampler_epoch(a) == dpt_sampler_epoch(c));
    CHECK(dpt_sampler_rejections(a) == dpt_sampler_rejections(c));
    /* a bad state is refused */
    st.cursor = n;
    CHECK_STATUS(dpt_sampler_set_state(c, &st), DPT_EINVAL);
    dpt_free(ia);
    dpt_free(ic);
    dpt_sampler_free(a);
    dpt_sampler_free(c);
}

/* The secure Poisson sampler's exact Bernoulli(q) inclusions: at q = 0.25 (q 2^64 an
 * integer, so P(include) is exactly q) and q = 0.0123, over 400 steps of 2000 examples,
 * the total is within 5 standard errors of q n T, every example's count fits
 * Binomial(T, q) (chi-square on the count histogram is replaced by its variance: within
 * 5 standard errors), and neighbouring inclusions are uncorrelated. */
static void test_secure_rate(double q) {
    enum { N = 2000, T = 400 };
    dpt_sampler *s;
    CHECK_OK(dpt_sampler_new_secure(DPT_SAMPLER_POISSON, N, 0, q, 0, &s));
    static uint32_t idx[N];
    static double cnt[N];
    memset(cnt, 0, sizeof cnt);
    double total = 0, pairs = 0;
    for (int t = 0; t < T; t++) {
        size_t b = 0;
        CHECK_OK(dpt_sampler_next(s, idx, &b));
        static unsigned char in[N];
        memset(in, 0, sizeof in);
        for (size_t k = 0; k < b; k++) {
            CHECK(idx[k] < N && (k == 0 || idx[k] > idx[k - 1]));
            in[idx[k]] = 1, cnt[idx[k]]++;
        }
        for (size_t i = 0; i + 1 < N; i++) pairs += in[i] && in[i + 1];
        total += (double)b;
    }
    const double nT = (double)N * T;
    CHECK_CLOSE(total, q * nT, 5 * sqrt(nT * q * (1 - q)), 0);
    double m = total / N, v = 0;
    for (size_t i = 0; i < N; i++) v += (cnt[i] - m) * (cnt[i] - m);
    v /= N - 1;
    const double vb = T * q * (1 - q); /* Binomial(T, q) variance; its estimate has sd ~ vb sqrt(2 / N) */
    CHECK_CLOSE(v, vb, 5 * vb * sqrt(2.0 / N), 0);
    const double np = (double)(N - 1) * T;
    CHECK_CLOSE(pairs, q * q * np, 5 * sqrt(np * q * q * (1 - q * q)), 0);
    printf("secure Poisson q %g: %g included (expected %g), count variance %.2f (binomial %.2f), neighbour pairs %g "
           "(expected %.1f)\n", q, total, q * nT, v, vb, pairs, q * q * np);
    dpt_sampler_free(s);
}

static void test_secure(void) {
    dpt_sampler *a, *b;
    CHECK_OK(dpt_sampler_new_secure(DPT_SAMPLER_POISSON, 1000, 0, 0.1, 0, &a));
    CHECK_OK(dpt_sampler_new_secure(DPT_SAMPLER_POISSON, 1000, 0, 0.1, 0, &b));
    static uint32_t ia[1000], ib[1000];
    size_t na, nb;
    CHECK_OK(dpt_sampler_next(a, ia, &na));
    CHECK_OK(dpt_sampler_next(b, ib, &nb));
    CHECK(na != nb || memcmp(ia, ib, na * sizeof(uint32_t)) != 0); /* OS seeds differ */
    /* a secure Poisson sampler resumes its counters but keeps its own OS stream */
    for (int t = 0; t < 4; t++) CHECK_OK(dpt_sampler_next(a, ia, &na));
    dpt_sampler_state st;
    dpt_sampler_get_state(a, &st);
    CHECK_OK(dpt_sampler_set_state(b, &st));
    CHECK(dpt_sampler_step(b) == 5 && dpt_sampler_epoch(b) == dpt_sampler_epoch(a));
    CHECK_OK(dpt_sampler_next(a, ia, &na));
    CHECK_OK(dpt_sampler_next(b, ib, &nb));
    CHECK(na != nb || memcmp(ia, ib, na * sizeof(uint32_t)) != 0);
    CHECK(dpt_sampler_epoch_ended(a) == dpt_sampler_epoch_ended(b));
    dpt_sampler_free(a);
    dpt_sampler_free(b);
    /* a secure shuffle cannot be rebuilt: refused */
    CHECK_OK(dpt_sampler_new_secure(DPT_SAMPLER_SHUFFLE, 100, 10, 0, 0, &a));
    CHECK_OK(dpt_sampler_new_secure(DPT_SAMPLER_SHUFFLE, 100, 10, 0, 0, &b));
    CHECK_OK(dpt_sampler_next(a, ia, &na));
    dpt_sampler_get_state(a, &st);
    CHECK_STATUS(dpt_sampler_set_state(b, &st), DPT_EINVAL);
    CHECK_ERR_HAS("securely seeded shuffle");
    dpt_sampler_free(a);
    dpt_sampler_free(b);
}

static void test_resume(void) {
    check_resume(DPT_SAMPLER_SHUFFLE, 103, 10, 0, 0, 4, 30);  /* mid-epoch */
    check_resume(DPT_SAMPLER_SHUFFLE, 103, 10, 0, 0, 11, 30); /* at an epoch boundary */
    check_resume(DPT_SAMPLER_SHUFFLE, 103, 10, 0, 0, 0, 15);  /* before any step */
    check_resume(DPT_SAMPLER_POISSON, 500, 0, 0.03, 0, 37, 50);
    check_resume(DPT_SAMPLER_POISSON_REJECT, 200, 0, 0.05, 10, 25, 50);
    check_resume(DPT_SAMPLER_FULL, 7, 0, 0, 0, 3, 3);
}

/* Poisson at MNIST scale: mean batch q n (the time is printed for information only;
 * speed is measured by benchmarks, never asserted by tests). */
static void test_speed(void) {
    dpt_sampler *s;
    CHECK_OK(dpt_sampler_new(DPT_SAMPLER_POISSON, 60000, 0, 256.0 / 60000, 0, 5, &s));
    static uint32_t idx[60000];
    size_t b, total = 0;
    double t0 = dpt_now();
    for (int t = 0; t < 200; t++) {
        CHECK_OK(dpt_sampler_next(s, idx, &b));
        total += b;
    }
    double dt = (dpt_now() - t0) / 200;
    printf("poisson n=60000 q=256/60000: %.3f ms per step, mean batch %.1f\n", dt * 1e3,
           total / 200.0);
    CHECK_CLOSE(total / 200.0, 256.0, 5.0 * sqrt(256.0 / 200.0), 0);
    dpt_sampler_free(s);
}

/* dpt_sampler_steps_for_epochs: the steps a sampler of these parameters takes to complete
 * E epochs (drawn here batch by batch until dpt_sampler_epoch reaches E), E x round(1/q)
 * for Poisson: N = 1000, B = 385, 10 epochs is 30 steps, not ceil(10 / 0.385) = 26
 * (issue 38.7); refusals name the parameter. */
static void test_steps_for_epochs(void) {
    uint64_t T = 0;
    CHECK_OK(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 1000, 385, 0, 10, &T)); /* q = B / N */
    CHECK(T == 30);
    CHECK_OK(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 0, 0, 0.385, 10, &T)); /* q given: n unused */
    CHECK(T == 30);
    const struct {
        dpt_sampler_kind kind;
        size_t n, batch, min_batch;
        double q;
        uint64_t epochs, want;
    } cases[] = {
        {DPT_SAMPLER_POISSON, 1000, 385, 0, 0.385, 10, 30},
        {DPT_SAMPLER_POISSON, 200, 0, 0, 0.3, 3, 9},      /* 1/q = 3.33 */
        {DPT_SAMPLER_POISSON, 200, 0, 0, 0.6, 4, 8},      /* 1/q = 1.67 */
        {DPT_SAMPLER_POISSON, 50, 0, 0, 1.0, 2, 2},
        {DPT_SAMPLER_POISSON_REJECT, 100, 0, 20, 0.25, 3, 12},
        {DPT_SAMPLER_SHUFFLE, 10, 3, 0, 0, 4, 16},        /* ceil(10 / 3) = 4 */
        {DPT_SAMPLER_SHUFFLE, 12, 4, 0, 0, 2, 6},
        {DPT_SAMPLER_FULL, 7, 0, 0, 0, 3, 3},
    };
    uint32_t idx[1000];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK_OK(dpt_sampler_steps_for_epochs(cases[c].kind, cases[c].n, cases[c].batch, cases[c].q, cases[c].epochs,
                                              &T));
        CHECK(T == cases[c].want);
        dpt_sampler *s = NULL;
        CHECK_OK(dpt_sampler_new(cases[c].kind, cases[c].n, cases[c].batch, cases[c].q, cases[c].min_batch, 7, &s));
        if (!s) continue;
        uint64_t drawn = 0;
        size_t b;
        while (dpt_sampler_epoch(s) < cases[c].epochs && drawn < 1000) {
            CHECK_OK(dpt_sampler_next(s, idx, &b));
            drawn++;
        }
        CHECK(drawn == T);
        if (drawn != T) fprintf(stderr, "case %zu: the sampler took %llu steps, the function says %llu\n", c,
                                (unsigned long long)drawn, (unsigned long long)T);
        dpt_sampler_free(s);
    }
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 10, 1, 0.1, 0, &T), DPT_EINVAL);
    CHECK_ERR_HAS("epochs");
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 10, 1, 1.5, 1, &T), DPT_EINVAL);
    CHECK_ERR_HAS("q = 1.5");
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 0, 0, 0, 1, &T), DPT_EINVAL);
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 10, 0, 1e-20, 1, &T), DPT_EINVAL);
    CHECK_ERR_HAS("below 2^-53");
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_SHUFFLE, 10, 11, 0, 1, &T), DPT_EINVAL);
    CHECK_ERR_HAS("batch size 11");
    CHECK_OK(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 10, 0, 0x1p-53, 1, &T));
    CHECK(T == (uint64_t)1 << 53);
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_POISSON, 10, 0, 0x1p-53, 2, &T), DPT_ERANGE);
    CHECK_ERR_HAS("2^53");
    CHECK_STATUS(dpt_sampler_steps_for_epochs(DPT_SAMPLER_FULL, 1, 0, 0, 1, NULL), DPT_EINVAL);
}

int main(void) {
    test_poisson();
    test_steps_for_epochs();
    test_reject();
    test_shuffle_full();
    test_resume();
    test_secure();
    test_secure_rate(0.25);
    test_secure_rate(0.0123);
    test_speed();
    TEST_MAIN_END();
}
