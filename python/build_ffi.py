"""Builds dptrain's cffi extension module (`dptrain._dptrain_cffi`) in API (out-of-line) mode.

The declarations below are the subset of the public headers (include/dptrain/*.h) that the
Python package calls. In API mode the C compiler checks every one of them against the real
headers when the module is built, and structs declared with `...;` get their true size and
field offsets from the compiler: a header change that would silently shift a field under
ABI mode (ffi.dlopen) is either absorbed or a compile error here.

Where the library and headers come from (first match wins):
  1. DPTRAIN_BUILD_DIR=<cmake build dir>  (headers from its source tree: <repo>/include and
     <build>/include for the generated version.h; library <build>/libdptrain.so)
  2. DPTRAIN_PREFIX=<install prefix>      (as made by `cmake --install build --prefix P`)
  3. pkg-config dptrain                   (an installed libdptrain, e.g. the Debian package)
  4. ../build next to this file           (an in-tree build: `cmake -B build`)
The extension records the library's directory as its RUNPATH, so it finds the same
libdptrain.so at run time; DPTRAIN_LIBRARY=<path> overrides that (see dptrain/_lib.py).
An installed package (setup.py) built from a cmake build directory (1 or 4) carries its own
copy of the library instead: setup.py copies it beside the extension, whose RUNPATH is then
$ORIGIN, so the package keeps working when the clone is deleted. Built against an installed
library (2 or 3), the package uses that library where it is installed.

In-tree use (tests, benchmarks):  python3 python/build_ffi.py --build-dir build
writes build/python/dptrain/_dptrain_cffi*.so, which the package finds by itself.
"""

import os
import re
import shlex
import subprocess
import sys

import cffi

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

CDEF_CORE = r"""
typedef enum {
    DPT_OK = 0, DPT_EINVAL = -1, DPT_ENOMEM = -2, DPT_EIO = -3, DPT_EFORMAT = -4,
    DPT_ERANGE = -5, DPT_ENOTSUP = -6, DPT_EBUDGET = -7, DPT_ECRYPTO = -8, DPT_EMISMATCH = -9,
    ...
} dpt_status;
const char *dpt_status_name(dpt_status s);
const char *dpt_last_error(void);
void dpt_clear_error(void);
const char *dpt_version(void);
const char *dpt_build_id(void);
const char *dpt_blas_core(void);
int dpt_threads_resolve(int requested);
void dpt_threads_set_blas(int threads);
int dpt_threads_get_blas(void);
double dpt_now(void);
void free(void *p);
"""

CDEF_ACCOUNTING = r"""
typedef enum { DPT_CONV_BALLE = 0, DPT_CONV_CLASSIC = 1 } dpt_conversion;
typedef enum { DPT_ACCT_RDP = 0, DPT_ACCT_PLD = 1, DPT_ACCT_DEFAULT = 2 } dpt_accountant;
dpt_status dpt_rdp_sgm(double q, double sigma, double alpha, double *rdp);
const double *dpt_rdp_default_orders(size_t *n);
dpt_status dpt_rdp_to_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                              dpt_conversion conv, double *eps, double *best_order, int *at_edge);
dpt_status dpt_rdp_sgm_epsilon_ex(double q, double sigma, uint64_t steps, double delta,
                                  dpt_conversion conv, const double *orders, size_t n_orders,
                                  double *eps, double *best_order, int *at_edge);
dpt_status dpt_pld_sgm_epsilon(double q, double sigma, uint64_t steps, double delta, double *eps);
dpt_status dpt_pld_sgm_delta(double q, double sigma, uint64_t steps, double eps, double *delta);
typedef struct { double grid; size_t max_points; } dpt_pld_options;
dpt_status dpt_pld_sgm_epsilon_ex(double q, double sigma, uint64_t steps, double delta,
                                  const dpt_pld_options *opt, double *eps);
dpt_status dpt_calibrate_sigma(double q, uint64_t steps, double delta, double target_eps,
                               dpt_accountant acct, dpt_conversion conv, double tol, double *sigma);
dpt_status dpt_calibrate_sigma_ex(double q, uint64_t steps, double delta, double target_eps,
                                  dpt_accountant acct, dpt_conversion conv, const double *orders,
                                  size_t n_orders, double tol, double *sigma);

typedef struct dpt_ledger dpt_ledger;
dpt_status dpt_ledger_new(dpt_ledger **out);
void dpt_ledger_free(dpt_ledger *l);
dpt_status dpt_ledger_add_sgm(dpt_ledger *l, double q, double sigma, uint64_t count);
dpt_status dpt_ledger_add_gaussian(dpt_ledger *l, double sensitivity, double sigma, const char *label);
dpt_status dpt_ledger_add_rdp_curve(dpt_ledger *l, const double *orders, const double *rdp,
                                    size_t n, uint64_t count, const char *label);
dpt_status dpt_ledger_add_eps_delta(dpt_ledger *l, double eps, double delta, const char *label);
dpt_status dpt_ledger_add_dpulr(dpt_ledger *l, double q, double sigma0, uint64_t N,
                                uint64_t N_B, uint64_t count);
uint64_t dpt_ledger_steps(const dpt_ledger *l);
size_t dpt_ledger_n_events(const dpt_ledger *l);
dpt_status dpt_ledger_set_meta(dpt_ledger *l, const char *key, const char *value);
const char *dpt_ledger_get_meta(const dpt_ledger *l, const char *key);
dpt_status dpt_ledger_epsilon(const dpt_ledger *l, double delta, dpt_accountant acct,
                              dpt_conversion conv, double *eps);
dpt_status dpt_ledger_epsilon_rdp(const dpt_ledger *l, double delta, dpt_conversion conv,
                                  const double *orders, size_t n_orders, double *eps,
                                  double *best_order, int *at_edge);
int dpt_ledger_pld_applies(const dpt_ledger *l);
dpt_status dpt_ledger_epsilon_default(const dpt_ledger *l, double delta, dpt_conversion conv, double *eps,
                                      dpt_accountant *which, double *eps_rdp, double *eps_pld);
const char *dpt_accountant_name(dpt_accountant acct);
dpt_status dpt_ledger_to_json(const dpt_ledger *l, char **json_out);
dpt_status dpt_ledger_from_json(const char *json, dpt_ledger **out);
dpt_status dpt_ledger_save(const dpt_ledger *l, const char *path);
dpt_status dpt_ledger_load(const char *path, dpt_ledger **out);

static const double DPT_DPULR_RATIO_ALPHA;
dpt_status dpt_dpulr_check(double q, uint64_t N, uint64_t N_B);
dpt_status dpt_dpulr_rdp_curve(double q, double sigma0, uint64_t N, uint64_t N_B,
                               const double *orders, size_t n, double *out);
dpt_status dpt_dpulr_rdp(double q, double sigma0, uint64_t N, uint64_t N_B, double alpha,
                         double *gamma, double *rejection, double *sgm);
dpt_status dpt_dpulr_epsilon(double q, double sigma0, uint64_t N, uint64_t N_B,
                             uint64_t steps, double delta, dpt_conversion conv, double *eps,
                             double *best_order);
dpt_status dpt_dpulr_default_min_batch(double q, double sigma0, uint64_t N, double max_ratio,
                                       uint64_t *N_B, double *ratio);
"""

