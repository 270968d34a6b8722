/* Model spec strings: "<kind>:<m_0>-<m_1>-...-<m_L>[:<activation>][:nobias]".
 * kind is mlp or ae; activation relu|gelu|tanh|sigmoid|identity (default relu).
 * Convolutional models: "cnn:<C>x<H>x<W>:<item>,<item>,...[:nobias]" (grammar in docs/nn.md)
 * Sequence models: "seq:<T>[x<D>]:<item>,...[:nobias]", the same items on (1, T, D)
 * and the named models below, which are expanded to such a string. */
#include "nn_internal.h"

#include <ctype.h>
#include <string.h>

static const struct {
    const char *name;
    dpt_layer_kind kind;
} act_names[] = {
    {"relu", DPT_LAYER_RELU},         {"gelu", DPT_LAYER_GELU},
    {"tanh", DPT_LAYER_TANH},         {"sigmoid", DPT_LAYER_SIGMOID},
    {"identity", DPT_LAYER_IDENTITY},
};

/* Copies [s, s + n) into buf (NUL-terminated, truncated to cap - 1). */
static const char *part(const char *s, size_t n, char *buf, size_t cap) {
    if (n >= cap) n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return buf;
}

/* ==== Named models ==== */

static const struct {
    const char *name, *spec;
} named[] = {
    /* Opacus examples/mnist.py SampleConvNet: 28 -> conv 8x8/2 pad 3 -> 14 -> maxpool 2/1 -> 13 -> conv 4x4/2 -> 5 ->
     * maxpool 2/1 -> 4; 32*4*4 = 512 -> 32 -> 10 (26010 parameters) */
    {"mnist_cnn", "cnn:1x28x28:conv16k8s2p3,relu,maxpool2s1,conv32k4s2,relu,maxpool2s1,flatten,fc32,relu,fc10"},
    /* Tramer & Boneh 2021's MNIST CNN (models.py of their Handcrafted-DP code): tanh, and
     * padding 2 in conv 1: 28 -> 13 -> maxpool 2/1 -> 12 -> conv 4x4/2 -> 5 -> 4 */
    {"mnist_cnn_tanh", "cnn:1x28x28:conv16k8s2p2,tanh,maxpool2s1,conv32k4s2,tanh,maxpool2s1,flatten,fc32,tanh,fc10"},
    /* Tramer & Boneh 2021's CIFAR-10 CNN on pixels (models.py of Handcrafted-DP, in_channels 3,
     * default size): three blocks of two 3x3 convolutions (padding 1, tanh) and a 2x2
     * max-pool, 32, 64, 128 channels: 32 -> 16 -> 8 -> 4; 128*4*4 = 2048 -> 128 -> 10,
     * tanh (550570 parameters; about 39 M multiply-adds per example forward) */
    {"cifar_cnn_tanh", "cnn:3x32x32:conv32k3p1,tanh,conv32k3p1,tanh,maxpool2,conv64k3p1,tanh,conv64k3p1,tanh,"
                       "maxpool2,conv128k3p1,tanh,conv128k3p1,tanh,maxpool2,flatten,fc128,tanh,fc10"},
    /* DP-ULR (Section 4.3) ResNet-5: conv 8, 16, 32, 32 channels 3x3 stride 1 (padding 1),
     * ReLU, the output of conv 4 added to its input (conv 3's activation) before the ReLU,
     * then one linear layer. The pooling is ours (the paper states none): 2x2 max-pooling
     * after conv 1 and conv 2 and 2x2 average-pooling before the linear layer, so the linear
     * layer sees 32*4*4 = 512 features (20410 parameters in all). */
    {"resnet5", "cnn:3x32x32:conv8k3p1,relu,maxpool2,conv16k3p1,relu,maxpool2,conv32k3p1,relu,[conv32k3p1],relu,"
                "avgpool2,flatten,fc10"},
};

