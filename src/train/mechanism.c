/* The sampled Gaussian mechanism over the caller's per-example gradients (mechanism.h):
 * DP-SGD's privacy-critical half (Abadi et al. 2016, Algorithm 1 with Poisson sampling)
 * without a model. It composes the library's pieces: the Poisson sampler (data), the
 * Gaussian or secure lattice noise (privacy), the ledger and the calibration (accounting),
 * and records each step exactly as DP-SGD does (dpt_sgm_ledger_events, common.c).
 * Letter key: n = examples, P = dim (floats per gradient), B = batch, C = clip norm. */
#include <dptrain/mechanism.h>
#include <dptrain/data.h>
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mechanism_internal.h"
#include "train_internal.h"

#define SGM_ALGORITHM "dpt_sgm" /* the ledger's "algorithm" metadata */
/* Steps are counted in uint64 and published as JSON numbers (doubles): at most 2^53. */
#define SGM_MAX_STEPS 9007199254740992ull
/* Coordinates per block of the parallel sum (each block sums its rows in order). */
#define SGM_SUM_BLOCK 1024
/* Clipping factors per pass of the clipped sum: rows are taken SGM_FAC_MAX / G at a time
 * (one at least), so the handle's buffers do not grow with the batch (virtual batches). */
#define SGM_FAC_MAX 4096

struct dpt_sgm {
    dpt_sgm_config cfg;   /* a copy; cfg.ledger_path points to path */
    char *path;           /* owned copy of ledger_path, or NULL */
    int lock_fd;          /* flock on path + ".lock" for the handle's lifetime (-1: none); the
                             file holds the ledger's id and the most steps it ever recorded */
    dpt_gauss_release rel; /* sigma in use (given or calibrated), the one the ledger records
                              (secure: the effective multiplier), C, 1 / (q n): the release
                              and its event, as DP-SGD's */
    dpt_sampler *sampler; /* DPT_SAMPLER_POISSON, stream DPT_STREAM_DATA */
    dpt_rng noise;        /* DPT_STREAM_NOISE */
    int noise_live;
    dpt_ledger *ledger;
    uint64_t steps;       /* steps in the ledger (a resumed file's included) */
    uint32_t *idx;        /* [n] the sampler's output (the secure sampler writes past the count) */
    size_t b;             /* size of the pending batch */
    int pending;          /* 1: sampled and recorded, not yet released */
    size_t cap;           /* dpt_sgm_batch_cap */
    size_t G;             /* clipping groups of a row: 1 (flat) or cfg.n_layers (per layer) */
    size_t *lofs;         /* [G + 1] offsets of the groups in a row: {0, P} when flat */
    double C_l;           /* each group's bound: C (flat), C / sqrt(G) (per layer) */
    size_t chunk;         /* rows per pass of the clipped sum: max(1, SGM_FAC_MAX / G) */
    double *fac;          /* [chunk, G] clipping factors of one pass of rows */
    double *sum;          /* [P] the clipped sum (virtual batches: of the rows so far) */
    size_t acc;           /* rows of the pending batch accumulated into sum */
    int acc_live;         /* 1: dpt_sgm_accumulate has started on the pending batch */
    size_t scratch_bytes; /* bytes of the buffers above (dpt_sgm_scratch_bytes) */
    float *noisy;         /* [P] the secure mechanism's working copy (out stays untouched on error) */
    int adaptive;         /* cfg.adaptive_quantile > 0 */
    dpt_adaclip ada;      /* C_t (fixed clipping: the config's C) and the quantile settings */
    double cnt;           /* adaptive: the pending batch's centred count sum_i (b_i - 1/2) so far */
    int budget_known;     /* budget_end computed (at the first sample) */
    uint64_t budget_end;  /* steps the target_epsilon allows in all */
};

/* ==== Configuration ==== */

dpt_sgm_config dpt_sgm_config_defaults(void) {
    dpt_sgm_config c;
    memset(&c, 0, sizeof c);
    c.clip = 1.0;
    c.delta = 1e-5;
    c.seed = 0; /* from the OS */
    c.secure = 1; /* the lattice mechanism and OS-keyed streams: a release is the noisy sum itself,
                   * and a floating-point Gaussian sampler's artefacts give a member away in it */
    c.secure_sampler = DPT_DGAUSS_TABLE;
    c.adaptive_lr = 0.2;
    return c;
}