CDEF_DATA_NN = r"""
typedef struct {
    size_t n, dim;
    float *x;
    int32_t *y;
    int n_classes;
    size_t shape[3];
    ...;
} dpt_dataset;
void dpt_dataset_free(dpt_dataset *d);
dpt_status dpt_dataset_from_arrays(const float *x, const int32_t *y, size_t n, size_t dim,
                                   int n_classes, dpt_dataset *out);
dpt_status dpt_dataset_set_shape(dpt_dataset *d, size_t c, size_t h, size_t w);
typedef enum { DPT_SAMPLER_SHUFFLE, DPT_SAMPLER_POISSON, DPT_SAMPLER_FULL,
               DPT_SAMPLER_POISSON_REJECT, ... } dpt_sampler_kind;

typedef enum { DPT_LAYER_LINEAR, DPT_LAYER_RELU, DPT_LAYER_GELU, DPT_LAYER_TANH,
               DPT_LAYER_SIGMOID, DPT_LAYER_IDENTITY, DPT_LAYER_CONV2D, DPT_LAYER_MAXPOOL,
               DPT_LAYER_AVGPOOL, DPT_LAYER_FLATTEN, DPT_LAYER_GROUPNORM,
               DPT_LAYER_SCATTER, DPT_LAYER_EMBEDDING, DPT_LAYER_LAYERNORM, DPT_LAYER_RMSNORM,
               DPT_LAYER_SEQLINEAR, DPT_LAYER_MEANPOOL, DPT_LAYER_CLSPOOL, DPT_LAYER_ATTENTION,
               DPT_LAYER_CHANNEL_AFFINE, DPT_LAYER_TOSEQ, ... } dpt_layer_kind;
typedef struct dpt_param_tensor {
    char name[48];
    int ndim;
    size_t shape[4];
    size_t offset, size;
    ...;
} dpt_param_tensor;
struct dpt_layer {
    dpt_layer_kind kind;
    char name[32];
    size_t in_dim, out_dim;
    size_t in_shape[3], out_shape[3];
    size_t n_params;
    int has_bias;
    size_t k, stride, pad, groups;
    size_t residual_from;
    ...;
};
typedef struct dpt_layer dpt_layer;
typedef struct {
    char spec[...];
    dpt_layer *layers;
    size_t n_params;
    float *theta;
    size_t max_batch;
    size_t in_dim, out_dim;
    float **act;
    float **dact;
    size_t n_layers;
    ...;
} dpt_model;
typedef enum { DPT_INIT_DEFAULT, ... } dpt_init_scheme;
typedef enum { DPT_LOSS_SOFTMAX_CE, DPT_LOSS_SIGMOID_BCE, DPT_LOSS_SQUARED, DPT_LOSS_TOKEN_CE,
               ... } dpt_loss_kind;
dpt_status dpt_model_new(const char *spec, size_t max_batch, int threads, dpt_model **out);
void dpt_model_free(dpt_model *m);
dpt_status dpt_model_forward(dpt_model *m, const float *x, size_t B);
typedef enum { DPT_GRAD_SUM, DPT_GRAD_PER_EXAMPLE, DPT_GRAD_SQNORM, DPT_GRAD_WEIGHTED,
               DPT_GRAD_DOT } dpt_grad_mode;
dpt_status dpt_model_backward(dpt_model *m, const float *dout, size_t B);
dpt_status dpt_model_param_grad(dpt_model *m, size_t B, dpt_grad_mode mode, const float *weights,
                                float *out, size_t ld, int accumulate);
size_t dpt_model_n_tensors(const dpt_model *m);
dpt_status dpt_model_tensor(const dpt_model *m, size_t i, dpt_param_tensor *t);
dpt_status dpt_loss_parse(const char *s, dpt_loss_kind *out);
dpt_status dpt_loss_tokens(const float *o, size_t B, size_t T, size_t V, const float *targets, float *loss,
                           float *dout);
dpt_status dpt_loss_tokens_pad(const float *o, size_t B, size_t T, size_t V, const float *targets,
                               long long pad_id, float *loss, float *dout);
int dpt_model_pad_id(const dpt_model *m, size_t *pad_id);
dpt_status dpt_init_parse(const char *s, dpt_init_scheme *out);

typedef struct dpt_model_builder dpt_model_builder;
dpt_status dpt_model_builder_new(size_t c, size_t h, size_t w, dpt_model_builder **out);
void dpt_model_builder_free(dpt_model_builder *b);
dpt_status dpt_model_builder_linear(dpt_model_builder *b, size_t out_features, int bias);
dpt_status dpt_model_builder_activation(dpt_model_builder *b, dpt_layer_kind kind);
dpt_status dpt_model_builder_conv2d(dpt_model_builder *b, size_t out_channels, size_t k,
                                    size_t stride, size_t pad, int bias);
dpt_status dpt_model_builder_maxpool(dpt_model_builder *b, size_t k, size_t stride);
dpt_status dpt_model_builder_avgpool(dpt_model_builder *b, size_t k, size_t stride);
dpt_status dpt_model_builder_groupnorm(dpt_model_builder *b, size_t groups);
dpt_status dpt_model_builder_flatten(dpt_model_builder *b);
dpt_status dpt_model_builder_item(dpt_model_builder *b, const char *item);
dpt_status dpt_model_builder_residual_begin(dpt_model_builder *b);
dpt_status dpt_model_builder_residual_end(dpt_model_builder *b);
dpt_status dpt_model_builder_shape(const dpt_model_builder *b, size_t shape[3]);
const char *dpt_model_builder_spec(const dpt_model_builder *b);
"""