/* Transformers (docs/nn.md "Named models"): width 64, 2 pre-LN blocks of 4-head attention
 * and a GELU MLP of width 4 x 64 (each block [ln,plin192,attn4,plin64],[ln,plin256,gelu,plin64]),
 * a final LayerNorm, then a head. Options after the name, each at most once:
 * t<T> positions, v<V> vocabulary, c<C> classes, with the defaults below.
 *   gpt_tiny[:t<T>][:v<V>][:p<P>]  causal LM body and head: seq:T:emb<V>x64,<blocks c>,ln,plin<V>
 *                                (per-position logits over the V tokens, (1, T, V))
 *   bert_tiny[:t<T>][:v<V>][:c<C>][:p<P>]  bidirectional encoder classifier: ...,ln,meanpool,fc<C>
 *                                (p<P>: token P pads, emb<V>x64pad<P>: the padding mask)
 *   vit_mnist[:c<C>], vit_cifar[:c<C>]  ViT on 1x28x28 / 3x32x32: 4x4 patches (a stride-4
 *                                convolution to 64 channels), a CLS vector and positions
 *                                (toseqcls), the blocks, ln, clspool, fc<C> */
static int read_num(const char **p, const char *end, size_t *v, int zero_ok);

#define XF_BLOCK(c) "[ln,plin192,attn4" c ",plin64],[ln,plin256,gelu,plin64]"
static const struct {
    const char *name, *opts;   /* opts: the letters the model takes */
    size_t T, V, C;            /* defaults */
    const char *fmt;           /* printf format of the spec; arguments in the order of opts */
} xformers[] = {
    {"gpt_tiny", "tvp", 64, 256, 0, "seq:%zu:emb%zux64%s," XF_BLOCK("c") "," XF_BLOCK("c") ",ln,plin%zu"},
    {"bert_tiny", "tvcp", 64, 256, 2, "seq:%zu:emb%zux64%s," XF_BLOCK("") "," XF_BLOCK("") ",ln,meanpool,fc%zu"},
    {"vit_mnist", "c", 0, 0, 10, "cnn:1x28x28:conv64k4s4,toseqcls," XF_BLOCK("") "," XF_BLOCK("") ",ln,clspool,fc%zu"},
    {"vit_cifar", "c", 0, 0, 10, "cnn:3x32x32:conv64k4s4,toseqcls," XF_BLOCK("") "," XF_BLOCK("") ",ln,clspool,fc%zu"},
};

/* The spec of a named transformer with its options ("gpt_tiny:t128:v96") in buf; 0 when
 * `spec` does not start with such a name (then buf is unused). */
static dpt_status expand_xformer(const char *spec, char *buf, size_t cap, int *found) {
    char bad[96];
    *found = 0;
    const char *colon = strchr(spec, ':');
    const size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    size_t j = 0;
    while (j < sizeof xformers / sizeof xformers[0] &&
           !(strlen(xformers[j].name) == n && !strncmp(spec, xformers[j].name, n)))
        j++;
    if (j == sizeof xformers / sizeof xformers[0]) return DPT_OK;
    *found = 1;
    size_t v[4] = {xformers[j].T, xformers[j].V, xformers[j].C, 0}; /* t, v, c, p */
    int seen[4] = {0, 0, 0, 0};
    const char *p = colon;
    while (p && *p == ':') {
        p++;
        const char *e = strchr(p, ':');
        if (!e) e = p + strlen(p);
        const char *letter = *p ? strchr("tvcp", *p) : NULL, *q = p + 1;
        const int k = letter ? (int)(letter - "tvcp") : -1;
        DPT_CHECK(k >= 0 && strchr(xformers[j].opts, *p) && !seen[k] && read_num(&q, e, &v[k], k == 3) && q == e,
                  DPT_EINVAL, "model spec '%s': '%s' is not an option of %s (it takes %s, each at most once)", spec,
                  part(p, (size_t)(e - p), bad, sizeof bad), xformers[j].name,
                  !strcmp(xformers[j].opts, "tvp")    ? "t<positions>, v<vocabulary>, p<pad id>"
                  : !strcmp(xformers[j].opts, "tvcp") ? "t<positions>, v<vocabulary>, c<classes>, p<pad id>"
                                                     : "c<classes>");
        seen[k] = 1;
        p = e;
    }
    int w;
    char pad[32] = ""; /* p<P>: the embedding's pad id (padding mask) */
    if (seen[3]) snprintf(pad, sizeof pad, "pad%zu", v[3]);
    if (!strcmp(xformers[j].opts, "tvp")) w = snprintf(buf, cap, xformers[j].fmt, v[0], v[1], pad, v[1]);
    else if (!strcmp(xformers[j].opts, "tvcp")) w = snprintf(buf, cap, xformers[j].fmt, v[0], v[1], pad, v[2]);
    else w = snprintf(buf, cap, xformers[j].fmt, v[2]);
    DPT_ASSERT(w > 0 && (size_t)w < cap);
    return DPT_OK;
}

