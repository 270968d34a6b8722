/* audit: empirical privacy auditing by membership inference. What DP-SGD's accountant
 * bounds from above, these attacks measure from below, for every algorithm (including
 * the ones with no guarantee: PDP-SGD, proportional noise, plain SGD).
 *   - statistics: ROC curve, AUC (Mann-Whitney, ties count 1/2), TPR at a fixed FPR,
 *     percentile-bootstrap confidence intervals; the regularized incomplete beta, its
 *     inverse and Clopper-Pearson intervals; the epsilon lower bound of an attack
 *     (Jagielski et al. 2020, Nasr et al. 2021);
 *   - scores: per-example loss (Yeom et al. 2018) and the logit-scaled confidence
 *     phi = log p_y - log(1 - p_y) of LiRA (Carlini et al. 2022), online and offline;
 *   - a driver that trains one model (target, shadow or canary run) through the library
 *     on a subset of a population and scores every population example.
 * Convention: a HIGHER score means "more likely a member". Scores of members are `in`,
 * of non-members `out`.
 * Memory: functions write into caller buffers unless they say they allocate.
 * Thread safety: reentrant (the driver uses its own trainer).
 * Errors: dpt_status + dpt_last_error() naming the parameter; the special functions
 * return NAN for arguments outside their domain. */
#ifndef DPTRAIN_AUDIT_H
#define DPTRAIN_AUDIT_H
#include <dptrain/core.h>
#include <dptrain/data.h>
#include <dptrain/train.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

/* ==== Special functions and binomial confidence ==== */
/* Regularized incomplete beta I_x(a, b) for a, b > 0, x in [0, 1] (continued fraction,
 * relative accuracy ~1e-14); NAN for invalid arguments. */
double dpt_betainc(double a, double b, double x);
/* The x in [0, 1] with I_x(a, b) = p (bisection to full double resolution); NAN for invalid input. */
double dpt_betainc_inv(double a, double b, double p);
/* Two-sided Clopper-Pearson interval for k successes in n trials at confidence 1 - alpha:
 * lo = B^-1(alpha/2; k, n-k+1) (0 when k = 0), hi = B^-1(1-alpha/2; k+1, n-k) (1 when
 * k = n). DPT_EINVAL for k > n, n = 0 or alpha outside (0, 1). */
dpt_status dpt_clopper_pearson(uint64_t k, uint64_t n, double alpha, double *lo, double *hi);

/* Epsilon lower bound from an attack's confusion counts on independent trials (tp, fn:
 * member trials; fp, tn: non-member trials), with confidence 1 - alpha: Clopper-Pearson
 * at alpha for each rate (a union bound over the two), then
 *   max(0, log((TPR_lo - delta) / FPR_hi), log((TNR_lo - delta) / FNR_hi)).
 * Any (eps, delta)-DP mechanism has TPR <= e^eps FPR + delta for every test. */
dpt_status dpt_audit_eps_lower_bound(uint64_t tp, uint64_t fn, uint64_t fp, uint64_t tn, double delta,
                                     double alpha, double *eps_lb);
/* The same from scores: the threshold is chosen on the even-indexed half of each set
 * (maximizing the point estimate of the bound) and the bound is computed with that fixed
 * threshold on the odd-indexed half, so the choice does not bias the interval. */
dpt_status dpt_audit_eps_from_scores(const double *in, size_t n_in, const double *out, size_t n_out,
                                     double delta, double alpha, double *eps_lb, double *threshold);

/* One-run audit (Steinke, Nasr and Jagielski 2023): m canaries, each included
 * independently with probability 1/2 in ONE training run; the auditor makes r guesses
 * (abstaining on the rest), v of them correct. Under (eps, delta)-DP,
 *   P[v correct or more] <= P[Bin(r, q) >= v] + 2 m delta max_{1<=i<=v} P[v-i <= Bin(r, q) < v] / i,
 * q = e^eps / (1 + e^eps). dpt_audit_one_run_pvalue returns that bound (capped at 1);
 * dpt_audit_one_run_eps the largest eps whose p-value is still < alpha (0 when even eps
 * = 0 is not rejected), by bisection to 1e-6. */
double dpt_audit_one_run_pvalue(uint64_t m, uint64_t r, uint64_t v, double eps, double delta);
dpt_status dpt_audit_one_run_eps(uint64_t m, uint64_t r, uint64_t v, double delta, double alpha, double *eps_lb);
/* Guesses from canary scores: "member" for the k highest, "non-member" for the k lowest
 * (2k <= n); *r = 2k guesses, *v = how many are right (is_member[i] the truth). */
