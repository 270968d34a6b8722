/* io: checkpoints in the safetensors layout (https://github.com/huggingface/safetensors):
 *   [8 bytes: N, little-endian u64][N bytes: JSON header, space-padded][tensor data]
 * header = {"__metadata__": {string: string}, "<name>": {"dtype": "F32", "shape": [...],
 *           "data_offsets": [begin, end]}, ...}, offsets relative to the data start.
 * The whole file is built in memory and handed to dpt_write_file_atomic, so a crash leaves
 * either the previous checkpoint or the new one. Loading validates everything (lengths,
 * JSON, marker, version, every metadata field's type and range, dtypes, shapes, contiguous
 * offsets, exact file length, and one SHA-256 over the WHOLE file: length field, header and
 * data, with the 64 hex digits of the hash itself read as '0') before a single parameter
 * is written, so a refused file leaves the model and optimizer untouched. An edited model
 * spec, optimizer state, RNG position or normalization statistic is refused like a flipped
 * data bit. See docs/checkpoints.md. */
#include <dptrain/io.h>

#include "io/checkpoint_ema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* safetensors refuses headers above 100 MB; so do we (a corrupted length field must not
 * make us trust a huge allocation). */
#define CK_MAX_HEADER ((uint64_t)100 * 1000 * 1000)
#define CK_MAX_TENSORS 4096
#define CK_HASH_KEY "checkpoint_sha256"
/* where the hash sits in the header as written: "checkpoint_sha256":"<64 hex digits>" */
#define CK_HASH_MARK "\"" CK_HASH_KEY "\":\""
#define CK_OPT_M "optim.m"
#define CK_OPT_V "optim.v"
/* A run with parameter averaging (dpt_train_config.ema_decay) stores the EMA under the
 * model's own tensor names (what predict, evaluate and PyTorch read) and the raw trained
 * parameters, flat, under this name (what a resume continues from). */
#define CK_RAW "train.theta"

/* ==== Little-endian encoding (explicit, independent of the host) ==== */

static void put_u64le(uint8_t *p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
}
static uint64_t get_u64le(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x |= (uint64_t)p[i] << (8 * i);
    return x;
}
static void put_f32le(uint8_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], 4);
        dst[4 * i] = (uint8_t)u, dst[4 * i + 1] = (uint8_t)(u >> 8);
        dst[4 * i + 2] = (uint8_t)(u >> 16), dst[4 * i + 3] = (uint8_t)(u >> 24);
    }
}
static void get_f32le(float *dst, const uint8_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)src[4 * i] | (uint32_t)src[4 * i + 1] << 8 |
                     (uint32_t)src[4 * i + 2] << 16 | (uint32_t)src[4 * i + 3] << 24;
        memcpy(&dst[i], &u, 4);
    }
}

/* ==== Saving ==== */

typedef struct {
    const char *name;
    int ndim;
    size_t shape[4];
    const float *src; /* [size] */
    size_t size;
} ck_out;

static const char *opt_kind_name(dpt_opt_kind k) { return k == DPT_OPT_ADAM ? "adam" : "sgd"; }

/* The optimizer's config and step count as a JSON object string (malloc'd). */
static char *optimizer_json(const dpt_optim *o) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddStringToObject(j, "kind", opt_kind_name(o->cfg.kind));
    cJSON_AddNumberToObject(j, "lr", o->cfg.lr);
    cJSON_AddNumberToObject(j, "momentum", o->cfg.momentum);
    cJSON_AddNumberToObject(j, "weight_decay", o->cfg.weight_decay);
    cJSON *b = cJSON_AddArrayToObject(j, "betas");
    if (b) {
        cJSON_AddItemToArray(b, cJSON_CreateNumber(o->cfg.beta1));
        cJSON_AddItemToArray(b, cJSON_CreateNumber(o->cfg.beta2));
    }
    cJSON_AddNumberToObject(j, "eps", o->cfg.eps);
    cJSON_AddNumberToObject(j, "t", (double)o->t);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

dpt_status dpt_checkpoint_save(const char *path, const dpt_model *m, const dpt_optim *opt,
                               const char *state_json) {
    return dpt_checkpoint_save_ema(path, m, opt, state_json, NULL);
}

