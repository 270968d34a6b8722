/* The privacy ledger: an ordered list of privacy events (consecutive identical events
 * merged into one with a count) and string metadata, composed under RDP or PLD, and
 * persisted as versioned JSON with a SHA-256 checksum over its canonical serialization. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/text_fit.h"
#include "dptrain/accounting.h"

dpt_status dpt_acct_rdp_curve(double q, double sigma, const double *orders, size_t n, double *out);
dpt_status dpt_acct_pld_eval(const double *qs, const double *sigmas, const uint64_t *counts,
                             size_t n_ev, int want_eps, double target, const dpt_pld_options *opt,
                             double *out);

#define LEDGER_FORMAT "dptrain-ledger"
#define LEDGER_VERSION 1
#define MAX_COUNT 9007199254740992.0 /* 2^53: counts are stored as JSON numbers */

typedef enum { EV_SGM = 0, EV_GAUSSIAN, EV_RDP_CURVE, EV_EPS_DELTA, EV_DPULR, EV_SGM_DGAUSS } ev_kind;
static const char *const EV_NAMES[] = {"sgm", "gaussian", "rdp_curve", "eps_delta", "dpulr", "sgm_dgauss"};

typedef struct {
    ev_kind kind;
    uint64_t count;
    double q, sigma;          /* SGM: rate, noise multiplier; GAUSSIAN: sigma = noise std */
    double sensitivity;       /* GAUSSIAN */
    double eps, delta;        /* EPS_DELTA */
    double *orders, *rdp;     /* RDP_CURVE: [n] each, per step */
    size_t n;
    uint64_t n_data, n_b;     /* DPULR: dataset size N and rejection threshold N_B (q, sigma above) */
    uint64_t coords;          /* SGM_DGAUSS: noise coordinates per step (q, sigma above) */
    double mu, tv;            /* SGM_DGAUSS: per-coordinate distance of the noise sampler */
    char *label;              /* may be NULL */
} ledger_event;

typedef struct {
    char *key, *value;
} meta_kv;

struct dpt_ledger {
    ledger_event *ev;
    size_t n_ev, cap_ev;
    meta_kv *meta; /* sorted by key, so equal ledgers serialize identically */
    size_t n_meta, cap_meta;
};

/* ==== Lifecycle ==== */

dpt_status dpt_ledger_new(dpt_ledger **out) {
    DPT_CHECK(out != NULL, DPT_EINVAL, "ledger output is NULL");
    dpt_ledger *l = calloc(1, sizeof *l);
    DPT_CHECK(l != NULL, DPT_ENOMEM, "ledger: out of memory");
    *out = l;
    return DPT_OK;
}

static void event_clear(ledger_event *e) {
    free(e->orders);
    free(e->rdp);
    free(e->label);
}

void dpt_ledger_free(dpt_ledger *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n_ev; i++) event_clear(&l->ev[i]);
    for (size_t i = 0; i < l->n_meta; i++) {
        free(l->meta[i].key);
        free(l->meta[i].value);
    }
    free(l->ev);
    free(l->meta);
    free(l);
}

static char *dup_str(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int same_label(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

/* Appends e (taking ownership of its pointers) or merges it into the last event. */
static dpt_status push_event(dpt_ledger *l, ledger_event *e) {
    if (l->n_ev > 0) {
        ledger_event *last = &l->ev[l->n_ev - 1];
        int same = last->kind == e->kind && same_label(last->label, e->label);
        if (same) switch (e->kind) {
            case EV_SGM: same = last->q == e->q && last->sigma == e->sigma; break;
            case EV_GAUSSIAN:
                same = last->sensitivity == e->sensitivity && last->sigma == e->sigma;
                break;
            case EV_EPS_DELTA: same = last->eps == e->eps && last->delta == e->delta; break;
            case EV_DPULR:
                same = last->q == e->q && last->sigma == e->sigma && last->n_data == e->n_data &&
                       last->n_b == e->n_b;
                break;
            case EV_SGM_DGAUSS:
                same = last->q == e->q && last->sigma == e->sigma && last->coords == e->coords &&
                       last->mu == e->mu && last->tv == e->tv;
                break;
            case EV_RDP_CURVE:
                same = last->n == e->n && !memcmp(last->orders, e->orders, e->n * sizeof(double)) &&
                       !memcmp(last->rdp, e->rdp, e->n * sizeof(double));
                break;
            }
        if (same && (double)last->count + (double)e->count <= MAX_COUNT) {
            last->count += e->count;
            event_clear(e);
            return DPT_OK;
        }
    }
    if (l->n_ev == l->cap_ev) {
        size_t cap = l->cap_ev ? 2 * l->cap_ev : 8, bytes;
        ledger_event *ne = dpt_mul_overflow(cap, sizeof *ne, &bytes) ? NULL : realloc(l->ev, bytes);
        if (!ne) {
            event_clear(e);
            return dpt_set_error(DPT_ENOMEM, "ledger: out of memory");
        }
        l->ev = ne;
        l->cap_ev = cap;
    }
    l->ev[l->n_ev++] = *e;
    return DPT_OK;
}

static dpt_status check_count(uint64_t count) {
    DPT_CHECK(count >= 1 && (double)count <= MAX_COUNT, DPT_EINVAL,
              "event count must be in [1, 2^53], got %llu", (unsigned long long)count);
    return DPT_OK;
}

static dpt_status set_label(ledger_event *e, const char *label) {
    if (!label) return DPT_OK;
    e->label = dup_str(label);
    DPT_CHECK(e->label != NULL, DPT_ENOMEM, "ledger: out of memory");
    return DPT_OK;
}

/* ==== Adding events ==== */

dpt_status dpt_ledger_add_sgm(dpt_ledger *l, double q, double sigma, uint64_t count) {
    DPT_CHECK(l != NULL, DPT_EINVAL, "ledger is NULL");
    DPT_CHECK(isfinite(q) && q > 0 && q <= 1, DPT_EINVAL, "sampling rate q must be in (0, 1], got %g", q);
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL, "noise multiplier sigma must be > 0, got %g", sigma);
    DPT_TRY(check_count(count));
    ledger_event e = {.kind = EV_SGM, .count = count, .q = q, .sigma = sigma};
    return push_event(l, &e);
}

dpt_status dpt_ledger_add_gaussian(dpt_ledger *l, double sensitivity, double sigma, const char *label) {
    DPT_CHECK(l != NULL, DPT_EINVAL, "ledger is NULL");
    DPT_CHECK(isfinite(sensitivity) && sensitivity > 0, DPT_EINVAL,
              "Gaussian sensitivity must be > 0, got %g", sensitivity);
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL, "Gaussian noise std sigma must be > 0, got %g", sigma);
    ledger_event e = {.kind = EV_GAUSSIAN, .count = 1, .sensitivity = sensitivity, .sigma = sigma};
    DPT_TRY(set_label(&e, label));
    return push_event(l, &e);
}

