/* optim: SGD (plain, momentum, weight decay) and Adam against naive double-precision
 * references over several steps, Adam's first two steps against hand-computed values,
 * a NaN gradient refused with theta unchanged, schedules at given epochs, parse and
 * validation errors naming the field. */
#include <dptrain/optim.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define N 37
#define STEPS 8

/* Deterministic pseudo-random values in [-1, 1) (no RNG dependency in this test). */
static double lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* ==== Naive double-precision references (the math the fast loop must follow) ==== */

/* SGD heavy ball: g' = g + wd theta; m = mu m + g'; theta -= lr m (mu = 0: theta -= lr g'). */
static void sgd_ref(double *th, double *m, const double *g, size_t n, double lr, double mu,
                    double wd) {
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] + wd * th[i];
        m[i] = mu * m[i] + gi;
        th[i] -= lr * m[i];
    }
}

/* Adam (Kingma & Ba, Algorithm 1; torch.optim.Adam with L2 weight decay). */
static void adam_ref(double *th, double *m, double *v, const double *g, size_t n, double lr,
                     double b1, double b2, double eps, double wd, int t) {
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] + wd * th[i];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
        th[i] -= lr * mh / (sqrt(vh) + eps);
    }
}

/* Runs STEPS steps of `cfg` with varying lr and compares theta and state with the
 * reference after every step. float32 state: relative error ~1e-6 per step. */
static void run_against_ref(const dpt_optim_config *cfg, const char *what) {
    dpt_optim o;
    CHECK_OK(dpt_optim_init(&o, cfg, N));
    float th[N], g[N];
    double thr[N], mr[N] = {0}, vr[N] = {0}, gr[N];
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) th[i] = (float)lcg(&s), thr[i] = th[i];
    double worst = 0;
    for (int t = 1; t <= STEPS; t++) {
        double lr = cfg->lr * (t % 3 == 0 ? 0.5 : 1.0);
        for (int i = 0; i < N; i++) g[i] = (float)(lcg(&s) * (1 + t)), gr[i] = g[i];
        CHECK_OK(dpt_optim_step(&o, th, g, lr));
        if (cfg->kind == DPT_OPT_SGD)
            sgd_ref(thr, mr, gr, N, lr, cfg->momentum, cfg->weight_decay);
        else
            adam_ref(thr, mr, vr, gr, N, lr, cfg->beta1, cfg->beta2, cfg->eps,
                     cfg->weight_decay, t);
        for (int i = 0; i < N; i++) {
            double d = fabs(th[i] - thr[i]) / (1e-6 + fabs(thr[i]));
            if (d > worst) worst = d;
            CHECK_CLOSE(th[i], thr[i], 1e-6, 1e-5);
            if (o.m) CHECK_CLOSE(o.m[i], mr[i], 1e-6, 1e-5);
            if (o.v) CHECK_CLOSE(o.v[i], vr[i], 1e-9, 1e-5);
        }
    }
    CHECK(o.t == STEPS);
    printf("%-28s max rel err vs double ref over %d steps: %.2e\n", what, STEPS, worst);
    dpt_optim_free(&o);
}

static void test_sgd(void) {
    dpt_optim_config c = dpt_optim_defaults(DPT_OPT_SGD);
    CHECK(c.lr == 0.1 && c.momentum == 0);
    run_against_ref(&c, "sgd");
    c.momentum = 0.9;
    run_against_ref(&c, "sgd momentum 0.9");
    c.weight_decay = 0.05;
    run_against_ref(&c, "sgd momentum 0.9 wd 0.05");
    c.momentum = 0;
    run_against_ref(&c, "sgd wd 0.05");

    /* plain SGD keeps no state; momentum allocates m */
    dpt_optim o;
    c = dpt_optim_defaults(DPT_OPT_SGD);
    CHECK_OK(dpt_optim_init(&o, &c, 4));
    CHECK(o.m == NULL && o.v == NULL);
    dpt_optim_free(&o);

    /* momentum by hand: theta 1, g 1 twice, lr 0.1, mu 0.5: m = 1 then 1.5,
     * theta = 0.9 then 0.75 */
    c.momentum = 0.5;
    CHECK_OK(dpt_optim_init(&o, &c, 1));
    float th = 1.0f, g = 1.0f;
    CHECK_OK(dpt_optim_step(&o, &th, &g, 0.1));
    CHECK_CLOSE(th, 0.9, 1e-7, 0);
    CHECK_OK(dpt_optim_step(&o, &th, &g, 0.1));
    CHECK_CLOSE(o.m[0], 1.5, 0, 0);
    CHECK_CLOSE(th, 0.75, 1e-7, 0);
    dpt_optim_free(&o);

    /* weight decay by hand: theta 2, g 0, wd 0.1, lr 0.5: theta = 2 - 0.5 * 0.2 = 1.9 */
    c = dpt_optim_defaults(DPT_OPT_SGD);
    c.weight_decay = 0.1;
    CHECK_OK(dpt_optim_init(&o, &c, 1));
    th = 2.0f, g = 0.0f;
    CHECK_OK(dpt_optim_step(&o, &th, &g, 0.5));
    CHECK_CLOSE(th, 1.9, 1e-7, 0);
    dpt_optim_free(&o);
}

