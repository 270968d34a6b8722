/* Data-parallel training (docs/distributed.md). The training set is cut into S contiguous
 * shards; rank r of R owns shards [r S / R, (r+1) S / R). Every rank draws the same global
 * batch from the shared data stream (so Poisson sampling stays exactly the single-process
 * sampling) and processes only the examples of its shards, each shard separately. With
 * --secure the sampler is OS-seeded on each rank: each rank's draw decides the examples
 * of its own shards, so every example is still included independently with probability
 * q, by its owner (the design), and the batch size is reduced with the sums. The per-shard sums
 * are then added in a fixed binary tree over SHARDS (not ranks): the float operations are
 * the same whatever R is, so R = 1, 2, 4 give bit-identical parameters. Rank 0 (owner of
 * shard 0) ends with the total and broadcasts it; every rank then runs the algorithm's
 * finish (the noise is drawn from the shared noise stream: one draw, the same on every
 * rank; in --secure mode rank 0's draw is broadcast). */
#include <dptrain/comm.h>
#include <dptrain/train.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_internal.h"

enum { TAG_TREE = 11, TAG_AGREE = 12 };

static size_t shard_lo(size_t k, size_t n, size_t S) { return (size_t)(((unsigned __int128)k * n) / S); }

void dpt_dist_free(dpt_trainer *t) {
    if (t->part)
        for (size_t k = 0; k < t->sh_hi - t->sh_lo; k++) dpt_free(t->part[k]);
    free(t->part);
    free(t->owner);
    dpt_free(t->tmp);
    dpt_free(t->res);
    dpt_free(t->sidx);
    t->part = NULL;
    t->owner = NULL;
    t->tmp = t->res = NULL;
    t->sidx = NULL;
    t->part_cap = 0;
}

static size_t dbl_off(size_t nf) { return (nf * sizeof(float) + 7) & ~(size_t)7; }

dpt_status dpt_dist_configure(dpt_trainer *t, size_t shards) {
    t->rank = dpt_comm_rank();
    t->nranks = dpt_comm_size();
    size_t S = shards ? shards : (size_t)t->nranks;
    DPT_CHECK(S >= 1 && S <= t->train->n, DPT_EINVAL,
              "dpt_train_config.shards must be in [1, %zu] (the training set size), got %zu", t->train->n, S);
    DPT_CHECK(S <= 65536, DPT_EINVAL, "dpt_train_config.shards = %zu: at most 65536", S);
    if ((S > 1 || t->nranks > 1) && !t->algo->distributable)
        return dpt_set_error(DPT_EINVAL, "algorithm %s does not support data-parallel training yet "
                             "(docs/distributed.md): run it with one MPI rank and dpt_train_config.shards = 1",
                             t->algo->name);
    dpt_dist_free(t);
    t->shards = S;
    t->dist = S > 1 || t->nranks > 1;
    size_t R = (size_t)t->nranks;
    t->owner = calloc(S, sizeof *t->owner);
    DPT_CHECK(t->owner, DPT_ENOMEM, "shards: out of memory");
    for (size_t r = 0; r < R; r++) {
        size_t a = shard_lo(r, S, R), b = shard_lo(r + 1, S, R);
        for (size_t k = a; k < b; k++) t->owner[k] = (int)r;
        if ((int)r == t->rank) {
            t->sh_lo = a;
            t->sh_hi = b;
        }
    }
    if (!t->dist) return DPT_OK;
    size_t nd = 2 + t->algo->n_sums; /* loss (or correct count) and the algorithm's sums */
    t->part_cap = dbl_off(t->model->n_params) + nd * sizeof(double);
    size_t own = t->sh_hi - t->sh_lo;
    t->part = calloc(own ? own : 1, sizeof *t->part);
    DPT_CHECK(t->part, DPT_ENOMEM, "shards: out of memory");
    for (size_t k = 0; k < own; k++)
        if (!(t->part[k] = dpt_alloc(t->part_cap, 1, "shard sums"))) return DPT_ENOMEM;
    t->tmp = dpt_alloc(t->part_cap, 1, "shard receive buffer");
    t->res = dpt_alloc(t->part_cap, 1, "reduced sums");
    t->sidx = dpt_alloc(t->train->n, sizeof *t->sidx, "shard batch indices");
    if (!t->tmp || !t->res || !t->sidx) return DPT_ENOMEM;
    return DPT_OK;
}

/* ==== The fixed tree over shards ==== */

static void add_into(unsigned char *dst, const unsigned char *src, size_t nf, size_t nd) {
    float *df = (float *)dst;
    const float *sf = (const float *)src;
    for (size_t i = 0; i < nf; i++) df[i] += sf[i];
    double *dd = (double *)(dst + dbl_off(nf));
    const double *sd = (const double *)(src + dbl_off(nf));
    for (size_t i = 0; i < nd; i++) dd[i] += sd[i];
}

