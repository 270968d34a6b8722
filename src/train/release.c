/* What a run's privacy statement does not cover: uses of the training data outside every
 * accountant, recorded where the run's results are published (ledger, metrics). */
#include <dptrain/accounting.h>
#include <string.h>

#include "train_internal.h"

dpt_status dpt_trainer_exclude_from_guarantee(dpt_trainer *t, const char *what) {
    DPT_CHECK(t, DPT_EINVAL, "dpt_trainer_exclude_from_guarantee: t is NULL");
    DPT_CHECK(what && what[0], DPT_EINVAL, "dpt_trainer_exclude_from_guarantee: what must be a non-empty text");
    DPT_CHECK(strlen(what) < sizeof t->excludes, DPT_EINVAL,
              "dpt_trainer_exclude_from_guarantee: what is longer than %zu bytes", sizeof t->excludes - 1);
    /* Before any result leaves the process: a resumed run's ledger holds the note already
     * (it is set again, identically, so a changed note shows in the ledger). */
    DPT_CHECK(t->step == 0 || t->resumed, DPT_EINVAL,
              "dpt_trainer_exclude_from_guarantee: call it before dpt_trainer_run (step %llu)",
              (unsigned long long)t->step);
    /* several exclusions are kept side by side ("; "); one already recorded is not repeated */
    if (strstr(t->excludes, what)) return DPT_OK;
    size_t have = strlen(t->excludes);
    DPT_CHECK(have + (have ? 2 : 0) + strlen(what) < sizeof t->excludes, DPT_EINVAL,
              "dpt_trainer_exclude_from_guarantee: the exclusions together exceed %zu bytes", sizeof t->excludes - 1);
    char all[sizeof t->excludes];
    memcpy(all, t->excludes, have);
    if (have) memcpy(all + have, "; ", 2), have += 2;
    memcpy(all + have, what, strlen(what) + 1); /* fits: checked above */
    if (t->ledger) DPT_TRY(dpt_ledger_set_meta(t->ledger, "epsilon_excludes", all));
    strcpy(t->excludes, all);
    return DPT_OK;
}