/* ==== Convolutional specs ==== */

/* Reads a whole number (1..DPT_SPEC_MAX_WIDTH; 0 allowed when zero_ok) at *p and advances. */
static int read_num(const char **p, const char *end, size_t *v, int zero_ok) {
    size_t x = 0, n = 0;
    while (*p < end && isdigit((unsigned char)**p) && n < 9) {
        x = x * 10 + (size_t)(**p - '0');
        (*p)++;
        n++;
    }
    if (n == 0 || (*p < end && isdigit((unsigned char)**p)) || (!zero_ok && x == 0) || x > DPT_SPEC_MAX_WIDTH)
        return 0;
    *v = x;
    return 1;
}

static int prefix(const char *p, const char *end, const char *w) {
    size_t n = strlen(w);
    return (size_t)(end - p) >= n && !strncmp(p, w, n);
}

/* One item "[conv16k3s1p1]" etc. in [p, end) */
static dpt_status parse_item(const char *spec, const char *p, const char *end, dpt_spec_item *it) {
    char bad[96];
    const char *p0 = p;
    memset(it, 0, sizeof *it);
    if (p < end && *p == '[') {
        it->res_open = 1;
        p++;
    }
    if (end > p && end[-1] == ']') {
        it->res_close = 1;
        end--;
    }
    const char *q = p;
    int ok = 1;
    size_t n = (size_t)(end - p);
    if (n == 3 && !strncmp(p, "fbn", 3)) {
        it->kind = DPT_LAYER_CHANNEL_AFFINE;
        return DPT_OK;
    }
    if (prefix(p, end, "bn") || prefix(p, end, "batchnorm")) {
        return dpt_set_error(DPT_EINVAL,
                             "model spec '%s': '%s': BatchNorm is not available: it normalizes with statistics of "
                             "the whole batch, so one example's output depends on the others and per-example "
                             "gradients (and DP-SGD's clipping) are not defined; use GroupNorm (gn<groups>), or fbn "
                             "(frozen BatchNorm: fixed channel statistics, e.g. DP ones from "
                             "dpt_trainer_feature_norm)",
                             spec, part(p0, (size_t)(end - p0) + (size_t)it->res_close, bad, sizeof bad));
    }
    for (size_t j = 0; j < sizeof act_names / sizeof act_names[0]; j++)
        if (strlen(act_names[j].name) == n && !strncmp(p, act_names[j].name, n)) {
            it->kind = act_names[j].kind;
            return DPT_OK;
        }
    if (n == 7 && !strncmp(p, "flatten", 7)) {
        it->kind = DPT_LAYER_FLATTEN;
        return DPT_OK;
    }
    static const struct {
        const char *name;
        dpt_layer_kind kind;
    } seq_names[] = {
        {"ln", DPT_LAYER_LAYERNORM}, {"rms", DPT_LAYER_RMSNORM}, {"meanpool", DPT_LAYER_MEANPOOL},
        {"clspool", DPT_LAYER_CLSPOOL},
    };
    for (size_t j = 0; j < sizeof seq_names / sizeof seq_names[0]; j++)
        if (strlen(seq_names[j].name) == n && !strncmp(p, seq_names[j].name, n)) {
            it->kind = seq_names[j].kind;
            return DPT_OK;
        }
    if (prefix(p, end, "conv")) {
        q = p + 4;
        it->kind = DPT_LAYER_CONV2D;
        it->stride = 1;
        ok = read_num(&q, end, &it->n, 0) && q < end && *q == 'k' && (q++, read_num(&q, end, &it->k, 0));
        if (ok && q < end && *q == 's') q++, ok = read_num(&q, end, &it->stride, 0);
        if (ok && q < end && *q == 'p') q++, ok = read_num(&q, end, &it->pad, 1);
        if (ok && prefix(q, end, "ws")) q += 2, it->ws = 1;
        if (ok && prefix(q, end, "nobias")) q += 6, it->nobias = 1;
    } else if (prefix(p, end, "maxpool") || prefix(p, end, "avgpool")) {
        it->kind = *p == 'm' ? DPT_LAYER_MAXPOOL : DPT_LAYER_AVGPOOL;
        q = p + 7;
        ok = read_num(&q, end, &it->k, 0);
        it->stride = it->k;
        if (ok && q < end && *q == 's') q++, ok = read_num(&q, end, &it->stride, 0);
    } else if (prefix(p, end, "scatter")) {
        it->kind = DPT_LAYER_SCATTER;
        it->k = 2; /* J, L: Tramer & Boneh's (and Kymatio's usual) choice */
        it->n = 8;
        q = p + 7;
        if (q < end && *q == 'j') q++, ok = read_num(&q, end, &it->k, 0);
        if (ok && q < end && *q == 'l') q++, ok = read_num(&q, end, &it->n, 0);
    } else if (prefix(p, end, "gn")) {
        it->kind = DPT_LAYER_GROUPNORM;
        q = p + 2;
        ok = read_num(&q, end, &it->n, 0);
    } else if (prefix(p, end, "emb")) {
        it->kind = DPT_LAYER_EMBEDDING;
        q = p + 3;
        ok = read_num(&q, end, &it->n, 0) && q < end && *q == 'x' && (q++, read_num(&q, end, &it->k, 0));
        if (ok && prefix(q, end, "nopos")) q += 5, it->nopos = 1;
        if (ok && prefix(q, end, "pad")) q += 3, it->has_pad = 1, ok = read_num(&q, end, &it->pad_id, 1);
    } else if (prefix(p, end, "plin")) {
        it->kind = DPT_LAYER_SEQLINEAR;
        q = p + 4;
        ok = read_num(&q, end, &it->n, 0);
        if (ok && prefix(q, end, "nobias")) q += 6, it->nobias = 1;
    } else if (prefix(p, end, "attn")) {
        it->kind = DPT_LAYER_ATTENTION;
        q = p + 4;
        ok = read_num(&q, end, &it->n, 0);
        if (ok && q < end && *q == 'c') q++, it->causal = 1;
    } else if (prefix(p, end, "toseq")) {
        it->kind = DPT_LAYER_TOSEQ;
        q = p + 5;
        if (prefix(q, end, "cls")) q += 3, it->cls = 1;
        if (prefix(q, end, "nopos")) q += 5, it->nopos = 1;
    } else if (prefix(p, end, "fc")) {
        it->kind = DPT_LAYER_LINEAR;
        q = p + 2;
        ok = read_num(&q, end, &it->n, 0);
        if (ok && prefix(q, end, "nobias")) q += 6, it->nobias = 1;
    } else {
        ok = 0;
    }
    if (!ok || q != end)
        return dpt_set_error(DPT_EINVAL,
                             "model spec '%s': '%s' is not a layer (expected conv<C>k<k>[s<s>][p<p>][ws][nobias], "
                             "maxpool<k>[s<s>], avgpool<k>[s<s>], gn<groups>, fbn, flatten, fc<K>[nobias], "
                             "scatter[j<J>][l<L>], emb<V>x<D>[nopos][pad<P>], ln, rms, plin<K>[nobias], attn<heads>[c], meanpool, "
                             "clspool, toseq[cls][nopos], relu|gelu|tanh|sigmoid|identity, optionally in [...] for a residual group)",
                             spec, part(p0, (size_t)(end - p0) + (size_t)it->res_close, bad, sizeof bad));
    return DPT_OK;
}

