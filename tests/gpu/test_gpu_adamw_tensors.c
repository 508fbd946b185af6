// test_gpu_adamw_tensors.c: AdamW over many tensors in one call
// (Backend.adamw_tensors) gives the bits of one adamw call per tensor, on the
// GPU (one launch, 128-bit path for aligned tensors) and on the CPU: FP32
// parameters with and without master weights, BF16 parameters with stochastic
// rounding, per-tensor weight decay and FP8 amaxes, sizes that are not
// multiples of the vector width, offsets aligned and not, two steps; BF16
// parameters with FP32 gradients (--grad-dtype fp32) as with BF16 ones.
#include "tests/gpu/gpu_test.h"

#define NT 9

typedef struct {
    AdamWTensor t[NT];
    size_t n_params, n_state;
} Layout;

// Tensors of odd sizes; `aligned`: every offset a multiple of 8 (the vector
// path); otherwise params/grads and the optimizer state are offset differently.
static Layout make_layout(int aligned) {
    static const size_t counts[NT] = {1, 7, 8, 9, 100, 4099, 33, 16, 517};
    Layout L;
    size_t p = aligned ? 0 : 3, s = aligned ? 8 : 5;
    for (int i = 0; i < NT; i++) {
        AdamWTensor* t = &L.t[i];
        t->param = t->grad = p;
        t->state = s;
        t->count = counts[i];
        t->index_base = p + 1000;  // any key; the per-tensor calls use the same
        t->weight_decay = i % 2 ? 0.0f : 0.1f;
        t->amax = NULL;
        p += counts[i] + (aligned ? (8 - counts[i] % 8) % 8 : 2);
        s += counts[i] + (aligned ? (8 - counts[i] % 8) % 8 + 8 : 1);
    }
    L.n_params = p + 8;
    L.n_state = s + 8;
    return L;
}

typedef struct {
    void *params, *grads;
    float *master, *m, *v, *amax;
} Buffers;

static Buffers upload(Backend* be, const float* w, const float* g, const Layout* L, int with_master, int gpu_side) {
    Buffers b;
    size_t np = L->n_params, ns = L->n_state;
    float* zeros = (float*)calloc(ns > NT ? ns : NT, sizeof(float));
    float* w_state = (float*)calloc(ns, sizeof(float));  // the master copy at the state offsets
    for (int i = 0; i < NT; i++)
        for (size_t e = 0; e < L->t[i].count; e++) w_state[L->t[i].state + e] = w[L->t[i].param + e];
    if (gpu_side) {
        b.params = gpu_from(w, np);
        b.grads = gpu_from(g, np);
        b.master = with_master ? gpu_from_f32(w_state, ns) : NULL;
        b.m = gpu_from_f32(zeros, ns);
        b.v = gpu_from_f32(zeros, ns);
        b.amax = gpu_from_f32(zeros, NT);
    } else {
        b.params = ref_from(w, np);
        b.grads = ref_from(g, np);
        b.master = with_master ? ref_from(w_state, ns) : NULL;
        b.m = ref_from(zeros, ns);
        b.v = ref_from(zeros, ns);
        b.amax = ref_from(zeros, NT);
    }
    free(zeros);
    free(w_state);
    (void)be;
    return b;
}

static void release(Backend* be, Buffers* b) {
    be->free(be, b->params);
    be->free(be, b->grads);
    if (b->master) be->free(be, b->master);
    be->free(be, b->m);
    be->free(be, b->v);
    be->free(be, b->amax);
}

static AdamWParams params_for(int step) {
    AdamWParams p;
    memset(&p, 0, sizeof p);
    p.lr = 3e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.grad_scale = 0.75f;
    p.step = step;
    p.seed = 1234;
    return p;
}

// Two steps: once as one adamw call per tensor, once as one adamw_tensors call.
static void run(Backend* be, Buffers* b, const Layout* L, int many) {
    size_t es = dtype_size(be->dtype);
    AdamWTensor t[NT];
    for (int i = 0; i < NT; i++) {
        t[i] = L->t[i];
        t[i].amax = i % 3 ? b->amax + i : NULL;
    }
    for (int step = 1; step <= 2; step++) {
        AdamWParams p = params_for(step);
        if (many) {
            be->adamw_tensors(be, b->params, b->master, b->grads, b->m, b->v, t, NT, &p);
            continue;
        }
        for (int i = 0; i < NT; i++) {
            AdamWParams q = p;
            q.weight_decay = t[i].weight_decay;
            q.index_base = t[i].index_base;
            q.amax = t[i].amax;
            be->adamw(be, (char*)b->params + t[i].param * es, b->master ? b->master + t[i].state : NULL,
                      (char*)b->grads + t[i].grad * es, b->m + t[i].state, b->v + t[i].state, t[i].count, &q);
        }
    }
}

