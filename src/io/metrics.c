/* io: JSON-lines metrics. One object per line, each written with one write(2) on a file
 * opened for appending, so that a crashed or killed run keeps every line it wrote (tail -f
 * works while training) and leaves at most one cut-short last line, which
 * dpt_metrics_last_step removes before a resumed run appends. */
#include <dptrain/io.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    size_t n = strlen(json_object);
    char *line = malloc(n + 2);
    DPT_CHECK(line, DPT_ENOMEM, "%s: out of memory", mt->path);
    memcpy(line, json_object, n);
    line[n] = '\n';
    /* stdio is bypassed (nothing is ever buffered in mt->f): one write of the whole line */
    int fd = fileno(mt->f);
    size_t done = 0;
    while (done < n + 1) {
        ssize_t w = write(fd, line + done, n + 1 - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            free(line);
            return dpt_set_error(DPT_EIO, "%s: write failed: %s", mt->path, w < 0 ? strerror(errno) : "no progress");
        }
        done += (size_t)w;
    }
    free(line);
    return DPT_OK;
}

void dpt_metrics_close(dpt_metrics *mt) {
    if (!mt || !mt->f) return;
    fclose(mt->f);
    mt->f = NULL;
}

dpt_status dpt_metrics_last_step(const char *path, int *found, uint64_t *step) {
    *found = 0;
    *step = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        DPT_CHECK(errno == ENOENT, DPT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        return DPT_OK;
    }
    DPT_CHECK(S_ISREG(st.st_mode), DPT_EIO, "%s: not a regular file", path);
    uint8_t *buf = NULL;
    size_t n = 0;
    DPT_TRY(dpt_read_file(path, &buf, &n));
    char *s = (char *)buf;
    size_t end = n; /* bytes of complete lines */
    while (end > 0 && s[end - 1] != '\n') end--;
    dpt_status rc = DPT_OK;
    if (end < n && truncate(path, (off_t)end) != 0)
        rc = dpt_set_error(DPT_EIO, "%s: cannot remove its cut-short last line: %s", path, strerror(errno));
    size_t lo = end ? end - 1 : 0; /* the last complete line is s[lo, end - 1) */
    while (lo > 0 && s[lo - 1] != '\n') lo--;
    if (rc == DPT_OK && end > 0) {
        s[end - 1] = 0;
        cJSON *o = cJSON_Parse(s + lo);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (!cJSON_IsObject(o) || !cJSON_IsNumber(v) || !(v->valuedouble >= 0) ||
            v->valuedouble != floor(v->valuedouble) || v->valuedouble > 9007199254740992.0)
            rc = dpt_set_error(DPT_EFORMAT, "%s: the last line is not a metrics record with a \"step\"", path);
        else {
            *found = 1;
            *step = (uint64_t)v->valuedouble;
        }
        cJSON_Delete(o);
    }
    dpt_free(buf);
    return rc;
}