static dpt_status check_config(const dpt_sgm_config *c) {
    DPT_CHECK(c->n >= 1 && c->n <= UINT32_MAX, DPT_EINVAL,
              "dpt_sgm_config.n: the dataset size must be in [1, 2^32 - 1], got %zu", c->n);
    DPT_CHECK(c->dim >= 1, DPT_EINVAL, "dpt_sgm_config.dim: the gradient length must be >= 1, got 0");
    DPT_CHECK(c->sample_rate > 0 && c->sample_rate <= 1, DPT_EINVAL,
              "dpt_sgm_config.sample_rate: the Poisson rate q must be in (0, 1], got %g", c->sample_rate);
    DPT_CHECK(isfinite(c->sigma) && c->sigma >= 0, DPT_EINVAL,
              "dpt_sgm_config.sigma: the noise multiplier must be finite and > 0 (or 0 to calibrate it), got %g",
              c->sigma);
    DPT_CHECK(isfinite(c->target_epsilon) && c->target_epsilon >= 0, DPT_EINVAL,
              "dpt_sgm_config.target_epsilon must be finite and >= 0 (0: no budget), got %g", c->target_epsilon);
    /* sigma = 0 would release the clipped sum itself: no accountant gives it a finite epsilon */
    DPT_CHECK(c->sigma > 0 || (c->target_epsilon > 0 && c->steps > 0), DPT_EINVAL,
              "dpt_sgm_config.sigma: give the noise multiplier (> 0), or target_epsilon and steps to calibrate it "
              "(target_epsilon %g, steps %" PRIu64 ")", c->target_epsilon, c->steps);
    DPT_CHECK(c->steps <= SGM_MAX_STEPS, DPT_EINVAL, "dpt_sgm_config.steps: at most 2^53, got %" PRIu64, c->steps);
    DPT_CHECK(isfinite(c->clip) && c->clip > 0, DPT_EINVAL,
              "dpt_sgm_config.clip: the clipping norm C must be > 0, got %g", c->clip);
    DPT_CHECK(c->delta > 0 && c->delta < 1, DPT_EINVAL, "dpt_sgm_config.delta must be in (0, 1), got %g", c->delta);
    DPT_CHECK(c->force || c->delta < 1.0 / (double)c->n, DPT_EINVAL,
              "dpt_sgm_config.delta %g >= 1/n = %g: such a delta allows publishing a whole example; lower it, or set "
              "dpt_sgm_config.force", c->delta, 1.0 / (double)c->n);
    DPT_CHECK(c->secure_sampler == DPT_DGAUSS_TABLE || c->secure_sampler == DPT_DGAUSS_CKS, DPT_EINVAL,
              "dpt_sgm_config.secure_sampler: unknown discrete Gaussian sampler %d", (int)c->secure_sampler);
    DPT_CHECK(isfinite(c->adaptive_quantile) && c->adaptive_quantile >= 0 && c->adaptive_quantile < 1, DPT_EINVAL,
              "dpt_sgm_config.adaptive_quantile: the target quantile must be in (0, 1), or 0 for a fixed clip; got %g",
              c->adaptive_quantile);
    if (c->adaptive_quantile > 0) {
        DPT_TRY(dpt_adaclip_check(c->adaptive_quantile, c->adaptive_lr, c->adaptive_sigma_b,
                                  "dpt_sgm_config.adaptive_"));
        DPT_CHECK(!c->secure, DPT_ENOTSUP, "dpt_sgm_config.adaptive_quantile: adaptive clipping is not available with "
                  "secure (lattice) noise, the default: set secure = 0 for it (floating-point noise, labelled in the "
                  "ledger)");
    }
    DPT_CHECK(!c->secure || !c->seed, DPT_EINVAL,
              "dpt_sgm_config.seed: the secure mode (the default) keys its streams from the OS and uses no seed; set "
              "secure = 0 for seeded, reproducible streams (floating-point noise: labelled in the ledger)");
    DPT_CHECK(!c->resume || (c->ledger_path && c->ledger_path[0]), DPT_EINVAL,
              "dpt_sgm_config.resume needs dpt_sgm_config.ledger_path (the ledger to continue)");
    if (c->clip_mode == DPT_CLIP_FLAT) {
        DPT_CHECK(!c->layer_sizes && c->n_layers == 0, DPT_EINVAL,
                  "dpt_sgm_config.layer_sizes is given (n_layers %zu) but clip_mode is DPT_CLIP_FLAT: set clip_mode "
                  "DPT_CLIP_PER_LAYER to clip each layer, or leave layer_sizes NULL and n_layers 0", c->n_layers);
        return DPT_OK;
    }
    DPT_CHECK(c->clip_mode == DPT_CLIP_PER_LAYER, DPT_EINVAL, "dpt_sgm_config.clip_mode: unknown mode %d",
              (int)c->clip_mode);
    DPT_CHECK(c->n_layers >= 1 && c->layer_sizes, DPT_EINVAL,
              "dpt_sgm_config.layer_sizes: DPT_CLIP_PER_LAYER needs the values per layer (layer_sizes, n_layers >= 1)");
    size_t total = 0;
    for (size_t l = 0; l < c->n_layers; l++) {
        DPT_CHECK(c->layer_sizes[l] >= 1, DPT_EINVAL, "dpt_sgm_config.layer_sizes[%zu] is 0: every layer holds a "
                  "value", l);
        DPT_CHECK(c->layer_sizes[l] <= c->dim - total, DPT_EINVAL, "dpt_sgm_config.layer_sizes: layers 0..%zu hold "
                  "more than dim = %zu values", l, c->dim);
        total += c->layer_sizes[l];
    }
    DPT_CHECK(total == c->dim, DPT_EINVAL, "dpt_sgm_config.layer_sizes: the %zu layers hold %zu values, dim is %zu",
              c->n_layers, total, c->dim);
    return DPT_OK;
}

/* ==== The ledger ==== */

/* The settings every recorded event depends on, as the ledger's metadata holds them. */
typedef struct {
    char n[32], dim[32], q[32], sigma[32], clip[32], secure[32];
} sgm_meta;
static const char *const META_KEYS[] = {"n", "dim", "q", "sigma", "clip", "secure"};

static void meta_values(const dpt_sgm *m, sgm_meta *v) {
    snprintf(v->n, sizeof v->n, "%zu", m->cfg.n);
    snprintf(v->dim, sizeof v->dim, "%zu", m->cfg.dim);
    snprintf(v->q, sizeof v->q, "%.17g", m->cfg.sample_rate);
    snprintf(v->sigma, sizeof v->sigma, "%.17g", m->rel.sigma_acct); /* as the trainer: the accounted one */
    snprintf(v->clip, sizeof v->clip, "%.17g", m->cfg.clip);
    snprintf(v->secure, sizeof v->secure, "%s", !m->cfg.secure ? "0"
             : m->cfg.secure_sampler == DPT_DGAUSS_TABLE ? "table" : "cks");
}

static const char *meta_field(const sgm_meta *v, size_t k) {
    const char *f[] = {v->n, v->dim, v->q, v->sigma, v->clip, v->secure};
    return f[k];
}

/* The adaptive clip's settings as the ledger holds them ("adaptive"; absent: fixed clip):
 * what its SGM(q, sigma) events cover besides the gradient (docs/dpsgd.md) */
static void adaptive_meta(const dpt_sgm *m, char *buf, size_t n) {
    snprintf(buf, n, "quantile %.17g lr %.17g sigma_b %.17g (Andrew et al. 2021: each event is the joint release of "
             "the gradient sum and the centred unclipped count)", m->ada.quantile, m->ada.lr, m->ada.sigma_b);
}