dpt_status dpt_checkpoint_save_ema(const char *path, const dpt_model *m, const dpt_optim *opt,
                                   const char *state_json, const float *ema) {
    DPT_CHECK(path && m, DPT_EINVAL, "checkpoint save: NULL path or model");
    if (!state_json) state_json = "{}";
    cJSON *st = cJSON_Parse(state_json);
    int st_ok = st && cJSON_IsObject(st);
    cJSON_Delete(st);
    DPT_CHECK(st_ok, DPT_EINVAL, "%s: training state is not a JSON object", path);
    if (opt) {
        DPT_CHECK(opt->n == m->n_params, DPT_EINVAL,
                  "%s: optimizer has %zu parameters, model has %zu", path, opt->n, m->n_params);
    }

    /* The tensor table: the model's named tensors, then the optimizer moments. */
    size_t nt_model = dpt_model_n_tensors(m), nt = nt_model + 3;
    ck_out *t = calloc(nt, sizeof *t);
    DPT_CHECK(t, DPT_ENOMEM, "%s: out of memory", path);
    dpt_param_tensor *pt = calloc(nt_model ? nt_model : 1, sizeof *pt);
    if (!pt) {
        free(t);
        return dpt_set_error(DPT_ENOMEM, "%s: out of memory", path);
    }
    nt = 0;
    for (size_t i = 0; i < nt_model; i++) {
        dpt_model_tensor(m, i, &pt[i]);
        DPT_ASSERT(pt[i].offset + pt[i].size <= m->n_params && pt[i].ndim <= 4);
        t[nt++] = (ck_out){pt[i].name, pt[i].ndim,
                           {pt[i].shape[0], pt[i].shape[1], pt[i].shape[2], pt[i].shape[3]},
                           (ema ? ema : m->theta) + pt[i].offset, pt[i].size};
    }
    if (ema) t[nt++] = (ck_out){CK_RAW, 1, {m->n_params, 0, 0, 0}, m->theta, m->n_params};
    if (opt && opt->m) t[nt++] = (ck_out){CK_OPT_M, 1, {opt->n, 0, 0, 0}, opt->m, opt->n};
    if (opt && opt->v) t[nt++] = (ck_out){CK_OPT_V, 1, {opt->n, 0, 0, 0}, opt->v, opt->n};

    dpt_status s = DPT_OK;
    cJSON *hdr = NULL;
    char *opt_s = NULL, *hdr_s = NULL;
    uint8_t *file = NULL;
    dpt_hash h = {0};
    int hash_open = 0;

    /* The data size (checked: shapes come from the model, counts from the caller). */
    size_t data_len = 0;
    for (size_t i = 0; i < nt; i++) {
        size_t bytes;
        if (dpt_mul_overflow(t[i].size, 4, &bytes) || data_len + bytes < data_len) {
            s = dpt_set_error(DPT_ENOMEM, "%s: checkpoint size overflow", path);
            goto done;
        }
        data_len += bytes;
    }
    uint8_t digest[32];
    char hex[65];
    memset(hex, '0', 64);
    hex[64] = 0;

    /* The JSON header: __metadata__ first, then the tensors in data order. */
    hdr = cJSON_CreateObject();
    cJSON *meta = hdr ? cJSON_AddObjectToObject(hdr, "__metadata__") : NULL;
    if (opt && !(opt_s = optimizer_json(opt))) meta = NULL;
    if (!meta) {
        s = dpt_set_error(DPT_ENOMEM, "%s: out of memory building the header", path);
        goto done;
    }
    char ver[16];
    snprintf(ver, sizeof ver, "%d", DPT_CHECKPOINT_VERSION);
    cJSON_AddStringToObject(meta, "format", DPT_CHECKPOINT_FORMAT);
    cJSON_AddStringToObject(meta, "format_version", ver);
    cJSON_AddStringToObject(meta, "model_spec", m->spec);
    if (opt_s) cJSON_AddStringToObject(meta, "optimizer", opt_s);
    cJSON_AddStringToObject(meta, "state", state_json);
    cJSON_AddStringToObject(meta, CK_HASH_KEY, hex); /* zeros now, the digest below */
    size_t off = 0;
    for (size_t i = 0; i < nt; i++) {
        cJSON *e = cJSON_AddObjectToObject(hdr, t[i].name);
        if (e) cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!e || !shape || !offs) {
            s = dpt_set_error(DPT_ENOMEM, "%s: out of memory building the header", path);
            goto done;
        }
        for (int d = 0; d < t[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += 4 * t[i].size;
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    }
    hdr_s = cJSON_PrintUnformatted(hdr);
    if (!hdr_s) {
        s = dpt_set_error(DPT_ENOMEM, "%s: out of memory printing the header", path);
        goto done;
    }
    /* Pad with spaces so the data starts 8-byte aligned (the spec allows trailing spaces). */
    size_t hlen = strlen(hdr_s), hpad = (hlen + 7) & ~(size_t)7;
    size_t total = 8 + hpad + data_len;
    DPT_ASSERT(total > data_len);
    file = dpt_alloc(total, 1, path);
    if (!file) {
        s = dpt_set_error(DPT_ENOMEM, "%s: out of memory (%zu bytes)", path, total);
        goto done;
    }
    put_u64le(file, (uint64_t)hpad);
    memcpy(file + 8, hdr_s, hlen);
    memset(file + 8 + hlen, ' ', hpad - hlen);
    uint8_t *p = file + 8 + hpad;
    for (size_t i = 0; i < nt; i++) {
        put_f32le(p, t[i].src, t[i].size);
        p += 4 * t[i].size;
    }
    /* The hash covers every byte of the file with its own 64 digits as '0' (the header is
     * printed by cJSON without spaces, and no string value can hold the unescaped mark) */
    const char *mark = strstr(hdr_s, CK_HASH_MARK);
    DPT_ASSERT(mark && !strstr(mark + 1, CK_HASH_MARK));
    size_t at = 8 + (size_t)(mark - hdr_s) + strlen(CK_HASH_MARK);
    if ((s = dpt_hash_init(&h)) != DPT_OK) goto done;
    hash_open = 1;
    if ((s = dpt_hash_update(&h, file, total)) != DPT_OK) goto done;
    hash_open = 0;
    if ((s = dpt_hash_final(&h, digest)) != DPT_OK) goto done;
    dpt_hex(digest, 32, hex);
    memcpy(file + at, hex, 64);
    s = dpt_write_file_atomic(path, file, total);

done:
    if (hash_open) (void)dpt_hash_final(&h, digest);
    dpt_free(file);
    free(hdr_s);
    free(opt_s);
    cJSON_Delete(hdr);
    free(pt);
    free(t);
    return s;
}

/* ==== Reading and validation ==== */

typedef struct {
    const char *name; /* points into the cJSON tree */
    int ndim;
    size_t shape[4];
    size_t size, begin, end; /* elements; byte offsets into the data section */
} ck_in;

typedef struct {
    const char *path;
    uint8_t *buf;
    size_t len;
    cJSON *root, *meta;
    const uint8_t *data;
    size_t data_len;
    ck_in *t;
    size_t nt;
} ck_file;

static void ck_close(ck_file *f) {
    dpt_free(f->buf);
    cJSON_Delete(f->root);
    free(f->t);
    memset(f, 0, sizeof *f);
}

/* A JSON number that is a non-negative integer exactly representable (< 2^53). */
static int json_size(const cJSON *j, size_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *out = (size_t)d;
    return 1;
}

static const char *meta_str(const ck_file *f, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int cmp_begin(const void *a, const void *b) {
    const ck_in *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

static void shape_str(const size_t *shape, int ndim, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, "%s%zu", d ? ", " : "", shape[d]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

/* One tensor entry of the header. */
static dpt_status ck_parse_tensor(ck_file *f, const cJSON *e, ck_in *t) {
    const char *P = f->path, *nm = e->string;
    t->name = nm;
    DPT_CHECK(cJSON_IsObject(e), DPT_EFORMAT, "%s: tensor \"%s\": entry is not an object", P, nm);
    const cJSON *k;
    cJSON_ArrayForEach(k, e) {
        DPT_CHECK(!strcmp(k->string, "dtype") || !strcmp(k->string, "shape") || !strcmp(k->string, "data_offsets"),
                  DPT_EFORMAT, "%s: tensor \"%s\": unknown key \"%s\"", P, nm, k->string);
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    DPT_CHECK(cJSON_IsString(dt), DPT_EFORMAT, "%s: tensor \"%s\": missing dtype", P, nm);
    DPT_CHECK(strcmp(dt->valuestring, "F32") == 0, DPT_EFORMAT,
              "%s: tensor \"%s\": dtype %s, expected F32", P, nm, dt->valuestring);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    DPT_CHECK(cJSON_IsArray(sh), DPT_EFORMAT, "%s: tensor \"%s\": missing shape", P, nm);
    int nd = cJSON_GetArraySize(sh);
    DPT_CHECK(nd <= 4, DPT_EFORMAT, "%s: tensor \"%s\": %d dimensions (at most 4)", P, nm, nd);
    t->ndim = nd;
    t->size = 1;
    int d = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, sh) {
        DPT_CHECK(json_size(x, &t->shape[d]), DPT_EFORMAT,
                  "%s: tensor \"%s\": shape entry %d is not a non-negative integer", P, nm, d);
        DPT_CHECK(!dpt_mul_overflow(t->size, t->shape[d], &t->size), DPT_EFORMAT,
                  "%s: tensor \"%s\": shape overflows", P, nm);
        d++;
    }
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    DPT_CHECK(cJSON_IsArray(of) && cJSON_GetArraySize(of) == 2 &&
                  json_size(cJSON_GetArrayItem(of, 0), &t->begin) &&
                  json_size(cJSON_GetArrayItem(of, 1), &t->end) && t->begin <= t->end,
              DPT_EFORMAT, "%s: tensor \"%s\": data_offsets must be [begin, end] with "
              "begin <= end", P, nm);
    size_t bytes;
    DPT_CHECK(!dpt_mul_overflow(t->size, 4, &bytes) && bytes == t->end - t->begin, DPT_EFORMAT,
              "%s: tensor \"%s\": shape needs %zu bytes but data_offsets span %zu", P, nm,
              t->size * 4, t->end - t->begin);
    return DPT_OK;
}

/* Parses the "optimizer" metadata into a config and step count. */
static dpt_status parse_optimizer(const char *P, const char *js, dpt_optim_config *c,
                                  uint64_t *t) {
    cJSON *j = cJSON_Parse(js);
    DPT_CHECK(j, DPT_EFORMAT, "%s: optimizer metadata is not valid JSON", P);
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "kind");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "betas");
    const char *fields[4] = {"lr", "momentum", "weight_decay", "eps"};
    double v[4];
    int ok = cJSON_IsString(k) && cJSON_IsArray(b) && cJSON_GetArraySize(b) == 2 &&
             cJSON_IsNumber(cJSON_GetArrayItem(b, 0)) && cJSON_IsNumber(cJSON_GetArrayItem(b, 1));
    for (int i = 0; i < 4 && ok; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, fields[i]);
        ok = cJSON_IsNumber(x);
        if (ok) v[i] = x->valuedouble;
    }
    size_t steps = 0;
    ok = ok && json_size(cJSON_GetObjectItemCaseSensitive(j, "t"), &steps);
    dpt_status s = DPT_OK;
    if (!ok) {
        s = dpt_set_error(DPT_EFORMAT, "%s: optimizer metadata lacks kind, lr, momentum, "
                          "weight_decay, betas, eps or t", P);
    } else if (dpt_optim_parse(k->valuestring, &c->kind) != DPT_OK) {
        s = dpt_error_context(DPT_EFORMAT, "%s: optimizer metadata", P);
    } else {
        c->lr = v[0], c->momentum = v[1], c->weight_decay = v[2], c->eps = v[3];
        c->beta1 = cJSON_GetArrayItem(b, 0)->valuedouble;
        c->beta2 = cJSON_GetArrayItem(b, 1)->valuedouble;
        *t = (uint64_t)steps;
        if (dpt_optim_validate(c) != DPT_OK)
            s = dpt_error_context(DPT_EFORMAT, "%s: optimizer metadata", P);
    }
    cJSON_Delete(j);
    return s;
}

/* Every metadata field, for type and range: exactly the known keys, each a string of the
 * right form (the hash is checked after the structure, over the whole file). */
static dpt_status check_metadata(ck_file *f) {
    const char *P = f->path;
    static const char *known[] = {"format", "format_version", "model_spec", "optimizer", "state", CK_HASH_KEY};
    const cJSON *mv;
    cJSON_ArrayForEach(mv, f->meta) {
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof known[0] && !ok; k++) ok = strcmp(mv->string, known[k]) == 0;
        DPT_CHECK(ok, DPT_EFORMAT, "%s: unknown metadata key \"%s\"", P, mv->string);
    }
    const char *spec = meta_str(f, "model_spec");
    DPT_CHECK(spec, DPT_EFORMAT, "%s: metadata lacks model_spec", P);
    DPT_CHECK(*spec && strlen(spec) < 4096, DPT_EFORMAT, "%s: model_spec is empty or longer than 4095 bytes", P);
    for (const char *c = spec; *c; c++)
        DPT_CHECK((unsigned char)*c > ' ' && (unsigned char)*c < 127, DPT_EFORMAT,
                  "%s: model_spec has a character outside printable ASCII (byte %zu)", P, (size_t)(c - spec));
    const char *state = meta_str(f, "state");
    DPT_CHECK(state, DPT_EFORMAT, "%s: metadata lacks state", P);
    cJSON *sj = cJSON_Parse(state);
    int obj = sj && cJSON_IsObject(sj);
    cJSON_Delete(sj);
    DPT_CHECK(obj, DPT_EFORMAT, "%s: metadata state is not a JSON object", P);
    const char *oj = meta_str(f, "optimizer");
    if (oj) {
        dpt_optim_config oc;
        uint64_t ot;
        DPT_TRY(parse_optimizer(P, oj, &oc, &ot));
    }
    const char *hash = meta_str(f, CK_HASH_KEY);
    DPT_CHECK(hash, DPT_EFORMAT, "%s: metadata lacks %s", P, CK_HASH_KEY);
    int hex = strlen(hash) == 64;
    for (size_t i = 0; hex && i < 64; i++) hex = (hash[i] >= '0' && hash[i] <= '9') || (hash[i] >= 'a' && hash[i] <= 'f');
    DPT_CHECK(hex, DPT_EFORMAT, "%s: %s is not 64 lowercase hex digits", P, CK_HASH_KEY);
    return DPT_OK;
}