CDEF_TRAIN = r"""
typedef enum { DPT_OPT_SGD = 0, DPT_OPT_ADAM = 1 } dpt_opt_kind;
typedef struct {
    dpt_opt_kind kind;
    double lr, momentum, weight_decay, beta1, beta2, eps;
    ...;
} dpt_optim_config;
dpt_optim_config dpt_optim_defaults(dpt_opt_kind kind);
dpt_status dpt_optim_validate(const dpt_optim_config *c);
typedef struct { ...; } dpt_schedule;
dpt_status dpt_schedule_parse(const char *s, dpt_schedule *out);
typedef enum { DPT_CLIP_FLAT = 0, DPT_CLIP_PER_LAYER = 1 } dpt_clip_mode;
dpt_status dpt_clip_mode_parse(const char *s, dpt_clip_mode *out);
double dpt_privacy_secure_sigma_eff(double sigma, size_t n);
typedef struct { uint64_t seed; int secure; ...; } dpt_rng;
#define DPT_STREAM_NOISE ...
dpt_status dpt_rng_init(dpt_rng *r, uint64_t seed, uint32_t stream_id);
dpt_status dpt_rng_init_secure(dpt_rng *r, uint32_t stream_id);
void dpt_rng_free(dpt_rng *r);
uint64_t dpt_dp_pca_seed(uint64_t seed);
uint64_t dpt_dp_mean_seed(uint64_t seed);
dpt_status dpt_dp_pca_fit(const float *X, size_t n, size_t d, size_t k, double sigma, dpt_rng *noise,
                          int secure, int threads, double *V, double *evals);
dpt_status dpt_dp_pca_project(const float *X, size_t n, size_t d, const double *V, size_t k, float *out);
dpt_status dpt_dp_pca_project_raw(const float *X, size_t n, size_t d, const double *V, size_t k, float *out);
dpt_status dpt_dp_mean(const float *X, size_t n, size_t d, double C, double sigma, dpt_rng *noise, int secure,
                       int threads, double *mu, size_t *clipped);
dpt_status dpt_dp_center(float *X, size_t n, size_t d, const double *mu);
dpt_status dpt_privacy_secure_sigma_for(double sigma_eff, size_t n, double *sigma);

typedef struct dpt_trainer dpt_trainer;
typedef struct dpt_algo { ...; } dpt_algo;
dpt_status dpt_algo_sgd_new(dpt_algo **out);
typedef struct {
    double sigma, clip;
    dpt_clip_mode clip_mode;
    int secure;
    double adaptive_quantile, adaptive_lr, adaptive_sigma_b;
    ...;
} dpt_dpsgd_config;
dpt_dpsgd_config dpt_dpsgd_config_defaults(void);
double dpt_algo_dpsgd_clip(const dpt_algo *a);
dpt_status dpt_privacy_adaptive_sigma(double sigma, double sigma_b, double *sigma_grad);
dpt_status dpt_algo_dpsgd_new(const dpt_dpsgd_config *cfg, dpt_algo **out);
typedef struct { double lambda; double kappa; double sigma; ...; } dpt_pdp_config;
dpt_status dpt_algo_pdpsgd_new(const dpt_pdp_config *cfg, dpt_algo **out);
double dpt_pdp_kappa(double eta, double sigma);
typedef struct { double sigma; double lambda; ...; } dpt_propnoise_config;
dpt_status dpt_algo_propnoise_new(const dpt_propnoise_config *cfg, dpt_algo **out);
typedef enum { DPT_ULR_CONTROLLER = 0, DPT_ULR_EXPLICIT = 1 } dpt_ulr_noise;
#define DPT_ULR_AUTO ...
typedef struct {
    int private_;
    size_t copies;
    double sigma0, clip;
    dpt_ulr_noise noise;
    double perturb_std;
    int antithetic, baseline;
    const char *modules;
    int accounted;
    ...;
} dpt_dpulr_config;
dpt_dpulr_config dpt_dpulr_config_defaults(void);
dpt_status dpt_algo_dpulr_new(const dpt_dpulr_config *cfg, dpt_algo **out);
typedef struct {
    double sigma, clip;
    unsigned z_steps;
    double z_lr, z_mu;
    int secure, private_;
    unsigned taylor_order, w_steps;
    double clip2;
    ...;
} dpt_dpmac_config;
dpt_dpmac_config dpt_dpmac_config_defaults(void);
dpt_status dpt_algo_dpmac_new(const dpt_dpmac_config *cfg, dpt_algo **out);
typedef enum { DPT_KL_EXACT = 0, DPT_KL_PAPER = 1 } dpt_kl_constant;
enum { DPT_KL_REMOVE = 1, DPT_KL_ADD = 2, DPT_KL_REPLACE = 4, DPT_KL_ALL = 7 };
typedef struct {
    double eta, sigma;
    int linearized, kl;
    dpt_kl_constant constant;
    const dpt_dataset *heldout;
    size_t replace_candidates;
    ...;
} dpt_noisy_gd_config;
dpt_noisy_gd_config dpt_noisy_gd_config_defaults(void);
dpt_status dpt_algo_noisy_gd_new(const dpt_noisy_gd_config *cfg, dpt_algo **out);
typedef struct {
    uint64_t steps;
    double c, remove, add, replace, worst;
    size_t remove_arg, add_arg, replace_arg_i, replace_arg_z;
    ...;
} dpt_kl_report;
dpt_status dpt_noisy_gd_kl(const dpt_algo *a, dpt_kl_report *r);

typedef struct {
    uint64_t epoch, step;
    double train_loss, test_loss, test_accuracy, wall_s, lr;
    ...;
} dpt_epoch_result;

typedef struct {
    const char *model_spec;
    dpt_loss_kind loss;
    dpt_init_scheme init;
    dpt_optim_config optim;
    dpt_schedule schedule;
    dpt_sampler_kind sampler;
    size_t batch_size;
    double sample_rate;
    size_t min_batch;
    uint64_t epochs, seed;
    int seed_from_os;
    int threads;
    const char *out_dir;
    const char *secret_dir;
    uint64_t max_steps;
    const char *run_json;
    const char *eval_split;
    double delta, target_epsilon;
    int allow_ledger_mismatch, secure;
    size_t shards;
    ...;
} dpt_train_config;
dpt_train_config dpt_train_config_defaults(void);
dpt_status dpt_trainer_new(const dpt_train_config *cfg, const dpt_dataset *train,
                           const dpt_dataset *test, dpt_algo *algo, dpt_trainer **out);
void dpt_trainer_free(dpt_trainer *t);
dpt_status dpt_trainer_exclude_from_guarantee(dpt_trainer *t, const char *what);
dpt_status dpt_trainer_resume(dpt_trainer *t);
dpt_status dpt_trainer_run(dpt_trainer *t, dpt_epoch_result *last);
dpt_status dpt_evaluate(dpt_model *m, dpt_loss_kind loss, const dpt_dataset *d,
                        double *mean_loss, double *accuracy);
dpt_model *dpt_trainer_model(dpt_trainer *t);
uint64_t dpt_trainer_step(const dpt_trainer *t);
const dpt_ledger *dpt_trainer_ledger(const dpt_trainer *t);
int dpt_trainer_budget_stopped(const dpt_trainer *t, double *eps_next);
dpt_status dpt_trainer_add_gaussian_release(dpt_trainer *t, double sensitivity, double sigma,
                                            const char *label);
dpt_status dpt_trainer_feature_norm(dpt_trainer *t, double sigma, double clip_mean, double clip_sq);
dpt_status dpt_dp_channel_sums(const float *x, size_t n, size_t K, size_t m, int p, double C, double *sums,
                               size_t *clipped);
dpt_status dpt_dp_channel_affine(const double *s1, const double *s2, size_t K, double n, float *scale,
                                 float *shift);
"""