static dpt_status ledger_fresh(dpt_sgm *m) {
    DPT_TRY(dpt_ledger_new(&m->ledger));
    sgm_meta v;
    meta_values(m, &v);
    DPT_TRY(dpt_ledger_set_meta(m->ledger, "algorithm", SGM_ALGORITHM));
    DPT_TRY(dpt_ledger_set_meta(m->ledger, "sampler", "poisson"));
    for (size_t k = 0; k < sizeof META_KEYS / sizeof *META_KEYS; k++)
        DPT_TRY(dpt_ledger_set_meta(m->ledger, META_KEYS[k], meta_field(&v, k)));
    char s[33];
    snprintf(s, sizeof s, "%.17g", m->rel.sigma);
    DPT_TRY(dpt_ledger_set_meta(m->ledger, "noise_multiplier", s));
    if (m->adaptive) {
        char a[320];
        adaptive_meta(m, a, sizeof a);
        DPT_TRY(dpt_ledger_set_meta(m->ledger, "adaptive", a));
    }
    /* a random id: the lock file's high-water mark names it (rollback detection) */
    DPT_TRY(dpt_run_id_new(s));
    return dpt_ledger_set_meta(m->ledger, "ledger_id", s);
}

/* Where the streams' seed came from: "os" (dpt_sgm_config.seed 0, a new one at every open)
 * or "caller" (whoever knows it can regenerate the batches and the noise; two handles
 * resumed from copies of one ledger file draw the same ones). Set at every open. */
static dpt_status ledger_seed_meta(dpt_sgm *m) {
    /* and a delta >= 1/n accepted with force: labelled wherever the epsilon goes (dpt_ledger_label) */
    if (m->cfg.delta >= 1.0 / (double)m->cfg.n) {
        char d[32];
        snprintf(d, sizeof d, "%.17g", m->cfg.delta);
        DPT_TRY(dpt_ledger_set_meta(m->ledger, "delta_forced", d));
    }
    /* floating-point Gaussian noise (secure = 0): its sampler's artefacts can give a member
     * away in a single release (Mironov 2012), which no accountant covers: labelled wherever
     * the epsilon goes (dpt_ledger_label) */
    if (!m->cfg.secure) DPT_TRY(dpt_ledger_set_meta(m->ledger, "noise_float", "1"));
    return dpt_ledger_set_meta(m->ledger, "seed_source", m->cfg.secure || !m->cfg.seed ? "os" : "caller");
}

/* ==== Rollback detection ====
 * The lock file beside the ledger ("PATH.lock") records "dpt_sgm-ledger <ledger_id>
 * <steps>\n" after every step: the most steps the ledger at PATH ever recorded. A resume
 * that finds a ledger with the same id but fewer steps (an older copy put back) is
 * refused: it would report a smaller epsilon than was spent. A copy at another path has
 * no such record; with the default seed its streams are new at every open, so it repeats
 * no batch and no noise, but its epsilon counts only its own steps (docs/dpsgd.md). */
#define HWM_MAGIC "dpt_sgm-ledger "

static dpt_status hwm_write(const dpt_sgm *m) {
    if (m->lock_fd < 0) return DPT_OK;
    const char *id = dpt_ledger_get_meta(m->ledger, "ledger_id");
    if (!id) return DPT_OK; /* a ledger of an older dptrain: nothing to name */
    char line[128];
    int n = snprintf(line, sizeof line, HWM_MAGIC "%s %" PRIu64 "\n", id, m->steps);
    DPT_CHECK(n > 0 && (size_t)n < sizeof line, DPT_EINVAL, "dpt_sgm: ledger_id is too long");
    DPT_CHECK(ftruncate(m->lock_fd, 0) == 0 && pwrite(m->lock_fd, line, (size_t)n, 0) == n, DPT_EIO,
              "dpt_sgm_config.ledger_path %s: cannot write its lock file: %s", m->path, strerror(errno));
    return DPT_OK;
}

static dpt_status hwm_check(const dpt_sgm *m) {
    const char *id = dpt_ledger_get_meta(m->ledger, "ledger_id");
    char buf[128] = "";
    ssize_t r = pread(m->lock_fd, buf, sizeof buf - 1, 0);
    if (!id || r <= 0) return DPT_OK;
    buf[r] = 0;
    char rec_id[80];
    unsigned long long most = 0;
    if (sscanf(buf, HWM_MAGIC "%79s %llu", rec_id, &most) != 2 || strcmp(rec_id, id)) return DPT_OK;
    DPT_CHECK(most <= m->steps, DPT_EMISMATCH,
              "dpt_sgm_config.ledger_path %s records %" PRIu64 " steps, but this ledger recorded %llu before (its "
              "lock file %s.lock says so): an older copy was put back. Its epsilon would leave out steps that were "
              "spent; restore the newest ledger, or start a new one at another path", m->path, m->steps, most,
              m->path);
    return DPT_OK;
}

/* Temporaries of the ledger's atomic writes (".NAME.tmp-XXXXXX" beside it) that a process
 * killed mid-write left: with the lock held no write of this ledger is under way. */
static void remove_stale_temps(const char *path) {
    char *d = strdup(path), *b = strdup(path);
    if (d && b) {
        const char *dir = dirname(d), *base = basename(b);
        char prefix[4200];
        int w = snprintf(prefix, sizeof prefix, ".%s.tmp-", base);
        DIR *dh = w > 0 && (size_t)w < sizeof prefix ? opendir(dir) : NULL;
        struct dirent *e;
        while (dh && (e = readdir(dh))) {
            if (strncmp(e->d_name, prefix, (size_t)w) || strlen(e->d_name) != (size_t)w + 6) continue;
            char full[8400];
            if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) < (int)sizeof full) (void)unlink(full);
        }
        if (dh) closedir(dh);
    }
    free(d);
    free(b);
}