static dpt_status check_curve(const double *orders, const double *rdp, size_t n) {
    DPT_CHECK(orders && rdp && n >= 1, DPT_EINVAL, "RDP curve must have at least one order");
    for (size_t i = 0; i < n; i++) {
        DPT_CHECK(isfinite(orders[i]) && orders[i] > 1, DPT_EINVAL,
                  "RDP curve order %zu must be > 1 and finite, got %g", i, orders[i]);
        DPT_CHECK(i == 0 || orders[i] > orders[i - 1], DPT_EINVAL,
                  "RDP curve orders must be strictly increasing (order %zu = %g)", i, orders[i]);
        DPT_CHECK(isfinite(rdp[i]) && rdp[i] >= 0, DPT_EINVAL,
                  "RDP curve value at order %g must be finite and >= 0, got %g", orders[i], rdp[i]);
    }
    return DPT_OK;
}

dpt_status dpt_ledger_add_rdp_curve(dpt_ledger *l, const double *orders, const double *rdp,
                                    size_t n, uint64_t count, const char *label) {
    DPT_CHECK(l != NULL, DPT_EINVAL, "ledger is NULL");
    DPT_TRY(check_curve(orders, rdp, n));
    DPT_TRY(check_count(count));
    ledger_event e = {.kind = EV_RDP_CURVE, .count = count, .n = n};
    e.orders = calloc(n, sizeof(double));
    e.rdp = calloc(n, sizeof(double));
    if (!e.orders || !e.rdp) {
        event_clear(&e);
        return dpt_set_error(DPT_ENOMEM, "ledger: out of memory");
    }
    memcpy(e.orders, orders, n * sizeof(double));
    memcpy(e.rdp, rdp, n * sizeof(double));
    dpt_status st = set_label(&e, label);
    if (st != DPT_OK) {
        event_clear(&e);
        return st;
    }
    return push_event(l, &e);
}

dpt_status dpt_ledger_add_eps_delta(dpt_ledger *l, double eps, double delta, const char *label) {
    DPT_CHECK(l != NULL, DPT_EINVAL, "ledger is NULL");
    DPT_CHECK(isfinite(eps) && eps >= 0, DPT_EINVAL, "event epsilon must be >= 0 and finite, got %g", eps);
    DPT_CHECK(isfinite(delta) && delta >= 0 && delta < 1, DPT_EINVAL, "event delta must be in [0, 1), got %g", delta);
    ledger_event e = {.kind = EV_EPS_DELTA, .count = 1, .eps = eps, .delta = delta};
    DPT_TRY(set_label(&e, label));
    return push_event(l, &e);
}

dpt_status dpt_ledger_add_dpulr(dpt_ledger *l, double q, double sigma0, uint64_t N, uint64_t N_B, uint64_t count) {
    DPT_CHECK(l != NULL, DPT_EINVAL, "ledger is NULL");
    DPT_CHECK(isfinite(sigma0) && sigma0 > 0, DPT_EINVAL, "noise multiplier sigma0 must be > 0, got %g", sigma0);
    DPT_TRY(dpt_dpulr_check(q, N, N_B));
    DPT_TRY(check_count(count));
    ledger_event e = {.kind = EV_DPULR, .count = count, .q = q, .sigma = sigma0, .n_data = N, .n_b = N_B};
    return push_event(l, &e);
}

dpt_status dpt_ledger_add_sgm_dgauss(dpt_ledger *l, double q, double sigma, uint64_t coords, double mu, double tv,
                                     uint64_t count) {
    DPT_CHECK(l != NULL, DPT_EINVAL, "ledger is NULL");
    DPT_CHECK(isfinite(q) && q > 0 && q <= 1, DPT_EINVAL, "sampling rate q must be in (0, 1], got %g", q);
    DPT_CHECK(isfinite(sigma) && sigma > 0, DPT_EINVAL, "noise multiplier sigma must be > 0, got %g", sigma);
    DPT_CHECK(coords >= 1 && (double)coords <= MAX_COUNT, DPT_EINVAL, "coords must be in [1, 2^53], got %llu",
              (unsigned long long)coords);
    DPT_CHECK(isfinite(mu) && mu >= 0 && mu < 1, DPT_EINVAL, "mu must be in [0, 1), got %g", mu);
    DPT_CHECK(isfinite(tv) && tv >= 0 && tv < 1, DPT_EINVAL, "tv must be in [0, 1), got %g", tv);
    DPT_TRY(check_count(count));
    ledger_event e = {.kind = EV_SGM_DGAUSS, .count = count, .q = q, .sigma = sigma, .coords = coords, .mu = mu, .tv = tv};
    return push_event(l, &e);
}

uint64_t dpt_ledger_steps(const dpt_ledger *l) {
    uint64_t s = 0;
    if (!l) return 0;
    for (size_t i = 0; i < l->n_ev; i++)
        if (l->ev[i].kind == EV_SGM || l->ev[i].kind == EV_DPULR || l->ev[i].kind == EV_SGM_DGAUSS)
            s += l->ev[i].count;
    return s;
}

