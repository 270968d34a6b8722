/* Model builder (dpt_model_builder_*): for every named model and several MLPs, the spec
 * built one layer at a time equals the hand-written spec, and the models built from both
 * have identical parameter tables and bit-identical outputs at the same initialization.
 * Every invalid layer is refused by the call that adds it, leaving the builder unchanged.
 * Also the by-name tensor lookup (dpt_model_tensor_by_name), and sequence models built
 * item by item (dpt_model_builder_item): the named transformers and their "seq:" specs. */
#include <dptrain/nn.h>

#include "testutil.h"

/* Both specs build models with the same tensor table, and the same seed gives the same
 * outputs on the same input, bit for bit. */
static void check_same_model(const char *a, const char *b) {
    dpt_model *ma = NULL, *mb = NULL;
    CHECK_OK(dpt_model_new(a, 3, 1, &ma));
    CHECK_OK(dpt_model_new(b, 3, 1, &mb));
    if (!ma || !mb) goto out;
    CHECK(ma->n_layers == mb->n_layers && ma->n_params == mb->n_params);
    CHECK(ma->in_dim == mb->in_dim && ma->out_dim == mb->out_dim);
    CHECK(dpt_model_n_tensors(ma) == dpt_model_n_tensors(mb));
    for (size_t i = 0; i < dpt_model_n_tensors(ma) && i < dpt_model_n_tensors(mb); i++) {
        dpt_param_tensor ta, tb;
        CHECK_OK(dpt_model_tensor(ma, i, &ta));
        CHECK_OK(dpt_model_tensor(mb, i, &tb));
        CHECK(!strcmp(ta.name, tb.name) && ta.ndim == tb.ndim && ta.offset == tb.offset && ta.size == tb.size &&
              ta.role == tb.role && !memcmp(ta.shape, tb.shape, sizeof ta.shape));
    }
    for (size_t l = 0; l < ma->n_layers && l < mb->n_layers; l++)
        CHECK(ma->layers[l].kind == mb->layers[l].kind && ma->layers[l].residual_from == mb->layers[l].residual_from &&
              ma->layers[l].has_bias == mb->layers[l].has_bias && !strcmp(ma->layers[l].name, mb->layers[l].name));
    dpt_rng ra, rb, rx;
    CHECK_OK(dpt_rng_init(&ra, 7, DPT_STREAM_INIT));
    CHECK_OK(dpt_rng_init(&rb, 7, DPT_STREAM_INIT));
    CHECK_OK(dpt_model_init(ma, DPT_INIT_DEFAULT, NULL, 0, 0.01, &ra));
    CHECK_OK(dpt_model_init(mb, DPT_INIT_DEFAULT, NULL, 0, 0.01, &rb));
    CHECK(!memcmp(ma->theta, mb->theta, ma->n_params * sizeof(float)));
    float *x = malloc(3 * ma->in_dim * sizeof *x);
    CHECK_OK(dpt_rng_init(&rx, 8, DPT_STREAM_AUX));
    for (size_t j = 0; j < 3 * ma->in_dim; j++) x[j] = dpt_rng_gauss(&rx);
    if (ma->layers[0].kind == DPT_LAYER_EMBEDDING) /* token ids in [0, V) */
        for (size_t j = 0; j < 3 * ma->in_dim; j++) x[j] = (float)(dpt_rng_u64(&rx) % ma->layers[0].k);
    CHECK_OK(dpt_model_forward(ma, x, 3));
    CHECK_OK(dpt_model_forward(mb, x, 3));
    CHECK(!memcmp(dpt_model_output(ma), dpt_model_output(mb), 3 * ma->out_dim * sizeof(float)));
    free(x);
    dpt_rng_free(&ra);
    dpt_rng_free(&rb);
    dpt_rng_free(&rx);
out:
    dpt_model_free(ma);
    dpt_model_free(mb);
}

