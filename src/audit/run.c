/* The whole membership-inference audit as one library call (dpt_audit_run): the
 * member/non-member split, the target model, the LiRA shadows (Carlini et al. 2022), the
 * loss attack (Yeom et al. 2018), bootstrap summaries and the canary audit with its
 * epsilon lower bounds (Jagielski et al. 2020; Steinke, Nasr and Jagielski 2023). The CLI's
 * `dptrain audit` prints and saves what this returns. Every size product is checked
 * (dpt_alloc2): the shadow count and the population come from the caller. */
#include <dptrain/audit.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

dpt_audit_config dpt_audit_config_defaults(void) {
    dpt_audit_config c;
    memset(&c, 0, sizeof c);
    c.job.cfg = dpt_train_config_defaults();
    c.job.algo = DPT_AUDIT_SGD;
    c.job.dpsgd = dpt_dpsgd_config_defaults();
    c.shadows = 16;
    c.jobs = 1;
    c.bootstrap = 200;
    c.alpha = 0.05;
    c.seed = 1;
    c.canary_runs = 1;
    return c;
}

void dpt_audit_result_free(dpt_audit_result *res) {
    if (!res) return;
    for (size_t k = 0; k < 3; k++) {
        dpt_free(res->attack[k].in);
        dpt_free(res->attack[k].out);
    }
    memset(res, 0, sizeof *res);
}

static void report(const dpt_audit_config *c, dpt_audit_stage stage, size_t done, size_t total,
                   const dpt_audit_result *res, double t0) {
    if (!c->progress) return;
    dpt_audit_progress p = {stage, done, total, res->population, res->members, res->test_accuracy, dpt_now() - t0};
    c->progress(c->user, &p);
}

/* Member and non-member scores of one attack, copied out of score [N]. */
static dpt_status add_attack(dpt_audit_result *res, const char *name, const double *score, const uint8_t *member,
                             size_t N) {
    dpt_audit_attack *a = &res->attack[res->n_attacks];
    a->name = name;
    a->in = dpt_alloc(res->members, sizeof(double), "audit member scores");
    a->out = dpt_alloc(N - res->members, sizeof(double), "audit non-member scores");
    if (!a->in || !a->out) return DPT_ENOMEM;
    res->n_attacks++;
    for (size_t i = 0; i < N; i++) {
        if (member[i]) a->in[a->n_in++] = score[i];
        else a->out[a->n_out++] = score[i];
    }
    return DPT_OK;
}