/* SHA-256 of the whole file with the hash's own 64 digits read as '0'. The digits must
 * sit where the writer puts them: once, right after the mark, inside the header. */
static dpt_status check_hash(const ck_file *f, size_t N) {
    const char *P = f->path, *want = meta_str(f, CK_HASH_KEY);
    const char *hdr = (const char *)f->buf + 8;
    size_t ml = strlen(CK_HASH_MARK), at = 0, found = 0;
    for (size_t i = 0; i + ml + 65 <= N; i++)
        if (!memcmp(hdr + i, CK_HASH_MARK, ml) && !memcmp(hdr + i + ml, want, 64) && hdr[i + ml + 64] == '"')
            found++, at = 8 + i + ml;
    DPT_CHECK(found == 1, DPT_EFORMAT, "%s: the header does not hold %s as dptrain writes it (file edited?)", P,
              CK_HASH_KEY);
    static const char zeros[64] = "0000000000000000000000000000000000000000000000000000000000000000";
    uint8_t digest[32];
    char hex[65];
    dpt_hash h;
    DPT_TRY(dpt_hash_init(&h));
    dpt_status hs = dpt_hash_update(&h, f->buf, at);
    if (hs == DPT_OK) hs = dpt_hash_update(&h, zeros, 64);
    if (hs == DPT_OK) hs = dpt_hash_update(&h, f->buf + at + 64, f->len - at - 64);
    dpt_status fs = dpt_hash_final(&h, digest);
    DPT_TRY(hs);
    DPT_TRY(fs);
    dpt_hex(digest, 32, hex);
    DPT_CHECK(strcmp(hex, want) == 0, DPT_EFORMAT,
              "%s: the file does not match its SHA-256 (header or tensor data corrupted or edited)", P);
    return DPT_OK;
}