/* The builder's spec equals `want`, and its model matches `want`'s (and `named`'s). */
static void check_spec(dpt_model_builder *b, const char *want, const char *named) {
    const char *got = dpt_model_builder_spec(b);
    CHECK(got && !strcmp(got, want));
    if (got && strcmp(got, want)) fprintf(stderr, "  builder spec '%s'\n  want         '%s'\n", got, want);
    if (!got) return;
    check_same_model(got, want);
    if (named) check_same_model(got, named);
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_builder_build(b, 2, 1, &m));
    CHECK(m && !strcmp(m->spec, want));
    dpt_model_free(m);
}

/* The two MNIST CNNs differ in conv1's padding and the activation */
static void mnist_like(dpt_model_builder *b, size_t pad1, dpt_layer_kind act) {
    CHECK_OK(dpt_model_builder_conv2d(b, 16, 8, 2, pad1, 1));
    CHECK_OK(dpt_model_builder_activation(b, act));
    CHECK_OK(dpt_model_builder_maxpool(b, 2, 1));
    CHECK_OK(dpt_model_builder_conv2d(b, 32, 4, 2, 0, 1));
    CHECK_OK(dpt_model_builder_activation(b, act));
    CHECK_OK(dpt_model_builder_maxpool(b, 2, 1));
    size_t sh[3];
    CHECK_OK(dpt_model_builder_shape(b, sh));
    CHECK(sh[0] == 32 && sh[1] == 4 && sh[2] == 4);
    CHECK_OK(dpt_model_builder_flatten(b));
    CHECK_OK(dpt_model_builder_linear(b, 32, 1));
    CHECK_OK(dpt_model_builder_activation(b, act));
    CHECK_OK(dpt_model_builder_linear(b, 10, 1));
}

static void test_named(void) {
    dpt_model_builder *b = NULL;
    /* mnist_cnn (Opacus) */
    CHECK_OK(dpt_model_builder_new(1, 28, 28, &b));
    mnist_like(b, 3, DPT_LAYER_RELU);
    check_spec(b, "cnn:1x28x28:conv16k8s2p3,relu,maxpool2s1,conv32k4s2,relu,maxpool2s1,flatten,fc32,relu,fc10",
               "mnist_cnn");
    dpt_model_builder_free(b);

    /* mnist_cnn_tanh (Tramer & Boneh) */
    CHECK_OK(dpt_model_builder_new(1, 28, 28, &b));
    mnist_like(b, 2, DPT_LAYER_TANH);
    check_spec(b, "cnn:1x28x28:conv16k8s2p2,tanh,maxpool2s1,conv32k4s2,tanh,maxpool2s1,flatten,fc32,tanh,fc10",
               "mnist_cnn_tanh");
    dpt_model_builder_free(b);

    /* resnet5 (DP-ULR): a residual group around conv4; pool stride 0 = the window */
    CHECK_OK(dpt_model_builder_new(3, 32, 32, &b));
    CHECK_OK(dpt_model_builder_conv2d(b, 8, 3, 1, 1, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_maxpool(b, 2, 0));
    CHECK_OK(dpt_model_builder_conv2d(b, 16, 3, 1, 1, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_maxpool(b, 2, 2));
    CHECK_OK(dpt_model_builder_conv2d(b, 32, 3, 1, 1, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_residual_begin(b));
    CHECK_OK(dpt_model_builder_conv2d(b, 32, 3, 1, 1, 1));
    CHECK_OK(dpt_model_builder_residual_end(b));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_avgpool(b, 2, 0));
    CHECK_OK(dpt_model_builder_flatten(b));
    CHECK_OK(dpt_model_builder_linear(b, 10, 1));
    check_spec(b,
               "cnn:3x32x32:conv8k3p1,relu,maxpool2,conv16k3p1,relu,maxpool2,conv32k3p1,relu,[conv32k3p1],relu,"
               "avgpool2,flatten,fc10",
               "resnet5");
    dpt_model_builder_free(b);

    /* cifar_cnn_tanh (Tramer & Boneh's CIFAR-10 CNN): blocks of two tanh 3x3 convolutions
     * (padding 1) and a 2x2 max-pool, 32, 64, 128 channels, then 2048 -> 128 -> 10 */
    CHECK_OK(dpt_model_builder_new(3, 32, 32, &b));
    for (size_t c = 32; c <= 128; c *= 2) {
        for (int j = 0; j < 2; j++) {
            CHECK_OK(dpt_model_builder_conv2d(b, c, 3, 1, 1, 1));
            CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_TANH));
        }
        CHECK_OK(dpt_model_builder_maxpool(b, 2, 2));
    }
    size_t sh[3];
    CHECK_OK(dpt_model_builder_shape(b, sh));
    CHECK(sh[0] == 128 && sh[1] == 4 && sh[2] == 4);
    CHECK_OK(dpt_model_builder_flatten(b));
    CHECK_OK(dpt_model_builder_linear(b, 128, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_TANH));
    CHECK_OK(dpt_model_builder_linear(b, 10, 1));
    check_spec(b,
               "cnn:3x32x32:conv32k3p1,tanh,conv32k3p1,tanh,maxpool2,conv64k3p1,tanh,conv64k3p1,tanh,maxpool2,"
               "conv128k3p1,tanh,conv128k3p1,tanh,maxpool2,flatten,fc128,tanh,fc10",
               "cifar_cnn_tanh");
    dpt_model_builder_free(b);
}