# Planning a run: the steps of E epochs as the trainer takes them and the calibration of a
# run's sigma (data.h, train.h); declared when the headers have them.
CDEF_PLANNING = r"""
dpt_status dpt_sampler_steps_for_epochs(dpt_sampler_kind kind, size_t n, size_t batch_size, double q,
                                        uint64_t epochs, uint64_t *steps);
dpt_status dpt_train_calibrate_sigma(const dpt_ledger *prior, double q, uint64_t steps, double delta,
                                     double target_eps, double *sigma);
"""

# Starting parameters (fine-tuning): declared only when the headers have them, like the
# callbacks below (dptrain.train checks hasattr).
CDEF_INIT_PARAMS = r"""
#define DPT_INIT_SOURCE_MAX ...
dpt_status dpt_trainer_set_initial_params(dpt_trainer *t, const float *params, size_t n, const char *source);
const char *dpt_trainer_initial_params(const dpt_trainer *t);
"""

# Regression targets (dpt_dataset.t, dpt_epoch_result.test_mse): declared only when the
# headers have them.
CDEF_TARGETS = r"""
dpt_status dpt_dataset_from_targets(const float *x, const float *t, size_t n, size_t dim, size_t t_dim,
                                    dpt_dataset *out);
"""

# Text data (token-id files, the fortunes corpus): declared only when the headers have them.
CDEF_TEXT = r"""
typedef enum { DPT_SPLIT_TRAIN = 0, DPT_SPLIT_TEST = 1 } dpt_split;
typedef enum { DPT_FORTUNES_TOPIC = 0, DPT_FORTUNES_CHARS = 1 } dpt_fortunes_kind;
#define DPT_FORTUNES_N_TOPICS ...
#define DPT_FORTUNES_TOPIC_SEQ_LEN ...
#define DPT_FORTUNES_CHARS_SEQ_LEN ...
#define DPT_TOK_BYTE_PAD ...
#define DPT_TOK_BYTE_EOS ...
#define DPT_TOK_BYTE_VOCAB ...
dpt_status dpt_data_load_fortunes(dpt_fortunes_kind kind, const char *dir, dpt_split split, size_t seq_len,
                                  dpt_dataset *out);
const char *dpt_fortunes_topic(int k);
typedef struct {
    size_t n_seqs, n_ids;
    uint32_t vocab;
    int n_classes;
    uint32_t *ids;
    size_t *offsets;
    int32_t *labels;
    ...;
} dpt_tokens;
dpt_status dpt_tokens_load(const char *path, dpt_tokens *out);
void dpt_tokens_free(dpt_tokens *t);
dpt_status dpt_tokens_classification(const dpt_tokens *t, size_t seq_len, uint32_t pad_id, dpt_dataset *out);
dpt_status dpt_tokens_lm_windows(const dpt_tokens *t, size_t seq_len, size_t stride, dpt_dataset *out);
"""