/* resume: the file's ledger, refused unless its events are of this mechanism's settings */
static dpt_status ledger_resume(dpt_sgm *m) {
    DPT_TRY(dpt_error_context(dpt_ledger_load(m->path, &m->ledger), "dpt_sgm_config.ledger_path (resume)"));
    const char *algo = dpt_ledger_get_meta(m->ledger, "algorithm");
    DPT_CHECK(algo && !strcmp(algo, SGM_ALGORITHM), DPT_EMISMATCH,
              "dpt_sgm_config.ledger_path %s: not the ledger of a dpt_sgm (its algorithm is %s), cannot resume it",
              m->path, algo ? algo : "not recorded");
    sgm_meta v;
    meta_values(m, &v);
    char msg[768] = "";
    size_t len = 0;
    for (size_t k = 0; k < sizeof META_KEYS / sizeof *META_KEYS; k++) {
        const char *was = dpt_ledger_get_meta(m->ledger, META_KEYS[k]), *now = meta_field(&v, k);
        if (was && !strcmp(was, now)) continue;
        int w = snprintf(msg + len, sizeof msg - len, "%s%s was %s, now %s", len ? "; " : "", META_KEYS[k],
                         was ? was : "not recorded", now);
        if (w > 0) len = len + (size_t)w < sizeof msg ? len + (size_t)w : sizeof msg - 1;
    }
    /* adaptive clipping: the same settings, and C_t continues from the file */
    char a[320] = "";
    if (m->adaptive) adaptive_meta(m, a, sizeof a);
    const char *was = dpt_ledger_get_meta(m->ledger, "adaptive");
    if (strcmp(was ? was : "", a)) {
        int w = snprintf(msg + len, sizeof msg - len, "%sadaptive clipping was %s, now %s", len ? "; " : "",
                         was ? was : "off", a[0] ? a : "off");
        if (w > 0) len = len + (size_t)w < sizeof msg ? len + (size_t)w : sizeof msg - 1;
    }
    DPT_CHECK(!msg[0], DPT_EMISMATCH, "dpt_sgm_config.resume: the ledger %s was written by other settings: %s",
              m->path, msg);
    m->steps = dpt_ledger_steps(m->ledger);
    const char *cur = dpt_ledger_get_meta(m->ledger, "clip_current");
    if (m->adaptive && cur) {
        char *end = NULL;
        const double C = strtod(cur, &end);
        DPT_CHECK(end != cur && !*end && isfinite(C) && C > 0, DPT_EFORMAT,
                  "dpt_sgm_config.ledger_path %s: clip_current (the adaptive clip) is not a positive number: %s",
                  m->path, cur);
        m->ada.C = C;
    }
    return DPT_OK;
}

/* epsilon (the default accountant: PLD, accounting.h) of the ledger plus `more` steps of
 * this mechanism: what its budget stops at */
static dpt_status eps_after(const void *ctx, uint64_t more, double *eps) {
    const dpt_sgm *m = ctx;
    if (!more) return dpt_ledger_epsilon(m->ledger, m->cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps);
    dpt_ledger *l = NULL;
    DPT_TRY(dpt_ledger_copy(m->ledger, &l));
    dpt_status s = dpt_gauss_release_record(&m->rel, l, more);
    if (s == DPT_OK) s = dpt_ledger_epsilon(l, m->cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, eps);
    dpt_ledger_free(l);
    return s;
}

/* The total steps target_epsilon allows (the trainer's budget search; the events added
 * later are the same ones, so it stays valid). */
static dpt_status budget_compute(dpt_sgm *m) {
    uint64_t left = 0;
    DPT_TRY(dpt_budget_steps_left(eps_after, m, m->cfg.target_epsilon, SGM_MAX_STEPS - m->steps, &left));
    m->budget_end = m->steps + left;
    m->budget_known = 1;
    return DPT_OK;
}

/* ==== Construction ==== */

static int path_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* sigma for `steps` steps to reach target_epsilon (the secure mode: the sigma whose
 * effective multiplier reaches the calibrated one) */
static dpt_status calibrate(const dpt_sgm_config *c, double *sigma) {
    double acct;
    DPT_TRY(dpt_error_context(dpt_calibrate_sigma(c->sample_rate, c->steps, c->delta, c->target_epsilon,
                                                  DPT_ACCT_DEFAULT, DPT_CONV_BALLE, 1e-4, &acct),
                              "dpt_sgm_config.target_epsilon"));
    if (!c->secure) {
        *sigma = acct;
        return DPT_OK;
    }
    return dpt_error_context(dpt_privacy_secure_sigma_for(acct, c->dim, sigma), "dpt_sgm_config.target_epsilon");
}

size_t dpt_sgm_batch_cap(const dpt_sgm *m) {
    return m ? m->cap : 0;
}


/* One dpt_sgm per ledger file at a time: an exclusive flock on path + ".lock", held until
 * dpt_sgm_free. Two handles on one ledger (two resumes of it, or two fresh ones racing to
 * create it) would each count from the same step: the file would undercount, and seeded
 * streams keyed by that step would repeat a batch and its noise on other gradients. */