/* MLPs: widths, one activation kind, bias on or off */
static void mlp(size_t d, const size_t *k, size_t n, dpt_layer_kind act, int bias, const char *want) {
    dpt_model_builder *b = NULL;
    CHECK_OK(dpt_model_builder_new(1, 1, d, &b));
    for (size_t i = 0; i < n; i++) {
        if (i) CHECK_OK(dpt_model_builder_activation(b, act));
        CHECK_OK(dpt_model_builder_linear(b, k[i], bias));
    }
    check_spec(b, want, NULL);
    dpt_model_builder_free(b);
}

static void test_mlps(void) {
    mlp(784, (const size_t[]){128, 64, 32, 10}, 4, DPT_LAYER_GELU, 1, "mlp:784-128-64-32-10:gelu");
    mlp(3072, (const size_t[]){1024, 1}, 2, DPT_LAYER_RELU, 0, "mlp:3072-1024-1:relu:nobias");
    mlp(10, (const size_t[]){3}, 1, DPT_LAYER_RELU, 1, "mlp:10-3");
    mlp(10, (const size_t[]){3}, 1, DPT_LAYER_RELU, 0, "mlp:10-3:nobias");
    mlp(6, (const size_t[]){4, 2, 4, 6}, 4, DPT_LAYER_TANH, 0, "mlp:6-4-2-4-6:tanh:nobias");
    mlp(5, (const size_t[]){7, 3}, 2, DPT_LAYER_IDENTITY, 1, "mlp:5-7-3:identity");
    mlp(4, (const size_t[]){8, 8, 2}, 3, DPT_LAYER_SIGMOID, 1, "mlp:4-8-8-2:sigmoid");
    /* the relu default of the spec language builds the same model */
    check_same_model("mlp:20-16-3", "mlp:20-16-3:relu");

    /* flat inputs that are not an MLP: mixed activations, mixed biases, a residual group */
    dpt_model_builder *b = NULL;
    CHECK_OK(dpt_model_builder_new(1, 1, 20, &b));
    CHECK_OK(dpt_model_builder_linear(b, 16, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_linear(b, 8, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_TANH));
    CHECK_OK(dpt_model_builder_linear(b, 2, 1));
    check_spec(b, "cnn:1x1x20:fc16,relu,fc8,tanh,fc2", NULL);
    dpt_model_builder_free(b);

    CHECK_OK(dpt_model_builder_new(1, 1, 20, &b));
    CHECK_OK(dpt_model_builder_linear(b, 16, 0));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_linear(b, 2, 1));
    check_spec(b, "cnn:1x1x20:fc16nobias,relu,fc2", NULL);
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_builder_build(b, 1, 1, &m));
    CHECK(m && m->n_params == 20 * 16 + 16 * 2 + 2 && !m->layers[0].has_bias && m->layers[2].has_bias);
    dpt_model_free(m);
    dpt_model_builder_free(b);

    CHECK_OK(dpt_model_builder_new(1, 1, 20, &b));
    CHECK_OK(dpt_model_builder_linear(b, 16, 1));
    CHECK_OK(dpt_model_builder_residual_begin(b));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_GELU));
    CHECK_OK(dpt_model_builder_linear(b, 16, 1));
    CHECK_OK(dpt_model_builder_residual_end(b));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_GELU));
    CHECK_OK(dpt_model_builder_linear(b, 3, 1));
    check_spec(b, "cnn:1x1x20:fc16,[gelu,fc16],gelu,fc3", NULL);
    dpt_model_builder_free(b);
}

