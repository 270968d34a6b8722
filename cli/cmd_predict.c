/* dptrain predict: a trained model's predictions for new data. Reads the feature columns of
 * a CSV file, applies the checkpoint's stored normalization statistics and recorded DP-PCA
 * as training did, and writes one CSV line per row: a classifier's predicted class and
 * probabilities, a regression model's predicted targets. Predictions of a DP model on new
 * data are post-processing: nothing here touches a privacy ledger. */
#include <cjson/cJSON.h>
#include <dptrain/inference.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "run_data.h"

static const char *USAGE =
    "usage: dptrain predict --checkpoint FILE|DIR --input FILE.csv [options]\n\n"
    "Predicts with a model that dptrain train saved. Reads the feature columns of a CSV file\n"
    "(comma separated, an optional header line, every field a number; --skip N leaves out\n"
    "the first N columns, e.g. the label of a labelled file), applies the normalization and\n"
    "DP-PCA the checkpoint records, as training did, and writes one CSV line per row, after a\n"
    "header: for a classifier (--loss ce) the predicted class and the softmax probabilities\n"
    "(prediction,p_0,...; a run trained with --classes names its kept labels: prediction,p_3,\n"
    "p_7 for --classes 3,7); --loss bce: the class and each output's sigmoid; a regression\n"
    "model (--targets K) its K predicted targets (prediction, or prediction_0,...); an\n"
    "autoencoder (--loss mse without targets) its outputs (output_0,...).";

/* Writes the CSV text of the predictions o [n, K] to f: a classifier's class is the label
 * lab[k] of its output k (the data's labels before --classes relabelled them; lab NULL:
 * k itself). */
static void format(FILE *f, const float *o, size_t n, size_t K, dpt_loss_kind loss, int regression, const int *lab) {
    const int classifier = loss != DPT_LOSS_SQUARED && loss != DPT_LOSS_TOKEN_CE; /* token-ce: the logits */
#define LAB(k) (lab ? (long)lab[k] : (long)(k))
    if (classifier) fputs("prediction", f);
    for (size_t k = 0; k < K; k++) {
        const char *sep = classifier || k ? "," : "";
        if (classifier) fprintf(f, "%sp_%ld", sep, loss == DPT_LOSS_SIGMOID_BCE && K == 1 ? LAB(1) : LAB(k));
        else if (regression && K == 1) fputs("prediction", f);
        else fprintf(f, "%s%s_%zu", sep, regression ? "prediction" : "output", k);
    }
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        const float *r = o + i * K;
        if (classifier) {
            size_t best = 0;
            for (size_t k = 1; k < K; k++) best = r[k] > r[best] ? k : best;
            if (K == 1) best = r[0] > 0; /* one output: label 1 when its logit is positive */
            fprintf(f, "%ld", LAB(best));
            /* softmax in double from the largest logit; sigmoid per output for bce */
            const double top = r[K == 1 ? 0 : best];
            double sum = 0;
            for (size_t k = 0; k < K && loss == DPT_LOSS_SOFTMAX_CE; k++) sum += exp((double)r[k] - top);
            for (size_t k = 0; k < K; k++) {
                double p = loss == DPT_LOSS_SOFTMAX_CE ? exp((double)r[k] - top) / sum : 1 / (1 + exp(-(double)r[k]));
                fprintf(f, ",%.6g", p);
            }
        } else {
            for (size_t k = 0; k < K; k++) fprintf(f, "%s%.9g", k ? "," : "", (double)r[k]);
        }
        fputc('\n', f);
    }
#undef LAB
}