static void test_adam(void) {
    dpt_optim_config c = dpt_optim_defaults(DPT_OPT_ADAM);
    CHECK(c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8);
    run_against_ref(&c, "adam");
    c.weight_decay = 0.01;
    c.lr = 0.05;
    run_against_ref(&c, "adam wd 0.01 lr 0.05");
    c.beta1 = 0.5, c.beta2 = 0.9, c.eps = 1e-3;
    run_against_ref(&c, "adam b 0.5/0.9 eps 1e-3");

    /* First two steps by hand: theta0 = 1, lr 0.1, defaults, g1 = 0.5, g2 = -1.
     * Step 1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25, theta = 1 - 0.1*0.5/(0.5+1e-8)
     *   = 0.900000002.
     * Step 2: m = 0.045 - 0.1 = -0.055, v = 0.00024975 + 0.001 = 0.00124975,
     *   m^ = -0.055/0.19 = -0.289473684, v^ = 0.00124975/0.001999 = 0.625187594,
     *   sqrt = 0.790688051, theta = 0.900000002 + 0.1*0.289473684/0.790688051 = 0.936610354. */
    c = dpt_optim_defaults(DPT_OPT_ADAM);
    dpt_optim o;
    CHECK_OK(dpt_optim_init(&o, &c, 1));
    float th = 1.0f, g = 0.5f;
    CHECK_OK(dpt_optim_step(&o, &th, &g, 0.1));
    CHECK_CLOSE(o.m[0], 0.05, 1e-9, 1e-6);
    CHECK_CLOSE(o.v[0], 0.00025, 1e-12, 1e-6);
    CHECK_CLOSE(th, 0.900000002, 0, 1e-7);
    g = -1.0f;
    CHECK_OK(dpt_optim_step(&o, &th, &g, 0.1));
    CHECK_CLOSE(o.m[0], -0.055, 1e-9, 1e-6);
    CHECK_CLOSE(o.v[0], 0.00124975, 1e-12, 1e-6);
    CHECK_CLOSE(th, 0.936610354, 0, 2e-7);
    CHECK(o.t == 2);
    dpt_optim_free(&o);
}

static void test_nonfinite(void) {
    const dpt_opt_kind kinds[2] = {DPT_OPT_SGD, DPT_OPT_ADAM};
    for (int k = 0; k < 2; k++) {
        dpt_optim_config c = dpt_optim_defaults(kinds[k]);
        c.momentum = kinds[k] == DPT_OPT_SGD ? 0.9 : 0;
        dpt_optim o;
        CHECK_OK(dpt_optim_init(&o, &c, 4));
        float th[4] = {1, 2, 3, 4}, g[4] = {0.1f, 0.2f, 0.3f, 0.4f};
        CHECK_OK(dpt_optim_step(&o, th, g, c.lr));
        float th0[4], m0[4];
        memcpy(th0, th, sizeof th);
        memcpy(m0, o.m, sizeof m0);
        g[2] = NAN;
        CHECK_STATUS(dpt_optim_step(&o, th, g, c.lr), DPT_ERANGE);
        CHECK_ERR_HAS("non-finite gradient");
        g[2] = INFINITY;
        CHECK_STATUS(dpt_optim_step(&o, th, g, c.lr), DPT_ERANGE);
        CHECK(memcmp(th, th0, sizeof th) == 0);
        CHECK(memcmp(o.m, m0, sizeof m0) == 0);
        CHECK(o.t == 1);
        g[2] = 0.3f;
        CHECK_STATUS(dpt_optim_step(&o, th, g, -0.1), DPT_EINVAL);
        CHECK_STATUS(dpt_optim_step(&o, th, g, NAN), DPT_EINVAL);
        CHECK(memcmp(th, th0, sizeof th) == 0);
        dpt_optim_free(&o);
    }
    dpt_optim_free(NULL);
}