/* Convolutional layers with every option: strides, padding, GroupNorm, biases, a
 * one-layer residual group, back-to-back groups. */
static void test_cnn(void) {
    dpt_model_builder *b = NULL;
    CHECK_OK(dpt_model_builder_new(3, 12, 12, &b));
    CHECK_OK(dpt_model_builder_conv2d(b, 8, 5, 1, 2, 0));
    CHECK_OK(dpt_model_builder_groupnorm(b, 4));
    CHECK_OK(dpt_model_builder_residual_begin(b));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_GELU));
    CHECK_OK(dpt_model_builder_residual_end(b));
    CHECK_OK(dpt_model_builder_residual_begin(b));
    CHECK_OK(dpt_model_builder_conv2d(b, 8, 3, 1, 1, 1));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_residual_end(b));
    CHECK_OK(dpt_model_builder_avgpool(b, 3, 2));
    CHECK_OK(dpt_model_builder_conv2d(b, 4, 2, 2, 0, 0));
    CHECK_OK(dpt_model_builder_linear(b, 5, 1));
    check_spec(b, "cnn:3x12x12:conv8k5p2nobias,gn4,[gelu],[conv8k3p1,relu],avgpool3s2,conv4k2s2nobias,fc5", NULL);
    dpt_model_builder_free(b);

    /* no weight layer with a bias: the global ":nobias" */
    CHECK_OK(dpt_model_builder_new(2, 6, 6, &b));
    CHECK_OK(dpt_model_builder_conv2d(b, 3, 3, 1, 0, 0));
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_SIGMOID));
    CHECK_OK(dpt_model_builder_flatten(b));
    CHECK_OK(dpt_model_builder_linear(b, 2, 0));
    check_spec(b, "cnn:2x6x6:conv3k3,sigmoid,flatten,fc2:nobias", NULL);
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_builder_build(b, 1, 1, &m));
    CHECK(m && m->n_params == 3 * 2 * 9 + 48 * 2);
    dpt_model_free(m);
    dpt_model_builder_free(b);
}

/* A refused call leaves the builder as it was (same spec, same shape). */
#define REFUSED(call, needle)                                                                                          \
    do {                                                                                                               \
        char before_[DPT_MODEL_SPEC_MAX + 1] = "";                                                                     \
        size_t sh0_[3], sh1_[3];                                                                                       \
        const char *s0_ = dpt_model_builder_spec(b);                                                                   \
        if (s0_) snprintf(before_, sizeof before_, "%s", s0_);                                                         \
        CHECK_OK(dpt_model_builder_shape(b, sh0_));                                                                    \
        CHECK_STATUS(call, DPT_EINVAL);                                                                                \
        CHECK_ERR_HAS(needle);                                                                                         \
        const char *s1_ = dpt_model_builder_spec(b);                                                                   \
        CHECK(s0_ ? (s1_ && !strcmp(before_, s1_)) : !s1_);                                                            \
        CHECK_OK(dpt_model_builder_shape(b, sh1_));                                                                    \
        CHECK(!memcmp(sh0_, sh1_, sizeof sh0_));                                                                       \
    } while (0)