/* Post-order over the shard range [lo, hi): the node's value ends in bufs[lo] at
 * owner[lo] as value(lo, mid) + value(mid, hi). Every rank walks the same tree; the
 * messages of a subtree only involve the ranks owning it, so no send waits on a receive
 * posted later (no deadlock). */
static dpt_status tree(dpt_trainer *t, unsigned char **bufs, size_t lo, size_t hi, size_t nf, size_t nd,
                       size_t bytes) {
    if (hi - lo <= 1) return DPT_OK;
    size_t mid = lo + (hi - lo + 1) / 2;
    DPT_TRY(tree(t, bufs, lo, mid, nf, nd, bytes));
    DPT_TRY(tree(t, bufs, mid, hi, nf, nd, bytes));
    int ol = t->owner[lo], om = t->owner[mid];
    if (ol == om) {
        if (ol == t->rank) add_into(bufs[lo - t->sh_lo], bufs[mid - t->sh_lo], nf, nd);
    } else if (om == t->rank) {
        DPT_TRY(dpt_comm_send(bufs[mid - t->sh_lo], bytes, ol, TAG_TREE));
    } else if (ol == t->rank) {
        DPT_TRY(dpt_comm_recv(t->tmp, bytes, om, TAG_TREE));
        add_into(bufs[lo - t->sh_lo], t->tmp, nf, nd);
    }
    return DPT_OK;
}

/* Reduces the owned buffers over all shards; the total lands in t->res on every rank. */
static dpt_status reduce_bcast(dpt_trainer *t, unsigned char **bufs, size_t nf, size_t nd) {
    size_t bytes = dbl_off(nf) + nd * sizeof(double);
    DPT_ASSERT(bytes <= t->part_cap);
    DPT_TRY(tree(t, bufs, 0, t->shards, nf, nd, bytes));
    if (t->rank == t->owner[0]) memcpy(t->res, bufs[0], bytes);
    return dpt_comm_bcast(t->res, bytes, t->owner[0]);
}

dpt_status dpt_dist_accumulate(dpt_trainer *t, size_t b, double *loss_sum, size_t *b_global) {
    dpt_algo *a = t->algo;
    dpt_model *m = t->model;
    size_t P = m->n_params, ns = a->n_sums, n = t->train->n;
    for (size_t k = t->sh_lo; k < t->sh_hi; k++) {
        memset(m->grad, 0, P * sizeof(float));
        if (ns) memset(a->sums, 0, ns * sizeof(double));
        size_t lo = shard_lo(k, n, t->shards), hi = shard_lo(k + 1, n, t->shards), c = 0;
        for (size_t i = 0; i < b; i++)
            if (t->idx[i] >= lo && t->idx[i] < hi) t->sidx[c++] = t->idx[i];
        double ls = 0;
        for (size_t j = 0; j < c; j += t->max_batch) {
            size_t bc = c - j < t->max_batch ? c - j : t->max_batch;
            dpt_train_gather(t, t->sidx + j, bc);
            double part = 0;
            DPT_TRY(a->accumulate(a, t, t->xb, t->tb ? NULL : t->yb, bc, &part));
            ls += part;
        }
        unsigned char *buf = t->part[k - t->sh_lo];
        memcpy(buf, m->grad, P * sizeof(float));
        double *d = (double *)(buf + dbl_off(P));
        d[0] = ls;
        d[1] = (double)c; /* examples of this shard: with --secure each rank samples its own */
        for (size_t i = 0; i < ns; i++) d[2 + i] = a->sums[i];
    }
    DPT_TRY(dpt_error_context(reduce_bcast(t, t->part, P, 2 + ns), "step %" PRIu64 ": reducing the shard sums",
                              t->step + 1));
    memcpy(m->grad, t->res, P * sizeof(float));
    const double *d = (const double *)(t->res + dbl_off(P));
    *loss_sum = d[0];
    *b_global = (size_t)d[1];
    for (size_t i = 0; i < ns; i++) a->sums[i] = d[2 + i];
    return DPT_OK;
}

dpt_status dpt_dist_evaluate(dpt_trainer *t, const dpt_dataset *d, double *mean_loss, double *accuracy) {
    DPT_CHECK(d && d->n > 0, DPT_EINVAL, "evaluate: empty dataset");
    for (size_t k = t->sh_lo; k < t->sh_hi; k++) {
        size_t lo = shard_lo(k, d->n, t->shards), hi = shard_lo(k + 1, d->n, t->shards), correct = 0;
        double ls = 0;
        if (hi > lo) DPT_TRY(dpt_eval_range(t->model, t->cfg.loss, d, lo, hi, &ls, &correct));
        double *v = (double *)t->part[k - t->sh_lo]; /* nf = 0: the doubles start at 0 */
        v[0] = ls;
        v[1] = (double)correct;
    }
    DPT_TRY(dpt_error_context(reduce_bcast(t, t->part, 0, 2), "evaluation: reducing the shard results"));
    const double *v = (const double *)t->res;
    *mean_loss = v[0] / (double)d->n;
    *accuracy = d->t ? NAN : v[1] / (double)d->n; /* regression: no accuracy */
    return DPT_OK;
}

