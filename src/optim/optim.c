/* optim: SGD (heavy-ball momentum, L2 weight decay) and Adam over the flat parameter
 * buffer, plus learning-rate schedules. Updates are element-wise, so splitting the loop
 * across threads cannot change a single bit of the result. State is float32 (one value per
 * parameter, like theta); each element's update is computed in double and rounded once. */
#include <dptrain/optim.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this many parameters the OpenMP fork costs more than the loop. */
#define OPTIM_PAR_MIN 65536

/* ==== Configuration ==== */

dpt_optim_config dpt_optim_defaults(dpt_opt_kind kind) {
    dpt_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.lr = kind == DPT_OPT_ADAM ? 1e-3 : 0.1;
    c.momentum = 0.0;
    c.weight_decay = 0.0;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    return c;
}

dpt_status dpt_optim_parse(const char *s, dpt_opt_kind *out) {
    DPT_CHECK(s && out, DPT_EINVAL, "dpt_optim_parse: %s is NULL", s ? "out" : "s");
    if (strcmp(s, "sgd") == 0) {
        *out = DPT_OPT_SGD;
        return DPT_OK;
    }
    if (strcmp(s, "adam") == 0) {
        *out = DPT_OPT_ADAM;
        return DPT_OK;
    }
    return dpt_set_error(DPT_EINVAL, "dpt_optim_parse: unknown optimizer \"%s\" (expected sgd or adam)", s);
}

dpt_status dpt_optim_validate(const dpt_optim_config *c) {
    DPT_CHECK(c, DPT_EINVAL, "dpt_optim_validate: c is NULL");
    DPT_CHECK(c->kind == DPT_OPT_SGD || c->kind == DPT_OPT_ADAM, DPT_EINVAL,
              "dpt_optim_config.kind must be DPT_OPT_SGD or DPT_OPT_ADAM, got %d", (int)c->kind);
    DPT_CHECK(isfinite(c->lr) && c->lr > 0, DPT_EINVAL, "dpt_optim_config.lr (the learning rate) must be > 0, got %g",
              c->lr);
    DPT_CHECK(c->weight_decay >= 0 && isfinite(c->weight_decay), DPT_EINVAL,
              "dpt_optim_config.weight_decay must be >= 0, got %g", c->weight_decay);
    if (c->kind == DPT_OPT_SGD) {
        DPT_CHECK(c->momentum >= 0 && c->momentum < 1, DPT_EINVAL,
                  "dpt_optim_config.momentum must be in [0, 1), got %g", c->momentum);
    } else {
        DPT_CHECK(c->beta1 >= 0 && c->beta1 < 1, DPT_EINVAL, "dpt_optim_config.beta1 must be in [0, 1), got %g",
                  c->beta1);
        DPT_CHECK(c->beta2 >= 0 && c->beta2 < 1, DPT_EINVAL, "dpt_optim_config.beta2 must be in [0, 1), got %g",
                  c->beta2);
        DPT_CHECK(isfinite(c->eps) && c->eps > 0, DPT_EINVAL, "dpt_optim_config.eps must be > 0, got %g", c->eps);
    }
    return DPT_OK;
}

/* ==== State ==== */

dpt_status dpt_optim_init(dpt_optim *o, const dpt_optim_config *cfg, size_t n) {
    DPT_CHECK(o, DPT_EINVAL, "dpt_optim_init: o is NULL");
    memset(o, 0, sizeof *o);
    DPT_TRY(dpt_optim_validate(cfg));
    DPT_CHECK(n > 0, DPT_EINVAL, "dpt_optim_init: n (the parameter count) must be > 0");
    o->cfg = *cfg;
    o->n = n;
    int need_m = cfg->kind == DPT_OPT_ADAM || cfg->momentum > 0;
    int need_v = cfg->kind == DPT_OPT_ADAM;
    if (need_m && !(o->m = dpt_alloc(n, sizeof(float), "optimizer first moment")))
        return DPT_ENOMEM;
    if (need_v && !(o->v = dpt_alloc(n, sizeof(float), "optimizer second moment"))) {
        dpt_optim_free(o);
        return DPT_ENOMEM;
    }
    return DPT_OK;
}

void dpt_optim_free(dpt_optim *o) {
    if (!o) return;
    dpt_free(o->m);
    dpt_free(o->v);
    memset(o, 0, sizeof *o);
}

/* ==== Updates ==== */

dpt_status dpt_optim_step(dpt_optim *o, float *theta, const float *grad, double lr) {
    DPT_CHECK(o, DPT_EINVAL, "dpt_optim_step: o is NULL");
    const size_t all[2] = {0, o->n};
    return dpt_optim_step_ranges(o, theta, grad, lr, all, 1);
}