/* Reads and validates the whole file. On error everything is released. */
static dpt_status ck_open_inner(ck_file *f) {
    const char *P = f->path;
    DPT_TRY(dpt_read_file(P, &f->buf, &f->len));
    DPT_CHECK(f->len >= 8, DPT_EFORMAT,
              "%s: truncated: %zu bytes, too short for the 8-byte header length", P, f->len);
    uint64_t N = get_u64le(f->buf);
    DPT_CHECK(N <= f->len - 8, DPT_EFORMAT,
              "%s: truncated: header says %llu bytes of JSON header, file has %zu after the "
              "length field", P, (unsigned long long)N, f->len - 8);
    DPT_CHECK(N >= 2 && N <= CK_MAX_HEADER, DPT_EFORMAT,
              "%s: implausible header length %llu (not a safetensors file?)", P,
              (unsigned long long)N);
    const char *js = (const char *)f->buf + 8, *end = NULL;
    f->root = cJSON_ParseWithLengthOpts(js, (size_t)N, &end, 0);
    DPT_CHECK(f->root, DPT_EFORMAT, "%s: header is not valid JSON (near byte %zu)", P,
              (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - js : 0) + 8);
    for (const char *q = end; q < js + N; q++)
        DPT_CHECK(*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r', DPT_EFORMAT,
                  "%s: header has garbage after the JSON object (byte %zu)", P,
                  (size_t)(q - js) + 8);
    DPT_CHECK(cJSON_IsObject(f->root), DPT_EFORMAT, "%s: header is not a JSON object", P);
    f->data = f->buf + 8 + N;
    f->data_len = f->len - 8 - (size_t)N;

    f->meta = cJSON_GetObjectItemCaseSensitive(f->root, "__metadata__");
    DPT_CHECK(cJSON_IsObject(f->meta), DPT_EFORMAT,
              "%s: no __metadata__ (not a dptrain checkpoint)", P);
    const cJSON *mv;
    cJSON_ArrayForEach(mv, f->meta) {
        DPT_CHECK(cJSON_IsString(mv), DPT_EFORMAT,
                  "%s: __metadata__ value \"%s\" is not a string", P, mv->string);
    }
    const char *fmt = meta_str(f, "format"), *ver = meta_str(f, "format_version");
    DPT_CHECK(fmt && strcmp(fmt, DPT_CHECKPOINT_FORMAT) == 0, DPT_EFORMAT,
              "%s: not a dptrain checkpoint (format \"%s\", expected \"%s\")", P,
              fmt ? fmt : "(missing)", DPT_CHECKPOINT_FORMAT);
    char want_ver[16];
    snprintf(want_ver, sizeof want_ver, "%d", DPT_CHECKPOINT_VERSION);
    DPT_CHECK(!ver || strcmp(ver, "1") != 0, DPT_EFORMAT,
              "%s: format_version 1 is no longer read: its integrity hash covered only the tensor "
              "data, not the header (model spec, optimizer, training state); train again to write "
              "a version %s checkpoint", P, want_ver);
    DPT_CHECK(ver && strcmp(ver, want_ver) == 0, DPT_EFORMAT,
              "%s: unsupported format_version \"%s\" (this build reads %s)", P,
              ver ? ver : "(missing)", want_ver);
    DPT_TRY(check_metadata(f));

    int n = cJSON_GetArraySize(f->root) - 1;
    DPT_CHECK(n >= 0 && n <= CK_MAX_TENSORS, DPT_EFORMAT, "%s: %d tensors (at most %d)", P, n,
              CK_MAX_TENSORS);
    f->t = calloc((size_t)n + 1, sizeof *f->t);
    DPT_CHECK(f->t, DPT_ENOMEM, "%s: out of memory", P);
    const cJSON *e;
    cJSON_ArrayForEach(e, f->root) {
        if (e == f->meta) continue;
        DPT_CHECK(strcmp(e->string, "__metadata__") != 0, DPT_EFORMAT,
                  "%s: duplicate __metadata__", P);
        for (size_t k = 0; k < f->nt; k++)
            DPT_CHECK(strcmp(f->t[k].name, e->string) != 0, DPT_EFORMAT,
                      "%s: tensor \"%s\" appears twice", P, e->string);
        DPT_TRY(ck_parse_tensor(f, e, &f->t[f->nt]));
        f->nt++;
    }

    /* Offsets must tile [0, total) without holes or overlaps, and total must be exactly
     * the bytes after the header. Checked on a sorted copy: the header order is free. */
    ck_in *sorted = calloc(f->nt + 1, sizeof *sorted);
    DPT_CHECK(sorted, DPT_ENOMEM, "%s: out of memory", P);
    memcpy(sorted, f->t, f->nt * sizeof *sorted);
    qsort(sorted, f->nt, sizeof *sorted, cmp_begin);
    size_t total = 0;
    for (size_t k = 0; k < f->nt; k++) {
        if (sorted[k].begin != total) {
            dpt_status s = dpt_set_error(
                DPT_EFORMAT, "%s: tensor \"%s\" starts at byte %zu, expected %zu "
                "(data_offsets must be contiguous)", P, sorted[k].name, sorted[k].begin, total);
            free(sorted);
            return s;
        }
        total = sorted[k].end;
    }
    free(sorted);
    DPT_CHECK(total <= f->data_len, DPT_EFORMAT,
              "%s: truncated: header says %zu bytes of tensors, file has %zu", P, total,
              f->data_len);
    DPT_CHECK(total == f->data_len, DPT_EFORMAT,
              "%s: %zu unexpected bytes after the tensors (header says %zu, file has %zu)", P,
              f->data_len - total, total, f->data_len);

    return check_hash(f, (size_t)N);
}