static dpt_status lock_ledger(dpt_sgm *m) {
    char lp[4200];
    int w = snprintf(lp, sizeof lp, "%s.lock", m->path);
    DPT_CHECK(w > 0 && (size_t)w < sizeof lp, DPT_EINVAL, "dpt_sgm_config.ledger_path is too long");
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    DPT_CHECK(fd >= 0, DPT_EIO, "dpt_sgm_config.ledger_path %s: cannot open its lock file %s: %s", m->path, lp,
              strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return dpt_set_error(DPT_EBUSY, "dpt_sgm_config.ledger_path %s is in use by another dpt_sgm (its lock %s "
                                 "is held): one mechanism per ledger at a time", m->path, lp);
        return dpt_set_error(DPT_EIO, "dpt_sgm_config.ledger_path %s: cannot lock %s: %s", m->path, lp, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dpt_set_error(DPT_EIO, "dpt_sgm_config.ledger_path %s: its lock file %s is not a regular file", m->path,
                             lp);
    }
    m->lock_fd = fd;
    remove_stale_temps(m->path);
    return DPT_OK;
}

/* dpt_alloc, counted in m->scratch_bytes (what the handle holds besides the ledger) */
static void *sgm_alloc(dpt_sgm *m, size_t n, size_t elem, const char *what) {
    void *p = dpt_alloc(n, elem, what);
    if (p) m->scratch_bytes += n * elem;
    return p;
}

/* The clipping groups of a row: flat, one group of P values bounded by C; per layer, the
 * config's layers, each bounded by dpt_privacy_split_equal's C / sqrt(G) (as DP-SGD's
 * DPT_CLIP_PER_LAYER). */
static dpt_status clip_groups_init(dpt_sgm *m) {
    const int per_layer = m->cfg.clip_mode == DPT_CLIP_PER_LAYER;
    m->G = per_layer ? m->cfg.n_layers : 1;
    m->lofs = sgm_alloc(m, m->G + 1, sizeof *m->lofs, "dpt_sgm layer offsets");
    if (!m->lofs) return DPT_ENOMEM;
    for (size_t l = 0; l < m->G; l++) m->lofs[l + 1] = m->lofs[l] + (per_layer ? m->cfg.layer_sizes[l] : m->cfg.dim);
    m->cfg.layer_sizes = NULL; /* the caller's array: only lofs is kept */
    m->C_l = m->cfg.clip;
    if (per_layer) {
        double *C_l = dpt_alloc(m->G, sizeof *C_l, "dpt_sgm per-layer norms");
        if (!C_l) return DPT_ENOMEM;
        dpt_status s = dpt_privacy_split_equal(m->cfg.clip, m->G, C_l);
        m->C_l = C_l[0]; /* an equal split: every layer's is C_l[0] */
        dpt_free(C_l);
        DPT_TRY(dpt_error_context(s, "dpt_sgm_config.layer_sizes"));
    }
    m->chunk = m->G < SGM_FAC_MAX ? SGM_FAC_MAX / m->G : 1;
    return DPT_OK;
}

/* The clip of the next release: C_t, each group's bound C_t / sqrt(G) (flat: C_t), and the
 * gradient noise's std sigma_Delta C_t */
static void set_clip(dpt_sgm *m, double C) {
    m->ada.C = C;
    m->C_l = m->G > 1 ? C / sqrt((double)m->G) : C; /* dpt_privacy_split_equal's split */
    dpt_gauss_release_set_clip(&m->rel, C);
}

dpt_status dpt_sgm_new(const dpt_sgm_config *cfg, dpt_sgm **out) {
    DPT_CHECK(out, DPT_EINVAL, "dpt_sgm_new: out is NULL");
    *out = NULL;
    DPT_CHECK(cfg, DPT_EINVAL, "dpt_sgm_new: cfg is NULL");
    DPT_TRY(check_config(cfg));
    dpt_sgm *m = calloc(1, sizeof *m);
    DPT_CHECK(m, DPT_ENOMEM, "dpt_sgm_new: out of memory");
    m->cfg = *cfg;
    m->lock_fd = -1;
    dpt_status s = DPT_OK;
    if (cfg->ledger_path && cfg->ledger_path[0]) {
        m->path = strdup(cfg->ledger_path);
        if (!m->path) {
            s = dpt_set_error(DPT_ENOMEM, "dpt_sgm_new: out of memory");
            goto fail;
        }
        if ((s = lock_ledger(m)) != DPT_OK) goto fail;
    }
    m->cfg.ledger_path = m->path;
    double sigma = cfg->sigma;
    if (!(sigma > 0) && (s = calibrate(cfg, &sigma)) != DPT_OK) goto fail;
    /* divide by the expected batch size q n, not |B|: the batch size is private */
    if ((s = dpt_gauss_release_init(&m->rel, cfg->sample_rate, sigma, cfg->clip,
                                    1.0 / (cfg->sample_rate * (double)cfg->n), cfg->dim, cfg->secure,
                                    cfg->secure_sampler)) != DPT_OK)
        goto fail;
    m->ada.C = cfg->clip;
    m->ada.frac = NAN;
    m->adaptive = cfg->adaptive_quantile > 0;
    if (m->adaptive) {
        /* sigma is the joint release's (the ledger's); the gradient draws sigma_Delta */
        m->ada.quantile = cfg->adaptive_quantile;
        m->ada.lr = cfg->adaptive_lr;
        m->ada.expected = cfg->sample_rate * (double)cfg->n;
        m->ada.sigma_b = cfg->adaptive_sigma_b > 0 ? cfg->adaptive_sigma_b : m->ada.expected / 20;
        if ((s = dpt_gauss_release_adaptive(&m->rel, m->ada.sigma_b, "dpt_sgm_config.adaptive_sigma_b")) != DPT_OK)
            goto fail;
    }
    if (cfg->resume) {
        if ((s = ledger_resume(m)) != DPT_OK) goto fail;
        if ((s = hwm_check(m)) != DPT_OK) goto fail;
        if ((s = ledger_seed_meta(m)) != DPT_OK) goto fail;
    } else {
        if (m->path && path_exists(m->path)) {
            s = dpt_set_error(DPT_EINVAL, "dpt_sgm_config.ledger_path %s exists: set dpt_sgm_config.resume to continue "
                              "its ledger, or choose another path (its record of an earlier run is kept)", m->path);
            goto fail;
        }
        if ((s = ledger_fresh(m)) != DPT_OK) goto fail;
        if ((s = ledger_seed_meta(m)) != DPT_OK) goto fail;
        /* the file exists from the start: an unwritable path fails here, not at step 1 */
        if (m->path && (s = dpt_ledger_save(m->ledger, m->path)) != DPT_OK) goto fail;
        if ((s = hwm_write(m)) != DPT_OK) goto fail;
    }
    /* Streams. Seeded: a resumed session is keyed by (seed, steps so far) through an
     * odd-constant multiple (a bijection of the step count), so it never replays a batch
     * or a noise draw of an earlier session (identical noise on two different gradients
     * would release their difference without noise); a fresh run keys by seed itself. */
    uint64_t base = cfg->seed;
    if (!cfg->secure && base == 0 && (s = dpt_os_random_u64(&base)) != DPT_OK) goto fail; /* 0: from the OS */
    const uint64_t seed = base ^ (m->steps * 0xBF58476D1CE4E5B9ull);
    s = cfg->secure ? dpt_sampler_new_secure(DPT_SAMPLER_POISSON, cfg->n, 0, cfg->sample_rate, 0, &m->sampler)
                    : dpt_sampler_new(DPT_SAMPLER_POISSON, cfg->n, 0, cfg->sample_rate, 0, seed, &m->sampler);
    if (s != DPT_OK) {
        dpt_error_context(s, "dpt_sgm_new");
        goto fail;
    }
    s = cfg->secure ? dpt_rng_init_secure(&m->noise, DPT_STREAM_NOISE) : dpt_rng_init(&m->noise, seed, DPT_STREAM_NOISE);
    if (s != DPT_OK) goto fail;
    m->noise_live = 1;
    m->cap = dpt_poisson_batch_bound(cfg->n, cfg->sample_rate);
    if ((s = clip_groups_init(m)) != DPT_OK) goto fail;
    set_clip(m, m->ada.C); /* a resumed adaptive run: the file's C_t */
    m->idx = sgm_alloc(m, cfg->n, sizeof *m->idx, "dpt_sgm batch indices");
    m->fac = sgm_alloc(m, m->chunk * m->G, sizeof *m->fac, "dpt_sgm clipping factors");
    m->sum = sgm_alloc(m, cfg->dim, sizeof *m->sum, "dpt_sgm clipped sum");
    m->noisy = sgm_alloc(m, cfg->dim, sizeof *m->noisy, "dpt_sgm release");
    if (!m->idx || !m->fac || !m->sum || !m->noisy) {
        s = DPT_ENOMEM;
        goto fail;
    }
    *out = m;
    return DPT_OK;
fail:
    dpt_sgm_free(m);
    return s;
}

void dpt_sgm_free(dpt_sgm *m) {
    if (!m) return;
    dpt_sampler_free(m->sampler);
    if (m->noise_live) dpt_rng_free(&m->noise);
    dpt_ledger_free(m->ledger);
    dpt_free(m->idx);
    dpt_free(m->lofs);
    dpt_free(m->fac);
    dpt_free(m->sum);
    dpt_free(m->noisy);
    free(m->path);
    if (m->lock_fd >= 0) close(m->lock_fd); /* releases the flock; the lock file stays (removing it would race) */
    free(m);
}

/* ==== Sampling ==== */

dpt_status dpt_sgm_sample(dpt_sgm *m, uint32_t *idx, size_t cap, size_t *b) {
    DPT_CHECK(m, DPT_EINVAL, "dpt_sgm_sample: m is NULL");
    DPT_CHECK(idx, DPT_EINVAL, "dpt_sgm_sample: idx is NULL");
    DPT_CHECK(b, DPT_EINVAL, "dpt_sgm_sample: b is NULL");
    DPT_CHECK(cap >= m->cap, DPT_EINVAL,
              "dpt_sgm_sample: cap %zu is too small: a batch needs up to %zu entries (dpt_sgm_batch_cap: q n + 6 "
              "sqrt(q n) + 8, at most n)", cap, m->cap);
    DPT_CHECK(m->steps < SGM_MAX_STEPS, DPT_ERANGE, "dpt_sgm_sample: 2^53 steps recorded, no more can be counted");
    if (m->cfg.target_epsilon > 0) {
        if (!m->budget_known) DPT_TRY(budget_compute(m));
        if (m->steps >= m->budget_end) {
            /* refuse BEFORE drawing: the step whose release would exceed the target */
            double now = 0, next = 0;
            DPT_TRY(eps_after(m, 0, &now));
            DPT_TRY(eps_after(m, 1, &next));
            return dpt_set_error(DPT_EBUDGET, "dpt_sgm_sample: step %" PRIu64 " would raise epsilon from %.4g to %.4g "
                                 "> dpt_sgm_config.target_epsilon %g (delta %g)", m->steps + 1, now, next,
                                 m->cfg.target_epsilon, m->cfg.delta);
        }
    }
    m->pending = 0; /* a batch sampled before and not released is spent: it was recorded */
    m->acc_live = 0; /* and so are the rows accumulated for it */
    m->acc = 0;
    m->cnt = 0;
    if (m->adaptive) {
        /* C_t of this step goes to the file with the step (a resume continues from it) */
        char c[40];
        snprintf(c, sizeof c, "%.17g", m->ada.C);
        DPT_TRY(dpt_ledger_set_meta(m->ledger, "clip_current", c));
    }
    DPT_TRY(dpt_sampler_next(m->sampler, m->idx, &m->b));
    /* The step is in the ledger, and the ledger on disk, before the caller sees the batch:
     * nothing derived from it can exist that the record does not cover. */
    DPT_TRY(dpt_gauss_release_record(&m->rel, m->ledger, 1));
    m->steps++;
    if (m->path) {
        DPT_TRY(dpt_error_context(dpt_ledger_save(m->ledger, m->path), "dpt_sgm_sample"));
        DPT_TRY(dpt_error_context(hwm_write(m), "dpt_sgm_sample"));
    }
    m->pending = 1;
    *b = m->b;
    DPT_CHECK(m->b <= cap, DPT_ERANGE,
              "dpt_sgm_sample: the batch has %zu examples, more than cap %zu (probability below 1e-9): it is recorded "
              "and pending; read it with dpt_sgm_batch into %zu entries", m->b, cap, m->b);
    memcpy(idx, m->idx, m->b * sizeof *idx);
    return DPT_OK;
}

dpt_status dpt_sgm_batch(const dpt_sgm *m, uint32_t *idx, size_t cap, size_t *b) {
    DPT_CHECK(m, DPT_EINVAL, "dpt_sgm_batch: m is NULL");
    DPT_CHECK(b, DPT_EINVAL, "dpt_sgm_batch: b is NULL");
    DPT_CHECK(m->pending, DPT_EINVAL, "dpt_sgm_batch: no batch is pending (call dpt_sgm_sample)");
    *b = m->b;
    DPT_CHECK(idx || m->b == 0, DPT_EINVAL, "dpt_sgm_batch: idx is NULL");
    DPT_CHECK(m->b <= cap, DPT_EINVAL, "dpt_sgm_batch: cap %zu is below the batch's %zu examples", cap, m->b);
    if (m->b) memcpy(idx, m->idx, m->b * sizeof *idx);
    return DPT_OK;
}

/* ==== Clipping and the sum ==== */

/* DPT_ERANGE naming the first row (its position first + i in the batch, not the example:
 * which examples were sampled is secret) with a NaN or infinite value */
static dpt_status check_rows(const dpt_sgm *m, const float *grads, size_t b, size_t first, const char *fn) {
    const size_t P = m->cfg.dim;
    for (size_t i = 0; i < b; i++)
        DPT_CHECK(dpt_all_finite(grads + i * P, P), DPT_ERANGE,
                  "%s: grads row %zu holds a NaN or infinite value (a diverged model? lower the learning rate)", fn,
                  first + i);
    return DPT_OK;
}

/* the group l with lofs[l] <= j < lofs[l + 1] */
static size_t group_of(const dpt_sgm *m, size_t j) {
    size_t lo = 0, hi = m->G; /* lofs[lo] <= j < lofs[hi] */
    while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        if (m->lofs[mid] <= j) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* sum [P] += sum_i clip(g_i) over grads [b, P] (finite rows), in double: clip(g_i) scales
 * each group l of the row (flat: the whole row) by min(1, C_l / ||g_{i,l}||). Each norm is
 * computed in double from the float row: dpt_privacy_clip_factors takes float squared norms,
 * which overflow to inf for rows of norm above ~1.8e19, while every finite row must be
 * clipped, not refused. The factor C_l / ||g_{i,l}|| makes the group's norm C_l to double
 * rounding (the float factors of the trainer reach it to float rounding). Rows are taken
 * `chunk` at a time (the factor buffer): a batch of any size is processed whole, never
 * truncated. The coordinates are split in blocks over threads; each block adds the rows in
 * order, so sum[j] sees the same additions in the same order whatever the thread count,
 * the chunking, or the split of the batch into dpt_sgm_accumulate calls. */
static double clipped_add(const dpt_sgm *m, const float *grads, size_t b, double *sum) {
    const size_t P = m->cfg.dim, G = m->G;
    const size_t *ofs = m->lofs; /* [G + 1] */
    const double C_l = m->C_l, C2 = m->ada.C * m->ada.C;
    double count = 0; /* sum_i (1[||g_i|| <= C_t] - 1/2), ||g_i|| over the whole row */
    const int nt = dpt_threads_resolve(m->cfg.threads);
    const size_t n_blocks = (P + SGM_SUM_BLOCK - 1) / SGM_SUM_BLOCK;
    double *fac = m->fac; /* [chunk, G] */
    for (size_t lo = 0; lo < b; lo += m->chunk) {
        const size_t bc = b - lo < m->chunk ? b - lo : m->chunk;
        const float *g = grads + lo * P; /* [bc, P] */
        double part = 0;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && bc * P > 65536) reduction(+ : part)
        for (size_t i = 0; i < bc; i++) {
            double tot = 0;
            for (size_t l = 0; l < G; l++) {
                const double sq = dpt_sqnorm_double(g + i * P + ofs[l], ofs[l + 1] - ofs[l]);
                const double norm = sqrt(sq);
                fac[i * G + l] = norm > C_l ? C_l / norm : 1.0; /* min(1, C_l / ||g_{i,l}||) */
                tot += sq;
            }
            part += (tot <= C2 ? 1.0 : 0.0) - 0.5; /* integers and halves: exact in any order */
        }
        count += part;
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && n_blocks > 1 && bc * P > 65536)
        for (size_t k = 0; k < n_blocks; k++) {
            const size_t j0 = k * SGM_SUM_BLOCK, j1 = j0 + SGM_SUM_BLOCK < P ? j0 + SGM_SUM_BLOCK : P;
            const size_t l0 = group_of(m, j0);
            for (size_t i = 0; i < bc; i++) {
                const float *row = g + i * P;
                const double *c = fac + i * G;
                for (size_t j = j0, l = l0; j < j1; l++) {
                    const size_t end = ofs[l + 1] < j1 ? ofs[l + 1] : j1;
                    const double cl = c[l];
                    for (; j < end; j++) sum[j] += cl * row[j];
                }
            }
        }
    }
    return count;
}

