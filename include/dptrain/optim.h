/* optim: optimizers (SGD with momentum and weight decay, Adam) and learning-rate schedules
 * over the flat parameter buffer. Memory: dpt_optim owns its state arrays (allocated in
 * dpt_optim_init for n parameters; freed by dpt_optim_free). Not thread-safe per object;
 * the update loops themselves may use threads and are bit-identical for a thread count.
 * Errors: DPT_EINVAL naming the config field (dpt_optim_config.lr, ...), DPT_ERANGE for a
 * non-finite gradient, DPT_ENOMEM. */
#ifndef DPTRAIN_OPTIM_H
#define DPTRAIN_OPTIM_H

#include <dptrain/core.h>

/* Declarations below are exported from libdptrain.so; everything else is hidden. */
#pragma GCC visibility push(default)
#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DPT_OPT_SGD = 0, DPT_OPT_ADAM = 1 } dpt_opt_kind;

typedef struct {
    dpt_opt_kind kind;
    double lr;            /* base learning rate (> 0) */
    double momentum;      /* SGD: heavy-ball momentum in [0, 1) (0 = plain SGD) */
    double weight_decay;  /* L2 coefficient added to the gradient: g + wd * theta (>= 0) */
    double beta1, beta2;  /* Adam (defaults 0.9, 0.999) */
    double eps;           /* Adam (default 1e-8) */
} dpt_optim_config;

/* Defaults for a kind (lr 0.1 for SGD, 1e-3 for Adam). */
dpt_optim_config dpt_optim_defaults(dpt_opt_kind kind);
dpt_status dpt_optim_parse(const char *s, dpt_opt_kind *out); /* "sgd" | "adam" */
/* Validates ranges: lr > 0 finite, momentum in [0,1), wd >= 0, betas in [0,1), eps > 0. */
dpt_status dpt_optim_validate(const dpt_optim_config *c);

typedef struct {
    dpt_optim_config cfg;
    size_t n;
    float *m;      /* [n] SGD momentum buffer / Adam first moment (NULL for plain SGD) */
    float *v;      /* [n] Adam second moment (NULL otherwise) */
    uint64_t t;    /* steps taken (Adam bias correction) */
} dpt_optim;

dpt_status dpt_optim_init(dpt_optim *o, const dpt_optim_config *cfg, size_t n);
void dpt_optim_free(dpt_optim *o); /* accepts NULL */
/* theta[n] -= update(grad[n]) with learning rate lr (the schedule's value for this step).
 * A non-finite gradient is DPT_ERANGE and theta is left unchanged. DPT_EINVAL, theta
 * unchanged, for an o that dpt_optim_init did not make for its config: zeroed, filled in
 * by hand, or with cfg.kind or cfg.momentum changed after init (no state for them). */
dpt_status dpt_optim_step(dpt_optim *o, float *theta, const float *grad, double lr);
/* The same step restricted to n_ranges >= 1 ranges [ranges[2r], ranges[2r+1]) of the
 * parameters (non-empty, increasing, disjoint, within [0, n)): elements outside them
 * (frozen parameters) keep theta and the moments unchanged, and only the ranges' gradient
 * is read (and checked to be finite). It counts as one step (Adam's bias correction).
 * dpt_optim_step(o, theta, grad, lr) is the one range [0, n). */
dpt_status dpt_optim_step_ranges(dpt_optim *o, float *theta, const float *grad, double lr, const size_t *ranges,
                                 size_t n_ranges);

/* ==== Learning-rate schedules ==== */
typedef enum { DPT_SCHED_CONSTANT = 0, DPT_SCHED_STEP = 1, DPT_SCHED_EXP = 2 } dpt_sched_kind;
typedef struct {
    dpt_sched_kind kind;
    double gamma;     /* STEP: multiply by gamma every `every` epochs; EXP: by gamma each epoch */
    unsigned every;   /* STEP only (>= 1) */
    unsigned decays;  /* EXP only: decay this many times, then hold (0 = never stop) */
} dpt_schedule;
/* lr for 0-based epoch `epoch`: constant base; step base*gamma^floor(epoch/every);
 * exp base*gamma^epoch, or base*gamma^min(epoch, decays) when decays > 0 (the DP-MAC
 * authors' "stop decaying after n epochs" is decays = n - 1). */
double dpt_schedule_lr(const dpt_schedule *s, double base_lr, uint64_t epoch);
/* Parses "constant" | "step:GAMMA:EVERY" (e.g. step:0.85:10) | "exp:GAMMA" |
 * "exp:GAMMA:DECAYS" (e.g. exp:0.95:19: 19 decays, constant from epoch 19 on). */
dpt_status dpt_schedule_parse(const char *s, dpt_schedule *out);

#ifdef __cplusplus
}
#endif
#pragma GCC visibility pop
#endif