static int same(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void compare(Backend* be, Buffers* x, Buffers* y, const Layout* L, const float* w, const char* what) {
    size_t np = L->n_params, ns = L->n_state;
    int gpu_side = be == gpu;
    float* read[2][5];
    Buffers* bs[2] = {x, y};
    for (int k = 0; k < 2; k++) {
        read[k][0] = gpu_side ? gpu_read(bs[k]->params, np) : (float*)bs[k]->params;
        read[k][1] = bs[k]->master ? (gpu_side ? gpu_read_f32(bs[k]->master, ns) : bs[k]->master) : NULL;
        read[k][2] = gpu_side ? gpu_read_f32(bs[k]->m, ns) : bs[k]->m;
        read[k][3] = gpu_side ? gpu_read_f32(bs[k]->v, ns) : bs[k]->v;
        read[k][4] = gpu_side ? gpu_read_f32(bs[k]->amax, NT) : bs[k]->amax;
    }
    CHECK(same(read[0][0], read[1][0], np), "%s: params differ", what);
    if (read[0][1]) CHECK(same(read[0][1], read[1][1], ns), "%s: master weights differ", what);
    CHECK(same(read[0][2], read[1][2], ns), "%s: m differs", what);
    CHECK(same(read[0][3], read[1][3], ns), "%s: v differs", what);
    CHECK(same(read[0][4], read[1][4], NT), "%s: amaxes differ", what);
    // Not vacuous: the update moved the weights, and an amax was written.
    int moved = 0;
    for (size_t e = 0; e < L->t[5].count; e++) moved += read[0][0][L->t[5].param + e] != w[L->t[5].param + e];
    CHECK(moved > 0 && read[0][4][1] > 0.0f, "%s: nothing was updated", what);
    if (gpu_side)
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 5; i++) free(read[k][i]);
}

static void check_case(Backend* be, int aligned, int with_master) {
    Layout L = make_layout(aligned);
    float* w = host_normal(L.n_params, 0.5f);
    float* g = host_normal(L.n_params, 0.01f);
    int gpu_side = be == gpu;
    Buffers x = upload(be, w, g, &L, with_master, gpu_side), y = upload(be, w, g, &L, with_master, gpu_side);
    run(be, &x, &L, 0);
    run(be, &y, &L, 1);
    char what[96];
    snprintf(what, sizeof what, "%s %s, %s offsets%s", gpu_side ? "gpu" : "cpu", dtype_name(be->dtype),
             aligned ? "aligned" : "unaligned", with_master ? ", master" : "");
    compare(be, &x, &y, &L, w, what);
    release(be, &x);
    release(be, &y);
    free(w);
    free(g);
}

// --grad-dtype fp32 in a BF16 run: adamw_tensors reading FP32 gradients
// (AdamWParams.grads_f32) gives the bits it gives for the same values as BF16
// gradients (they are bf16-representable), on both load paths.
static void check_fp32_grads(int aligned) {
    Layout L = make_layout(aligned);
    float* w = host_normal(L.n_params, 0.5f);
    float* g = host_normal(L.n_params, 0.01f);
    for (size_t i = 0; i < L.n_params; i++) g[i] = as_stored(g[i]);
    Buffers x = upload(gpu, w, g, &L, 1, 1), y = upload(gpu, w, g, &L, 1, 1);
    gpu->free(gpu, y.grads);
    y.grads = gpu_from_f32(g, L.n_params);
    run(gpu, &x, &L, 1);
    AdamWTensor t[NT];
    for (int i = 0; i < NT; i++) {
        t[i] = L.t[i];
        t[i].amax = i % 3 ? y.amax + i : NULL;
    }
    for (int step = 1; step <= 2; step++) {
        AdamWParams p = params_for(step);
        p.grads_f32 = 1;
        gpu->adamw_tensors(gpu, y.params, y.master, y.grads, y.m, y.v, t, NT, &p);
    }
    char what[96];
    snprintf(what, sizeof what, "gpu bf16 with fp32 gradients, %s offsets", aligned ? "aligned" : "unaligned");
    compare(gpu, &x, &y, &L, w, what);
    release(gpu, &x);
    release(gpu, &y);
    free(w);
    free(g);
}

static void test_adamw_tensors_matches_per_tensor_calls(void) {
    for (int aligned = 0; aligned < 2; aligned++) {
        if (gdt() == DTYPE_BF16) {
            check_case(gpu, aligned, 1);
            check_fp32_grads(aligned);
        } else {
            check_case(gpu, aligned, 0);
            check_case(gpu, aligned, 1);
            check_case(ref, aligned, 0);
            check_case(ref, aligned, 1);
        }
    }
}

int main(void) {
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        gpu = cuda_backend_create(dts[d]);
        RUN_SUFFIXED(test_adamw_tensors_matches_per_tensor_calls, dts[d] == DTYPE_BF16 ? "_bf16" : "_fp32");
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