# Frozen layers (dpt_train_config.freeze) and the layer table: declared only when the headers
# have them.
CDEF_FREEZE_FUNCS = r"""
size_t dpt_model_summary(const dpt_model *m, char *buf, size_t n);
dpt_status dpt_model_freeze_parse(const dpt_model *m, const char *spec, unsigned char *frozen, size_t *trained);
const char *dpt_trainer_frozen(const dpt_trainer *t, size_t *trained);
"""

# The trainer's callbacks (issue 19): declared only when the headers have them, so the
# package builds against a library with or without them (dptrain.train checks hasattr).
CDEF_CALLBACKS = r"""
typedef struct {
    uint64_t step, epoch;
    size_t step_in_epoch, steps_per_epoch;
    double wall_s, loss;
    size_t batch;
    ...;
} dpt_step_info;
typedef enum { DPT_LOG_INFO = 0, DPT_LOG_NOTE = 1, DPT_LOG_WARN = 2 } dpt_log_level;
typedef int (*dpt_step_fn)(void *user, const dpt_step_info *info);
typedef int (*dpt_epoch_fn)(void *user, const dpt_epoch_result *r);
typedef void (*dpt_log_fn)(void *user, dpt_log_level level, const char *msg);
extern "Python" int _dpt_py_on_step(void *, const dpt_step_info *);
extern "Python" int _dpt_py_on_epoch(void *, const dpt_epoch_result *);
extern "Python" void _dpt_py_log(void *, dpt_log_level, const char *);
typedef enum { DPT_STOP_NONE, DPT_STOP_DONE, DPT_STOP_MAX_STEPS, DPT_STOP_BUDGET,
               DPT_STOP_CALLBACK, ... } dpt_stop_reason;
dpt_stop_reason dpt_trainer_stop_reason(const dpt_trainer *t);
const char *dpt_trainer_run_id(const dpt_trainer *t);
dpt_status dpt_run_seed_resolve(const char *dir, int resume, uint64_t *seed, int *from_os);
dpt_status dpt_run_seed_resolve_at(const char *dir, const char *secret_dir, int resume, uint64_t *seed,
                                   int *from_os);
dpt_status dpt_run_secret_dir(const char *secret_dir, char *out, size_t cap);
dpt_status dpt_run_secret_path(const char *run_dir, const char *secret_dir, char *out, size_t cap, int *found);
dpt_status dpt_run_secret_remove(const char *run_dir, const char *secret_dir, char *note, size_t cap);
"""
# New run directories and PARENT/latest (dptrain.train's runs_dir=): when the headers have them.
CDEF_RUN_DIR = r"""
dpt_status dpt_run_dir_new_name(const char *parent, char *out, size_t cap);
dpt_status dpt_run_dir_link_latest(const char *run_dir, int *linked);
"""
# fields of dpt_train_config / dpt_epoch_result that come with the callbacks
CALLBACK_CONFIG_FIELDS = """
    dpt_step_fn on_step;
    dpt_epoch_fn on_epoch;
    dpt_log_fn log;
    void *user;
    int overwrite;
"""
CALLBACK_EPOCH_FIELDS = """
    double epsilon, epsilon_pld, delta;
    int partial;
    size_t steps_in_epoch, steps_per_epoch;
    double epsilon_rdp;
    int accountant;
"""

CDEF_INFERENCE = r"""
typedef struct dpt_checkpoint dpt_checkpoint;
dpt_status dpt_checkpoint_open(const char *path, int threads, dpt_checkpoint **out);
void dpt_checkpoint_close(dpt_checkpoint *ck);
dpt_model *dpt_checkpoint_model(dpt_checkpoint *ck);
const char *dpt_checkpoint_spec(const dpt_checkpoint *ck);
dpt_loss_kind dpt_checkpoint_loss(const dpt_checkpoint *ck);
const char *dpt_checkpoint_state(const dpt_checkpoint *ck);
uint64_t dpt_checkpoint_step(const dpt_checkpoint *ck);
const char *dpt_checkpoint_algorithm(const dpt_checkpoint *ck);
const dpt_ledger *dpt_checkpoint_ledger(const dpt_checkpoint *ck);
dpt_status dpt_checkpoint_epsilon(const dpt_checkpoint *ck, double delta, double *eps);
dpt_status dpt_checkpoint_predict(dpt_checkpoint *ck, const float *x, size_t n, float *out);
dpt_status dpt_checkpoint_evaluate(dpt_checkpoint *ck, const dpt_dataset *d, double *mean_loss,
                                   double *accuracy);
typedef struct { ...; } dpt_optim;
dpt_status dpt_checkpoint_save(const char *path, const dpt_model *m, const dpt_optim *opt,
                               const char *state_json);
"""


