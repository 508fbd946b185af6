// test_gpu_adamw_bf16.c: AdamW with BF16 moments (--adam-dtype bf16) on the
// GPU against the CPU reference, bit for bit: three steps over tensors of odd
// sizes at offsets aligned to the 128-bit path and not, through adamw_tensors
// (one launch) and through adamw (one kernel per tensor). FP32 parameters:
// parameters, m, v and amaxes equal the CPU's. BF16 parameters with FP32
// masters: masters, m and v equal the CPU's run on the same (BF16-valued)
// gradients with masters, and each BF16 parameter is its master rounded with
// the top 16 bits of the same draw whose low 32 bits rounded m and v.
#include "tests/gpu/gpu_test.h"

#define NT 7
static const size_t counts[NT] = {1, 9, 8, 4099, 33, 16, 517};

typedef struct {
    AdamWTensor t[NT];
    size_t n_params, n_state;
} Layout;

static Layout make_layout(int aligned) {
    Layout L;
    size_t p = aligned ? 0 : 3, s = aligned ? 8 : 5;
    for (int i = 0; i < NT; i++) {
        AdamWTensor* t = &L.t[i];
        memset(t, 0, sizeof *t);
        t->param = t->grad = p;
        t->state = s;
        t->count = counts[i];
        t->index_base = p + 50000;
        t->weight_decay = i % 2 ? 0.0f : 0.1f;
        p += counts[i] + (aligned ? (8 - counts[i] % 8) % 8 : 2);
        s += counts[i] + (aligned ? (8 - counts[i] % 8) % 8 + 8 : 1);
    }
    L.n_params = p + 8;
    L.n_state = s + 8;
    return L;
}

static AdamWParams hyper(int step) {
    AdamWParams p;
    memset(&p, 0, sizeof p);
    p.lr = 3e-3f;
    p.beta1 = 0.9f;
    p.beta2 = 0.95f;
    p.eps = 1e-8f;
    p.grad_scale = 0.75f;
    p.step = step;
    p.seed = rng_key(28, 7, (uint64_t)step);
    p.moment_dtype = DTYPE_BF16;
    return p;
}

// Three steps on backend b's buffers, by one adamw_tensors call or by per-tensor adamw calls.
static void steps(Backend* b, void* params, float* master, void* grads, uint16_t* m, uint16_t* v, float* amax,
                  const Layout* L, int many) {
    size_t es = dtype_size(b->dtype);
    AdamWTensor t[NT];
    for (int i = 0; i < NT; i++) {
        t[i] = L->t[i];
        t[i].amax = i % 3 ? amax + i : NULL;
    }
    for (int step = 1; step <= 3; step++) {
        AdamWParams p = hyper(step);
        if (many) {
            b->adamw_tensors(b, params, master, grads, m, v, t, NT, &p);
            continue;
        }
        for (int i = 0; i < NT; i++) {
            AdamWParams q = p;
            q.weight_decay = t[i].weight_decay;
            q.index_base = t[i].index_base;
            q.amax = t[i].amax;
            b->adamw(b, (char*)params + t[i].param * es, master ? master + t[i].state : NULL,
                     (char*)grads + t[i].grad * es, m + t[i].state, v + t[i].state, t[i].count, &q);
        }
    }
}

static uint16_t* host_moments(size_t n, float scale, int square) {
    uint16_t* h = (uint16_t*)xmalloc(n * 2);
    uint64_t key = rng_key(20240711, ++test_stream, 2);
    for (size_t i = 0; i < n; i++) {
        float x = scale * rng_normal(key, i);
        h[i] = f32_to_bf16(square ? x * x : x);
    }
    return h;
}

static void* dev_copy(const void* h, size_t bytes) {
    void* d = gpu->alloc(gpu, bytes, "test buffer");
    gpu->to_device(gpu, d, h, bytes);
    return d;
}