/* theta[lo, hi) -= update(grad[lo, hi)): the element-wise body of one step; o->t counts
 * the step already (Adam's bias correction uses it). */
static void step_range(dpt_optim *o, float *theta, const float *grad, double lr, size_t lo, size_t hi) {
    const double wd = o->cfg.weight_decay;
    const long long a = (long long)lo, b = (long long)hi;
    const int par = hi - lo >= OPTIM_PAR_MIN;
    if (o->cfg.kind == DPT_OPT_SGD) {
        const double mu = o->cfg.momentum;
        float *m = o->m;
        if (!m) {
            /* theta -= lr (g + wd theta) */
#pragma omp parallel for schedule(static) if (par)
            for (long long i = a; i < b; i++) theta[i] = (float)(theta[i] - lr * ((double)grad[i] + wd * theta[i]));
        } else {
            /* heavy ball (PyTorch SGD, dampening 0): m = mu m + g; theta -= lr m */
#pragma omp parallel for schedule(static) if (par)
            for (long long i = a; i < b; i++) {
                double mi = mu * m[i] + ((double)grad[i] + wd * theta[i]);
                m[i] = (float)mi;
                theta[i] = (float)(theta[i] - lr * mi);
            }
        }
        return;
    }
    /* Adam (Kingma & Ba 2015, Algorithm 1, as in torch.optim.Adam with L2 weight decay):
     * m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
     * theta -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
     * Element arithmetic is in double: (float)(1 - 0.999) is off by 5e-5 relative, which
     * would bias v; the loop is memory-bound, so double costs nothing measurable. */
    const double t = (double)o->t, b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.eps;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const double step = lr / bc1, inv_sqrt_bc2 = 1.0 / sqrt(bc2);
    const double c1 = 1.0 - b1, c2 = 1.0 - b2;
    float *m = o->m, *v = o->v;
    DPT_ASSERT(m && v); /* dpt_optim_step_ranges refuses an Adam without them */
#pragma omp parallel for schedule(static) if (par)
    for (long long i = a; i < b; i++) {
        double g = (double)grad[i] + wd * theta[i];
        double mi = b1 * m[i] + c1 * g, vi = b2 * v[i] + c2 * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        theta[i] = (float)(theta[i] - step * mi / (sqrt(vi) * inv_sqrt_bc2 + eps));
    }
}

dpt_status dpt_optim_step_ranges(dpt_optim *o, float *theta, const float *grad, double lr, const size_t *ranges,
                                 size_t n_ranges) {
    DPT_CHECK(o && theta && grad && o->n > 0, DPT_EINVAL, "dpt_optim_step: %s",
              !o ? "o is NULL" : !theta ? "theta is NULL" : !grad ? "grad is NULL" : "o is not initialized");
    /* the struct is public: a config changed after dpt_optim_init, or a struct filled in by
     * hand, may lack the state its kind needs (step_range would read NULL moments) */
    const int adam = o->cfg.kind == DPT_OPT_ADAM, sgd = o->cfg.kind == DPT_OPT_SGD;
    DPT_CHECK((adam && o->m && o->v) || (sgd && (o->m || !(o->cfg.momentum > 0))), DPT_EINVAL,
              "dpt_optim_step: o is not initialized for its config (kind %d%s, m %s, v %s): dpt_optim_init makes the "
              "state the config needs", (int)o->cfg.kind, sgd && o->cfg.momentum > 0 ? " with momentum" : "",
              o->m ? "set" : "NULL", o->v ? "set" : "NULL");
    DPT_CHECK(isfinite(lr) && lr > 0, DPT_EINVAL, "dpt_optim_step: lr (the learning rate) must be > 0, got %g", lr);
    DPT_CHECK(ranges && n_ranges >= 1, DPT_EINVAL, "dpt_optim_step_ranges: no ranges to update");
    for (size_t r = 0; r < n_ranges; r++) {
        const size_t lo = ranges[2 * r], hi = ranges[2 * r + 1];
        DPT_CHECK(lo < hi && hi <= o->n && (r == 0 || lo >= ranges[2 * r - 1]), DPT_EINVAL,
                  "dpt_optim_step_ranges: range %zu [%zu, %zu) is empty, beyond the %zu parameters or overlaps "
                  "the one before",
                  r, lo, hi, o->n);
    }
    /* Checked before any write: a NaN/Inf gradient must leave theta and the moments as
     * they were, so the caller can skip the step or stop cleanly. Only the updated ranges
     * are read. */
    for (size_t r = 0; r < n_ranges; r++)
        DPT_CHECK(dpt_all_finite(grad + ranges[2 * r], ranges[2 * r + 1] - ranges[2 * r]), DPT_ERANGE,
                  "optimizer step: non-finite gradient (NaN or Inf); parameters left unchanged");
    o->t++; /* one step, however many ranges */
    for (size_t r = 0; r < n_ranges; r++) step_range(o, theta, grad, lr, ranges[2 * r], ranges[2 * r + 1]);
    return DPT_OK;
}