/* Large enough to take the threaded path: result equals the one-element loop exactly. */
static void test_threaded_matches(void) {
    const size_t n = 200003;
    float *th = malloc(n * sizeof *th), *g = malloc(n * sizeof *g);
    uint64_t s = 7;
    for (size_t i = 0; i < n; i++) th[i] = (float)lcg(&s), g[i] = (float)lcg(&s);
    dpt_optim_config c = dpt_optim_defaults(DPT_OPT_ADAM);
    c.weight_decay = 0.01;
    dpt_optim big, one;
    CHECK_OK(dpt_optim_init(&big, &c, n));
    CHECK_OK(dpt_optim_init(&one, &c, 1));
    CHECK_OK(dpt_optim_step(&big, th, g, 0.01));
    /* element 123457 with a 1-element optimizer from the same start */
    uint64_t s2 = 7;
    float t1 = 0, g1 = 0;
    for (size_t i = 0; i <= 123457; i++) t1 = (float)lcg(&s2), g1 = (float)lcg(&s2);
    CHECK_OK(dpt_optim_step(&one, &t1, &g1, 0.01));
    CHECK(t1 == th[123457]);
    dpt_optim_free(&big);
    dpt_optim_free(&one);
    free(th);
    free(g);
}

static void test_validate(void) {
    dpt_optim_config c = dpt_optim_defaults(DPT_OPT_SGD);
    CHECK_OK(dpt_optim_validate(&c));
    c.lr = -1;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_optim_config.lr (the learning rate) must be > 0, got -1");
    c.lr = NAN;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("learning rate");
    c = dpt_optim_defaults(DPT_OPT_SGD);
    c.momentum = 1.0;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_optim_config.momentum must be in [0, 1), got 1");
    c.momentum = 0;
    c.weight_decay = -0.5;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_optim_config.weight_decay must be >= 0, got -0.5");
    c = dpt_optim_defaults(DPT_OPT_ADAM);
    c.beta1 = 1.2;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("beta1 must be in [0, 1), got 1.2");
    c.beta1 = 0.9, c.beta2 = -0.1;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("beta2");
    c.beta2 = 0.999, c.eps = 0;
    CHECK_STATUS(dpt_optim_validate(&c), DPT_EINVAL);
    CHECK_ERR_HAS("eps must be > 0, got 0");
    dpt_optim o;
    CHECK_STATUS(dpt_optim_init(&o, &c, 10), DPT_EINVAL);
    CHECK(o.m == NULL && o.v == NULL);
    dpt_optim_free(&o);

    dpt_opt_kind k;
    CHECK_OK(dpt_optim_parse("sgd", &k));
    CHECK(k == DPT_OPT_SGD);
    CHECK_OK(dpt_optim_parse("adam", &k));
    CHECK(k == DPT_OPT_ADAM);
    CHECK_STATUS(dpt_optim_parse("adamw", &k), DPT_EINVAL);
    CHECK_ERR_HAS("unknown optimizer \"adamw\"");
}