dpt_status dpt_audit_one_run_guess(const double *score, const uint8_t *is_member, size_t n, size_t k, uint64_t *r,
                                   uint64_t *v);

/* ==== ROC ==== */
/* AUC = P(s_in > s_out) + P(s_in = s_out)/2. NAN when a set is empty. */
double dpt_audit_auc(const double *in, size_t n_in, const double *out, size_t n_out);
/* Largest TPR over thresholds whose FPR <= max_fpr (a test "score >= t"). */
double dpt_audit_tpr_at_fpr(const double *in, size_t n_in, const double *out, size_t n_out, double max_fpr);
/* ROC points (fpr, tpr) from (0,0) to (1,1) at every distinct threshold, ascending;
 * fpr/tpr need n_in + n_out + 1 entries; *n receives the count. */
dpt_status dpt_audit_roc(const double *in, size_t n_in, const double *out, size_t n_out, double *fpr, double *tpr,
                         size_t *n);

typedef struct {
    double auc, auc_lo, auc_hi;
    double fpr_levels[2];            /* 0.001, 0.01 */
    double tpr[2], tpr_lo[2], tpr_hi[2];
} dpt_audit_summary;
/* AUC and TPR at 0.1% and 1% FPR with percentile-bootstrap intervals at 1 - alpha
 * (n_boot resamples of each set with replacement, from `seed`). */
dpt_status dpt_audit_summarize(const double *in, size_t n_in, const double *out, size_t n_out, size_t n_boot,
                               double alpha, uint64_t seed, dpt_audit_summary *s);

/* ==== Scores ==== */
/* For softmax cross-entropy models: per-example loss -log p_y and LiRA's
 * phi = log p_y - log(sum_{k != y} p_k) (stable in the logits), over d's examples idx
 * (NULL = all), in chunks of the model's max_batch. DPT_EINVAL when the model has one
 * output. */
dpt_status dpt_audit_scores(dpt_model *m, const dpt_dataset *d, const uint32_t *idx, size_t n, double *loss,
                            double *phi);
/* LiRA scores of the N target values phi_t from S shadows: phi_sh [S, N], in_mask [S, N]
 * (1 = example trained on by that shadow). Per example the IN and OUT means; one pooled
 * (global) standard deviation for IN and one for OUT (Carlini et al.'s fixed variance,
 * the stable choice with few shadows). online = 1: log N(phi; mu_in, s_in) -
 * log N(phi; mu_out, s_out) (offline formula for an example without IN shadows);
 * online = 0: (phi - mu_out) / s_out. Examples without OUT shadows get score 0.
 * DPT_EINVAL when no example has both IN and OUT shadows (online) or no OUT (offline). */
dpt_status dpt_audit_lira(const double *phi_sh, const uint8_t *in_mask, size_t S, size_t N, const double *phi_t,
                          int online, double *score);

/* ==== Driver ==== */
typedef enum { DPT_AUDIT_SGD = 0, DPT_AUDIT_DPSGD, DPT_AUDIT_PDPSGD, DPT_AUDIT_PROPNOISE } dpt_audit_algo;
typedef struct {
    dpt_train_config cfg;    /* run settings (out_dir is ignored: nothing is written) */
    dpt_audit_algo algo;
    dpt_dpsgd_config dpsgd;  /* DPT_AUDIT_DPSGD (cfg.sampler must be Poisson) */
    dpt_pdp_config pdp;      /* DPT_AUDIT_PDPSGD */
    dpt_propnoise_config prop; /* DPT_AUDIT_PROPNOISE */
} dpt_audit_job;
typedef struct {
    double epsilon;          /* DP-SGD: RDP epsilon at cfg.delta of this run; NAN otherwise */
    double test_accuracy;    /* on `test` (NAN without) */
    double wall_s;           /* training time */
} dpt_audit_run_info;
/* Trains one model on the examples i of `pop` with member[i] = 1 (seed overrides
 * cfg.seed), then writes loss[i] and phi[i] for EVERY example of pop (either may be
 * NULL). test may be NULL. */
dpt_status dpt_audit_train_and_score(const dpt_audit_job *job, const dpt_dataset *pop, const uint8_t *member,
                                     const dpt_dataset *test, uint64_t seed, double *loss, double *phi,
                                     dpt_audit_run_info *info);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