/* ==== Learning-rate schedules ==== */

double dpt_schedule_lr(const dpt_schedule *s, double base_lr, uint64_t epoch) {
    if (!s) return base_lr;
    switch (s->kind) {
    case DPT_SCHED_STEP:
        return base_lr * pow(s->gamma, (double)(epoch / (s->every ? s->every : 1)));
    case DPT_SCHED_EXP:
        return base_lr * pow(s->gamma, (double)(s->decays && epoch > s->decays ? s->decays : epoch));
    case DPT_SCHED_CONSTANT:
    default:
        return base_lr;
    }
}

/* Parses a positive finite gamma from `p` up to `end_ch` ('\0' or ':'); sets *next. */
static dpt_status parse_gamma(const char *s, const char *p, char end_ch, double *gamma,
                              const char **next) {
    char *e = NULL;
    errno = 0;
    double g = strtod(p, &e);
    DPT_CHECK(e != p && *e == end_ch && errno == 0, DPT_EINVAL,
              "schedule \"%s\": gamma \"%.*s\" is not a number", s,
              (int)(strchr(p, end_ch) ? strchr(p, end_ch) - p : (long)strlen(p)), p);
    DPT_CHECK(isfinite(g) && g > 0, DPT_EINVAL, "schedule \"%s\": gamma must be > 0, got %g",
              s, g);
    *gamma = g;
    *next = e;
    return DPT_OK;
}

/* Parses the whole number of epochs `name` (>= 1, fits unsigned) that ends schedule `s` at `p`;
 * `note` follows ">= 1" in the error. */
static dpt_status parse_count(const char *s, const char *p, const char *name, const char *note,
                              unsigned *out) {
    char *e = NULL;
    errno = 0;
    unsigned long k = strtoul(p, &e, 10);
    DPT_CHECK(*p >= '0' && *p <= '9' && e != p && *e == '\0' && errno == 0, DPT_EINVAL,
              "schedule \"%s\": %s \"%s\" is not a whole number of epochs", s, name, p);
    DPT_CHECK(k >= 1 && k <= 0xFFFFFFFFul, DPT_EINVAL, "schedule \"%s\": %s must be >= 1 %s, got %s", s,
              name, note, p);
    *out = (unsigned)k;
    return DPT_OK;
}

dpt_status dpt_schedule_parse(const char *s, dpt_schedule *out) {
    DPT_CHECK(s && out, DPT_EINVAL, "dpt_schedule_parse: %s is NULL", s ? "out" : "s");
    memset(out, 0, sizeof *out);
    out->gamma = 1.0;
    out->every = 1;
    if (strcmp(s, "constant") == 0) {
        out->kind = DPT_SCHED_CONSTANT;
        return DPT_OK;
    }
    const char *next;
    if (strncmp(s, "step:", 5) == 0) {
        DPT_CHECK(strchr(s + 5, ':'), DPT_EINVAL,
                  "schedule \"%s\": expected step:GAMMA:EVERY (e.g. step:0.85:10)", s);
        DPT_TRY(parse_gamma(s, s + 5, ':', &out->gamma, &next));
        DPT_TRY(parse_count(s, next + 1, "EVERY", "epoch", &out->every));
        out->kind = DPT_SCHED_STEP;
        return DPT_OK;
    }
    if (strncmp(s, "exp:", 4) == 0) {
        const int capped = strchr(s + 4, ':') != NULL;
        DPT_TRY(parse_gamma(s, s + 4, capped ? ':' : '\0', &out->gamma, &next));
        out->kind = DPT_SCHED_EXP;
        if (capped) { /* exp:GAMMA:DECAYS */
            DPT_TRY(parse_count(s, next + 1, "DECAYS", "(omit it to decay every epoch)", &out->decays));
        }
        return DPT_OK;
    }
    return dpt_set_error(DPT_EINVAL,
                         "unknown schedule \"%s\" (expected constant, step:GAMMA:EVERY, exp:GAMMA or "
                         "exp:GAMMA:DECAYS)", s);
}