# Membership-inference auditing (dptrain/audit.h; dptrain.audit): the statistics and the
# scores of a model, declared when the header has them; the whole audit (dpt_audit_run)
# and its progress callback, when it has that too (with the trainer's callbacks, which
# dptrain.audit.run uses to stop the audit's trainers on Ctrl-C).
CDEF_AUDIT = r"""
typedef struct {
    double auc, auc_lo, auc_hi;
    double fpr_levels[2];
    double tpr[2], tpr_lo[2], tpr_hi[2];
    ...;
} dpt_audit_summary;
dpt_status dpt_audit_eps_lower_bound(uint64_t tp, uint64_t fn, uint64_t fp, uint64_t tn, double delta,
                                     double alpha, double *eps_lb);
dpt_status dpt_audit_eps_from_scores(const double *in, size_t n_in, const double *out, size_t n_out,
                                     double delta, double alpha, double *eps_lb, double *threshold);
dpt_status dpt_audit_one_run_eps(uint64_t m, uint64_t r, uint64_t v, double delta, double alpha, double *eps_lb);
dpt_status dpt_audit_one_run_guess(const double *score, const uint8_t *is_member, size_t n, size_t k, uint64_t *r,
                                   uint64_t *v);
double dpt_audit_auc(const double *in, size_t n_in, const double *out, size_t n_out);
double dpt_audit_tpr_at_fpr(const double *in, size_t n_in, const double *out, size_t n_out, double max_fpr);
dpt_status dpt_audit_roc(const double *in, size_t n_in, const double *out, size_t n_out, double *fpr, double *tpr,
                         size_t *n);
dpt_status dpt_audit_summarize(const double *in, size_t n_in, const double *out, size_t n_out, size_t n_boot,
                               double alpha, uint64_t seed, dpt_audit_summary *s);
dpt_status dpt_audit_scores(dpt_model *m, const dpt_dataset *d, const uint32_t *idx, size_t n, double *loss,
                            double *phi);
"""
CDEF_AUDIT_RUN = r"""
typedef enum { DPT_AUDIT_SGD, DPT_AUDIT_DPSGD, DPT_AUDIT_PDPSGD, DPT_AUDIT_PROPNOISE, ... } dpt_audit_algo;
typedef struct {
    dpt_train_config cfg;
    dpt_audit_algo algo;
    dpt_dpsgd_config dpsgd;
    dpt_pdp_config pdp;
    dpt_propnoise_config prop;
    ...;
} dpt_audit_job;
typedef enum { DPT_AUDIT_STAGE_START, DPT_AUDIT_STAGE_TARGET, DPT_AUDIT_STAGE_SHADOW, DPT_AUDIT_STAGE_CANARY,
               ... } dpt_audit_stage;
typedef struct {
    dpt_audit_stage stage;
    size_t done, total;
    size_t population, members;
    double test_accuracy;
    double elapsed_s;
    ...;
} dpt_audit_progress;
typedef void (*dpt_audit_progress_fn)(void *user, const dpt_audit_progress *p);
typedef struct {
    dpt_audit_job job;
    size_t shadows;
    int jobs;
    size_t bootstrap;
    double alpha;
    uint64_t seed;
    size_t canaries, canary_runs, one_run_guesses;
    dpt_model *target;
    size_t max_pairs;
    dpt_audit_progress_fn progress;
    void *user;
    ...;
} dpt_audit_config;
dpt_audit_config dpt_audit_config_defaults(void);
typedef struct {
    const char *name;
    double *in, *out;
    size_t n_in, n_out;
    dpt_audit_summary s;
    ...;
} dpt_audit_attack;
typedef struct {
    size_t population, members, shadows;
    size_t n_attacks;
    dpt_audit_attack attack[3];
    double test_accuracy, epsilon, sample_rate;
    double target_s, target_loop_s, shadow_s;
    size_t canaries, canary_runs, canary_in, canary_out;
    double canary_auc, canary_eps_lb, canary_threshold, canary_delta, canary_run_epsilon;
    uint64_t one_run_guesses, one_run_correct;
    double one_run_eps_lb;
    ...;
} dpt_audit_result;
dpt_status dpt_audit_run(const dpt_audit_config *cfg, const dpt_dataset *pop, const dpt_dataset *test,
                         dpt_audit_result *res);
void dpt_audit_result_free(dpt_audit_result *res);
extern "Python" void _dpt_py_audit_progress(void *, const dpt_audit_progress *);
"""


# The sampled Gaussian mechanism over the caller's gradients (dptrain/mechanism.h;
# dptrain.PrivateGradients), declared when the headers have it.
CDEF_MECHANISM = r"""
typedef enum { DPT_DGAUSS_TABLE, DPT_DGAUSS_CKS, ... } dpt_dgauss_method;
typedef struct dpt_sgm dpt_sgm;
typedef struct {
    size_t n, dim;
    double sample_rate, sigma, clip, delta, target_epsilon;
    uint64_t steps, seed;
    int secure;
    dpt_dgauss_method secure_sampler;
    int threads;
    const char *ledger_path;
    int resume, force;
    dpt_clip_mode clip_mode;
    const size_t *layer_sizes;
    size_t n_layers;
    double adaptive_quantile, adaptive_lr, adaptive_sigma_b;
    ...;
} dpt_sgm_config;
dpt_sgm_config dpt_sgm_config_defaults(void);
dpt_status dpt_sgm_new(const dpt_sgm_config *cfg, dpt_sgm **out);
void dpt_sgm_free(dpt_sgm *m);
size_t dpt_sgm_batch_cap(const dpt_sgm *m);
dpt_status dpt_sgm_sample(dpt_sgm *m, uint32_t *idx, size_t cap, size_t *b);
dpt_status dpt_sgm_batch(const dpt_sgm *m, uint32_t *idx, size_t cap, size_t *b);
dpt_status dpt_sgm_release(dpt_sgm *m, const float *grads, size_t b, float *out);
dpt_status dpt_sgm_accumulate(dpt_sgm *m, const float *grads, size_t rows);
dpt_status dpt_sgm_release_accumulated(dpt_sgm *m, float *out);
dpt_status dpt_sgm_epsilon(const dpt_sgm *m, double delta, dpt_accountant acct, double *eps);
const dpt_ledger *dpt_sgm_ledger(const dpt_sgm *m);
double dpt_sgm_sigma(const dpt_sgm *m);
double dpt_sgm_sigma_accounted(const dpt_sgm *m);
uint64_t dpt_sgm_steps(const dpt_sgm *m);
double dpt_sgm_clip(const dpt_sgm *m);
dpt_status dpt_privacy_secure_distance(dpt_dgauss_method method, double *mu, double *tv);
dpt_status dpt_dgauss_method_parse(const char *name, dpt_dgauss_method *out);
dpt_status dpt_ledger_add_sgm_dgauss(dpt_ledger *l, double q, double sigma, uint64_t coords, double mu, double tv,
                                     uint64_t count);
"""