static void check_case(int aligned, int many) {
    Layout L = make_layout(aligned);
    size_t np = L.n_params, ns = L.n_state;
    float* w = host_normal(np, 0.5f);  // rounded to BF16 in BF16 mode: the masters start from these values
    float* g = host_normal(np, 0.01f);
    uint16_t* m0 = host_moments(ns, 1e-3f, 0);
    uint16_t* v0 = host_moments(ns, 1e-2f, 1);
    const int bf = gdt() == DTYPE_BF16;
    // The FP32 weights at the state offsets (the masters in BF16 mode).
    float* w_state = (float*)xcalloc(ns, sizeof(float));
    for (int i = 0; i < NT; i++)
        for (size_t e = 0; e < L.t[i].count; e++) w_state[L.t[i].state + e] = w[L.t[i].param + e];
    float zeros[NT] = {0};

    // CPU: FP32 parameters (with masters in BF16 mode, so that the update reads and writes them).
    float* r_params = ref_from(w, np);
    float* r_master = bf ? ref_from(w_state, ns) : NULL;
    float* r_grads = ref_from(g, np);
    uint16_t* r_m = (uint16_t*)xmalloc(ns * 2);
    uint16_t* r_v = (uint16_t*)xmalloc(ns * 2);
    memcpy(r_m, m0, ns * 2);
    memcpy(r_v, v0, ns * 2);
    float r_amax[NT] = {0};
    steps(ref, r_params, r_master, r_grads, r_m, r_v, r_amax, &L, 1);

    void* d_params = gpu_from(w, np);
    float* d_master = bf ? gpu_from_f32(w_state, ns) : NULL;
    void* d_grads = gpu_from(g, np);
    uint16_t* d_m = (uint16_t*)dev_copy(m0, ns * 2);
    uint16_t* d_v = (uint16_t*)dev_copy(v0, ns * 2);
    float* d_amax = gpu_from_f32(zeros, NT);
    steps(gpu, d_params, d_master, d_grads, d_m, d_v, d_amax, &L, many);

    char what[96];
    snprintf(what, sizeof what, "%s, %s offsets, %s", dtype_name(gdt()), aligned ? "aligned" : "unaligned",
             many ? "adamw_tensors" : "adamw per tensor");
    uint16_t* got_m = (uint16_t*)xmalloc(ns * 2);
    uint16_t* got_v = (uint16_t*)xmalloc(ns * 2);
    gpu->to_host(gpu, got_m, d_m, ns * 2);
    gpu->to_host(gpu, got_v, d_v, ns * 2);
    float* got_p = gpu_read(d_params, np);
    // Only the tensors' elements: the padding between them is never touched on either side.
    long bad_m = 0, bad_v = 0, bad_w = 0, bad_p = 0, moved = 0;
    float* got_master = bf ? gpu_read_f32(d_master, ns) : NULL;
    for (int i = 0; i < NT; i++) {
        const AdamWTensor* t = &L.t[i];
        for (size_t e = 0; e < t->count; e++) {
            size_t s = t->state + e, p = t->param + e;
            bad_m += got_m[s] != r_m[s];
            bad_v += got_v[s] != r_v[s];
            moved += got_m[s] != m0[s];
            if (bf) {
                bad_w += memcmp(&got_master[s], &r_master[s], 4) != 0;
                // The last step's draw rounded the parameter from the master.
                uint64_t r = rng_u64(hyper(3).seed, t->index_base + e);
                bad_p += got_p[p] != bf16_to_f32(f32_to_bf16_stochastic(r_master[s], (uint32_t)(r >> 48)));
            } else {
                bad_p += memcmp(&got_p[p], &r_params[p], 4) != 0;
            }
        }
    }
    CHECK(bad_m == 0 && bad_v == 0, "%s: %ld m and %ld v differ from the CPU's", what, bad_m, bad_v);
    CHECK(bad_p == 0 && bad_w == 0, "%s: %ld parameters and %ld masters differ from the CPU's", what, bad_p, bad_w);
    CHECK(moved > (long)ns / 2, "%s: only %ld moments changed", what, moved);
    if (!bf) {
        float* got_amax = gpu_read_f32(d_amax, NT);
        CHECK(!memcmp(got_amax, r_amax, sizeof r_amax) && r_amax[1] > 0, "%s: amaxes differ", what);
        free(got_amax);
    }
    free(got_master);
    free(got_p);
    free(got_m);
    free(got_v);
    GPU_FREE(d_params, d_grads, d_m, d_v, d_amax);
    if (d_master) gpu->free(gpu, d_master);
    REF_FREE(r_params, r_grads);
    if (r_master) ref->free(ref, r_master);
    free(r_m);
    free(r_v);
    free(w);
    free(g);
    free(m0);
    free(v0);
    free(w_state);
}

static void test_adamw_bf16_moments_match_cpu(void) {
    for (int aligned = 0; aligned < 2; aligned++)
        for (int many = 0; many < 2; many++) check_case(aligned, many);
}

int main(void) {
    ref = cpu_backend_create(DTYPE_F32, 0);
    DType dts[2] = {DTYPE_F32, DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        gpu = cuda_backend_create(dts[d]);
        RUN_SUFFIXED(test_adamw_bf16_moments_match_cpu, dts[d] == DTYPE_BF16 ? "_bf16" : "_fp32");
        gpu->destroy(gpu);
    }
    ref->destroy(ref);
    return TESTS_DONE();
}