size_t dpt_ledger_n_events(const dpt_ledger *l) { return l ? l->n_ev : 0; }

/* ==== Metadata ==== */

/* One function composes the labels, so the epoch lines, the final line and eval (CLI and
 * Python) say the same thing about the same ledger. */
void dpt_ledger_label(const dpt_ledger *l, int full, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    if (!l) return;
    const char *ex = dpt_ledger_get_meta(l, "epsilon_excludes"), *seed = dpt_ledger_get_meta(l, "seed_source");
    /* the short labels (seed, forced delta, allowed mismatch) are never dropped: they are
     * composed first, the exclusions get the room left, and a text that does not fit ends
     * in "...]" (the ledger holds it whole) */
    char tail[640] = "";
    size_t w = 0;
    if (seed && !strcmp(seed, "caller")) {
        snprintf(tail, sizeof tail, "%s", full ? "  [SEEDED run (a chosen seed): holds only while the seed stays "
                                                 "secret and no other run uses it]"
                                               : "  [SEEDED]");
        w = strlen(tail);
    }
    /* floating-point noise on a released sum (dpt_sgm with secure = 0) */
    const char *fl = dpt_ledger_get_meta(l, "noise_float");
    if (fl && !strcmp(fl, "1")) {
        snprintf(tail + w, sizeof tail - w, "%s", full ? "  [floating-point noise (secure = 0): its sampler's artefacts "
                                                         "are not covered by the epsilon (Mironov 2012)]"
                                                       : "  [float noise]");
        w += strlen(tail + w);
    }
    /* a delta >= 1/N accepted by force (dpt_train_config with such a delta, dpt_sgm_config.force) */
    const char *fd = dpt_ledger_get_meta(l, "delta_forced");
    if (fd) {
        if (full)
            snprintf(tail + w, sizeof tail - w, "  [delta %.40s >= 1/N accepted (force): such a delta allows "
                     "releasing a whole example]", fd);
        else
            snprintf(tail + w, sizeof tail - w, "  [delta >= 1/N (forced)]");
        w += strlen(tail + w);
    }
    /* a resume over a ledger that did not match (allow_ledger_mismatch): one key per resume */
    int mismatch = 0;
    for (size_t i = 0; i < l->n_meta && !mismatch; i++)
        mismatch = !strncmp(l->meta[i].key, "mismatch_allowed_at_step_", 25);
    if (mismatch)
        snprintf(tail + w, sizeof tail - w, "%s", full ? "  [ledger mismatch allowed: resumed although the ledger "
                                                         "recorded other settings or data (mismatch_allowed_at_step_* "
                                                         "in the ledger)]"
                                                       : "  [ledger mismatch allowed]");
    const size_t nt = strlen(tail);
    if (ex && *ex && cap > nt + 1)
        dpt_bracket_fit(buf, cap - nt, full ? "  [this epsilon does NOT cover: " : "  [epsilon does NOT cover: ", ex);
    const size_t have = strlen(buf);
    snprintf(buf + have, cap - have, "%s", tail);
}

dpt_status dpt_ledger_set_meta(dpt_ledger *l, const char *key, const char *value) {
    DPT_CHECK(l && key && *key && value, DPT_EINVAL, "ledger meta: key must be non-empty, value non-NULL");
    size_t i = 0;
    while (i < l->n_meta && strcmp(l->meta[i].key, key) < 0) i++;
    char *v = dup_str(value);
    DPT_CHECK(v != NULL, DPT_ENOMEM, "ledger: out of memory");
    if (i < l->n_meta && strcmp(l->meta[i].key, key) == 0) {
        free(l->meta[i].value);
        l->meta[i].value = v;
        return DPT_OK;
    }
    char *k = dup_str(key);
    if (!k) {
        free(v);
        return dpt_set_error(DPT_ENOMEM, "ledger: out of memory");
    }
    if (l->n_meta == l->cap_meta) {
        size_t cap = l->cap_meta ? 2 * l->cap_meta : 8, bytes;
        meta_kv *nm = dpt_mul_overflow(cap, sizeof *nm, &bytes) ? NULL : realloc(l->meta, bytes);
        if (!nm) {
            free(k);
            free(v);
            return dpt_set_error(DPT_ENOMEM, "ledger: out of memory");
        }
        l->meta = nm;
        l->cap_meta = cap;
    }
    memmove(&l->meta[i + 1], &l->meta[i], (l->n_meta - i) * sizeof(meta_kv));
    l->meta[i].key = k;
    l->meta[i].value = v;
    l->n_meta++;
    return DPT_OK;
}

const char *dpt_ledger_get_meta(const dpt_ledger *l, const char *key) {
    if (!l || !key) return NULL;
    for (size_t i = 0; i < l->n_meta; i++)
        if (!strcmp(l->meta[i].key, key)) return l->meta[i].value;
    return NULL;
}

/* ==== Epsilon ==== */

int dpt_ledger_pld_applies(const dpt_ledger *l) {
    if (!l) return 0;
    for (size_t i = 0; i < l->n_ev; i++)
        if (l->ev[i].kind != EV_SGM && l->ev[i].kind != EV_GAUSSIAN && l->ev[i].kind != EV_SGM_DGAUSS) return 0;
    return 1;
}


const char *dpt_accountant_name(dpt_accountant acct) {
    switch (acct) {
    case DPT_ACCT_RDP: return "rdp";
    case DPT_ACCT_PLD: return "pld";
    case DPT_ACCT_DEFAULT: return "default";
    }
    return NULL;
}

/* The sampler distance of the SGM_DGAUSS events (docs/dpsgd.md, "Secure noise"): the run's
 * output is within total variation dtv of a mechanism whose every probability is within a
 * factor e^(+-mtot) of the exact discrete Gaussian's, mtot = sum count coords mu,
 * dtv = sum count coords tv. */
