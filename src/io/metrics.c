/* io: JSON-lines metrics. One object per line, flushed after every line so that a crashed
 * or killed run keeps every line it wrote (tail -f works while training). */
#include <dptrain/io.h>

#include <errno.h>
#include <string.h>

dpt_status dpt_metrics_open(dpt_metrics *mt, const char *path, int append) {
    DPT_CHECK(mt && path, DPT_EINVAL, "metrics: NULL argument");
    memset(mt, 0, sizeof *mt);
    DPT_CHECK(strlen(path) < sizeof mt->path, DPT_EINVAL, "metrics: path longer than %zu bytes",
              sizeof mt->path - 1);
    mt->f = fopen(path, append ? "a" : "w");
    DPT_CHECK(mt->f, DPT_EIO, "%s: cannot open for writing: %s", path, strerror(errno));
    strcpy(mt->path, path);
    return DPT_OK;
}

dpt_status dpt_metrics_write(dpt_metrics *mt, const char *json_object) {
    DPT_CHECK(mt && mt->f, DPT_EINVAL, "metrics: file is not open");
    DPT_CHECK(json_object && json_object[0] == '{' && !strchr(json_object, '\n'), DPT_EINVAL,
              "%s: a metrics line must be one JSON object without newlines", mt->path);
    DPT_CHECK(fputs(json_object, mt->f) >= 0 && fputc('\n', mt->f) != EOF && fflush(mt->f) == 0,
              DPT_EIO, "%s: write failed: %s", mt->path, strerror(errno));
    return DPT_OK;
}

void dpt_metrics_close(dpt_metrics *mt) {
    if (!mt || !mt->f) return;
    fclose(mt->f);
    mt->f = NULL;
}
