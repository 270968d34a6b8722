/* Membership scores: per-example loss (Yeom et al. 2018), LiRA's logit-scaled confidence
 * and the online/offline likelihood-ratio scores (Carlini et al. 2022), and the driver
 * that trains one model on a subset of a population through the library. */
#include <dptrain/accounting.h>
#include <dptrain/audit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

dpt_status dpt_audit_scores(dpt_model *m, const dpt_dataset *d, const uint32_t *idx, size_t n, double *loss,
                            double *phi) {
    DPT_CHECK(m && d, DPT_EINVAL, "dpt_audit_scores: %s is NULL", m ? "d" : "m");
    DPT_CHECK(!d->t, DPT_ENOTSUP, "audit: %s has regression targets; the membership-inference audit scores "
              "classifiers only", d->source[0] ? d->source : "the dataset");
    DPT_CHECK(d->y, DPT_EINVAL, "audit: %s has no labels", d->source[0] ? d->source : "the dataset");
    DPT_CHECK(m->out_dim >= 2, DPT_EINVAL, "audit: needs a softmax classifier (>= 2 outputs), the model has %zu",
              m->out_dim);
    DPT_CHECK(d->dim == m->in_dim, DPT_EINVAL, "audit: data has %zu features, the model expects %zu", d->dim,
              m->in_dim);
    size_t mb = m->max_batch, D = d->dim, K = m->out_dim;
    /* the caller's indices and labels, before anything runs (the loop below asserts them) */
    DPT_CHECK(idx || n <= d->n, DPT_EINVAL,
              "dpt_audit_scores: n = %zu with idx NULL (d's first n examples), but d has %zu", n, d->n);
    for (size_t i = 0; i < n; i++) {
        const size_t j = idx ? idx[i] : i;
        DPT_CHECK(j < d->n, DPT_EINVAL, "dpt_audit_scores: idx[%zu] = %zu is not an example of d (%zu examples)", i, j,
                  d->n);
        DPT_CHECK(d->y[j] >= 0 && (size_t)d->y[j] < K, DPT_EINVAL,
                  "dpt_audit_scores: example %zu of d has label %d, not one of the model's %zu classes", j,
                  (int)d->y[j], K);
    }
    float *xb = dpt_alloc2(mb, D, sizeof(float), "audit batch");
    int32_t *yb = dpt_alloc(mb, sizeof(int32_t), "audit labels");
    uint32_t *ib = dpt_alloc(mb, sizeof(uint32_t), "audit indices");
    dpt_status st = (xb && yb && ib) ? DPT_OK : DPT_ENOMEM;
    for (size_t lo = 0; st == DPT_OK && lo < n; lo += mb) {
        size_t bc = n - lo < mb ? n - lo : mb;
        for (size_t i = 0; i < bc; i++) {
            ib[i] = idx ? idx[lo + i] : (uint32_t)(lo + i);
            DPT_ASSERT(ib[i] < d->n);
        }
        dpt_dataset_gather(d, ib, bc, xb, yb);
        if ((st = dpt_model_forward(m, xb, bc)) != DPT_OK) break;
        const float *o = dpt_model_output(m);
        for (size_t i = 0; i < bc; i++) {
            const float *oi = o + i * K;
            int y = yb[i];
            DPT_ASSERT(y >= 0 && (size_t)y < K);
            double mx = oi[0];
            for (size_t k = 1; k < K; k++) mx = oi[k] > mx ? oi[k] : mx;
            double se = 0, se_other = 0, mo = -INFINITY;
            for (size_t k = 0; k < K; k++) {
                se += exp((double)oi[k] - mx);
                if ((int)k != y) mo = fmax(mo, (double)oi[k]);
            }
            for (size_t k = 0; k < K; k++)
                if ((int)k != y) se_other += exp((double)oi[k] - mo);
            if (loss) loss[lo + i] = -((double)oi[y] - mx - log(se));
            /* log p_y - log sum_{k != y} p_k = o_y - logsumexp_{k != y} o_k */
            if (phi) phi[lo + i] = (double)oi[y] - (mo + log(se_other));
        }
    }
    dpt_free(xb);
    dpt_free(yb);
    dpt_free(ib);
    return st == DPT_ENOMEM ? dpt_set_error(DPT_ENOMEM, "audit: out of memory") : st;
}

static double log_normal(double x, double mu, double s) {
    double z = (x - mu) / s;
    return -0.5 * z * z - log(s);
}