static void dgauss_totals(const dpt_ledger *l, double *mtot, double *dtv) {
    *mtot = *dtv = 0;
    for (size_t i = 0; i < l->n_ev; i++)
        if (l->ev[i].kind == EV_SGM_DGAUSS) {
            double k = (double)l->ev[i].count * (double)l->ev[i].coords;
            *mtot += k * l->ev[i].mu;
            *dtv += k * l->ev[i].tv;
        }
}

/* Value of a curve event at `alpha`: the value at the smallest curve order >= alpha (RDP is
 * non-decreasing in the order, van Erven & Harremoes 2014, Thm. 3), +inf above the curve. */
static double curve_at(const ledger_event *e, double alpha) {
    for (size_t i = 0; i < e->n; i++)
        if (e->orders[i] >= alpha) return e->rdp[i];
    return INFINITY;
}

dpt_status dpt_ledger_epsilon_rdp(const dpt_ledger *l, double delta, dpt_conversion conv,
                                  const double *orders, size_t n_orders, double *eps,
                                  double *best_order, int *at_edge) {
    DPT_CHECK(l && eps, DPT_EINVAL, "ledger epsilon: NULL argument");
    DPT_CHECK(isfinite(delta) && delta > 0 && delta < 1, DPT_EINVAL, "delta must be in (0, 1), got %g", delta);
    if (!orders) orders = dpt_rdp_default_orders(&n_orders);
    DPT_CHECK(n_orders >= 1, DPT_EINVAL, "empty RDP order grid");
    /* (eps, delta) events compose by basic composition with the RDP part. */
    double eps_pure = 0, delta_pure = 0;
    int any_rdp = 0;
    for (size_t i = 0; i < l->n_ev; i++) {
        const ledger_event *e = &l->ev[i];
        if (e->kind == EV_EPS_DELTA) {
            eps_pure += e->eps * (double)e->count;
            delta_pure += e->delta * (double)e->count;
        } else {
            any_rdp = 1;
        }
    }
    if (best_order) *best_order = 0;
    if (at_edge) *at_edge = 0;
    if (!any_rdp) {
        DPT_CHECK(delta_pure <= delta, DPT_ERANGE,
                  "the (eps, delta) events alone spend delta %g > target %g", delta_pure, delta);
        *eps = eps_pure;
        return DPT_OK;
    }
    double delta_rdp = delta - delta_pure;
    DPT_CHECK(delta_rdp > 0, DPT_ERANGE,
              "the (eps, delta) events spend delta %g, leaving nothing of target %g", delta_pure, delta);
    double mtot, dtv;
    dgauss_totals(l, &mtot, &dtv);
    double *total = dpt_alloc2(2, n_orders, sizeof(double), "ledger RDP");
    if (!total) return DPT_ENOMEM;
    double *tmp = total + n_orders;
    dpt_status st = DPT_OK;
    for (size_t i = 0; i < l->n_ev && st == DPT_OK; i++) {
        const ledger_event *e = &l->ev[i];
        double c = (double)e->count;
        switch (e->kind) {
        case EV_SGM:
            st = dpt_acct_rdp_curve(e->q, e->sigma, orders, n_orders, tmp);
            for (size_t j = 0; j < n_orders && st == DPT_OK; j++) total[j] += c * tmp[j];
            break;
        case EV_GAUSSIAN: {
            double m = e->sigma / e->sensitivity; /* RDP alpha / (2 m^2), Mironov 2017 Prop. 7 */
            for (size_t j = 0; j < n_orders; j++) total[j] += c * orders[j] / (2.0 * m * m);
            break;
        }
        case EV_RDP_CURVE:
            for (size_t j = 0; j < n_orders; j++) total[j] += c * curve_at(e, orders[j]);
            break;
        case EV_DPULR: {
            /* recomputed from the stored parameters (q, sigma0, N, N_B) every time: a ledger
             * written before issue 38 gets the sound bound, not the withdrawn one */
            st = dpt_dpulr_rdp_curve(e->q, e->sigma, e->n_data, e->n_b, orders, n_orders, tmp);
            for (size_t j = 0; j < n_orders && st == DPT_OK; j++) total[j] += c * tmp[j];
            break;
        }
        case EV_SGM_DGAUSS: {
            /* SGM, plus the sampler: every output probability within e^(+-coords mu) of the
             * exact mechanism's adds coords mu (2 alpha - 1) / (alpha - 1) to D_alpha */
            st = dpt_acct_rdp_curve(e->q, e->sigma, orders, n_orders, tmp);
            double cm = (double)e->coords * e->mu;
            for (size_t j = 0; j < n_orders && st == DPT_OK; j++)
                total[j] += c * (tmp[j] + cm * (2 * orders[j] - 1) / (orders[j] - 1));
            break;
        }
        case EV_EPS_DELTA: break;
        }
    }
    double e_rdp = 0;
    if (st == DPT_OK && dtv > 0) {
        /* total variation dtv costs (1 + e^eps) dtv of delta: bound eps by its value at half
         * the budget, which is larger than the final one */
        double e_half = 0;
        st = dpt_rdp_to_epsilon(orders, total, n_orders, delta_rdp / 2, conv, &e_half, NULL, NULL);
        double spend = (1 + exp(e_half + eps_pure)) * dtv;
        if (st == DPT_OK && !(spend <= delta_rdp / 2))
            st = dpt_set_error(DPT_ERANGE, "the secure sampler's total variation %g (times 1 + e^eps) exceeds half of "
                                           "delta %g", dtv, delta_rdp);
        delta_rdp -= spend;
    }
    if (st == DPT_OK) st = dpt_rdp_to_epsilon(orders, total, n_orders, delta_rdp, conv, &e_rdp, best_order, at_edge);
    dpt_free(total);
    if (st == DPT_OK) *eps = e_rdp + eps_pure;
    return st;
}

