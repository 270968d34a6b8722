/* Fuzzes the ledger reader (what `dptrain account --ledger` and resume parse). A ledger
 * refused only for its checksum is re-sealed with the checksum its content hashes to (the
 * reader says it) and read again, so the accepting paths are reached too: for an accepted
 * ledger, its RDP epsilon and a write/read round trip that must give the same epsilon.
 * Seeds: ledgers written by dpt_ledger_to_json. */
#include <dptrain/accounting.h>

#include <cjson/cJSON.h>
#include <math.h>

#include "fuzz_util.h"

static void accepted(dpt_ledger *l) {
    double e1 = NAN, e2 = NAN;
    dpt_status st1 = dpt_ledger_epsilon(l, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e1);
    char *js = NULL;
    dpt_ledger *l2 = NULL;
    if (dpt_ledger_to_json(l, &js) != DPT_OK || dpt_ledger_from_json(js, &l2) != DPT_OK) abort(); /* we read what we write */
    dpt_status st2 = dpt_ledger_epsilon(l2, 1e-5, DPT_ACCT_RDP, DPT_CONV_BALLE, &e2);
    if (st1 != st2 || (st1 == DPT_OK && !(e1 == e2 || (isnan(e1) && isnan(e2))))) abort();
    dpt_ledger_free(l2);
    free(js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = fuzz_str(data, size);
    dpt_ledger *l = NULL;
    if (dpt_ledger_from_json(s, &l) == DPT_OK) {
        accepted(l);
        dpt_ledger_free(l);
    } else {
        const char *e = strstr(dpt_last_error(), "content hashes to ");
        cJSON *root = e ? cJSON_Parse(s) : NULL;
        if (root && cJSON_IsObject(root)) {
            cJSON *sum = cJSON_CreateString(e + strlen("content hashes to "));
            if (!cJSON_ReplaceItemInObjectCaseSensitive(root, "checksum", sum)) cJSON_Delete(sum);
            char *t = cJSON_PrintUnformatted(root);
            if (t && dpt_ledger_from_json(t, &l) == DPT_OK) {
                accepted(l);
                dpt_ledger_free(l);
            }
            free(t);
        }
        cJSON_Delete(root);
    }
    free(s);
    return 0;
}

static void fuzz_seeds(const char *dir) {
    dpt_ledger *l = NULL;
    char *js = NULL;
    double orders[3] = {2, 4, 8}, rdp[3] = {0.01, 0.02, 0.05};
    if (dpt_ledger_new(&l) != DPT_OK || dpt_ledger_set_meta(l, "algorithm", "dpsgd") != DPT_OK ||
        dpt_ledger_add_sgm(l, 0.01, 1.1, 100) != DPT_OK || dpt_ledger_add_rdp_curve(l, orders, rdp, 3, 2, "pca") != DPT_OK ||
        dpt_ledger_add_gaussian(l, 1.0, 4.0, "stats") != DPT_OK || dpt_ledger_add_eps_delta(l, 0.1, 1e-7, "x") != DPT_OK ||
        dpt_ledger_add_dpulr(l, 0.01, 2.0, 10000, 50, 20) != DPT_OK || dpt_ledger_to_json(l, &js) != DPT_OK)
        abort();
    fuzz_seed(dir, "ledger_mixed", js, strlen(js));
    free(js);
    dpt_ledger_free(l);
    if (dpt_ledger_new(&l) != DPT_OK || dpt_ledger_to_json(l, &js) != DPT_OK) abort();
    fuzz_seed(dir, "ledger_empty", js, strlen(js));
    free(js);
    dpt_ledger_free(l);
}