dpt_status dpt_audit_lira(const double *phi_sh, const uint8_t *in_mask, size_t S, size_t N, const double *phi_t,
                          int online, double *score) {
    size_t SN;
    DPT_CHECK(S >= 1 && N >= 1, DPT_EINVAL, "lira: needs shadows and examples");
    DPT_CHECK(!dpt_mul_overflow(S, N, &SN), DPT_EINVAL, "lira: S x N = %zu x %zu overflows", S, N);
    double *mu_in = calloc(N, sizeof *mu_in), *mu_out = calloc(N, sizeof *mu_out);
    size_t *c_in = calloc(N, sizeof *c_in), *c_out = calloc(N, sizeof *c_out);
    if (!mu_in || !mu_out || !c_in || !c_out) {
        free(mu_in), free(mu_out), free(c_in), free(c_out);
        return dpt_set_error(DPT_ENOMEM, "lira: out of memory");
    }
    for (size_t s = 0; s < S; s++)
        for (size_t i = 0; i < N; i++) {
            double v = phi_sh[s * N + i];
            if (in_mask[s * N + i]) mu_in[i] += v, c_in[i]++;
            else mu_out[i] += v, c_out[i]++;
        }
    for (size_t i = 0; i < N; i++) {
        if (c_in[i]) mu_in[i] /= (double)c_in[i];
        if (c_out[i]) mu_out[i] /= (double)c_out[i];
    }
    /* pooled variances around each example's own mean */
    double ss_in = 0, ss_out = 0;
    size_t df_in = 0, df_out = 0, both = 0, any_out = 0;
    for (size_t s = 0; s < S; s++)
        for (size_t i = 0; i < N; i++) {
            double v = phi_sh[s * N + i];
            if (in_mask[s * N + i]) ss_in += (v - mu_in[i]) * (v - mu_in[i]);
            else ss_out += (v - mu_out[i]) * (v - mu_out[i]);
        }
    for (size_t i = 0; i < N; i++) {
        if (c_in[i] > 1) df_in += c_in[i] - 1;
        if (c_out[i] > 1) df_out += c_out[i] - 1;
        both += c_in[i] && c_out[i];
        any_out += c_out[i] > 0;
    }
    dpt_status st = DPT_OK;
    if (online && !both) st = dpt_set_error(DPT_EINVAL, "lira online: no example has both IN and OUT shadows");
    if (!any_out) st = dpt_set_error(DPT_EINVAL, "lira: no example has OUT shadows");
    if (st == DPT_OK) {
        double s_in = df_in ? sqrt(ss_in / (double)df_in) : 1.0, s_out = df_out ? sqrt(ss_out / (double)df_out) : 1.0;
        if (!(s_in > 1e-6)) s_in = 1e-6;
        if (!(s_out > 1e-6)) s_out = 1e-6;
        for (size_t i = 0; i < N; i++) {
            if (!c_out[i]) score[i] = 0;
            else if (online && c_in[i])
                score[i] = log_normal(phi_t[i], mu_in[i], s_in) - log_normal(phi_t[i], mu_out[i], s_out);
            else score[i] = (phi_t[i] - mu_out[i]) / s_out;
        }
    }
    free(mu_in), free(mu_out), free(c_in), free(c_out);
    return st;
}

dpt_status dpt_audit_train_and_score(const dpt_audit_job *job, const dpt_dataset *pop, const uint8_t *member,
                                     const dpt_dataset *test, uint64_t seed, double *loss, double *phi,
                                     dpt_audit_run_info *info) {
    DPT_CHECK(!pop->t, DPT_ENOTSUP, "audit: the population has regression targets; the membership-inference "
              "audit scores classifiers only");
    DPT_CHECK(pop->y && (!test || test->y), DPT_EINVAL, "audit: the %s has no labels", pop->y ? "test set" : "population");
    size_t nm = 0;
    for (size_t i = 0; i < pop->n; i++) nm += member[i] != 0;
    DPT_CHECK(nm >= 1, DPT_EINVAL, "audit: the training subset is empty");
    dpt_dataset sub = *pop;
    sub.n = nm;
    sub.x = dpt_alloc2(nm, pop->dim, sizeof(float), "audit training subset");
    sub.y = dpt_alloc(nm, sizeof(int32_t), "audit training labels");
    if (!sub.x || !sub.y) {
        dpt_free(sub.x), dpt_free(sub.y);
        return DPT_ENOMEM;
    }
    for (size_t i = 0, k = 0; i < pop->n; i++)
        if (member[i]) {
            memcpy(sub.x + k * pop->dim, pop->x + i * pop->dim, pop->dim * sizeof(float));
            sub.y[k++] = pop->y[i];
        }
    dpt_train_config cfg = job->cfg;
    cfg.seed = seed;
    cfg.out_dir = NULL;
    if (cfg.sampler == DPT_SAMPLER_SHUFFLE && cfg.batch_size > nm) cfg.batch_size = nm;
    dpt_algo *a = NULL;
    dpt_status st;
    switch (job->algo) {
    case DPT_AUDIT_SGD: st = dpt_algo_sgd_new(&a); break;
    case DPT_AUDIT_DPSGD: st = dpt_algo_dpsgd_new(&job->dpsgd, &a); break;
    case DPT_AUDIT_PDPSGD: st = dpt_algo_pdpsgd_new(&job->pdp, &a); break;
    case DPT_AUDIT_PROPNOISE: st = dpt_algo_propnoise_new(&job->prop, &a); break;
    default: st = dpt_set_error(DPT_EINVAL, "audit: unknown algorithm %d", (int)job->algo);
    }
    dpt_trainer *t = NULL;
    if (st == DPT_OK) {
        st = dpt_trainer_new(&cfg, &sub, test, a, &t); /* owns a, even on failure */
    }
    dpt_epoch_result r;
    memset(&r, 0, sizeof r);
    r.test_accuracy = NAN;
    if (st == DPT_OK) st = dpt_trainer_run(t, &r);
    if (st == DPT_OK) st = dpt_audit_scores(dpt_trainer_model(t), pop, NULL, pop->n, loss, phi);
    if (st == DPT_OK && info) {
        info->epsilon = NAN;
        const dpt_ledger *l = dpt_trainer_ledger(t);
        if (l) st = dpt_ledger_epsilon(l, cfg.delta, DPT_ACCT_DEFAULT, DPT_CONV_BALLE, &info->epsilon);
        /* the run's own labels (a seed the audit chose: [SEEDED]), as train prints them */
        dpt_ledger_label(l, 1, info->epsilon_label, sizeof info->epsilon_label);
        info->test_accuracy = test ? r.test_accuracy : NAN;
        info->wall_s = r.wall_s;
    }
    dpt_trainer_free(t);
    dpt_free(sub.x);
    dpt_free(sub.y);
    return st;
}