dpt_status dpt_spec_item_parse(const char *item, dpt_spec_item *it) {
    return parse_item(item, item, item + strlen(item), it);
}

int dpt_spec_item_format(const dpt_spec_item *it, char *buf, size_t cap) {
    char body[64];
    switch (it->kind) {
    case DPT_LAYER_CONV2D: {
        int w = snprintf(body, sizeof body, "conv%zuk%zu", it->n, it->k);
        if (it->stride != 1) w += snprintf(body + w, sizeof body - (size_t)w, "s%zu", it->stride);
        if (it->pad) w += snprintf(body + w, sizeof body - (size_t)w, "p%zu", it->pad);
        if (it->ws) w += snprintf(body + w, sizeof body - (size_t)w, "ws");
        if (it->nobias) snprintf(body + w, sizeof body - (size_t)w, "nobias");
        break;
    }
    case DPT_LAYER_MAXPOOL:
    case DPT_LAYER_AVGPOOL: {
        int w = snprintf(body, sizeof body, "%s%zu", it->kind == DPT_LAYER_MAXPOOL ? "maxpool" : "avgpool", it->k);
        if (it->stride != it->k) snprintf(body + w, sizeof body - (size_t)w, "s%zu", it->stride);
        break;
    }
    case DPT_LAYER_GROUPNORM: snprintf(body, sizeof body, "gn%zu", it->n); break;
    case DPT_LAYER_CHANNEL_AFFINE: snprintf(body, sizeof body, "fbn"); break;
    case DPT_LAYER_SCATTER: {
        int w = snprintf(body, sizeof body, "scatter");
        if (it->k != 2) w += snprintf(body + w, sizeof body - (size_t)w, "j%zu", it->k);
        if (it->n != 8) snprintf(body + w, sizeof body - (size_t)w, "l%zu", it->n);
        break;
    }
    case DPT_LAYER_FLATTEN: snprintf(body, sizeof body, "flatten"); break;
    case DPT_LAYER_LINEAR: snprintf(body, sizeof body, "fc%zu%s", it->n, it->nobias ? "nobias" : ""); break;
    case DPT_LAYER_EMBEDDING: {
        int w = snprintf(body, sizeof body, "emb%zux%zu%s", it->n, it->k, it->nopos ? "nopos" : "");
        if (it->has_pad) snprintf(body + w, sizeof body - (size_t)w, "pad%zu", it->pad_id);
        break;
    }
    case DPT_LAYER_LAYERNORM: snprintf(body, sizeof body, "ln"); break;
    case DPT_LAYER_RMSNORM: snprintf(body, sizeof body, "rms"); break;
    case DPT_LAYER_SEQLINEAR: snprintf(body, sizeof body, "plin%zu%s", it->n, it->nobias ? "nobias" : ""); break;
    case DPT_LAYER_ATTENTION: snprintf(body, sizeof body, "attn%zu%s", it->n, it->causal ? "c" : ""); break;
    case DPT_LAYER_TOSEQ:
        snprintf(body, sizeof body, "toseq%s%s", it->cls ? "cls" : "", it->nopos ? "nopos" : "");
        break;
    default: snprintf(body, sizeof body, "%s", dpt_layer_kind_name(it->kind)); break;
    }
    return snprintf(buf, cap, "%s%s%s", it->res_open ? "[" : "", body, it->res_close ? "]" : "");
}

