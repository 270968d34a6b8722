/* io: checkpoint round trip (model, Adam m/v/t, config, state) bit-identical; the file's
 * safetensors layout; every truncation length refused; every flipped data byte refused
 * (hash); edited headers refused (format, version, dtype, shapes, offsets, JSON);
 * wrong model -> DPT_EMISMATCH naming the spec or tensor, model left untouched;
 * missing file -> DPT_EIO naming the path; no .tmp left behind; JSON-lines metrics. */
#include <dptrain/io.h>

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define SPEC "mlp:4-3-2:relu"

static char g_path[256], g_bad[256];

static void fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

static dpt_model *new_model(const char *spec) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new(spec, 1, 1, &m));
    if (!m) {
        fprintf(stderr, "cannot build %s: %s\n", spec, dpt_last_error());
        exit(1);
    }
    return m;
}

static void write_bytes(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* A saved model + Adam after 3 steps; returns the model and optimizer for comparison. */
static void make_checkpoint(dpt_model **pm, dpt_optim *o) {
    dpt_model *m = new_model(SPEC);
    fill(m->theta, m->n_params, 1);
    dpt_optim_config c = dpt_optim_defaults(DPT_OPT_ADAM);
    c.weight_decay = 1e-4;
    c.lr = 0.003;
    CHECK_OK(dpt_optim_init(o, &c, m->n_params));
    float *g = malloc(m->n_params * sizeof *g);
    for (int s = 0; s < 3; s++) {
        fill(g, m->n_params, 100 + s);
        CHECK_OK(dpt_optim_step(o, m->theta, g, c.lr));
    }
    free(g);
    m->theta[0] = -0.0f;  /* sign of zero must survive */
    m->theta[1] = 1e-40f; /* subnormal */
    m->theta[2] = 3.4e38f;
    CHECK_OK(dpt_checkpoint_save(g_path, m, o, "{\"step\":3,\"epoch\":1,\"seed\":42}"));
    *pm = m;
}

/* files named like dpt_write_file_atomic's temporaries (.NAME.tmp-XXXXXX) in the test dir */
static int temporaries(void) {
    DIR *d = opendir(tu_tmpdir());
    struct dirent *e;
    int n = d ? 0 : -1;
    while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

static void test_round_trip(void) {
    dpt_model *m;
    dpt_optim o;
    make_checkpoint(&m, &o);
    CHECK(access(g_path, F_OK) == 0);
    CHECK(temporaries() == 0); /* atomic write leaves no temporary behind */

    /* load into a fresh model and a differently configured optimizer */
    dpt_model *m2 = new_model(SPEC);
    dpt_optim o2;
    dpt_optim_config sgd = dpt_optim_defaults(DPT_OPT_SGD);
    CHECK_OK(dpt_optim_init(&o2, &sgd, m2->n_params));
    char *state = NULL;
    CHECK_OK(dpt_checkpoint_load(g_path, m2, &o2, &state));
    CHECK(memcmp(m->theta, m2->theta, m->n_params * sizeof(float)) == 0);
    CHECK(signbit(m2->theta[0]) && m2->theta[1] == 1e-40f);
    CHECK(o2.cfg.kind == DPT_OPT_ADAM && o2.t == 3 && o2.n == o.n);
    CHECK(o2.cfg.lr == o.cfg.lr && o2.cfg.weight_decay == o.cfg.weight_decay);
    CHECK(o2.cfg.beta1 == o.cfg.beta1 && o2.cfg.beta2 == o.cfg.beta2 && o2.cfg.eps == o.cfg.eps);
    CHECK(o2.m && o2.v && memcmp(o.m, o2.m, o.n * sizeof(float)) == 0);
    CHECK(o2.v && memcmp(o.v, o2.v, o.n * sizeof(float)) == 0);
    CHECK(state && strcmp(state, "{\"step\":3,\"epoch\":1,\"seed\":42}") == 0);
    free(state);

    /* the next step from both is identical */
    float *g = malloc(m->n_params * sizeof *g);
    fill(g, m->n_params, 999);
    CHECK_OK(dpt_optim_step(&o, m->theta, g, o.cfg.lr));
    CHECK_OK(dpt_optim_step(&o2, m2->theta, g, o2.cfg.lr));
    CHECK(memcmp(m->theta, m2->theta, m->n_params * sizeof(float)) == 0);
    free(g);

    /* peek: spec and state, both optional */
    char *spec = NULL;
    CHECK_OK(dpt_checkpoint_peek(g_path, &spec, &state));
    CHECK(spec && strcmp(spec, SPEC) == 0);
    CHECK(state && strstr(state, "\"epoch\":1"));
    free(spec);
    free(state);
    CHECK_OK(dpt_checkpoint_peek(g_path, NULL, NULL));
    /* load without optimizer or state */
    CHECK_OK(dpt_checkpoint_load(g_path, m2, NULL, NULL));

    /* plain SGD (no moments) and no state: overwrite the same path atomically */
    dpt_optim p;
    CHECK_OK(dpt_optim_init(&p, &sgd, m->n_params));
    p.t = 17;
    CHECK_OK(dpt_checkpoint_save(g_path, m, &p, NULL));
    CHECK(temporaries() == 0);
    CHECK_OK(dpt_checkpoint_load(g_path, m2, &o2, &state));
    CHECK(o2.cfg.kind == DPT_OPT_SGD && o2.m == NULL && o2.v == NULL && o2.t == 17);
    CHECK(o2.cfg.lr == sgd.lr);
    CHECK(state && strcmp(state, "{}") == 0);
    free(state);
    CHECK(memcmp(m->theta, m2->theta, m->n_params * sizeof(float)) == 0);

    /* SGD with momentum round-trips m */
    dpt_optim q;
    sgd.momentum = 0.9;
    CHECK_OK(dpt_optim_init(&q, &sgd, m->n_params));
    fill(q.m, q.n, 5);
    CHECK_OK(dpt_checkpoint_save(g_path, m, &q, "{}"));
    CHECK_OK(dpt_checkpoint_load(g_path, m2, &o2, NULL));
    CHECK(o2.cfg.momentum == 0.9 && o2.m && !o2.v && memcmp(o2.m, q.m, q.n * 4) == 0);

    /* saved without optimizer: loading one is a mismatch, loading none is fine */
    CHECK_OK(dpt_checkpoint_save(g_path, m, NULL, "{}"));
    CHECK_STATUS(dpt_checkpoint_load(g_path, m2, &o2, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("no optimizer state");
    CHECK_OK(dpt_checkpoint_load(g_path, m2, NULL, NULL));

    /* bad arguments */
    CHECK_STATUS(dpt_checkpoint_save(g_path, m, NULL, "[1,2]"), DPT_EINVAL);
    CHECK_ERR_HAS("not a JSON object");
    CHECK_STATUS(dpt_checkpoint_save(g_path, m, NULL, "{oops"), DPT_EINVAL);
    char nodir[300];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/ckpt.safetensors", tu_tmpdir());
    CHECK_STATUS(dpt_checkpoint_save(nodir, m, NULL, "{}"), DPT_EIO);
    CHECK_ERR_HAS("no/such/dir");

    dpt_optim_free(&o);
    dpt_optim_free(&o2);
    dpt_optim_free(&p);
    dpt_optim_free(&q);
    dpt_model_free(m);
    dpt_model_free(m2);
}

/* The bytes follow the safetensors layout and a plain reading of it. */
static void test_layout(void) {
    dpt_model *m;
    dpt_optim o;
    make_checkpoint(&m, &o);
    uint8_t *b;
    size_t n;
    CHECK_OK(dpt_read_file(g_path, &b, &n));
    uint64_t N = 0;
    for (int i = 0; i < 8; i++) N |= (uint64_t)b[i] << (8 * i);
    CHECK(N % 8 == 0 && 8 + N < n);
    CHECK(memcmp(b + 8, "{\"__metadata__\":{\"format\":\"dptrain-checkpoint\"", 46) == 0);
    CHECK(b[8 + N - 1] == ' ' || b[8 + N - 1] == '}');
    size_t want = 8 + N + 4 * (m->n_params + 2 * o.n);
    CHECK(n == want);
    /* the first tensor starts the data section: little-endian float32 of theta[offset] */
    dpt_param_tensor t0;
    dpt_model_tensor(m, 0, &t0);
    const uint8_t *d = b + 8 + N;
    for (size_t i = 0; i < t0.size; i++) {
        uint32_t u = (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 |
                     (uint32_t)d[4 * i + 2] << 16 | (uint32_t)d[4 * i + 3] << 24;
        float f;
        memcpy(&f, &u, 4);
        CHECK(memcmp(&f, &m->theta[t0.offset + i], 4) == 0);
    }
    char key[128];
    snprintf(key, sizeof key, "\"%s\":{\"dtype\":\"F32\",\"shape\":[", t0.name);
    CHECK(strstr((const char *)b + 8, key) != NULL);
    CHECK(strstr((const char *)b + 8, "\"optim.v\":{\"dtype\":\"F32\"") != NULL);
    dpt_free(b);
    dpt_optim_free(&o);
    dpt_model_free(m);
}

static void test_truncation_and_corruption(void) {
    dpt_model *m;
    dpt_optim o;
    make_checkpoint(&m, &o);
    uint8_t *b;
    size_t n;
    CHECK_OK(dpt_read_file(g_path, &b, &n));
    uint64_t N = 0;
    for (int i = 0; i < 8; i++) N |= (uint64_t)b[i] << (8 * i);
    dpt_model *m2 = new_model(SPEC);
    fill(m2->theta, m2->n_params, 77);
    float *keep = malloc(m2->n_params * sizeof *keep);
    memcpy(keep, m2->theta, m2->n_params * sizeof *keep);

    /* every truncation length */
    int refused = 0, named = 0, data_msg = 0;
    for (size_t len = 0; len < n; len++) {
        write_bytes(g_bad, b, len);
        dpt_status s = dpt_checkpoint_load(g_bad, m2, NULL, NULL);
        refused += s == DPT_EFORMAT;
        named += strstr(dpt_last_error(), g_bad) != NULL;
        if (len > 8 + N) data_msg += strstr(dpt_last_error(), "truncated: header says") != NULL;
        if (s != DPT_EFORMAT) fprintf(stderr, "length %zu: status %d\n", len, (int)s);
        CHECK_STATUS(dpt_checkpoint_peek(g_bad, NULL, NULL), DPT_EFORMAT);
    }
    CHECK(refused == (int)n && named == (int)n && data_msg == (int)(n - 9 - N));
    write_bytes(g_bad, b, 8 + N + 1);
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EFORMAT);
    CHECK_ERR_HAS("truncated: header says");
    CHECK_ERR_HAS("bytes of tensors, file has 1");
    printf("truncation: %zu lengths refused; e.g. \"%s\"\n", n, dpt_last_error());
    CHECK(memcmp(keep, m2->theta, m2->n_params * sizeof *keep) == 0);

    /* trailing bytes */
    uint8_t *big = malloc(n + 4);
    memcpy(big, b, n);
    memset(big + n, 0, 4);
    write_bytes(g_bad, big, n + 4);
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EFORMAT);
    CHECK_ERR_HAS("4 unexpected bytes after the tensors");
    free(big);

    /* every flipped bit-pattern in the data section is caught by the hash */
    int caught = 0;
    for (size_t i = 8 + N; i < n; i++) {
        b[i] ^= 0x40;
        write_bytes(g_bad, b, n);
        caught += dpt_checkpoint_load(g_bad, m2, &o, NULL) == DPT_EFORMAT &&
                  strstr(dpt_last_error(), "SHA-256") != NULL;
        b[i] ^= 0x40;
    }
    CHECK(caught == (int)(n - 8 - N));
    CHECK(memcmp(keep, m2->theta, m2->n_params * sizeof *keep) == 0);

    /* header length field: zero, and absurdly large */
    uint8_t save[8];
    memcpy(save, b, 8);
    memset(b, 0, 8);
    write_bytes(g_bad, b, n);
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EFORMAT);
    CHECK_ERR_HAS("implausible header length 0");
    memset(b, 0xff, 8);
    write_bytes(g_bad, b, n);
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EFORMAT);
    CHECK_ERR_HAS("truncated: header says 18446744073709551615 bytes of JSON header");
    memcpy(b, save, 8);

    /* the intact file still loads (the loops above restored every byte) */
    write_bytes(g_bad, b, n);
    CHECK_OK(dpt_checkpoint_load(g_bad, m2, NULL, NULL));
    CHECK(memcmp(m->theta, m2->theta, m->n_params * sizeof(float)) == 0);

    free(keep);
    dpt_free(b);
    dpt_optim_free(&o);
    dpt_model_free(m);
    dpt_model_free(m2);
}

/* The checkpoint hash rule, written out independently of src/io/checkpoint.c: SHA-256 of
 * the whole file with the 64 digits after "checkpoint_sha256":" read as '0'. Re-seals an
 * edited file so the structural checks behind the hash can be tested (or, with a wrong
 * position, shows the hash is what refuses it). */
static void reseal(uint8_t *b, size_t n) {
    const char *mark = "\"checkpoint_sha256\":\"";
    size_t ml = strlen(mark);
    for (size_t i = 8; i + ml + 64 <= n; i++)
        if (!memcmp(b + i, mark, ml)) {
            uint8_t *d = b + i + ml, dg[32];
            memset(d, '0', 64);
            dpt_hash h;
            dpt_hash_init(&h);
            dpt_hash_update(&h, b, n);
            dpt_hash_final(&h, dg);
            char hex[65];
            dpt_hex(dg, 32, hex);
            memcpy(d, hex, 64);
            return;
        }
}

/* Rewrites g_path's header with the first `from` replaced by `to` (re-padded), into g_bad;
 * re-sealed (a valid hash) unless raw. */
static int edit_header_ex(const char *from, const char *to, int raw) {
    uint8_t *b;
    size_t n;
    if (dpt_read_file(g_path, &b, &n) != DPT_OK) return 0;
    uint64_t N = 0;
    for (int i = 0; i < 8; i++) N |= (uint64_t)b[i] << (8 * i);
    char *h = calloc(N + strlen(to) + 16, 1);
    memcpy(h, b + 8, N);
    char *at = strstr(h, from);
    if (!at) {
        fprintf(stderr, "edit_header: \"%s\" not in header\n", from);
        free(h);
        dpt_free(b);
        return 0;
    }
    size_t pre = (size_t)(at - h), fl = strlen(from), tl = strlen(to);
    char *h2 = calloc(N + tl + 16, 1);
    memcpy(h2, h, pre);
    memcpy(h2 + pre, to, tl);
    strcpy(h2 + pre + tl, h + pre + fl);
    size_t hl = strlen(h2);
    while (hl > 0 && h2[hl - 1] == ' ') hl--;
    size_t N2 = (hl + 7) & ~(size_t)7, dl = n - 8 - N;
    uint8_t *out = malloc(8 + N2 + dl);
    for (int i = 0; i < 8; i++) out[i] = (uint8_t)((uint64_t)N2 >> (8 * i));
    memset(out + 8, ' ', N2);
    memcpy(out + 8, h2, hl);
    memcpy(out + 8 + N2, b + 8 + N, dl);
    if (!raw) reseal(out, 8 + N2 + dl);
    write_bytes(g_bad, out, 8 + N2 + dl);
    free(out);
    free(h2);
    free(h);
    dpt_free(b);
    return 1;
}

static int edit_header(const char *from, const char *to) { return edit_header_ex(from, to, 0); }

static void test_edited_headers(void) {
    dpt_model *m;
    dpt_optim o;
    make_checkpoint(&m, &o);
    dpt_model *m2 = new_model(SPEC);
    dpt_param_tensor t0, t1;
    dpt_model_tensor(m, 0, &t0); /* fc1.weight {3, 4} */
    dpt_model_tensor(m, 1, &t1); /* fc1.bias {3} */
    char from[128], to[128], msg[160];

    /* the editor itself is sound: a no-op edit loads */
    CHECK(edit_header("\"F32\"", "\"F32\""));
    CHECK_OK(dpt_checkpoint_load(g_bad, m2, &o, NULL));

    struct {
        const char *from, *to;
        dpt_status want;
        const char *msg;
    } cases[] = {
        {"dptrain-checkpoint", "other-checkpoint", DPT_EFORMAT,
         "not a dptrain checkpoint (format \"other-checkpoint\""},
        {"\"format\":\"dptrain-checkpoint\",", "", DPT_EFORMAT, "format \"(missing)\""},
        {"\"format_version\":\"2\"", "\"format_version\":\"3\"", DPT_EFORMAT,
         "unsupported format_version \"3\" (this build reads 2)"},
        {"\"format_version\":\"2\"", "\"format_version\":\"1\"", DPT_EFORMAT,
         "format_version 1 is no longer read: its integrity hash covered only the tensor data"},
        {"\"format_version\":\"2\"", "\"format_version\":2", DPT_EFORMAT, "is not a string"},
        {"{\"__metadata__\":{", "{\"__metadata__\":{{", DPT_EFORMAT, "not valid JSON"},
        {"{\"__metadata__\"", "[\"__metadata__\"", DPT_EFORMAT, "not valid JSON"},
        {"\"__metadata__\"", "\"meta\"", DPT_EFORMAT, "no __metadata__"},
        {"\"F32\"", "\"F16\"", DPT_EFORMAT, "dtype F16, expected F32"},
        {"\"checkpoint_sha256\":\"", "\"checkpoint_sha256\":\"0", DPT_EFORMAT, "is not 64 lowercase hex"},
        {"\"checkpoint_sha256\"", "\"tensors_sha256\"", DPT_EFORMAT, "unknown metadata key \"tensors_sha256\""},
        {"\"model_spec\"", "\"model\":\"x\",\"model_spec\"", DPT_EFORMAT, "unknown metadata key \"model\""},
        {"\"model_spec\":\"", "\"model_spec_\":\"", DPT_EFORMAT, "unknown metadata key"},
        {"\"model_spec\":\"", "\"model_spec\":\"\\n", DPT_EFORMAT, "model_spec has a character outside"},
        {"\"state\":\"{", "\"state\":\"[1],{", DPT_EFORMAT, "state is not a JSON object"},
        {"\"data_offsets\":[0,", "\"data_offsets\":[4,", DPT_EFORMAT, "data_offsets"},
        {"\"data_offsets\":[0,", "\"data_offsets\":[-1,", DPT_EFORMAT,
         "data_offsets must be [begin, end]"},
        {"\"optim.m\"", "\"extra.m\"", DPT_EMISMATCH, "tensor \"extra.m\" is not part of model"},
        {"\"kind\\\":\\\"adam\\\"", "\"kind\\\":\\\"adamw\\\"", DPT_EFORMAT,
         "unknown optimizer \"adamw\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(edit_header(cases[i].from, cases[i].to));
        CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, &o, NULL), cases[i].want);
        CHECK_ERR_HAS(cases[i].msg);
        CHECK_ERR_HAS(g_bad);
        if (cases[i].want == DPT_EFORMAT) CHECK_STATUS(dpt_checkpoint_peek(g_bad, NULL, NULL), DPT_EFORMAT);
    }

    /* issue 18: edits that leave a well-formed header (another activation, a changed
     * optimizer moment count or learning rate, another seed or RNG position, another
     * normalization statistic) are refused by the hash over the whole file */
    const char *silent[][2] = {
        {":relu\"", ":tanh\""},
        {"\\\"t\\\":3", "\\\"t\\\":4"},
        {"\\\"lr\\\":0.003", "\\\"lr\\\":0.03"},
        {"\\\"seed\\\":42", "\\\"seed\\\":43"},
        {"\\\"step\\\":3", "\\\"step\\\":2"},
        {"\"F32\",\"shape\"", "\"F32\" ,\"shape\""},
    };
    for (size_t i = 0; i < sizeof silent / sizeof silent[0]; i++) {
        CHECK(edit_header_ex(silent[i][0], silent[i][1], 1));
        CHECK_STATUS(dpt_checkpoint_peek(g_bad, NULL, NULL), DPT_EFORMAT);
        CHECK_ERR_HAS("does not match its SHA-256");
        /* the same edit re-sealed is read (these are valid values): the hash refused it */
        CHECK(edit_header_ex(silent[i][0], silent[i][1], 0));
        CHECK_OK(dpt_checkpoint_peek(g_bad, NULL, NULL));
    }
    /* a second copy of the hash key elsewhere in the header is refused */
    CHECK(edit_header("\"dtype\":\"F32\"", "\"checkpoint_sha256\":\"0000000000000000000000000000000000000000000000000000000000000000\",\"dtype\":\"F32\""));
    CHECK_STATUS(dpt_checkpoint_peek(g_bad, NULL, NULL), DPT_EFORMAT);
    CHECK_ERR_HAS("unknown key \"checkpoint_sha256\"");

    /* a shape inconsistent with its own data_offsets is malformed ... */
    snprintf(from, sizeof from, "\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu]", t0.name,
             t0.shape[0], t0.shape[1]);
    snprintf(to, sizeof to, "\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu]", t0.name,
             t0.shape[0], t0.shape[1] + 1);
    CHECK(edit_header(from, to));
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EFORMAT);
    snprintf(msg, sizeof msg, "tensor \"%s\": shape needs", t0.name);
    CHECK_ERR_HAS(msg);
    /* ... a consistent shape that differs from the model's is a mismatch naming the tensor */
    snprintf(to, sizeof to, "\"%s\":{\"dtype\":\"F32\",\"shape\":[%zu,%zu]", t0.name,
             t0.shape[1], t0.shape[0]);
    CHECK(edit_header(from, to));
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EMISMATCH);
    snprintf(msg, sizeof msg, "tensor \"%s\" has shape [%zu, %zu] in the checkpoint, the model "
             "expects [%zu, %zu]", t0.name, t0.shape[1], t0.shape[0], t0.shape[0], t0.shape[1]);
    CHECK_ERR_HAS(msg);
    /* a renamed model tensor: missing */
    snprintf(from, sizeof from, "\"%s\":{", t1.name);
    CHECK(edit_header(from, "\"zzz\":{"));
    CHECK_STATUS(dpt_checkpoint_load(g_bad, m2, NULL, NULL), DPT_EMISMATCH);
    snprintf(msg, sizeof msg, "tensor \"%s\" missing from the checkpoint", t1.name);
    CHECK_ERR_HAS(msg);

    /* wrong model: the spec mismatch names both specs; the model is left untouched */
    dpt_model *m3 = new_model("mlp:4-3-3:relu");
    fill(m3->theta, m3->n_params, 3);
    float keep[64];
    CHECK(m3->n_params <= 64);
    memcpy(keep, m3->theta, m3->n_params * sizeof(float));
    CHECK_STATUS(dpt_checkpoint_load(g_path, m3, NULL, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("checkpoint is for model \"" SPEC "\", not \"mlp:4-3-3:relu\"");
    CHECK(memcmp(keep, m3->theta, m3->n_params * sizeof(float)) == 0);
    /* an optimizer sized for another model */
    dpt_optim small;
    dpt_optim_config c = dpt_optim_defaults(DPT_OPT_ADAM);
    CHECK_OK(dpt_optim_init(&small, &c, 5));
    CHECK_STATUS(dpt_checkpoint_load(g_path, m2, &small, NULL), DPT_EMISMATCH);
    CHECK_ERR_HAS("optimizer has 5 parameters");
    CHECK(small.n == 5 && small.t == 0);
    dpt_optim_free(&small);
    dpt_model_free(m3);

    /* missing file: DPT_EIO naming the path */
    char none[300];
    snprintf(none, sizeof none, "%s/does-not-exist.safetensors", tu_tmpdir());
    CHECK_STATUS(dpt_checkpoint_load(none, m2, NULL, NULL), DPT_EIO);
    CHECK_ERR_HAS(none);
    char *sp = (char *)1;
    CHECK_STATUS(dpt_checkpoint_peek(none, &sp, NULL), DPT_EIO);
    CHECK(sp == NULL);

    dpt_optim_free(&o);
    dpt_model_free(m);
    dpt_model_free(m2);
}

static void test_metrics(void) {
    char p[300];
    snprintf(p, sizeof p, "%s/metrics.jsonl", tu_tmpdir());
    dpt_metrics mt;
    CHECK_OK(dpt_metrics_open(&mt, p, 0));
    CHECK_OK(dpt_metrics_write(&mt, "{\"epoch\":0,\"train_loss\":1.5}"));
    /* flushed: visible before close */
    uint8_t *b;
    size_t n;
    CHECK_OK(dpt_read_file(p, &b, &n));
    CHECK(n == 29 && memcmp(b, "{\"epoch\":0,\"train_loss\":1.5}\n", 29) == 0);
    dpt_free(b);
    CHECK_STATUS(dpt_metrics_write(&mt, "{\"a\":1}\n{\"b\":2}"), DPT_EINVAL);
    CHECK_STATUS(dpt_metrics_write(&mt, "not json"), DPT_EINVAL);
    dpt_metrics_close(&mt);
    dpt_metrics_close(&mt);
    CHECK_OK(dpt_metrics_open(&mt, p, 1));
    CHECK_OK(dpt_metrics_write(&mt, "{\"epoch\":1}"));
    dpt_metrics_close(&mt);
    CHECK_OK(dpt_read_file(p, &b, &n));
    CHECK(n == 41 && memcmp(b + 29, "{\"epoch\":1}\n", 12) == 0);
    dpt_free(b);
    CHECK_OK(dpt_metrics_open(&mt, p, 0)); /* truncates */
    dpt_metrics_close(&mt);
    CHECK_OK(dpt_read_file(p, &b, &n));
    CHECK(n == 0);
    dpt_free(b);
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/dir/m.jsonl", tu_tmpdir());
    CHECK_STATUS(dpt_metrics_open(&mt, bad, 0), DPT_EIO);
    CHECK_ERR_HAS(bad);
}

int main(void) {
    snprintf(g_path, sizeof g_path, "%s/ckpt.safetensors", tu_tmpdir());
    snprintf(g_bad, sizeof g_bad, "%s/bad.safetensors", tu_tmpdir());
    test_round_trip();
    test_layout();
    test_truncation_and_corruption();
    test_edited_headers();
    test_metrics();
    TEST_MAIN_END();
}