dpt_status dpt_ledger_epsilon(const dpt_ledger *l, double delta, dpt_accountant acct,
                              dpt_conversion conv, double *eps) {
    DPT_CHECK(l && eps, DPT_EINVAL, "ledger epsilon: NULL argument");
    if (acct == DPT_ACCT_DEFAULT) return dpt_ledger_epsilon_default(l, delta, conv, eps, NULL, NULL, NULL);
    if (acct == DPT_ACCT_RDP) return dpt_ledger_epsilon_rdp(l, delta, conv, NULL, 0, eps, NULL, NULL);
    DPT_CHECK(acct == DPT_ACCT_PLD, DPT_EINVAL, "unknown accountant %d", (int)acct);
    DPT_CHECK(isfinite(delta) && delta > 0 && delta < 1, DPT_EINVAL, "delta must be in (0, 1), got %g", delta);
    DPT_CHECK(dpt_ledger_pld_applies(l), DPT_ENOTSUP,
              "the PLD accountant handles only sampled-Gaussian and Gaussian events; "
              "this ledger has RDP-curve or (eps, delta) events (use the RDP accountant)");
    if (l->n_ev == 0) {
        *eps = 0;
        return DPT_OK;
    }
    double *qs = dpt_alloc2(2, l->n_ev, sizeof(double), "ledger PLD");
    uint64_t *cnt = dpt_alloc(l->n_ev, sizeof(uint64_t), "ledger PLD");
    if (!qs || !cnt) {
        dpt_free(qs);
        dpt_free(cnt);
        return DPT_ENOMEM;
    }
    double *sg = qs + l->n_ev;
    for (size_t i = 0; i < l->n_ev; i++) {
        const ledger_event *e = &l->ev[i];
        int sgm = e->kind == EV_SGM || e->kind == EV_SGM_DGAUSS;
        qs[i] = sgm ? e->q : 1.0;
        sg[i] = sgm ? e->sigma : e->sigma / e->sensitivity;
        cnt[i] = e->count;
    }
    /* the secure sampler (SGM_DGAUSS): the exact mechanism's (eps, d) becomes
     * (eps + 2 mtot, e^mtot d) pointwise, then + (1 + e^eps) dtv in total variation */
    double mtot, dtv;
    dgauss_totals(l, &mtot, &dtv);
    double d = delta;
    dpt_status st = DPT_OK;
    if (dtv > 0) {
        double e_half = 0;
        st = dpt_acct_pld_eval(qs, sg, cnt, l->n_ev, 1, delta / 2 * exp(-mtot), NULL, &e_half);
        double spend = (1 + exp(e_half + 2 * mtot)) * dtv;
        if (st == DPT_OK && !(spend <= delta / 2))
            st = dpt_set_error(DPT_ERANGE, "the secure sampler's total variation %g (times 1 + e^eps) exceeds half of "
                                           "delta %g", dtv, delta);
        d -= spend;
    }
    if (st == DPT_OK) st = dpt_acct_pld_eval(qs, sg, cnt, l->n_ev, 1, d * exp(-mtot), NULL, eps);
    if (st == DPT_OK) *eps += 2 * mtot;
    dpt_free(qs);
    dpt_free(cnt);
    return st;
}

dpt_status dpt_ledger_epsilon_default(const dpt_ledger *l, double delta, dpt_conversion conv, double *eps,
                                      dpt_accountant *which, double *eps_rdp, double *eps_pld) {
    DPT_CHECK(l && eps, DPT_EINVAL, "ledger epsilon: NULL argument");
    double r = NAN, p = NAN;
    DPT_TRY(dpt_ledger_epsilon_rdp(l, delta, conv, NULL, 0, &r, NULL, NULL));
    if (dpt_ledger_pld_applies(l)) {
        /* a PLD bound that cannot be stated (DPT_ERANGE: the secure sampler's distance over
         * the PLD's share of delta) leaves the RDP bound, which holds on its own */
        dpt_status s = dpt_ledger_epsilon(l, delta, DPT_ACCT_PLD, conv, &p);
        if (s == DPT_ERANGE) p = NAN;
        else DPT_TRY(s);
    }
    /* both bound the same (eps, delta) curve from above: the smaller is a bound too */
    const int pld = !isnan(p) && !(r < p);
    *eps = pld ? p : r;
    if (which) *which = pld ? DPT_ACCT_PLD : DPT_ACCT_RDP;
    if (eps_rdp) *eps_rdp = r;
    if (eps_pld) *eps_pld = p;
    return DPT_OK;
}

/* ==== JSON ==== */

/* A JSON number that reads back bit-identically (dpt_format_double; cJSON's own printer
 * accepts a 1-ulp difference, which would make a saved ledger differ from the one in
 * memory). Non-finite values keep their C spelling, as before (the parser refuses them). */
static cJSON *exact_number(double v) {
    char buf[DPT_DOUBLE_TEXT];
    if (isfinite(v)) dpt_format_double(v, buf);
    else snprintf(buf, sizeof buf, "%g", v);
    return cJSON_CreateRaw(buf);
}

static int add_num(cJSON *o, const char *key, double v) {
    cJSON *x = exact_number(v);
    if (!x) return 0;
    if (!cJSON_AddItemToObject(o, key, x)) {
        cJSON_Delete(x);
        return 0;
    }
    return 1;
}