static dpt_status parse_cnn(const char *spec, const char *body, int seq, dpt_spec *out) {
    char bad[96];
    /* input shape CxHxW (cnn:), or T (token ids, (1, T, 1)) or TxD ((1, T, D)) (seq:) */
    const char *p = body, *end = strchr(p, ':');
    if (!end) end = p + strlen(p);
    const char *q = p;
    int ok;
    if (seq) {
        out->in_shape[0] = out->in_shape[2] = 1;
        ok = read_num(&q, end, &out->in_shape[1], 0) &&
             (q == end || (*q == 'x' && (q++, read_num(&q, end, &out->in_shape[2], 0)) && q == end));
    } else {
        ok = read_num(&q, end, &out->in_shape[0], 0) && q < end && *q == 'x' &&
             (q++, read_num(&q, end, &out->in_shape[1], 0)) && q < end && *q == 'x' &&
             (q++, read_num(&q, end, &out->in_shape[2], 0)) && q == end;
    }
    if (!ok)
        return dpt_set_error(DPT_EINVAL, "model spec '%s': '%s' is not an input shape (expected %s)", spec,
                             part(p, (size_t)(end - p), bad, sizeof bad),
                             seq ? "T token ids or TxD features, e.g. 32 or 32x16" : "CxHxW, e.g. 3x32x32");
    DPT_CHECK(*end == ':' && end[1] && end[1] != ':', DPT_EINVAL,
              "model spec '%s': no layers after the input shape (expected e.g. 'cnn:1x28x28:conv16k5,relu,fc10')",
              spec);
    p = end + 1;
    end = strchr(p, ':');
    if (!end) end = p + strlen(p);
    int open = 0;
    while (p < end) {
        q = p;
        while (q < end && *q != ',') q++;
        DPT_CHECK(out->n_items < DPT_SPEC_MAX_ITEMS, DPT_EINVAL, "model spec '%s': more than %d layers", spec,
                  DPT_SPEC_MAX_ITEMS);
        dpt_spec_item *it = &out->items[out->n_items++];
        DPT_TRY(parse_item(spec, p, q, it));
        DPT_CHECK(!(it->res_open && open), DPT_EINVAL, "model spec '%s': residual groups cannot be nested", spec);
        if (it->res_open) open = 1;
        if (it->res_close) {
            DPT_CHECK(open, DPT_EINVAL, "model spec '%s': ']' without a matching '['", spec);
            open = 0;
        }
        p = q < end ? q + 1 : q;
        DPT_CHECK(!(q < end && p == end), DPT_EINVAL, "model spec '%s': trailing ','", spec);
    }
    DPT_CHECK(!open, DPT_EINVAL, "model spec '%s': '[' without a matching ']'", spec);
    DPT_CHECK(out->n_items > 0, DPT_EINVAL, "model spec '%s': no layers", spec);
    /* option ":nobias" */
    while (*end == ':') {
        p = end + 1;
        end = strchr(p, ':');
        if (!end) end = p + strlen(p);
        if ((size_t)(end - p) == 6 && !strncmp(p, "nobias", 6)) out->has_bias = 0;
        else
            return dpt_set_error(DPT_EINVAL, "model spec '%s': unknown option '%s' (expected nobias)", spec,
                                 part(p, (size_t)(end - p), bad, sizeof bad));
    }
    return DPT_OK;
}