int dpt_cmd_predict(int argc, char **argv) {
    const char *ckpt_arg = NULL, *input = NULL, *out = NULL;
    long skip = 0, threads = 0;
    cli_option opts[] = {
        {"--checkpoint", CLI_STR, &ckpt_arg, "FILE|DIR", "checkpoint.safetensors written by dptrain train, or its run directory (required)", NULL},
        {"--input", CLI_STR, &input, "FILE", "CSV file of the examples to predict (.gz accepted; required)", NULL},
        {"--skip", CLI_LONG, &skip, "N", "leading columns that are not features: 1 for a file with its label first, K for a --targets K file", NULL},
        {"--out", CLI_STR, &out, "FILE", "write the predictions to FILE instead of stdout (a file is replaced atomically; a device or FIFO is written in place; a symbolic link is followed and kept; - or the file stdout is, e.g. /dev/stdout, is written through stdout)", NULL},
        {"--threads", CLI_LONG, &threads, "N", "threads (0 = all cores)", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    int rc = cli_parse(argc, argv, 1, opts, USAGE);
    if (rc < 0) return 0;
    if (rc) return rc;
    if (!ckpt_arg) return cli_error("--checkpoint: required (see dptrain predict --help)");
    if (!input) return cli_error("--input: required (a CSV file of features; see dptrain predict --help)");
    if (skip < 0 || skip >= 1000000) return cli_error("--skip must be in [0, 1000000), got %ld", skip);
    if (threads < 0 || threads > 1024) return cli_error("--threads must be in [0, 1024], got %ld", threads);
    if (out && !*out) return cli_error("--out: empty file name");
    char ckpt[1100];
    if ((rc = cli_checkpoint_file("--checkpoint", ckpt_arg, ckpt, sizeof ckpt)) != 0) return rc;

    dpt_threads_set_blas((int)threads);
    dpt_checkpoint *ck = NULL;
    dpt_status st = dpt_checkpoint_open(ckpt, (int)threads, &ck);
    if (st != DPT_OK) return cli_refuse(st, "--checkpoint");
    dpt_dataset d;
    memset(&d, 0, sizeof d);
    float *o = NULL;
    char *text = NULL;
    int code = 0;
    if ((st = dpt_data_load_csv_features(input, (size_t)skip, &d)) != DPT_OK) {
        code = cli_refuse(st, "--input");
        goto done;
    }
    /* the run's preprocessing (runs of dptrain train record it; a Python run or a
     * Model.save checkpoint trained on the arrays as given) */
    cJSON *root = cJSON_Parse(dpt_checkpoint_state(ck));
    const cJSON *run = root ? cJSON_GetObjectItemCaseSensitive(root, "run") : NULL;
    long targets = 0;
    if (run && cli_run_targets(run, &targets) != DPT_OK) targets = 0;
    if (!targets && root) { /* Model.save keeps the target count at the top */
        const cJSON *tg = cJSON_GetObjectItemCaseSensitive(root, "targets");
        if (cJSON_IsNumber(tg) && tg->valuedouble >= 1) targets = (long)tg->valuedouble;
    }
    int lab[64];
    size_t n_lab = 0;
    st = run ? cli_run_classes(run, lab, &n_lab) : DPT_OK;
    /* the features the run's inputs had: a recorded DP-PCA's, or the model's */
    const dpt_model *m = dpt_checkpoint_model(ck);
    const size_t K = dpt_model_out_dim(m);
    size_t in = dpt_model_in_dim(m);
    const cJSON *pca = run ? cJSON_GetObjectItemCaseSensitive(run, "pca") : NULL;
    const cJSON *pf = pca ? cJSON_GetObjectItemCaseSensitive(pca, "features") : NULL;
    if (cJSON_IsNumber(pf) && pf->valuedouble >= 1 && pf->valuedouble <= 1e7) in = (size_t)pf->valuedouble;
    char *run_s = run && cJSON_GetObjectItemCaseSensitive(run, "normalize") ? cJSON_PrintUnformatted(run) : NULL;
    cJSON_Delete(root);
    if (st == DPT_OK && n_lab && n_lab != K && !(n_lab == 2 && K == 1))
        st = dpt_set_error(DPT_EFORMAT, "checkpoint run record: %zu classes kept, but the model has %zu outputs", n_lab,
                           K);
    if (st != DPT_OK) {
        free(run_s);
        code = cli_refuse(st, "--checkpoint");
        goto done;
    }
    if (d.dim != in) {
        free(run_s);
        code = cli_error("--input %s: %zu feature%s per row%s, but the model of %s takes %zu%s", input, d.dim,
                         d.dim == 1 ? "" : "s", skip ? " after --skip" : "", ckpt, in,
                         skip ? "" : " (--skip N leaves out leading columns such as a label)");
        goto done;
    }
    if (run_s) {
        st = cli_apply_run_preprocessing(run_s, &d);
        free(run_s);
        if (st != DPT_OK) {
            code = cli_refuse(st, "--checkpoint");
            goto done;
        }
    }
    o = malloc(d.n * K * sizeof *o);
    if (!o) {
        code = cli_failf("out of memory for %zu x %zu predictions", d.n, K);
        goto done;
    }
    if ((st = dpt_checkpoint_predict(ck, d.x, d.n, o)) != DPT_OK) {
        code = cli_fail("predict");
        goto done;
    }
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    if (mem) format(mem, o, d.n, K, dpt_checkpoint_loss(ck), targets > 0, n_lab ? lab : NULL);
    if (!mem || ferror(mem) | fclose(mem)) {
        code = cli_failf("out of memory for the predictions' text");
        goto done;
    }
    if (out) {
        if ((code = cli_write_output("--out", out, text, text_len)) == 0) fprintf(stderr, "dptrain predict: %zu predictions written to %s\n", d.n, out);
    } else if (fwrite(text, 1, text_len, stdout) != text_len || fflush(stdout) != 0) {
        code = cli_failf("writing the predictions to stdout failed");
    }
done:
    free(text);
    free(o);
    dpt_dataset_free(&d);
    dpt_checkpoint_close(ck);
    return code;
}