static cJSON *num_array(const double *v, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) {
        cJSON *x = exact_number(v[i]);
        if (!x || !cJSON_AddItemToArray(a, x)) {
            cJSON_Delete(x);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* The canonical object without the checksum. Field order is fixed; meta is sorted. */
static cJSON *ledger_to_cjson(const dpt_ledger *l) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return NULL;
    int ok = cJSON_AddStringToObject(root, "format", LEDGER_FORMAT) &&
             add_num(root, "version", LEDGER_VERSION) &&
             cJSON_AddStringToObject(root, "adjacency", "add-remove") &&
             add_num(root, "total_sgm_steps", (double)dpt_ledger_steps(l));
    cJSON *meta = ok ? cJSON_AddObjectToObject(root, "meta") : NULL;
    for (size_t i = 0; meta && i < l->n_meta; i++)
        if (!cJSON_AddStringToObject(meta, l->meta[i].key, l->meta[i].value)) meta = NULL;
    cJSON *evs = meta ? cJSON_AddArrayToObject(root, "events") : NULL;
    for (size_t i = 0; evs && i < l->n_ev; i++) {
        const ledger_event *e = &l->ev[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(evs, o)) {
            cJSON_Delete(o);
            evs = NULL;
            break;
        }
        int k = cJSON_AddStringToObject(o, "type", EV_NAMES[e->kind]) != NULL;
        switch (e->kind) {
        case EV_SGM:
            k = k && add_num(o, "q", e->q) && add_num(o, "sigma", e->sigma);
            break;
        case EV_GAUSSIAN:
            k = k && add_num(o, "sensitivity", e->sensitivity) &&
                add_num(o, "sigma", e->sigma);
            break;
        case EV_EPS_DELTA:
            k = k && add_num(o, "eps", e->eps) && add_num(o, "delta", e->delta);
            break;
        case EV_DPULR:
            k = k && add_num(o, "q", e->q) && add_num(o, "sigma", e->sigma) &&
                add_num(o, "n", (double)e->n_data) && add_num(o, "min_batch", (double)e->n_b);
            break;
        case EV_SGM_DGAUSS:
            k = k && add_num(o, "q", e->q) && add_num(o, "sigma", e->sigma) &&
                add_num(o, "coords", (double)e->coords) && add_num(o, "mu", e->mu) && add_num(o, "tv", e->tv);
            break;
        case EV_RDP_CURVE: {
            cJSON *a = num_array(e->orders, e->n), *b = num_array(e->rdp, e->n);
            if (!a || !b || !cJSON_AddItemToObject(o, "orders", a)) {
                cJSON_Delete(a);
                cJSON_Delete(b);
                k = 0;
            } else if (!cJSON_AddItemToObject(o, "rdp", b)) {
                cJSON_Delete(b);
                k = 0;
            }
            break;
        }
        }
        k = k && add_num(o, "count", (double)e->count);
        if (k && e->label) k = cJSON_AddStringToObject(o, "label", e->label) != NULL;
        if (!k) evs = NULL;
    }
    if (!evs) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static dpt_status checksum_hex(const char *canon, char out[72]) {
    dpt_hash h;
    uint8_t dig[32];
    DPT_TRY(dpt_hash_init(&h));
    dpt_status st = dpt_hash_update(&h, canon, strlen(canon));
    dpt_status st2 = dpt_hash_final(&h, dig);
    DPT_TRY(st);
    DPT_TRY(st2);
    memcpy(out, "sha256:", 7);
    dpt_hex(dig, 32, out + 7);
    return DPT_OK;
}

/* Canonical string (unformatted, no checksum) -> malloc'd, and its checksum. */
static dpt_status canonical(const dpt_ledger *l, cJSON **root_out, char sum[72]) {
    cJSON *root = ledger_to_cjson(l);
    DPT_CHECK(root != NULL, DPT_ENOMEM, "ledger JSON: out of memory");
    char *canon = cJSON_PrintUnformatted(root);
    if (!canon) {
        cJSON_Delete(root);
        return dpt_set_error(DPT_ENOMEM, "ledger JSON: out of memory");
    }
    dpt_status st = checksum_hex(canon, sum);
    cJSON_free(canon);
    if (st != DPT_OK) {
        cJSON_Delete(root);
        return st;
    }
    *root_out = root;
    return DPT_OK;
}

dpt_status dpt_ledger_to_json(const dpt_ledger *l, char **json_out) {
    DPT_CHECK(l && json_out, DPT_EINVAL, "ledger to_json: NULL argument");
    cJSON *root = NULL;
    char sum[72];
    DPT_TRY(canonical(l, &root, sum));
    char *txt = NULL;
    if (cJSON_AddStringToObject(root, "checksum", sum)) txt = cJSON_Print(root);
    cJSON_Delete(root);
    DPT_CHECK(txt != NULL, DPT_ENOMEM, "ledger JSON: out of memory");
    /* cJSON allocates with malloc by default; hand back a plain malloc'd copy anyway */
    size_t n = strlen(txt);
    char *out = malloc(n + 2);
    if (!out) {
        cJSON_free(txt);
        return dpt_set_error(DPT_ENOMEM, "ledger JSON: out of memory");
    }
    memcpy(out, txt, n);
    out[n] = '\n';
    out[n + 1] = 0;
    cJSON_free(txt);
    *json_out = out;
    return DPT_OK;
}

/* ---- parsing with validation ---- */

static dpt_status get_num(const cJSON *o, const char *key, const char *where, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    DPT_CHECK(x != NULL, DPT_EFORMAT, "%s: missing field \"%s\"", where, key);
    DPT_CHECK(cJSON_IsNumber(x), DPT_EFORMAT, "%s: field \"%s\" must be a number", where, key);
    DPT_CHECK(isfinite(x->valuedouble), DPT_EFORMAT, "%s: field \"%s\" is not finite", where, key);
    *v = x->valuedouble;
    return DPT_OK;
}

static dpt_status get_count(const cJSON *o, const char *where, uint64_t *c) {
    double v;
    DPT_TRY(get_num(o, "count", where, &v));
    DPT_CHECK(v >= 1 && v <= MAX_COUNT && v == floor(v), DPT_EFORMAT,
              "%s: \"count\" must be an integer >= 1, got %g", where, v);
    *c = (uint64_t)v;
    return DPT_OK;
}

static dpt_status get_label(const cJSON *o, const char *where, const char **label) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "label");
    *label = NULL;
    if (!x) return DPT_OK;
    DPT_CHECK(cJSON_IsString(x) && x->valuestring, DPT_EFORMAT, "%s: \"label\" must be a string", where);
    *label = x->valuestring;
    return DPT_OK;
}