/* ==== Agreement and resume ==== */

typedef struct {
    uint8_t data_hash[32];
    uint64_t n_train, n_test, n_params, shards, seed, sampler, batch, max_batch;
    double q;
    char algo[32], model[192], freeze[1024];
} agree_msg;

static void agree_fill(const dpt_trainer *t, agree_msg *m) {
    memset(m, 0, sizeof *m);
    memcpy(m->data_hash, t->data_hash, 32);
    m->n_train = t->train->n;
    m->n_test = t->test ? t->test->n : 0;
    m->n_params = t->model->n_params;
    m->shards = t->shards;
    m->seed = t->cfg.seed;
    m->sampler = (uint64_t)t->cfg.sampler;
    m->batch = t->cfg.batch_size;
    m->max_batch = t->max_batch;
    m->q = t->cfg.sample_rate;
    snprintf(m->algo, sizeof m->algo, "%s", t->algo->name);
    snprintf(m->model, sizeof m->model, "%s", t->cfg.model_spec);
    memcpy(m->freeze, t->freeze_list, sizeof m->freeze);
}

dpt_status dpt_dist_check_agree(dpt_trainer *t) {
    if (t->nranks == 1) return DPT_OK;
    agree_msg mine, root;
    agree_fill(t, &mine);
    memcpy(&root, &mine, sizeof root); /* bytes, padding included */
    DPT_TRY(dpt_comm_bcast(&root, sizeof root, 0));
    if (!memcmp(&mine, &root, sizeof mine)) return DPT_OK;
    if (memcmp(mine.data_hash, root.data_hash, 32) || mine.n_train != root.n_train || mine.n_test != root.n_test)
        return dpt_set_error(DPT_EMISMATCH, "rank %d: the training/test data differ from rank 0's (every rank must "
                             "read the same dataset; %" PRIu64 " vs %" PRIu64 " training examples)", t->rank,
                             mine.n_train, root.n_train);
    return dpt_set_error(DPT_EMISMATCH, "rank %d: the run settings differ from rank 0's (algorithm %s vs %s, model "
                         "%s vs %s, shards %" PRIu64 " vs %" PRIu64 ", frozen layers \"%s\" vs \"%s\"): every rank "
                         "must get the same configuration",
                         t->rank, mine.algo, root.algo, mine.model, root.model, mine.shards, root.shards, mine.freeze,
                         root.freeze);
}

/* Reads a file whole; a missing file is length 0 with *present = 0. */
static dpt_status read_opt(const char *path, uint8_t **data, size_t *n, int *present) {
    struct stat st;
    *data = NULL;
    *n = 0;
    *present = stat(path, &st) == 0;
    if (!*present) return DPT_OK;
    return dpt_read_file(path, data, n);
}

/* Every rank learns whether every rank is ok (a collective verdict: the non-root ranks
 * report to rank 0, which broadcasts the conjunction), so a local failure makes all ranks
 * return an error together instead of leaving the others waiting in a collective. */
static dpt_status agree_all_ok(const dpt_trainer *t, int ok, int *all_ok) {
    uint8_t all = ok != 0;
    if (t->rank == 0) {
        for (int r = 1; r < t->nranks; r++) {
            uint8_t v = 0;
            DPT_TRY(dpt_comm_recv(&v, 1, r, TAG_AGREE));
            all &= v;
        }
    } else {
        DPT_TRY(dpt_comm_send(&all, 1, 0, TAG_AGREE));
    }
    DPT_TRY(dpt_comm_bcast(&all, 1, 0));
    *all_ok = all;
    return DPT_OK;
}

dpt_status dpt_dist_check_start(dpt_trainer *t) {
    if (t->nranks == 1) return DPT_OK;
    uint8_t mine[32], root[32];
    dpt_hash h;
    DPT_TRY(dpt_hash_init(&h));
    dpt_status su = dpt_hash_update(&h, t->model->theta, t->model->n_params * sizeof *t->model->theta);
    DPT_TRY(dpt_hash_final(&h, mine));
    DPT_TRY(su);
    memcpy(root, mine, sizeof root);
    DPT_TRY(dpt_comm_bcast(root, sizeof root, 0));
    int all = 0, same = !memcmp(mine, root, sizeof mine);
    DPT_TRY(agree_all_ok(t, same, &all));
    if (all) return DPT_OK;
    return dpt_set_error(DPT_EMISMATCH, "rank %d: %s (every rank must start from the same parameters: give each "
                         "the same initial parameters, or none)", t->rank,
                         same ? "another rank's starting parameters differ from rank 0's"
                              : "its starting parameters differ from rank 0's");
}