def _pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "dptrain"], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out.stdout)


def locate():
    """(include_dirs, library_dirs, how) for the headers and libdptrain.so to build against."""
    build = os.environ.get("DPTRAIN_BUILD_DIR")
    if build:
        given, build = build, os.path.abspath(build)
        if not os.path.isdir(build):
            sys.exit("build_ffi: DPTRAIN_BUILD_DIR=%s: %s is not a directory%s" % (
                given, build, "" if os.path.isabs(given) else
                " (a relative path is taken from the current directory, which is python/ when pip builds "
                "the package: give an absolute one, e.g. DPTRAIN_BUILD_DIR=$PWD/build)"))
        src = _source_dir_of(build)
        return [os.path.join(src, "include"), os.path.join(build, "include")], [build], "DPTRAIN_BUILD_DIR=" + build
    prefix = os.environ.get("DPTRAIN_PREFIX")
    if prefix:
        prefix = os.path.abspath(prefix)
        libdirs = [d for d in (os.path.join(prefix, "lib"), os.path.join(prefix, "lib64"),
                               os.path.join(prefix, "lib", "x86_64-linux-gnu"))
                   if os.path.isdir(d) and any(f.startswith("libdptrain.so") for f in os.listdir(d))]
        return [os.path.join(prefix, "include")], libdirs, "DPTRAIN_PREFIX=" + prefix
    cflags, libs = _pkg_config("--cflags-only-I"), _pkg_config("--libs-only-L")
    if cflags is not None and libs is not None:
        # normalized: a relocatable .pc gives ${pcfiledir}/../../lib, recorded as the run path
        inc = [os.path.normpath(f[2:]) for f in cflags if f.startswith("-I")]
        lib = [os.path.normpath(f[2:]) for f in libs if f.startswith("-L")]
        if not lib:
            var = _pkg_config("--variable=libdir")
            lib = var if var else []
        return inc, lib, "pkg-config dptrain"
    build = os.path.join(REPO, "build")
    if os.path.exists(os.path.join(build, "libdptrain.so")):
        return [os.path.join(REPO, "include"), os.path.join(build, "include")], [build], "in-tree build " + build
    sys.exit("build_ffi: libdptrain not found: set DPTRAIN_BUILD_DIR to a cmake build directory, DPTRAIN_PREFIX "
             "to an install prefix, or install it so that `pkg-config dptrain` finds it")


def bundled_build_dir():
    """The cmake build directory whose libdptrain.so an installed package ships inside itself
    (DPTRAIN_BUILD_DIR or ../build), or None when the library found is an installed one."""
    _, library_dirs, how = locate()
    return library_dirs[0] if how.startswith(("DPTRAIN_BUILD_DIR=", "in-tree build ")) else None