static void test_schedules(void) {
    dpt_schedule s;
    CHECK_OK(dpt_schedule_parse("constant", &s));
    CHECK(s.kind == DPT_SCHED_CONSTANT);
    CHECK(dpt_schedule_lr(&s, 0.1, 0) == 0.1 && dpt_schedule_lr(&s, 0.1, 1000) == 0.1);

    /* step:0.85:10 -> epochs 0..9 base, 10..19 base*0.85, 20 base*0.85^2 */
    CHECK_OK(dpt_schedule_parse("step:0.85:10", &s));
    CHECK(s.kind == DPT_SCHED_STEP && s.gamma == 0.85 && s.every == 10);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.1, 0), 0.1, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.1, 9), 0.1, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.1, 10), 0.085, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.1, 19), 0.085, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.1, 20), 0.07225, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.1, 35), 0.1 * 0.85 * 0.85 * 0.85, 0, 1e-15);

    CHECK_OK(dpt_schedule_parse("exp:0.5", &s));
    CHECK(s.kind == DPT_SCHED_EXP && s.gamma == 0.5);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 0), 0.2, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 1), 0.1, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 3), 0.025, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(NULL, 0.2, 3), 0.2, 0, 0);
    CHECK(s.decays == 0);

    /* exp:0.5:2 -> 0.2, 0.1, 0.05, then held at 0.05 (the DP-MAC authors' lr floor) */
    CHECK_OK(dpt_schedule_parse("exp:0.5:2", &s));
    CHECK(s.kind == DPT_SCHED_EXP && s.gamma == 0.5 && s.decays == 2);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 0), 0.2, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 1), 0.1, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 2), 0.05, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 3), 0.05, 0, 1e-15);
    CHECK_CLOSE(dpt_schedule_lr(&s, 0.2, 1000), 0.05, 0, 1e-15);

    struct {
        const char *in, *msg;
    } bad[] = {
        {"", "unknown schedule"},
        {"linear", "unknown schedule \"linear\""},
        {"step", "unknown schedule"},
        {"step:0.85", "expected step:GAMMA:EVERY"},
        {"step:abc:10", "gamma \"abc\" is not a number"},
        {"step:0.85:", "EVERY \"\" is not a whole number"},
        {"step:0.85:0", "EVERY must be >= 1"},
        {"step:0.85:-3", "is not a whole number"},
        {"step:0.85:2.5", "is not a whole number"},
        {"step:0:10", "gamma must be > 0, got 0"},
        {"step:-1:10", "gamma must be > 0"},
        {"exp:", "is not a number"},
        {"exp:0.9x", "is not a number"},
        {"exp:nan", "gamma must be > 0"},
        {"exp:inf", "gamma must be > 0"},
        {"exp:0.9:", "DECAYS \"\" is not a whole number"},
        {"exp:0.9:0", "DECAYS must be >= 1"},
        {"exp:0.9:2.5", "is not a whole number"},
        {"exp:0.9:x", "is not a whole number"},
        {"exp:0:3", "gamma must be > 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(dpt_schedule_parse(bad[i].in, &s), DPT_EINVAL);
        CHECK_ERR_HAS(bad[i].msg);
    }
}

/* dpt_optim_step_ranges: inside the ranges exactly the full step's values (a second
 * optimizer stepping everything), outside them theta and the moments untouched, and a
 * non-finite gradient outside them ignored; one step of Adam's count per call; bad ranges
 * refused. */
static void test_ranges(void) {
    const size_t ranges[4] = {3, 10, 20, 30};
    for (int kind = 0; kind < 3; kind++) {
        dpt_optim_config c = dpt_optim_defaults(kind == 2 ? DPT_OPT_ADAM : DPT_OPT_SGD);
        c.weight_decay = 0.3, c.momentum = kind == 1 ? 0.9 : 0;
        dpt_optim part, all;
        CHECK_OK(dpt_optim_init(&part, &c, N));
        CHECK_OK(dpt_optim_init(&all, &c, N));
        float th[N], tha[N], g[N];
        uint64_t s = 99;
        for (int i = 0; i < N; i++) th[i] = tha[i] = (float)lcg(&s);
        for (int t = 1; t <= 4; t++) {
            float before[N];
            memcpy(before, th, sizeof th);
            for (int i = 0; i < N; i++) g[i] = (float)lcg(&s);
            CHECK_OK(dpt_optim_step(&all, tha, g, 0.05));
            g[0] = NAN, g[N - 1] = INFINITY; /* outside the ranges: never read */
            CHECK_OK(dpt_optim_step_ranges(&part, th, g, 0.05, ranges, 2));
            for (size_t i = 0; i < N; i++) {
                const int in = (i >= 3 && i < 10) || (i >= 20 && i < 30);
                if (in) {
                    CHECK(th[i] == tha[i]);
                } else {
                    CHECK(th[i] == before[i]);
                    if (part.m) CHECK(part.m[i] == 0.0f);
                    if (part.v) CHECK(part.v[i] == 0.0f);
                }
            }
        }
        CHECK(part.t == 4);
        g[5] = NAN; /* inside: refused, nothing written */
        float keep[N];
        memcpy(keep, th, sizeof th);
        CHECK_STATUS(dpt_optim_step_ranges(&part, th, g, 0.05, ranges, 2), DPT_ERANGE);
        CHECK(!memcmp(keep, th, sizeof th) && part.t == 4);
        const size_t overlap[4] = {3, 10, 9, 12}, empty[2] = {4, 4}, beyond[2] = {30, N + 1};
        CHECK_STATUS(dpt_optim_step_ranges(&part, th, g, 0.05, overlap, 2), DPT_EINVAL);
        CHECK_ERR_HAS("range 1 [9, 12) is empty, beyond the 37 parameters or overlaps the one before");
        CHECK_STATUS(dpt_optim_step_ranges(&part, th, g, 0.05, empty, 1), DPT_EINVAL);
        CHECK_STATUS(dpt_optim_step_ranges(&part, th, g, 0.05, beyond, 1), DPT_EINVAL);
        CHECK_STATUS(dpt_optim_step_ranges(&part, th, g, 0.05, ranges, 0), DPT_EINVAL);
        dpt_optim_free(&part);
        dpt_optim_free(&all);
    }
}