static void test_errors(void) {
    dpt_model_builder *b = NULL;
    CHECK_STATUS(dpt_model_builder_new(0, 28, 28, &b), DPT_EINVAL);
    CHECK_ERR_HAS("dpt_model_builder_new: the input shape c, h, w must be >= 1");
    CHECK(!b);
    CHECK_STATUS(dpt_model_builder_new(4096, 4096, 2, &b), DPT_EINVAL);
    CHECK_STATUS(dpt_model_builder_new(1, 1, 1, NULL), DPT_EINVAL);
    CHECK_ERR_HAS("out is NULL");

    CHECK_OK(dpt_model_builder_new(1, 8, 8, &b));
    CHECK(!dpt_model_builder_spec(b));
    CHECK_ERR_HAS("no layers");
    dpt_model *m = (dpt_model *)1;
    CHECK_STATUS(dpt_model_builder_build(b, 1, 1, &m), DPT_EINVAL);
    CHECK(m == NULL);
    /* shapes that do not fit, at the call that adds them */
    REFUSED(dpt_model_builder_conv2d(b, 4, 9, 1, 0, 1), "dpt_model_builder_conv2d: layer 1 on a 1x8x8 input");
    REFUSED(dpt_model_builder_conv2d(b, 4, 3, 1, 3, 1), "padding 3 < kernel");
    REFUSED(dpt_model_builder_conv2d(b, 0, 3, 1, 0, 1), "out_channels must be in [1,");
    REFUSED(dpt_model_builder_conv2d(b, 4, 3, 0, 0, 1), "stride must be in [1,");
    REFUSED(dpt_model_builder_maxpool(b, 9, 1), "window 9 is larger than the 8x8 input");
    REFUSED(dpt_model_builder_activation(b, DPT_LAYER_CONV2D), "is not an activation");
    REFUSED(dpt_model_builder_linear(b, 0, 1), "out_features must be in [1,");
    REFUSED(dpt_model_builder_linear(b, ((size_t)1 << 24) + 1, 1), "out_features must be in [1, 16777216]");
    CHECK_OK(dpt_model_builder_conv2d(b, 6, 3, 1, 1, 1));
    REFUSED(dpt_model_builder_groupnorm(b, 4), "4 groups do not divide 6 channels");
    CHECK_OK(dpt_model_builder_maxpool(b, 2, 0));
    REFUSED(dpt_model_builder_maxpool(b, 5, 0), "layer 3 on a 6x4x4 input: pool: window 5 is larger");
    /* residual groups: unbalanced, nested, empty, shape-changing, tanh at the end */
    REFUSED(dpt_model_builder_residual_end(b), "no residual group is open");
    CHECK_OK(dpt_model_builder_residual_begin(b));
    CHECK(!dpt_model_builder_spec(b));
    CHECK_ERR_HAS("the residual group opened before layer 3 is not closed");
    REFUSED(dpt_model_builder_residual_begin(b), "cannot be nested");
    REFUSED(dpt_model_builder_residual_end(b), "the residual group has no layers");
    CHECK_OK(dpt_model_builder_conv2d(b, 3, 3, 1, 1, 1)); /* 6x4x4 -> 3x4x4 */
    CHECK_STATUS(dpt_model_builder_residual_end(b), DPT_EINVAL);
    CHECK_ERR_HAS("maps shape 6x4x4 to 3x4x4");
    CHECK_OK(dpt_model_builder_conv2d(b, 6, 3, 1, 1, 1)); /* back to 6x4x4 */
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_TANH));
    CHECK_STATUS(dpt_model_builder_residual_end(b), DPT_EINVAL);
    CHECK_ERR_HAS("cannot end with tanh");
    CHECK_OK(dpt_model_builder_activation(b, DPT_LAYER_RELU));
    CHECK_OK(dpt_model_builder_residual_end(b));
    CHECK_OK(dpt_model_builder_flatten(b));
    CHECK_OK(dpt_model_builder_linear(b, 2, 1));
    const char *s = dpt_model_builder_spec(b);
    CHECK(s && !strcmp(s, "cnn:1x8x8:conv6k3p1,maxpool2,[conv3k3p1,conv6k3p1,tanh,relu],flatten,fc2"));
    if (s) check_same_model(s, s);
    /* a dimension-preserving group that changes the shape (2x2x2 -> 1x1x8) is refused too */
    dpt_model_builder_free(b);
    CHECK_OK(dpt_model_builder_new(2, 2, 2, &b));
    CHECK_OK(dpt_model_builder_residual_begin(b));
    CHECK_OK(dpt_model_builder_flatten(b));
    CHECK_STATUS(dpt_model_builder_residual_end(b), DPT_EINVAL);
    CHECK_ERR_HAS("maps shape 2x2x2 to 1x1x8");
    CHECK_STATUS(dpt_model_new("cnn:2x2x2:[flatten]", 1, 1, &m), DPT_EINVAL);
    CHECK_ERR_HAS("maps shape 2x2x2 to 1x1x8");
    dpt_model_builder_free(b);

    /* the spec length limit (DPT_MODEL_SPEC_MAX): "cnn:1x1x4:" then "fc4000000" items with
     * commas, 10 n + 9 characters, so 24 fit; the 25th is refused */
    CHECK_OK(dpt_model_builder_new(1, 1, 4, &b));
    int st = DPT_OK;
    size_t n = 0;
    while ((st = dpt_model_builder_linear(b, 4000000, 1)) == DPT_OK) n++;
    CHECK(st == DPT_EINVAL && n == 24);
    CHECK_ERR_HAS("layer 25 would make the model spec longer than 255 characters");
    s = dpt_model_builder_spec(b);
    CHECK(s && strlen(s) == 249);
    dpt_model_builder_free(b);

    CHECK_STATUS(dpt_model_builder_linear(NULL, 3, 1), DPT_EINVAL);
    CHECK_ERR_HAS("b is NULL");
    CHECK(!dpt_model_builder_spec(NULL));
    dpt_model_builder_free(NULL);
}