dpt_status dpt_sgm_clipped_sum_count(const dpt_sgm *m, const float *grads, size_t b, double *sum, double *count) {
    DPT_TRY(check_rows(m, grads, b, 0, "dpt_sgm_release"));
    memset(sum, 0, m->cfg.dim * sizeof *sum);
    *count = clipped_add(m, grads, b, sum);
    return DPT_OK;
}

dpt_status dpt_sgm_clipped_sum(const dpt_sgm *m, const float *grads, size_t b, double *sum) {
    double count;
    return dpt_sgm_clipped_sum_count(m, grads, b, sum, &count);
}

/* The release of the pending batch's sum m->sum (and count m->cnt) into out: the gradient
 * with std sigma C_t (adaptive: sigma_Delta C_t), then the adaptive clip's count with std
 * sigma_b, and C_{t+1} (post-processing). A failure after noise was drawn keeps the batch
 * spent (never released with a second draw). */
static dpt_status release_sum(dpt_sgm *m, float *out) {
    DPT_TRY(dpt_gauss_release_apply_sum(&m->rel, &m->noise, m->sum, m->noisy, m->cfg.threads));
    if (m->adaptive) {
        DPT_TRY(dpt_adaclip_step(&m->ada, &m->noise, m->cnt));
        set_clip(m, m->ada.C);
    }
    memcpy(out, m->noisy, m->cfg.dim * sizeof *out);
    return DPT_OK;
}