static dpt_status ck_open(const char *path, ck_file *f) {
    memset(f, 0, sizeof *f);
    DPT_CHECK(path, DPT_EINVAL, "checkpoint: NULL path");
    f->path = path;
    dpt_status s = ck_open_inner(f);
    if (s != DPT_OK) ck_close(f);
    return s;
}

static const ck_in *ck_find(const ck_file *f, const char *name) {
    for (size_t k = 0; k < f->nt; k++)
        if (strcmp(f->t[k].name, name) == 0) return &f->t[k];
    return NULL;
}

static dpt_status dup_out(const char *path, const char *s, char **out) {
    if (!out) return DPT_OK;
    *out = strdup(s);
    DPT_CHECK(*out, DPT_ENOMEM, "%s: out of memory", path);
    return DPT_OK;
}

dpt_status dpt_checkpoint_peek(const char *path, char **model_spec, char **state_json) {
    if (model_spec) *model_spec = NULL;
    if (state_json) *state_json = NULL;
    ck_file f;
    DPT_TRY(ck_open(path, &f));
    dpt_status s = dup_out(path, meta_str(&f, "model_spec"), model_spec);
    if (s == DPT_OK) s = dup_out(path, meta_str(&f, "state"), state_json);
    if (s != DPT_OK && model_spec) {
        free(*model_spec);
        *model_spec = NULL;
    }
    ck_close(&f);
    return s;
}

