/* Checked, aligned allocation and float32 tensors. */
#include <dptrain/core.h>

#include <stdlib.h>
#include <string.h>

int dpt_mul_overflow(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int dpt_mul3_overflow(size_t a, size_t b, size_t c, size_t *out) {
    size_t ab;
    if (dpt_mul_overflow(a, b, &ab) || dpt_mul_overflow(ab, c, &ab)) return -1;
    *out = ab;
    return 0;
}

void *dpt_alloc2(size_t a, size_t b, size_t elem, const char *what) {
    size_t n;
    if (dpt_mul_overflow(a, b, &n)) {
        dpt_set_error(DPT_ENOMEM, "%s: size overflow (%zu x %zu x %zu bytes)", what ? what : "allocation", a, b, elem);
        return NULL;
    }
    return dpt_alloc(n, elem, what);
}

void *dpt_alloc3(size_t a, size_t b, size_t c, size_t elem, const char *what) {
    size_t n;
    if (dpt_mul3_overflow(a, b, c, &n)) {
        dpt_set_error(DPT_ENOMEM, "%s: size overflow (%zu x %zu x %zu x %zu bytes)", what ? what : "allocation", a, b, c,
                      elem);
        return NULL;
    }
    return dpt_alloc(n, elem, what);
}

void *dpt_alloc(size_t n, size_t elem, const char *what) {
    size_t bytes;
    if (dpt_mul_overflow(n, elem, &bytes) || bytes > SIZE_MAX - 64) {
        dpt_set_error(DPT_ENOMEM, "%s: size overflow (%zu x %zu bytes)", what ? what : "allocation", n, elem);
        return NULL;
    }
    size_t rounded = (bytes + 63) & ~(size_t)63;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) {
        dpt_set_error(DPT_ENOMEM, "%s: cannot allocate %zu bytes", what ? what : "allocation", bytes);
        return NULL;
    }
    memset(p, 0, rounded);
    return p;
}

void dpt_free(void *p) { free(p); }

dpt_status dpt_tensor_alloc(dpt_tensor *t, int ndim, const size_t *shape) {
    DPT_CHECK(t, DPT_EINVAL, "dpt_tensor_alloc: t is NULL");
    DPT_CHECK(ndim >= 1 && ndim <= DPT_MAX_DIMS, DPT_EINVAL, "dpt_tensor_alloc: ndim %d outside 1..%d", ndim,
              DPT_MAX_DIMS);
    DPT_CHECK(shape, DPT_EINVAL, "dpt_tensor_alloc: shape is NULL");
    memset(t, 0, sizeof *t);
    size_t size = 1;
    for (int i = 0; i < ndim; i++) {
        DPT_CHECK(!dpt_mul_overflow(size, shape[i], &size), DPT_ENOMEM, "tensor: size overflow");
        t->shape[i] = shape[i];
    }
    t->ndim = ndim;
    t->size = size;
    t->data = dpt_alloc(size, sizeof(float), "tensor");
    if (!t->data) return DPT_ENOMEM;
    t->owns = 1;
    return DPT_OK;
}

dpt_tensor dpt_tensor_view(float *data, int ndim, const size_t *shape) {
    dpt_tensor t, empty;
    memset(&t, 0, sizeof t);
    memset(&empty, 0, sizeof empty);
    if (ndim < 1 || ndim > DPT_MAX_DIMS || !shape) return empty; /* no status to return: core.h */
    t.size = 1;
    for (int i = 0; i < ndim; i++) {
        if (dpt_mul_overflow(t.size, shape[i], &t.size)) return empty;
        t.shape[i] = shape[i];
    }
    t.data = data;
    t.ndim = ndim;
    return t;
}

void dpt_tensor_free(dpt_tensor *t) {
    if (!t) return;
    if (t->owns) dpt_free(t->data);
    memset(t, 0, sizeof *t);
}