size_t dpt_sgm_scratch_bytes(const dpt_sgm *m) {
    return m ? m->scratch_bytes : 0;
}

const double *dpt_sgm_accumulated(const dpt_sgm *m, size_t *rows) {
    *rows = m->acc_live ? m->acc : 0;
    return m->sum;
}

/* ==== Release ==== */

dpt_status dpt_sgm_release(dpt_sgm *m, const float *grads, size_t b, float *out) {
    DPT_CHECK(m, DPT_EINVAL, "dpt_sgm_release: m is NULL");
    DPT_CHECK(out, DPT_EINVAL, "dpt_sgm_release: out is NULL");
    DPT_CHECK(m->pending, DPT_EINVAL,
              "dpt_sgm_release: no batch is pending: call dpt_sgm_sample first (each sampled batch is released once)");
    DPT_CHECK(!m->acc_live, DPT_EINVAL,
              "dpt_sgm_release: %zu rows of this batch were accumulated (dpt_sgm_accumulate): finish it with "
              "dpt_sgm_release_accumulated", m->acc);
    DPT_CHECK(b == m->b, DPT_EINVAL, "dpt_sgm_release: b = %zu, but the sampled batch has %zu examples", b, m->b);
    DPT_CHECK(grads || b == 0, DPT_EINVAL, "dpt_sgm_release: grads is NULL");
    const size_t P = m->cfg.dim;
    /* claimed before any work: a second release of this batch (another thread) is refused
     * even while this one runs; an error gives it back (dpt_sgm is still one thread's at a
     * time: the buffers and the noise stream are not shared safely) */
    m->pending = 0;
    dpt_status st = dpt_sgm_clipped_sum_count(m, grads, b, m->sum, &m->cnt);
    if (st != DPT_OK) {
        m->pending = 1;
        return st;
    }
    (void)P;
    /* (sum + noise) / (q n) (secure: the lattice mechanism of secure DP-SGD on the float sum) */
    return release_sum(m, out);
}