/* A dpt_optim that dpt_optim_init did not make for its config is refused with DPT_EINVAL,
 * theta and the step count untouched: a zeroed struct; a config switched to Adam, given
 * momentum or an unknown kind after init; a struct filled in by hand (the Adam update
 * asserted its moments, aborting the caller; SGD silently ignored the momentum). */
static void test_uninitialized(void) {
    float th[4] = {1, 2, 3, 4}, g[4] = {0.1f, 0.2f, 0.3f, 0.4f}, th0[4];
    memcpy(th0, th, sizeof th);
    const size_t all[2] = {0, 4};
    dpt_optim o;
    memset(&o, 0, sizeof o);
    CHECK_STATUS(dpt_optim_step(&o, th, g, 0.1), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_optim_step: o is not initialized");
    const dpt_optim_config sgd = dpt_optim_defaults(DPT_OPT_SGD);
    CHECK_OK(dpt_optim_init(&o, &sgd, 4));
    o.cfg = dpt_optim_defaults(DPT_OPT_ADAM);
    CHECK_STATUS(dpt_optim_step(&o, th, g, 0.1), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_optim_step: o is not initialized for its config (kind 1, m NULL, v NULL)");
    CHECK_STATUS(dpt_optim_step_ranges(&o, th, g, 0.1, all, 1), DPT_EINVAL);
    CHECK_ERR_HAS("(kind 1, m NULL, v NULL)");
    o.cfg = sgd;
    o.cfg.momentum = 0.9;
    CHECK_STATUS(dpt_optim_step(&o, th, g, 0.1), DPT_EINVAL);
    CHECK_ERR_HAS("(kind 0 with momentum, m NULL, v NULL)");
    o.cfg = sgd;
    o.cfg.kind = (dpt_opt_kind)7;
    CHECK_STATUS(dpt_optim_step(&o, th, g, 0.1), DPT_EINVAL);
    CHECK_ERR_HAS("(kind 7, m NULL, v NULL)");
    CHECK(memcmp(th, th0, sizeof th) == 0 && o.t == 0);
    o.cfg = sgd; /* as made: plain SGD */
    CHECK_OK(dpt_optim_step(&o, th, g, 0.1));
    CHECK(o.t == 1 && th[3] == (float)(4 - 0.1 * (double)0.4f));
    dpt_optim_free(&o);
    /* Adam made by dpt_optim_init has its moments, by hand it has none */
    const dpt_optim_config adam = dpt_optim_defaults(DPT_OPT_ADAM);
    memset(&o, 0, sizeof o);
    o.cfg = adam, o.n = 4;
    memcpy(th, th0, sizeof th);
    CHECK_STATUS(dpt_optim_step(&o, th, g, 1e-3), DPT_EINVAL);
    CHECK_ERR_HAS("(kind 1, m NULL, v NULL)");
    CHECK(memcmp(th, th0, sizeof th) == 0 && o.t == 0);
    CHECK_OK(dpt_optim_init(&o, &adam, 4));
    CHECK_OK(dpt_optim_step(&o, th, g, 1e-3));
    dpt_optim_free(&o);
}

int main(void) {
    test_ranges();
    test_uninitialized();
    test_sgd();
    test_adam();
    test_nonfinite();
    test_threaded_matches();
    test_validate();
    test_schedules();
    TEST_MAIN_END();
}