static void test_tensor_by_name(void) {
    dpt_model *m = NULL;
    CHECK_OK(dpt_model_new("cnn:2x5x5:conv4k3,gn2,relu,flatten,fc4nobias", 2, 1, &m));
    if (!m) return;
    /* the layout-free accessors agree with the fields */
    CHECK(!strcmp(dpt_model_spec(m), "cnn:2x5x5:conv4k3,gn2,relu,flatten,fc4nobias"));
    CHECK(dpt_model_n_params(m) == 72 + 4 + 8 + 36 * 4 && dpt_model_n_params(m) == m->n_params);
    CHECK(dpt_model_params(m) == m->theta && dpt_model_max_batch(m) == 2);
    CHECK(dpt_model_in_dim(m) == 50 && dpt_model_out_dim(m) == 4);
    dpt_param_tensor t;
    float *w = dpt_model_tensor_by_name(m, "conv1.weight", &t);
    CHECK(w == m->theta && t.ndim == 4 && t.shape[0] == 4 && t.shape[1] == 2 && t.shape[2] == 3 && t.size == 72);
    float *cb = dpt_model_tensor_by_name(m, "conv1.bias", &t);
    CHECK(cb == m->theta + 72 && t.size == 4 && t.role == DPT_TENSOR_BIAS);
    float *fw = dpt_model_tensor_by_name(m, "fc1.weight", &t);
    CHECK(fw == m->theta + 84 && t.ndim == 2 && t.shape[0] == 4 && t.shape[1] == 36);
    CHECK(!dpt_model_tensor_by_name(m, "fc1.bias", &t));
    CHECK_ERR_HAS("has no tensor 'fc1.bias' (it has: conv1.weight, conv1.bias, gn1.weight, gn1.bias, fc1.weight)");
    /* the view writes through to theta */
    fw[5] = 4.5f;
    CHECK(m->theta[84 + 5] == 4.5f);
    CHECK(!dpt_model_tensor_by_name(m, NULL, &t));
    CHECK_ERR_HAS("name is NULL");
    CHECK_STATUS(dpt_model_tensor(m, 5, &t), DPT_EINVAL);
    CHECK_ERR_HAS("i = 5, but model 'cnn:2x5x5:conv4k3,gn2,relu,flatten,fc4nobias' has 5 tensors");
    CHECK(t.name[0] == 0 && t.size == 0);
    dpt_model_free(m);
}