/* ==== Virtual batches ==== */

dpt_status dpt_sgm_accumulate(dpt_sgm *m, const float *grads, size_t rows) {
    DPT_CHECK(m, DPT_EINVAL, "dpt_sgm_accumulate: m is NULL");
    DPT_CHECK(m->pending, DPT_EINVAL,
              "dpt_sgm_accumulate: no batch is pending: call dpt_sgm_sample first (each sampled batch is released "
              "once)");
    const size_t done = m->acc_live ? m->acc : 0;
    DPT_CHECK(rows <= m->b - done, DPT_EINVAL,
              "dpt_sgm_accumulate: %zu more rows would make %zu, but the sampled batch has %zu examples (each "
              "example's gradient is accumulated once); nothing was added", rows, done + rows, m->b);
    DPT_CHECK(grads || rows == 0, DPT_EINVAL, "dpt_sgm_accumulate: grads is NULL");
    DPT_TRY(check_rows(m, grads, rows, done, "dpt_sgm_accumulate")); /* before any addition */
    if (!m->acc_live) {
        memset(m->sum, 0, m->cfg.dim * sizeof *m->sum);
        m->acc = 0;
        m->cnt = 0;
        m->acc_live = 1;
    }
    m->cnt += clipped_add(m, grads, rows, m->sum);
    m->acc += rows;
    return DPT_OK;
}

dpt_status dpt_sgm_release_accumulated(dpt_sgm *m, float *out) {
    DPT_CHECK(m, DPT_EINVAL, "dpt_sgm_release_accumulated: m is NULL");
    DPT_CHECK(out, DPT_EINVAL, "dpt_sgm_release_accumulated: out is NULL");
    DPT_CHECK(m->pending, DPT_EINVAL,
              "dpt_sgm_release_accumulated: no batch is pending: call dpt_sgm_sample first (each sampled batch is "
              "released once)");
    const size_t done = m->acc_live ? m->acc : 0;
    /* the ledger recorded the step of this batch: a sum of fewer or other rows is not it */
    DPT_CHECK(done == m->b, DPT_EINVAL,
              "dpt_sgm_release_accumulated: %zu rows were accumulated, but the sampled batch has %zu examples: "
              "accumulate every sampled example's gradient once, then release (nothing was released)", done, m->b);
    /* an empty batch (nothing accumulated): the release of a zero sum */
    if (!m->acc_live) {
        memset(m->sum, 0, m->cfg.dim * sizeof *m->sum);
        m->cnt = 0;
    }
    m->pending = 0; /* claimed before the noise, as in dpt_sgm_release */
    m->acc_live = 0;
    m->acc = 0;
    return release_sum(m, out);
}

/* ==== Queries ==== */

dpt_status dpt_sgm_epsilon(const dpt_sgm *m, double delta, dpt_accountant acct, double *eps) {
    DPT_CHECK(m, DPT_EINVAL, "dpt_sgm_epsilon: m is NULL");
    DPT_CHECK(eps, DPT_EINVAL, "dpt_sgm_epsilon: eps is NULL");
    DPT_CHECK(acct == DPT_ACCT_RDP || acct == DPT_ACCT_PLD || acct == DPT_ACCT_DEFAULT, DPT_EINVAL,
              "dpt_sgm_epsilon: unknown accountant %d", (int)acct);
    return dpt_ledger_epsilon(m->ledger, delta == 0 ? m->cfg.delta : delta, acct, DPT_CONV_BALLE, eps);
}

const dpt_ledger *dpt_sgm_ledger(const dpt_sgm *m) {
    return m ? m->ledger : NULL;
}

double dpt_sgm_sigma(const dpt_sgm *m) {
    return m ? m->rel.sigma : NAN;
}

double dpt_sgm_sigma_accounted(const dpt_sgm *m) {
    return m ? m->rel.sigma_acct : NAN;
}

uint64_t dpt_sgm_steps(const dpt_sgm *m) {
    return m ? m->steps : 0;
}

double dpt_sgm_clip(const dpt_sgm *m) {
    return m ? m->ada.C : NAN;
}