static dpt_status check_config(const dpt_audit_config *c, const dpt_dataset *pop, const dpt_dataset *test) {
    DPT_CHECK(c && pop, DPT_EINVAL, "dpt_audit_run: cfg and pop must not be NULL");
    DPT_CHECK(!pop->t && (!test || !test->t), DPT_ENOTSUP, "dpt_audit_run: regression data (real-valued targets); "
              "the membership-inference audit scores classifiers only");
    DPT_CHECK(pop->y && (!test || test->y), DPT_EINVAL, "dpt_audit_run: the %s has no labels",
              pop->y ? "test set" : "population");
    DPT_CHECK(c->shadows != 1, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.shadows must be 0 or >= 2, got 1");
    DPT_CHECK(c->jobs >= 1 && c->jobs <= 64, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.jobs must be in [1, 64], got %d", c->jobs);
    DPT_CHECK(c->alpha > 0 && c->alpha < 1, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.alpha must be in (0, 1), got %g", c->alpha);
    DPT_CHECK(c->canary_runs >= 1, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.canary_runs must be >= 1, got 0");
    DPT_CHECK(pop->n <= UINT32_MAX, DPT_EINVAL, "dpt_audit_run: pop has %zu examples, at most 2^32 - 1", pop->n);
    if (c->canaries > 0) {
        size_t trials;
        DPT_CHECK(!c->target, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.canaries: a canary audit trains its own models, "
                  "not with a given target");
        DPT_CHECK(!dpt_mul_overflow(c->canaries, c->canary_runs, &trials) && trials >= 8, DPT_EINVAL,
                  "dpt_audit_run: dpt_audit_config.canaries x dpt_audit_config.canary_runs (%zu x %zu) must "
                  "be at least 8 trials", c->canaries,
                  c->canary_runs);
        DPT_CHECK(c->one_run_guesses == 0 || (c->canary_runs == 1 && 2 * c->one_run_guesses <= c->canaries),
                  DPT_EINVAL, "dpt_audit_run: dpt_audit_config.one_run_guesses %zu: the one-run audit takes one run "
                  "(canary_runs 1, got %zu) and guesses on both sides, so at most canaries / 2 = %zu",
                  c->one_run_guesses, c->canary_runs, c->canaries / 2);
        DPT_CHECK(test && c->canaries <= test->n, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.canaries %zu: only %zu test "
                  "examples to make canaries from", c->canaries, test ? test->n : (size_t)0);
        /* a canary is a test example given another class's label (canary_audit) */
        DPT_CHECK(pop->n_classes >= 2, DPT_EINVAL, "dpt_audit_run: dpt_audit_config.canaries %zu: a canary is "
                  "mislabelled, and the data have %d class%s", c->canaries, pop->n_classes,
                  pop->n_classes == 1 ? "" : "es");
    }
    if (c->target) {
        DPT_CHECK(test, DPT_EINVAL, "dpt_audit_run: a given target needs test data (its non-members)");
        DPT_CHECK(test->n <= UINT32_MAX, DPT_EINVAL, "dpt_audit_run: test has %zu examples, at most 2^32 - 1", test->n);
    } else {
        DPT_CHECK(pop->n >= 8, DPT_EINVAL, "dpt_audit_run: pop must have at least 8 examples, got %zu", pop->n);
    }
    return DPT_OK;
}

/* With a given target: a balanced population of n random training examples (members,
 * first) and n random test examples (non-members, second). */
static dpt_status balanced_population(const dpt_audit_config *c, const dpt_dataset *train, const dpt_dataset *test,
                                      dpt_dataset *pop) {
    size_t n = train->n < test->n ? train->n : test->n;
    if (c->max_pairs && c->max_pairs < n) n = c->max_pairs;
    DPT_CHECK(n >= 4, DPT_EINVAL, "dpt_audit_run: too few training/test examples to audit (%zu of each, need 4)", n);
    uint32_t *pi = dpt_alloc(train->n, sizeof *pi, "audit permutation"), *po = dpt_alloc(test->n, sizeof *po, "audit permutation");
    dpt_rng pr;
    dpt_status st = (pi && po) ? dpt_rng_init(&pr, c->seed, DPT_STREAM_DATA) : DPT_ENOMEM;
    if (st == DPT_OK) {
        for (size_t i = 0; i < train->n; i++) pi[i] = (uint32_t)i;
        for (size_t i = 0; i < test->n; i++) po[i] = (uint32_t)i;
        for (size_t i = 0; i < n; i++) {
            size_t j = i + (size_t)dpt_rng_below(&pr, train->n - i), k = i + (size_t)dpt_rng_below(&pr, test->n - i);
            uint32_t t1 = pi[i]; pi[i] = pi[j], pi[j] = t1;
            uint32_t t2 = po[i]; po[i] = po[k], po[k] = t2;
        }
        dpt_rng_free(&pr);
        *pop = *train;
        pop->n = 2 * n;
        pop->x = dpt_alloc2(2 * n, train->dim, sizeof(float), "audit population");
        pop->y = dpt_alloc2(2, n, sizeof(int32_t), "audit population labels");
        if (!pop->x || !pop->y) {
            dpt_free(pop->x), dpt_free(pop->y);
            pop->x = NULL, pop->y = NULL;
            st = DPT_ENOMEM;
        } else {
            dpt_dataset_gather(train, pi, n, pop->x, pop->y);
            dpt_dataset_gather(test, po, n, pop->x + n * pop->dim, pop->y + n);
        }
    }
    dpt_free(pi), dpt_free(po);
    return st;
}

/* Trains the S shadows on their random halves (masks [S, N]) in parallel over models;
 * phi_sh [S, N] receives their scores. */
static dpt_status train_shadows(const dpt_audit_config *c, const dpt_audit_job *job, const dpt_dataset *pop,
                                const uint8_t *masks, double *phi_sh, dpt_audit_result *res) {
    size_t S = c->shadows, N = pop->n;
    dpt_audit_job sj = *job;
    if (c->jobs > 1) sj.cfg.threads = 1; /* parallel over models, one thread each */
    int failed = 0;
    dpt_status fst = DPT_OK;
    size_t done_count = 0;
    char err[512] = "";
    double t0 = dpt_now();
#pragma omp parallel for num_threads(c->jobs) schedule(dynamic, 1)
    for (long s = 0; s < (long)S; s++) {
        int skip;
#pragma omp atomic read
        skip = failed;
        if (skip) continue;
        /* the shared population is read, never copied per thread except the subset */
        dpt_status st = dpt_audit_train_and_score(&sj, pop, masks + (size_t)s * N, NULL, c->seed + 1 + (uint64_t)s,
                                                  NULL, phi_sh + (size_t)s * N, NULL);
#pragma omp critical(audit_shadow)
        {
            if (st != DPT_OK && !failed) {
                failed = 1;
                fst = st;
                snprintf(err, sizeof err, "%s", dpt_last_error());
            }
            done_count++;
            report(c, DPT_AUDIT_STAGE_SHADOW, done_count, S, res, t0);
        }
    }
    res->shadow_s = (dpt_now() - t0) / (double)S;
    if (failed) return dpt_set_error(fst, "dpt_audit_run: shadow model: %s", err);
    return DPT_OK;
}

/* Canary audit: M test examples with a wrong label, each in the training set with
 * probability 1/2, over R runs; the loss attack on them bounds epsilon from below. */
static dpt_status canary_audit(const dpt_audit_config *c, const dpt_audit_job *job, const dpt_dataset *pop,
                               const uint8_t *member, const dpt_dataset *test, dpt_rng *r, dpt_audit_result *res) {
    size_t M = c->canaries, R = c->canary_runs, N = pop->n;
    dpt_dataset cp = *pop;
    cp.n = N + M;
    cp.x = dpt_alloc2(cp.n, pop->dim, sizeof(float), "canary population");
    cp.y = dpt_alloc(cp.n, sizeof(int32_t), "canary labels");
    uint8_t *cm = dpt_alloc(cp.n, 1, "canary membership");
    double *cl = dpt_alloc(cp.n, sizeof *cl, "canary losses");
    double *cin = dpt_alloc2(M, R, sizeof *cin, "canary scores"), *cout = dpt_alloc2(M, R, sizeof *cout, "canary scores");
    double *all = dpt_alloc(M, sizeof *all, "canary scores");
    size_t ni = 0, no = 0;
    double delta = job->algo == DPT_AUDIT_DPSGD ? job->cfg.delta : 0.0;
    dpt_status st = (cp.x && cp.y && cm && cl && cin && cout && all) ? DPT_OK : DPT_ENOMEM;
    if (st == DPT_OK) {
        memcpy(cp.x, pop->x, N * pop->dim * sizeof(float));
        memcpy(cp.y, pop->y, N * sizeof(int32_t));
        int K = pop->n_classes;
        for (size_t j = 0; j < M; j++) {
            memcpy(cp.x + (N + j) * pop->dim, test->x + j * test->dim, pop->dim * sizeof(float));
            cp.y[N + j] = (int32_t)((test->y[j] + 1 + (int)dpt_rng_below(r, (uint64_t)(K - 1))) % K);
        }
        memcpy(cm, member, N);
    }
    double t0 = dpt_now();
    for (size_t rr = 0; st == DPT_OK && rr < R; rr++) {
        for (size_t j = 0; j < M; j++) cm[N + j] = (uint8_t)dpt_rng_bernoulli(r, 0.5);
        dpt_audit_run_info ci;
        st = dpt_audit_train_and_score(job, &cp, cm, NULL, c->seed + 100003 + rr, cl, NULL, &ci);
        if (st != DPT_OK) break;
        res->canary_run_epsilon = ci.epsilon;
        if (!res->epsilon_label[0]) memcpy(res->epsilon_label, ci.epsilon_label, sizeof res->epsilon_label);
        for (size_t j = 0; j < M; j++) {
            if (cm[N + j]) cin[ni++] = -cl[N + j];
            else cout[no++] = -cl[N + j];
        }
        report(c, DPT_AUDIT_STAGE_CANARY, rr + 1, R, res, t0);
    }
    res->canaries = M, res->canary_runs = R, res->canary_in = ni, res->canary_out = no, res->canary_delta = delta;
    if (st == DPT_OK)
        st = dpt_audit_eps_from_scores(cin, ni, cout, no, delta, c->alpha, &res->canary_eps_lb, &res->canary_threshold);
    if (st == DPT_OK) res->canary_auc = dpt_audit_auc(cin, ni, cout, no);
    if (st == DPT_OK && R == 1 && M >= 2) {
        /* Steinke, Nasr and Jagielski 2023: valid for one run with independent inclusion */
        size_t k = c->one_run_guesses > 0 ? c->one_run_guesses : (M / 10 ? M / 10 : 1);
        for (size_t j = 0; j < M; j++) all[j] = -cl[N + j];
        st = dpt_audit_one_run_guess(all, cm + N, M, k, &res->one_run_guesses, &res->one_run_correct);
        if (st == DPT_OK)
            st = dpt_audit_one_run_eps(M, res->one_run_guesses, res->one_run_correct, delta, c->alpha, &res->one_run_eps_lb);
    }
    dpt_free(cp.x), dpt_free(cp.y), dpt_free(cm), dpt_free(cl), dpt_free(cin), dpt_free(cout), dpt_free(all);
    return st == DPT_OK ? st : dpt_error_context(st, "dpt_audit_run: canary audit");
}

dpt_status dpt_audit_run(const dpt_audit_config *c, const dpt_dataset *pop_in, const dpt_dataset *test,
                         dpt_audit_result *res) {
    DPT_CHECK(res, DPT_EINVAL, "dpt_audit_run: res must not be NULL");
    memset(res, 0, sizeof *res);
    res->test_accuracy = res->epsilon = res->sample_rate = NAN;
    res->canary_auc = res->canary_eps_lb = res->canary_threshold = res->canary_run_epsilon = NAN;
    res->one_run_eps_lb = NAN;
    DPT_TRY(check_config(c, pop_in, test));
    dpt_dataset owned_pop;
    memset(&owned_pop, 0, sizeof owned_pop);
    const dpt_dataset *pop = pop_in;
    if (c->target) {
        DPT_TRY(balanced_population(c, pop_in, test, &owned_pop));
        pop = &owned_pop;
    }
    size_t N = pop->n, S = c->shadows;
    dpt_audit_job job = c->job;
    res->population = N, res->members = N / 2, res->shadows = S;
    uint8_t *member = dpt_alloc(N, 1, "audit membership");
    uint8_t *masks = S ? dpt_alloc2(S, N, 1, "audit shadow masks") : NULL;
    double *phi_sh = S ? dpt_alloc2(S, N, sizeof(double), "audit shadow scores") : NULL;
    double *loss = dpt_alloc(N, sizeof(double), "audit losses"), *phi = dpt_alloc(N, sizeof(double), "audit scores");
    double *score = dpt_alloc(N, sizeof(double), "audit scores");
    uint32_t *perm = c->target ? NULL : dpt_alloc(N, sizeof(uint32_t), "audit permutation");
    dpt_rng r;
    int rng_live = 0;
    dpt_status st = DPT_OK;
    if (!member || (S && (!masks || !phi_sh)) || !loss || !phi || !score || (!c->target && !perm)) st = DPT_ENOMEM;
    if (st == DPT_OK && (st = dpt_rng_init(&r, c->seed, DPT_STREAM_AUX)) == DPT_OK) rng_live = 1;
    size_t n_mem = N / 2;
    if (st == DPT_OK) {
        /* members: a uniformly random half (exactly N/2); with a given target the first half */
        if (c->target) {
            for (size_t i = 0; i < n_mem; i++) member[i] = 1;
        } else {
            for (size_t i = 0; i < N; i++) perm[i] = (uint32_t)i;
            for (size_t i = N - 1; i > 0; i--) {
                size_t j = (size_t)dpt_rng_below(&r, i + 1);
                uint32_t tmp = perm[i];
                perm[i] = perm[j], perm[j] = tmp;
            }
            for (size_t i = 0; i < n_mem; i++) member[perm[i]] = 1;
        }
        if (job.algo == DPT_AUDIT_DPSGD) {
            job.cfg.sampler = DPT_SAMPLER_POISSON;
            job.cfg.sample_rate = res->sample_rate = (double)job.cfg.batch_size / (double)n_mem;
            if (!(job.cfg.sample_rate <= 1))
                st = dpt_set_error(DPT_EINVAL, "dpt_audit_run: dpt_train_config.batch_size %zu is larger than the %zu members",
                                   job.cfg.batch_size, n_mem);
            else if (!(job.cfg.delta > 0 && job.cfg.delta < 1.0 / (double)n_mem))
                st = dpt_set_error(DPT_EINVAL, "dpt_audit_run: dpt_train_config.delta must be in (0, 1/members = %g), got %g",
                                   1.0 / (double)n_mem, job.cfg.delta);
        } else if (job.cfg.batch_size > n_mem) {
            st = dpt_set_error(DPT_EINVAL, "dpt_audit_run: dpt_train_config.batch_size %zu is larger than the %zu members",
                               job.cfg.batch_size, n_mem);
        }
    }
    if (st == DPT_OK) report(c, DPT_AUDIT_STAGE_START, 0, 1, res, dpt_now());
    double t0 = dpt_now();
    if (st == DPT_OK) {
        if (c->target) {
            double tl;
            st = dpt_audit_scores(c->target, pop, NULL, N, loss, phi);
            if (st == DPT_OK) st = dpt_evaluate(c->target, DPT_LOSS_SOFTMAX_CE, test, &tl, &res->test_accuracy);
            res->target_loop_s = 0;
        } else {
            dpt_audit_run_info info;
            st = dpt_audit_train_and_score(&job, pop, member, test, c->seed, loss, phi, &info);
            if (st == DPT_OK) {
                res->epsilon = info.epsilon;
                memcpy(res->epsilon_label, info.epsilon_label, sizeof res->epsilon_label);
                res->test_accuracy = info.test_accuracy;
                res->target_loop_s = info.wall_s;
            }
            if (st != DPT_OK) st = dpt_error_context(st, "dpt_audit_run: target model");
        }
        res->target_s = dpt_now() - t0;
    }
    if (st == DPT_OK) report(c, DPT_AUDIT_STAGE_TARGET, 1, 1, res, t0);
    if (st == DPT_OK) {
        for (size_t i = 0; i < N; i++) score[i] = -loss[i];
        st = add_attack(res, "loss", score, member, N);
    }
    if (st == DPT_OK && S) {
        /* every shadow's half is drawn first, so the result does not depend on jobs */
        for (size_t s = 0; s < S; s++)
            for (size_t i = 0; i < N; i++) masks[s * N + i] = (uint8_t)dpt_rng_bernoulli(&r, 0.5);
        st = train_shadows(c, &job, pop, masks, phi_sh, res);
        static const char *names[2] = {"lira-offline", "lira-online"};
        for (int online = 0; st == DPT_OK && online < 2; online++) {
            st = dpt_audit_lira(phi_sh, masks, S, N, phi, online, score);
            if (st == DPT_OK) st = add_attack(res, names[online], score, member, N);
        }
    }
    for (size_t k = 0; st == DPT_OK && k < res->n_attacks; k++) {
        dpt_audit_attack *a = &res->attack[k];
        st = dpt_audit_summarize(a->in, a->n_in, a->out, a->n_out, c->bootstrap, c->alpha, c->seed + 7, &a->s);
    }
    if (st == DPT_OK && c->canaries > 0) st = canary_audit(c, &job, pop, member, test, &r, res);
    if (rng_live) dpt_rng_free(&r);
    dpt_free(member), dpt_free(masks), dpt_free(phi_sh), dpt_free(loss), dpt_free(phi), dpt_free(score), dpt_free(perm);
    if (c->target) dpt_dataset_free(&owned_pop);
    if (st != DPT_OK) dpt_audit_result_free(res);
    return st;
}