/* mode 0600: the copies include the run's secret key */
static dpt_status write_all(const char *path, const uint8_t *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd);
    DPT_CHECK(f, DPT_EIO, "%s: cannot create: %s", path, strerror(errno));
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int bad = w != n;
    if (fclose(f) != 0) bad = 1;
    DPT_CHECK(!bad, DPT_EIO, "%s: write failed", path);
    return DPT_OK;
}

/* What a rank needs to resume, sent by rank 0: the checkpoint, then (when present) the
 * ledger and the run's secret (from the secret directory, or an older run's directory;
 * without it the resume refuses or, when allowed, draws a new one). The other ranks write
 * them into a private temporary directory under these names and resume from there (their
 * secret_dir is "", so the copy is all they read). */
#define RESUME_FILES 3
static const char *const RESUME_NAME[RESUME_FILES] = {"checkpoint.safetensors", "ledger.json", DPT_RUN_KEY_FILE};

dpt_status dpt_dist_resume(dpt_trainer *t, dpt_status (*local)(dpt_trainer *t)) {
    if (t->nranks == 1) return local(t);
    /* header: [0] ok (the checkpoint was read), then per file: present, bytes */
    uint64_t hdr[1 + 2 * RESUME_FILES] = {0};
    uint8_t *buf[RESUME_FILES] = {NULL, NULL, NULL};
    dpt_status s = DPT_OK;
    if (t->rank == 0) {
        for (int i = 0; i < RESUME_FILES && s == DPT_OK; i++) {
            char path[600];
            int present = 0;
            size_t n = 0;
            if (i == 2) s = dpt_run_secret_find(t, path, sizeof path); /* the secret: wherever it is */
            else snprintf(path, sizeof path, "%s/%s", t->out_dir, RESUME_NAME[i]);
            if (s == DPT_OK) s = read_opt(path, &buf[i], &n, &present);
            hdr[1 + 2 * i] = (uint64_t)present;
            hdr[2 + 2 * i] = n;
            if (i == 0 && !present) break;
        }
        hdr[0] = s == DPT_OK && hdr[1];
    }
    dpt_status cs = dpt_comm_bcast(hdr, sizeof hdr, 0);
    if (cs == DPT_OK && hdr[0]) {
        int have = 1;
        for (int i = 0; i < RESUME_FILES && t->rank != 0; i++)
            if (!(buf[i] = malloc(hdr[2 + 2 * i] ? hdr[2 + 2 * i] : 1))) have = 0;
        /* an allocation failure must not leave the other ranks waiting in the broadcast */
        int all_ok = 0;
        cs = agree_all_ok(t, have, &all_ok);
        if (cs == DPT_OK && !all_ok)
            cs = dpt_set_error(DPT_ENOMEM, "rank %d: resume: %s", t->rank,
                               !have ? "out of memory for the checkpoint copy"
                                     : "another rank ran out of memory for the checkpoint copy");
        for (int i = 0; i < RESUME_FILES && cs == DPT_OK; i++) cs = dpt_comm_bcast(buf[i], hdr[2 + 2 * i], 0);
    }
    if (cs != DPT_OK || t->rank == 0) {
        for (int i = 0; i < RESUME_FILES; i++) free(buf[i]);
        /* rank 0's local also reports a missing or unreadable checkpoint */
        return cs != DPT_OK ? cs : local(t);
    }
    if (!hdr[0]) return dpt_set_error(DPT_EIO, "rank %d: resume: rank 0 could not read the run's checkpoint", t->rank);
    /* Other ranks (possibly on other hosts) resume from a private copy of rank 0's files. */
    const char *tmpdir = getenv("TMPDIR");
    char dir[512], path[RESUME_FILES][600];
    snprintf(dir, sizeof dir, "%s/dptrain-resume-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(dir)) {
        for (int i = 0; i < RESUME_FILES; i++) free(buf[i]);
        return dpt_set_error(DPT_EIO, "rank %d: resume: cannot create a temporary directory in %s: %s", t->rank,
                             tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
    }
    for (int i = 0; i < RESUME_FILES; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, RESUME_NAME[i]);
        if (s == DPT_OK && hdr[1 + 2 * i]) s = write_all(path[i], buf[i], hdr[2 + 2 * i]);
        free(buf[i]);
    }
    if (s == DPT_OK) {
        snprintf(t->out_dir, sizeof t->out_dir, "%s", dir);
        s = local(t);
        t->out_dir[0] = 0; /* rank 0 alone writes files */
    }
    for (int i = 0; i < RESUME_FILES; i++) unlink(path[i]);
    rmdir(dir);
    return s;
}