/* the two transformer blocks of the named models, item by item (c: causal attention) */
static void xf_blocks(dpt_model_builder *b, int causal) {
    for (int k = 0; k < 2; k++) {
        const char *att[] = {"ln", causal ? "attn4c" : "attn4", "plin64"}, *mlp[] = {"ln", "plin256", "gelu", "plin64"};
        CHECK_OK(dpt_model_builder_residual_begin(b));
        CHECK_OK(dpt_model_builder_item(b, att[0]));
        CHECK_OK(dpt_model_builder_item(b, "plin192"));
        CHECK_OK(dpt_model_builder_item(b, att[1]));
        CHECK_OK(dpt_model_builder_item(b, att[2]));
        CHECK_OK(dpt_model_builder_residual_end(b));
        CHECK_OK(dpt_model_builder_residual_begin(b));
        for (int j = 0; j < 4; j++) CHECK_OK(dpt_model_builder_item(b, mlp[j]));
        CHECK_OK(dpt_model_builder_residual_end(b));
    }
}

static void test_seq(void) {
#define BLK(c) "[ln,plin192,attn4" c ",plin64],[ln,plin256,gelu,plin64]"
    dpt_model_builder *b = NULL;
    CHECK_OK(dpt_model_builder_new(1, 8, 1, &b));
    CHECK_OK(dpt_model_builder_item(b, "emb16x64"));
    xf_blocks(b, 1);
    CHECK_OK(dpt_model_builder_item(b, "ln"));
    CHECK_OK(dpt_model_builder_item(b, "plin16"));
    check_spec(b, "seq:8:emb16x64," BLK("c") "," BLK("c") ",ln,plin16", "gpt_tiny:t8:v16");
    dpt_model_builder_free(b);
    b = NULL;
    CHECK_OK(dpt_model_builder_new(1, 28, 28, &b));
    CHECK_OK(dpt_model_builder_conv2d(b, 64, 4, 4, 0, 1));
    CHECK_OK(dpt_model_builder_item(b, "toseqcls"));
    xf_blocks(b, 0);
    const char *tail[] = {"ln", "clspool", "fc10"};
    for (int j = 0; j < 3; j++) CHECK_OK(dpt_model_builder_item(b, tail[j]));
    check_spec(b, "cnn:1x28x28:conv64k4s4,toseqcls," BLK("") "," BLK("") ",ln,clspool,fc10", "vit_mnist");
    dpt_model_builder_free(b);
#undef BLK
    /* float sequences: "seq:TxD", and ":nobias" when no weight layer (plin included) has a bias */
    b = NULL;
    CHECK_OK(dpt_model_builder_new(1, 5, 6, &b));
    CHECK_OK(dpt_model_builder_item(b, "rms"));
    CHECK_OK(dpt_model_builder_item(b, "plin4nobias"));
    CHECK_OK(dpt_model_builder_item(b, "meanpool"));
    CHECK_OK(dpt_model_builder_linear(b, 2, 0));
    check_spec(b, "seq:5x6:rms,plin4,meanpool,fc2:nobias", NULL);
    /* refusals leave the builder unchanged */
    const struct {
        const char *item, *needle;
    } bad[] = {
        {"plin", "'plin' is not a layer"},
        {"[ln", "give residual groups with dpt_model_builder_residual_begin"},
        {"ln]", "give residual groups with dpt_model_builder_residual_begin"},
        {"scatter", "the scattering layer can only be the first layer"},
        {"emb10x4", "token ids of shape (1, T, 1)"},
        {"attn3", "attention"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK_STATUS(dpt_model_builder_item(b, bad[k].item), DPT_EINVAL);
        CHECK_ERR_HAS("dpt_model_builder_item");
        CHECK_ERR_HAS(bad[k].needle);
    }
    CHECK_STATUS(dpt_model_builder_item(b, NULL), DPT_EINVAL);
    check_spec(b, "seq:5x6:rms,plin4,meanpool,fc2:nobias", NULL);
    dpt_model_builder_free(b);
}

int main(void) {
    test_seq();
    test_named();
    test_mlps();
    test_cnn();
    test_errors();
    test_tensor_by_name();
    TEST_MAIN_END();
}