def _source_dir_of(build):
    """The source tree of a cmake build directory (CMAKE_HOME_DIRECTORY in its cache)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return REPO


def _read_header(include_dirs, name):
    for d in include_dirs:
        p = os.path.join(d, "dptrain", name)
        if os.path.exists(p):
            with open(p) as f:
                return f.read()
    return ""


def make_builder(bundle=False):
    """bundle: the library will sit beside the extension (setup.py copies it), so the extension's
    run path is $ORIGIN rather than the directory it was linked from."""
    include_dirs, library_dirs, how = locate()
    train_h = _read_header(include_dirs, "train.h")
    if not train_h:
        sys.exit("build_ffi: dptrain/train.h not found in %s (%s)" % (include_dirs, how))
    have_callbacks = bool(re.search(r"\bdpt_step_fn\s+on_step\s*;", train_h))
    have_inference = bool(_read_header(include_dirs, "inference.h"))
    train = CDEF_TRAIN
    if re.search(r"\bint\s+quiet\s*;", train_h):  # before the callbacks: the trainer printed epoch lines
        train = train.replace("    size_t shards;\n", "    size_t shards;\n    int progress, quiet;\n", 1)
    have_freeze = bool(re.search(r"\bconst\s+char\s+\*freeze\s*;", train_h))
    if have_freeze:  # a field of the config (its order does not matter in a `...;` struct)
        train = train.replace("    const char *model_spec;\n", "    const char *model_spec;\n    const char *freeze;\n",
                              1)
    if re.search(r"\bint\s+no_feature_cache\s*;", train_h):
        train = train.replace("    const char *model_spec;\n", "    const char *model_spec;\n    int no_feature_cache;\n", 1)
    if re.search(r"\bsize_t\s+physical_batch\s*;", train_h):  # virtual batches in the engine
        train = train.replace("    size_t shards;\n", "    size_t shards;\n    size_t physical_batch;\n", 1)
    if re.search(r"\bdouble\s+ema_decay\s*;", train_h):  # parameter averaging, augmentation (issue 42 item 4)
        train = train.replace("    size_t shards;\n", "    size_t shards;\n    double ema_decay;\n    int ema_warmup;\n"
                              "    int augment;\n    size_t aug_mult;\n", 1)
        train = train.replace("    double train_loss, test_loss, test_accuracy, wall_s, lr;\n",
                              "    double train_loss, test_loss, test_accuracy, wall_s, lr;\n"
                              "    double test_loss_ema, test_accuracy_ema;\n", 1)
        train = ("typedef enum { DPT_AUGMENT_NONE = 0, DPT_AUGMENT_CROP = 1, DPT_AUGMENT_CROP_FLIP = 2 } "
                 "dpt_augment_kind;\n") + train
    have_targets = "dpt_dataset_from_targets" in _read_header(include_dirs, "data.h")
    data_nn = CDEF_DATA_NN
    if have_targets:  # fields of `...;` structs: their order does not matter
        data_nn = data_nn.replace("    size_t shape[3];\n    ...;\n} dpt_dataset;",
                                  "    size_t shape[3];\n    float *t;\n    size_t t_dim;\n    ...;\n} dpt_dataset;", 1)
        train = train.replace("    double train_loss, test_loss, test_accuracy, wall_s, lr;\n",
                              "    double train_loss, test_loss, test_accuracy, wall_s, lr;\n    double test_mse;\n", 1)
    cdef = CDEF_CORE + CDEF_ACCOUNTING + data_nn
    if have_callbacks:
        cb_types, cb_rest = CDEF_CALLBACKS.split("extern \"Python\"", 1)
        # step info and the callback types must precede the config that holds them
        epoch_fields = CALLBACK_EPOCH_FIELDS
        if re.search(r"\bchar\s+privacy_label\s*\[", train_h):  # the labels every epoch line carries
            epoch_fields += "    char privacy_label[...];\n"
        train = train.replace("typedef struct {\n    uint64_t epoch, step;",
                              "typedef struct {\n    uint64_t epoch, step;" + epoch_fields, 1)
        head, tail = train.split("typedef struct {\n    const char *model_spec;", 1)
        train = head + cb_types + "typedef struct {\n    const char *model_spec;" + \
            tail.replace("    size_t shards;\n", "    size_t shards;\n" + CALLBACK_CONFIG_FIELDS, 1)
        train += "extern \"Python\"" + cb_rest
    cdef += train
    if "dpt_train_calibrate_sigma" in train_h and "dpt_sampler_steps_for_epochs" in _read_header(include_dirs,
                                                                                                "data.h"):
        cdef += CDEF_PLANNING
    if "dpt_trainer_set_initial_params" in train_h:
        cdef += CDEF_INIT_PARAMS
    if have_freeze:
        cdef += CDEF_FREEZE_FUNCS
    if have_targets:
        cdef += CDEF_TARGETS
    if "dpt_data_load_fortunes" in _read_header(include_dirs, "data.h"):
        cdef += CDEF_TEXT
    if have_inference:
        cdef += CDEF_INFERENCE
    audit_h = _read_header(include_dirs, "audit.h")
    if re.search(r"\bdpt_audit_summarize\s*\(", audit_h) and re.search(r"\bdpt_audit_scores\s*\(", audit_h):
        cdef += CDEF_AUDIT
        if have_callbacks and re.search(r"\bdpt_audit_run\s*\(", audit_h):
            audit_run = CDEF_AUDIT_RUN
            if re.search(r"\bchar\s+epsilon_label\s*\[", audit_h):  # the labels of the audit's epsilon
                audit_run = audit_run.replace("    double one_run_eps_lb;\n", "    double one_run_eps_lb;\n"
                                              "    char epsilon_label[...];\n", 1)
            cdef += audit_run
            if re.search(r"\bvoid\s+dpt_algo_free\s*\(", train_h):  # dptrain.audit.run's constructor probe
                cdef += "void dpt_algo_free(dpt_algo *a);\n"
    if re.search(r"\bdpt_run_dir_new_name\s*\(", train_h):  # runs_dir=: new run directories, PARENT/latest
        cdef += CDEF_RUN_DIR
    if re.search(r"\bdpt_sgm_release\s*\(", _read_header(include_dirs, "mechanism.h")):
        cdef += CDEF_MECHANISM
    if re.search(r"\bdpt_ledger_label\s*\(", _read_header(include_dirs, "accounting.h")):  # labels of an epsilon
        cdef += "void dpt_ledger_label(const dpt_ledger *l, int full, char *buf, size_t cap);\n"
        if have_inference:
            cdef += "void dpt_checkpoint_label(const dpt_checkpoint *ck, int full, char *buf, size_t cap);\n"
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(
        "dptrain._dptrain_cffi",
        "#include <dptrain/dptrain.h>\n%s\n#include <stdlib.h>\n"
        "#define DPTRAIN_PY_HAVE_CALLBACKS %d\n" % ("#include <dptrain/inference.h>" if have_inference else "",
                                                    int(have_callbacks)),
        include_dirs=include_dirs,
        library_dirs=library_dirs,
        runtime_library_dirs=["$ORIGIN"] if bundle else library_dirs,
        libraries=["dptrain"],
        extra_compile_args=["-O2", "-std=c11"],
    )
    return ffi


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="build dptrain's cffi module for in-tree use")
    ap.add_argument("--build-dir", required=True, help="cmake build directory (holds libdptrain.so)")
    args = ap.parse_args(argv)
    os.environ["DPTRAIN_BUILD_DIR"] = os.path.abspath(args.build_dir)
    ffi = make_builder()
    out = os.path.join(os.path.abspath(args.build_dir), "python")
    os.makedirs(out, exist_ok=True)
    path = ffi.compile(tmpdir=out, verbose=False)
    print(path)


# setup.py's cffi_modules entry point
ffibuilder = make_builder(bundle=bundled_build_dir() is not None) if __name__ != "__main__" else None

if __name__ == "__main__":
    main(sys.argv[1:])