static dpt_status get_array(const cJSON *o, const char *key, const char *where, double **out, size_t *n) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    DPT_CHECK(cJSON_IsArray(a), DPT_EFORMAT, "%s: \"%s\" must be an array of numbers", where, key);
    int m = cJSON_GetArraySize(a);
    DPT_CHECK(m >= 1, DPT_EFORMAT, "%s: \"%s\" is empty", where, key);
    double *v = calloc((size_t)m, sizeof(double));
    DPT_CHECK(v != NULL, DPT_ENOMEM, "ledger: out of memory");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
            free(v);
            return dpt_set_error(DPT_EFORMAT, "%s: \"%s\"[%d] must be a finite number", where, key, i);
        }
        v[i++] = x->valuedouble;
    }
    *out = v;
    *n = (size_t)m;
    return DPT_OK;
}

static dpt_status parse_event(dpt_ledger *l, const cJSON *o, size_t idx) {
    char where[48];
    snprintf(where, sizeof where, "event %zu", idx);
    DPT_CHECK(cJSON_IsObject(o), DPT_EFORMAT, "%s: must be an object", where);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    DPT_CHECK(cJSON_IsString(t) && t->valuestring, DPT_EFORMAT, "%s: missing string field \"type\"", where);
    uint64_t count = 0;
    const char *label = NULL;
    DPT_TRY(get_count(o, where, &count));
    DPT_TRY(get_label(o, where, &label));
    size_t before = l->n_ev;
    dpt_status st;
    if (!strcmp(t->valuestring, "sgm")) {
        double q, s;
        DPT_TRY(get_num(o, "q", where, &q));
        DPT_TRY(get_num(o, "sigma", where, &s));
        DPT_CHECK(q > 0 && q <= 1, DPT_EFORMAT, "%s: q must be in (0, 1], got %g", where, q);
        DPT_CHECK(s > 0, DPT_EFORMAT, "%s: sigma must be > 0, got %g", where, s);
        DPT_CHECK(label == NULL, DPT_EFORMAT, "%s: sgm events carry no label", where);
        ledger_event e = {.kind = EV_SGM, .count = count, .q = q, .sigma = s};
        st = push_event(l, &e);
    } else if (!strcmp(t->valuestring, "gaussian")) {
        double sens, s;
        DPT_TRY(get_num(o, "sensitivity", where, &sens));
        DPT_TRY(get_num(o, "sigma", where, &s));
        DPT_CHECK(sens > 0, DPT_EFORMAT, "%s: sensitivity must be > 0, got %g", where, sens);
        DPT_CHECK(s > 0, DPT_EFORMAT, "%s: sigma must be > 0, got %g", where, s);
        ledger_event e = {.kind = EV_GAUSSIAN, .count = count, .sensitivity = sens, .sigma = s};
        DPT_TRY(set_label(&e, label));
        st = push_event(l, &e);
    } else if (!strcmp(t->valuestring, "eps_delta")) {
        double ep, de;
        DPT_TRY(get_num(o, "eps", where, &ep));
        DPT_TRY(get_num(o, "delta", where, &de));
        DPT_CHECK(ep >= 0, DPT_EFORMAT, "%s: eps must be >= 0, got %g", where, ep);
        DPT_CHECK(de >= 0 && de < 1, DPT_EFORMAT, "%s: delta must be in [0, 1), got %g", where, de);
        ledger_event e = {.kind = EV_EPS_DELTA, .count = count, .eps = ep, .delta = de};
        DPT_TRY(set_label(&e, label));
        st = push_event(l, &e);
    } else if (!strcmp(t->valuestring, "dpulr")) {
        double q, sg, nd, nb;
        DPT_TRY(get_num(o, "q", where, &q));
        DPT_TRY(get_num(o, "sigma", where, &sg));
        DPT_TRY(get_num(o, "n", where, &nd));
        DPT_TRY(get_num(o, "min_batch", where, &nb));
        DPT_CHECK(label == NULL, DPT_EFORMAT, "%s: dpulr events carry no label", where);
        DPT_CHECK(nd >= 2 && nd <= MAX_COUNT && nd == floor(nd) && nb >= 1 && nb == floor(nb) && nb <= nd, DPT_EFORMAT,
                  "%s: n and min_batch must be integers with 1 <= min_batch <= n, n >= 2", where);
        st = dpt_ledger_add_dpulr(l, q, sg, (uint64_t)nd, (uint64_t)nb, count);
        if (st != DPT_OK) return dpt_error_context(DPT_EFORMAT, "%s", where);
    } else if (!strcmp(t->valuestring, "sgm_dgauss")) {
        double q, sg, co, mu, tv;
        DPT_TRY(get_num(o, "q", where, &q));
        DPT_TRY(get_num(o, "sigma", where, &sg));
        DPT_TRY(get_num(o, "coords", where, &co));
        DPT_TRY(get_num(o, "mu", where, &mu));
        DPT_TRY(get_num(o, "tv", where, &tv));
        DPT_CHECK(label == NULL, DPT_EFORMAT, "%s: sgm_dgauss events carry no label", where);
        DPT_CHECK(co >= 1 && co <= MAX_COUNT && co == floor(co), DPT_EFORMAT, "%s: coords must be an integer >= 1",
                  where);
        st = dpt_ledger_add_sgm_dgauss(l, q, sg, (uint64_t)co, mu, tv, count);
        if (st != DPT_OK) return dpt_error_context(DPT_EFORMAT, "%s", where);
    } else if (!strcmp(t->valuestring, "rdp_curve")) {
        ledger_event e = {.kind = EV_RDP_CURVE, .count = count};
        size_t n2 = 0;
        st = get_array(o, "orders", where, &e.orders, &e.n);
        if (st == DPT_OK) st = get_array(o, "rdp", where, &e.rdp, &n2);
        if (st == DPT_OK && n2 != e.n)
            st = dpt_set_error(DPT_EFORMAT, "%s: \"orders\" has %zu entries, \"rdp\" %zu", where, e.n, n2);
        if (st == DPT_OK) {
            st = check_curve(e.orders, e.rdp, e.n);
            if (st != DPT_OK) st = dpt_error_context(DPT_EFORMAT, "%s", where);
        }
        if (st == DPT_OK) st = set_label(&e, label);
        if (st != DPT_OK) {
            event_clear(&e);
            return st;
        }
        st = push_event(l, &e);
    } else {
        return dpt_set_error(DPT_EFORMAT, "%s: unknown type \"%s\"", where, t->valuestring);
    }
    DPT_TRY(st);
    /* Stored ledgers are already merged: a mergeable neighbour means the file was edited. */
    DPT_CHECK(l->n_ev == before + 1, DPT_EFORMAT, "%s: identical to the previous event (not merged)", where);
    return DPT_OK;
}