dpt_status dpt_spec_parse(const char *spec, dpt_spec *out) {
    DPT_CHECK(spec && out, DPT_EINVAL, "model spec: NULL");
    memset(out, 0, sizeof *out);
    for (size_t j = 0; j < sizeof named / sizeof named[0]; j++)
        if (!strcmp(spec, named[j].name)) spec = named[j].spec;
    char xf[512];
    int found;
    DPT_TRY(expand_xformer(spec, xf, sizeof xf, &found));
    if (found) spec = xf;
    if (!strncmp(spec, "cnn:", 4)) {
        out->cnn = 1;
        out->has_bias = 1;
        return parse_cnn(spec, spec + 4, 0, out);
    }
    if (!strncmp(spec, "seq:", 4)) {
        out->cnn = 1;
        out->has_bias = 1;
        return parse_cnn(spec, spec + 4, 1, out);
    }
    out->act = DPT_LAYER_RELU;
    out->has_bias = 1;
    char bad[96];
    DPT_CHECK(*spec, DPT_EINVAL, "model spec '': empty (expected e.g. 'mlp:784-128-10:relu')");
    const char *colon = strchr(spec, ':');
    size_t klen = colon ? (size_t)(colon - spec) : strlen(spec);
    if (klen == 3 && !strncmp(spec, "mlp", 3)) {
        out->autoencoder = 0;
    } else if (klen == 2 && !strncmp(spec, "ae", 2)) {
        out->autoencoder = 1;
    } else {
        return dpt_set_error(DPT_EINVAL,
                             "model spec '%s': unknown model kind '%s' (expected mlp, ae, cnn, seq, or a named model: "
                             "mnist_cnn, mnist_cnn_tanh, cifar_cnn_tanh, resnet5, gpt_tiny, bert_tiny, vit_mnist, vit_cifar)",
                             spec, part(spec, klen, bad, sizeof bad));
    }
    DPT_CHECK(colon && colon[1] && colon[1] != ':', DPT_EINVAL,
              "model spec '%s': no layer widths (expected e.g. '%s:784-128-10')", spec,
              part(spec, klen, bad, sizeof bad));

    /* widths: digits separated by '-', up to the next ':' */
    const char *p = colon + 1;
    const char *end = strchr(p, ':');
    if (!end) end = p + strlen(p);
    while (p <= end) {
        const char *q = p;
        while (q < end && *q != '-') q++;
        size_t n = (size_t)(q - p);
        int ok = n > 0 && n <= 9;
        size_t w = 0;
        for (size_t j = 0; ok && j < n; j++) {
            if (!isdigit((unsigned char)p[j])) ok = 0;
            else w = w * 10 + (size_t)(p[j] - '0');
        }
        if (!ok || w == 0 || w > DPT_SPEC_MAX_WIDTH) {
            return dpt_set_error(DPT_EINVAL, "model spec '%s': '%s' is not a layer width (a whole number in 1..%zu)",
                                 spec, part(p, n, bad, sizeof bad), DPT_SPEC_MAX_WIDTH);
        }
        if (out->n_widths == DPT_SPEC_MAX_WIDTHS) {
            return dpt_set_error(DPT_EINVAL, "model spec '%s': too many layers (at most %d widths)", spec,
                                 DPT_SPEC_MAX_WIDTHS);
        }
        out->widths[out->n_widths++] = w;
        if (q == end) break;
        p = q + 1;
    }
    DPT_CHECK(out->n_widths >= 2, DPT_EINVAL,
              "model spec '%s': needs at least two widths (input and output), got %zu", spec, out->n_widths);
    if (out->autoencoder) {
        DPT_CHECK(out->widths[0] == out->widths[out->n_widths - 1], DPT_EINVAL,
                  "model spec '%s': an autoencoder's output width %zu differs from its input width %zu", spec,
                  out->widths[out->n_widths - 1], out->widths[0]);
    }

    /* options: ":<activation>" and ":nobias", each at most once */
    int seen_act = 0, seen_nobias = 0;
    p = end;
    while (*p == ':') {
        p++;
        const char *q = strchr(p, ':');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        size_t j;
        for (j = 0; j < sizeof act_names / sizeof act_names[0]; j++)
            if (strlen(act_names[j].name) == n && !strncmp(p, act_names[j].name, n)) break;
        if (j < sizeof act_names / sizeof act_names[0]) {
            DPT_CHECK(!seen_act, DPT_EINVAL, "model spec '%s': more than one activation ('%s')", spec,
                      part(p, n, bad, sizeof bad));
            seen_act = 1;
            out->act = act_names[j].kind;
        } else if (n == 6 && !strncmp(p, "nobias", 6)) {
            DPT_CHECK(!seen_nobias, DPT_EINVAL, "model spec '%s': 'nobias' given twice", spec);
            seen_nobias = 1;
            out->has_bias = 0;
        } else {
            return dpt_set_error(DPT_EINVAL,
                                 "model spec '%s': unknown activation or option '%s' "
                                 "(expected relu|gelu|tanh|sigmoid|identity or nobias)",
                                 spec, part(p, n, bad, sizeof bad));
        }
        p += n;
    }
    return DPT_OK;
}