/* Checks that tensor `name` exists with a 1-D shape [n]. */
static dpt_status check_vec(const ck_file *f, const char *name, size_t n, const ck_in **out) {
    const ck_in *t = ck_find(f, name);
    DPT_CHECK(t, DPT_EMISMATCH, "%s: optimizer tensor \"%s\" missing from the checkpoint",
              f->path, name);
    DPT_CHECK(t->ndim == 1 && t->shape[0] == n, DPT_EMISMATCH,
              "%s: tensor \"%s\" has %zu elements, the optimizer expects %zu", f->path, name,
              t->size, n);
    *out = t;
    return DPT_OK;
}

static dpt_status ck_load(ck_file *f, dpt_model *m, dpt_optim *opt, char **state_json, float *ema) {
    const char *P = f->path;
    const char *spec = meta_str(f, "model_spec");
    DPT_CHECK(strcmp(spec, m->spec) == 0, DPT_EMISMATCH,
              "%s: checkpoint is for model \"%s\", not \"%s\"", P, spec, m->spec);

    /* Every model tensor present with the model's shape; nothing unknown in the file. */
    size_t nt = dpt_model_n_tensors(m);
    dpt_param_tensor *pt = calloc(nt ? nt : 1, sizeof *pt);
    DPT_CHECK(pt, DPT_ENOMEM, "%s: out of memory", P);
    const ck_in **src = calloc(nt ? nt : 1, sizeof *src);
    if (!src) {
        free(pt);
        return dpt_set_error(DPT_ENOMEM, "%s: out of memory", P);
    }
    dpt_status s = DPT_OK;
    dpt_optim tmp = {0};
    for (size_t i = 0; i < nt && s == DPT_OK; i++) {
        dpt_model_tensor(m, i, &pt[i]);
        src[i] = ck_find(f, pt[i].name);
        if (!src[i]) {
            s = dpt_set_error(DPT_EMISMATCH, "%s: tensor \"%s\" missing from the checkpoint", P,
                              pt[i].name);
            break;
        }
        int same = src[i]->ndim == pt[i].ndim;
        for (int d = 0; same && d < pt[i].ndim; d++) same = src[i]->shape[d] == pt[i].shape[d];
        if (!same) {
            char a[96], b[96];
            shape_str(src[i]->shape, src[i]->ndim, a, sizeof a);
            shape_str(pt[i].shape, pt[i].ndim, b, sizeof b);
            s = dpt_set_error(DPT_EMISMATCH, "%s: tensor \"%s\" has shape %s in the checkpoint, "
                              "the model expects %s", P, pt[i].name, a, b);
        }
    }
    for (size_t k = 0; k < f->nt && s == DPT_OK; k++) {
        const char *nm = f->t[k].name;
        int known = strcmp(nm, CK_OPT_M) == 0 || strcmp(nm, CK_OPT_V) == 0 || strcmp(nm, CK_RAW) == 0;
        for (size_t i = 0; i < nt && !known; i++) known = strcmp(nm, pt[i].name) == 0;
        if (!known)
            s = dpt_set_error(DPT_EMISMATCH, "%s: tensor \"%s\" is not part of model \"%s\"", P,
                              nm, m->spec);
    }

    /* The optimizer is rebuilt from the stored config (its kind decides which moments
     * exist), filled, and swapped in only when everything succeeded. */
    const ck_in *tm = NULL, *tv = NULL;
    if (s == DPT_OK && opt) {
        const char *oj = meta_str(f, "optimizer");
        dpt_optim_config c;
        uint64_t t = 0;
        if (!oj) {
            s = dpt_set_error(DPT_EMISMATCH, "%s: checkpoint has no optimizer state", P);
        } else if (opt->n != m->n_params) {
            s = dpt_set_error(DPT_EMISMATCH, "%s: optimizer has %zu parameters, model has %zu",
                              P, opt->n, m->n_params);
        } else if ((s = parse_optimizer(P, oj, &c, &t)) == DPT_OK &&
                   (s = dpt_optim_init(&tmp, &c, m->n_params)) == DPT_OK) {
            tmp.t = t;
            if (tmp.m) s = check_vec(f, CK_OPT_M, tmp.n, &tm);
            if (s == DPT_OK && tmp.v) s = check_vec(f, CK_OPT_V, tmp.n, &tv);
        }
    }
    /* the raw parameters of an EMA run, for a resume that continues it */
    const ck_in *traw = NULL;
    if (s == DPT_OK && ema) {
        traw = ck_find(f, CK_RAW);
        if (!traw)
            s = dpt_set_error(DPT_EMISMATCH, "%s: the checkpoint holds no raw parameters (tensor \"%s\"): it was "
                              "written by a run without parameter averaging (ema_decay)", P, CK_RAW);
        else if (traw->ndim != 1 || traw->shape[0] != m->n_params)
            s = dpt_set_error(DPT_EMISMATCH, "%s: tensor \"%s\" has %zu elements, the model has %zu parameters", P,
                              CK_RAW, traw->size, m->n_params);
    }
    char *state = NULL;
    if (s == DPT_OK) s = dup_out(P, meta_str(f, "state"), state_json ? &state : NULL);

    if (s == DPT_OK) {
        for (size_t i = 0; i < nt; i++)
            get_f32le((ema ? ema : m->theta) + pt[i].offset, f->data + src[i]->begin, pt[i].size);
        if (traw) get_f32le(m->theta, f->data + traw->begin, m->n_params);
        if (opt) {
            if (tm) get_f32le(tmp.m, f->data + tm->begin, tmp.n);
            if (tv) get_f32le(tmp.v, f->data + tv->begin, tmp.n);
            dpt_optim_free(opt);
            *opt = tmp;
            memset(&tmp, 0, sizeof tmp);
        }
        if (state_json) *state_json = state;
    }
    dpt_optim_free(&tmp);
    free(src);
    free(pt);
    return s;
}

dpt_status dpt_checkpoint_load(const char *path, dpt_model *m, dpt_optim *opt,
                               char **state_json) {
    if (state_json) *state_json = NULL;
    DPT_CHECK(m, DPT_EINVAL, "checkpoint load: NULL model");
    ck_file f;
    DPT_TRY(ck_open(path, &f));
    dpt_status s = ck_load(&f, m, opt, state_json, NULL);
    ck_close(&f);
    return s;
}

dpt_status dpt_checkpoint_load_ema(const char *path, dpt_model *m, dpt_optim *opt, char **state_json, float *ema) {
    if (state_json) *state_json = NULL;
    DPT_CHECK(m && ema, DPT_EINVAL, "checkpoint load: NULL model or EMA buffer");
    ck_file f;
    DPT_TRY(ck_open(path, &f));
    dpt_status s = ck_load(&f, m, opt, state_json, ema);
    ck_close(&f);
    return s;
}