static dpt_status from_cjson(const cJSON *root, dpt_ledger *l, char sum_out[72]) {
    DPT_CHECK(cJSON_IsObject(root), DPT_EFORMAT, "not a JSON object");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    DPT_CHECK(cJSON_IsString(f) && !strcmp(f->valuestring, LEDGER_FORMAT), DPT_EFORMAT,
              "not a dptrain ledger (\"format\" must be \"%s\")", LEDGER_FORMAT);
    double ver;
    DPT_TRY(get_num(root, "version", "ledger", &ver));
    DPT_CHECK(ver == LEDGER_VERSION, DPT_EFORMAT, "unsupported ledger version %g (this build reads %d)",
              ver, LEDGER_VERSION);
    const cJSON *adj = cJSON_GetObjectItemCaseSensitive(root, "adjacency");
    DPT_CHECK(cJSON_IsString(adj) && !strcmp(adj->valuestring, "add-remove"), DPT_EFORMAT,
              "\"adjacency\" must be \"add-remove\"");
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    DPT_CHECK(cJSON_IsObject(meta), DPT_EFORMAT, "missing object \"meta\"");
    const cJSON *m;
    cJSON_ArrayForEach(m, meta) {
        DPT_CHECK(cJSON_IsString(m) && m->string && *m->string, DPT_EFORMAT,
                  "meta \"%s\" must be a string", m->string ? m->string : "");
        DPT_CHECK(dpt_ledger_get_meta(l, m->string) == NULL, DPT_EFORMAT, "duplicate meta key \"%s\"", m->string);
        DPT_TRY(dpt_ledger_set_meta(l, m->string, m->valuestring));
    }
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "events");
    DPT_CHECK(cJSON_IsArray(evs), DPT_EFORMAT, "missing array \"events\"");
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) DPT_TRY(parse_event(l, e, i++));
    double steps;
    DPT_TRY(get_num(root, "total_sgm_steps", "ledger", &steps));
    DPT_CHECK(steps == (double)dpt_ledger_steps(l), DPT_EFORMAT,
              "\"total_sgm_steps\" is %.17g but the events add up to %llu", steps,
              (unsigned long long)dpt_ledger_steps(l));
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "checksum");
    DPT_CHECK(cJSON_IsString(c) && c->valuestring, DPT_EFORMAT, "missing string field \"checksum\"");
    DPT_CHECK(strlen(c->valuestring) < 72, DPT_EFORMAT, "malformed \"checksum\"");
    strcpy(sum_out, c->valuestring);
    return DPT_OK;
}

dpt_status dpt_ledger_from_json(const char *json, dpt_ledger **out) {
    DPT_CHECK(json && out, DPT_EINVAL, "ledger from_json: NULL argument");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        size_t off = end ? (size_t)(end - json) : 0;
        return dpt_set_error(DPT_EFORMAT, "invalid or truncated JSON near byte %zu", off);
    }
    dpt_ledger *l = NULL;
    dpt_status st = dpt_ledger_new(&l);
    char stored[72] = {0}, actual[72];
    if (st == DPT_OK) st = from_cjson(root, l, stored);
    cJSON_Delete(root);
    if (st == DPT_OK) {
        /* Re-serialize what was parsed: any edit to the content changes the checksum. */
        cJSON *canon = NULL;
        st = canonical(l, &canon, actual);
        cJSON_Delete(canon);
        if (st == DPT_OK && strcmp(stored, actual) != 0)
            st = dpt_set_error(DPT_EFORMAT, "checksum mismatch (file edited or corrupted): stored %s, "
                               "content hashes to %s", stored, actual);
    }
    if (st != DPT_OK) {
        dpt_ledger_free(l);
        return st;
    }
    *out = l;
    return DPT_OK;
}

dpt_status dpt_ledger_save(const dpt_ledger *l, const char *path) {
    DPT_CHECK(l && path, DPT_EINVAL, "ledger save: NULL argument");
    char *txt = NULL;
    DPT_TRY(dpt_ledger_to_json(l, &txt));
    dpt_status st = dpt_write_file_atomic(path, txt, strlen(txt));
    free(txt);
    if (st != DPT_OK) return dpt_error_context(st, "saving ledger %s", path);
    return DPT_OK;
}

dpt_status dpt_ledger_load(const char *path, dpt_ledger **out) {
    DPT_CHECK(path && out, DPT_EINVAL, "ledger load: NULL argument");
    uint8_t *data = NULL;
    size_t n = 0;
    /* a ledger of a million events is ~100 MB of JSON; a device or a bigger file is not one */
    dpt_status st = dpt_read_file_max(path, (size_t)256 << 20, &data, &n);
    if (st != DPT_OK) return dpt_error_context(st, "ledger"); /* the message names the path */
    if (strlen((const char *)data) != n) {
        dpt_free(data);
        return dpt_set_error(DPT_EFORMAT, "ledger %s: contains a NUL byte", path);
    }
    st = dpt_ledger_from_json((const char *)data, out);
    dpt_free(data);
    if (st != DPT_OK) return dpt_error_context(st, "ledger %s", path);
    return DPT_OK;
}
