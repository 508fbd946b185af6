// test_sim_cudnn.cu: the cuDNN attention path (kernels/cuda/attention_cudnn.cu)
// on the harness, through the fake library tests/cuda_sim/cudnn (found the
// way train_gpt finds cuDNN: dlopen of $TRAIN_GPT_CUDNN_LIB).
// - forward and backward against a float64 reference computed here, at odd
//   shapes: T not a multiple of 64, NH not a power of two, HS 64 and 128,
//   NKV = NH, NKV < NH and NKV = 1; outputs poisoned before each call;
// - the backend's attention op (the dispatch point) against the CPU backend;
// - the backward is bit-for-bit repeatable; plans are built once per shape
//   and a repeat allocates nothing; a misaligned tensor is refused;
// - the plan cache is bounded (least recently used plans freed, never fatal);
//   TRAIN_GPT_CUDNN_WORKSPACE skips engines that ask for more (cudnn stops
//   naming the size, auto runs natively); a plan run with another shape's
//   buffers is caught; once the step's shape is declared (reserve_scratch),
//   other shapes run natively and build no plan;
// - the fake rejects malformed graphs (wrong strides, missing attributes,
//   duplicate ids, an unknown operation sequence), so it cannot pass anything.
#include <dlfcn.h>
#include <libgen.h>

#include <vector>

#include "kernels/bf16.h"
#include "kernels/cuda/attention_cudnn.cuh"
#include "tests/cuda_sim/sim_test.h"

#include <cudnn_graph.h>

extern "C" Backend* cuda_backend_create(DType dtype);

namespace {

Backend* gpu;
uint64_t seed = 12345;

// Host values rounded to BF16, uniform in [-a, a].
std::vector<float> random_bf16(size_t n, float a) {
    std::vector<float> x(n);
    for (auto& v : x) v = bf16_to_f32(f32_to_bf16(a * ((test_rand(&seed) / 2147483648.0f) - 1.0f)));
    return x;
}

void* upload_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); i++) h[i] = f32_to_bf16(x[i]);
    void* d = gpu->alloc(gpu, h.size() * 2, "test");
    gpu->to_device(gpu, d, h.data(), h.size() * 2);
    return d;
}

void poison(void* d, size_t bytes) {
    std::vector<unsigned char> p(bytes, 0xff);  // NaN in BF16 and FP32
    gpu->to_device(gpu, d, p.data(), bytes);
}

std::vector<float> download_bf16(const void* d, size_t n) {
    std::vector<uint16_t> h(n);
    gpu->to_host(gpu, h.data(), d, n * 2);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_f32(h[i]);
    return x;
}

std::vector<float> download_f32(const void* d, size_t n) {
    std::vector<float> x(n);
    gpu->to_host(gpu, x.data(), d, n * 4);
    return x;
}

// The attention contract in float64: qkv (B, T, NH + 2 NKV, HS) -> out (B, T,
// NH, HS), lse (B, NH, T); and dqkv from dout, with D = rowsum(dout * out)
// from `stored_out` (the out the backward is given: the device's, in BF16).
struct Ref {
    std::vector<double> out, lse, dqkv;
};

Ref reference(const std::vector<float>& qkv, const std::vector<float>& dout, const std::vector<float>& stored_out,
              int B, int T, int NH, int NKV, int HS) {
    int W = (NH + 2 * NKV) * HS, C = NH * HS, group = NH / NKV;
    double scale = 1.0 / sqrt((double)HS);
    Ref r;
    r.out.assign((size_t)B * T * C, 0);
    r.lse.assign((size_t)B * NH * T, 0);
    r.dqkv.assign((size_t)B * T * W, 0);
    std::vector<double> p(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kh = h / group;
            auto q = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * W + h * HS + d]; };
            auto k = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * W + (NH + kh) * HS + d]; };
            auto v = [&](int t, int d) { return (double)qkv[((size_t)b * T + t) * W + (NH + NKV + kh) * HS + d]; };
            for (int i = 0; i < T; i++) {
                double m = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += q(i, d) * k(j, d);
                    p[j] = s * scale;
                    m = fmax(m, p[j]);
                }
                double l = 0;
                for (int j = 0; j <= i; j++) l += exp(p[j] - m);
                double lse = m + log(l);
                r.lse[((size_t)b * NH + h) * T + i] = lse;
                for (int j = 0; j <= i; j++) p[j] = exp(p[j] - lse);
                double* o = &r.out[((size_t)b * T + i) * C + h * HS];
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < HS; d++) o[d] += p[j] * v(j, d);
                // backward of this query row
                const float* g = &dout[((size_t)b * T + i) * C + h * HS];
                const float* so = &stored_out[((size_t)b * T + i) * C + h * HS];
                double D = 0;
                for (int d = 0; d < HS; d++) D += (double)g[d] * so[d];
                double* dq = &r.dqkv[((size_t)b * T + i) * W + h * HS];
                for (int j = 0; j <= i; j++) {
                    double dp = 0;
                    for (int d = 0; d < HS; d++) dp += g[d] * v(j, d);
                    double ds = p[j] * (dp - D) * scale;
                    double* dk = &r.dqkv[((size_t)b * T + j) * W + (NH + kh) * HS];
                    double* dv = &r.dqkv[((size_t)b * T + j) * W + (NH + NKV + kh) * HS];
                    for (int d = 0; d < HS; d++) {
                        dq[d] += ds * k(j, d);
                        dk[d] += ds * q(i, d);
                        dv[d] += p[j] * g[d];
                    }
                }
            }
        }
    return r;
}

// max |got - want| / max |want| (both finite), or 1e9 on a non-finite value.
// The scale is at least 0.01: a gradient that vanishes exactly (dQ at T = 1)
// is measured absolutely.
double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
    double e = 0, m = 1e-2;
    for (size_t i = 0; i < got.size(); i++) {
        if (!std::isfinite(got[i])) return 1e9;
        e = fmax(e, fabs(got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

void check_shape(int B, int T, int NH, int NKV, int HS) {
    int W = (NH + 2 * NKV) * HS, C = NH * HS;
    std::vector<float> qkv = random_bf16((size_t)B * T * W, 1.5f), dout = random_bf16((size_t)B * T * C, 1.0f);
    void* d_qkv = upload_bf16(qkv);
    void* d_dout = upload_bf16(dout);
    void* d_out = gpu->alloc(gpu, (size_t)B * T * C * 2, "test");
    float* d_lse = (float*)gpu->alloc(gpu, (size_t)B * NH * T * 4, "test");
    void* d_dqkv = gpu->alloc(gpu, (size_t)B * T * W * 2, "test");
    poison(d_out, (size_t)B * T * C * 2);
    poison(d_lse, (size_t)B * NH * T * 4);
    poison(d_dqkv, (size_t)B * T * W * 2);
    CHECK(attention_cudnn_use(gpu, 0, B, T, NH, NKV, HS, d_out, d_lse, d_qkv, d_qkv), "cuDNN declined the forward");
    attention_cudnn_forward(gpu, d_out, d_lse, d_qkv, B, T, NH, NKV, HS);
    attention_cudnn_backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, NKV, HS);
    std::vector<float> out = download_bf16(d_out, (size_t)B * T * C);
    Ref r = reference(qkv, dout, out, B, T, NH, NKV, HS);
    double e_out = rel_err(out, r.out);
    double e_lse = rel_err(download_f32(d_lse, (size_t)B * NH * T), r.lse);
    std::vector<float> dqkv = download_bf16(d_dqkv, (size_t)B * T * W);
    // dQ, dK and dV separately: each to its own scale.
    std::vector<float> part[3];
    std::vector<double> want[3];
    for (size_t i = 0; i < dqkv.size(); i++) {
        int col = (int)(i % W), which = col < NH * HS ? 0 : col < (NH + NKV) * HS ? 1 : 2;
        part[which].push_back(dqkv[i]);
        want[which].push_back(r.dqkv[i]);
    }
    const char* names[3] = {"dQ", "dK", "dV"};
    double e_grad[3];
    for (int k = 0; k < 3; k++) e_grad[k] = rel_err(part[k], want[k]);
    printf("# B=%d T=%d NH=%d NKV=%d HS=%d: error out %.2g lse %.2g dQ %.2g dK %.2g dV %.2g\n", B, T, NH, NKV, HS,
           e_out, e_lse, e_grad[0], e_grad[1], e_grad[2]);
    CHECK(e_out < 8e-3, "B=%d T=%d NH=%d NKV=%d HS=%d: out error %.3g", B, T, NH, NKV, HS, e_out);
    CHECK(e_lse < 1e-6, "B=%d T=%d NH=%d NKV=%d HS=%d: lse error %.3g", B, T, NH, NKV, HS, e_lse);
    for (int k = 0; k < 3; k++) {
        double e = e_grad[k];
        CHECK(e < 1e-2, "B=%d T=%d NH=%d NKV=%d HS=%d: %s error %.3g", B, T, NH, NKV, HS, names[k], e);
    }
    gpu->free(gpu, d_qkv);
    gpu->free(gpu, d_dout);
    gpu->free(gpu, d_out);
    gpu->free(gpu, d_lse);
    gpu->free(gpu, d_dqkv);
}

void test_mha_hs64() { check_shape(2, 67, 3, 3, 64); }
void test_mha_hs128() { check_shape(1, 70, 5, 5, 128); }
void test_gqa_hs128() { check_shape(1, 130, 6, 2, 128); }
void test_mqa_hs64() { check_shape(2, 33, 5, 1, 64); }
void test_single_token() { check_shape(3, 1, 2, 1, 64); }

// The backend's own op (today's signature, NKV = NH) goes to cuDNN and agrees
// with the CPU backend's attention.
void test_backend_op_matches_cpu() {
    int B = 2, T = 45, NH = 3, HS = 64, C = NH * HS;
    Backend* cpu = cpu_backend_create(DTYPE_F32, 1);
    std::vector<float> qkv = random_bf16((size_t)B * T * 3 * C, 1.5f), dout = random_bf16((size_t)B * T * C, 1.0f);
    std::vector<float> out(B * T * C), lse(B * NH * T), dqkv(B * T * 3 * C);
    cpu->attention_forward(cpu, out.data(), lse.data(), qkv.data(), B, T, NH, NH, HS);
    cpu->attention_backward(cpu, dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NH, HS);
    int64_t g0, x0, g1, x1;
    void (*counts)(int64_t*, int64_t*) = NULL;
    void* lib = dlopen(getenv("TRAIN_GPT_CUDNN_LIB"), RTLD_NOW | RTLD_NOLOAD);
    if (lib) *(void**)&counts = dlsym(lib, "cuda_sim_cudnn_counts");
    CHECK(counts != NULL, "the fake library is not loaded");
    if (!counts) return;
    counts(&g0, &x0);
    void* d_qkv = upload_bf16(qkv);
    void* d_dout = upload_bf16(dout);
    void* d_out = gpu->alloc(gpu, (size_t)B * T * C * 2, "test");
    float* d_lse = (float*)gpu->alloc(gpu, (size_t)B * NH * T * 4, "test");
    void* d_dqkv = gpu->alloc(gpu, (size_t)B * T * 3 * C * 2, "test");
    poison(d_dqkv, (size_t)B * T * 3 * C * 2);
    gpu->attention_forward(gpu, d_out, d_lse, d_qkv, B, T, NH, NH, HS);
    gpu->attention_backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, NH, HS);
    std::vector<float> first = download_bf16(d_dqkv, dqkv.size());
    size_t held = gpu->allocated_bytes(gpu);
    counts(&g1, &x1);
    CHECK(g1 - g0 == 2 && x1 - x0 == 2, "forward + backward: %lld graphs, %lld executions (want 2, 2)",
          (long long)(g1 - g0), (long long)(x1 - x0));
    std::vector<double> w_out(out.begin(), out.end()), w_lse(lse.begin(), lse.end()), w_d(dqkv.begin(), dqkv.end());
    CHECK(rel_err(download_bf16(d_out, out.size()), w_out) < 1e-2, "out differs from the CPU backend");
    CHECK(rel_err(download_f32(d_lse, lse.size()), w_lse) < 1e-5, "lse differs from the CPU backend");
    CHECK(rel_err(first, w_d) < 2e-2, "dqkv differs from the CPU backend");
    // Again: the cached plans (no new graph), and the same bits.
    poison(d_dqkv, (size_t)B * T * 3 * C * 2);
    gpu->attention_forward(gpu, d_out, d_lse, d_qkv, B, T, NH, NH, HS);
    gpu->attention_backward(gpu, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, NH, HS);
    std::vector<float> second = download_bf16(d_dqkv, dqkv.size());
    counts(&g1, &x1);
    CHECK(g1 - g0 == 2 && x1 - x0 == 4, "repeat: %lld graphs, %lld executions (want 2, 4)", (long long)(g1 - g0),
          (long long)(x1 - x0));
    CHECK(memcmp(first.data(), second.data(), first.size() * 4) == 0, "the backward is not bit-for-bit repeatable");
    CHECK(gpu->allocated_bytes(gpu) == held, "the repeat allocated device memory (%zu -> %zu bytes)", held,
          gpu->allocated_bytes(gpu));
    gpu->free(gpu, d_qkv);
    gpu->free(gpu, d_dout);
    gpu->free(gpu, d_out);
    gpu->free(gpu, d_lse);
    gpu->free(gpu, d_dqkv);
    cpu->destroy(cpu);
}

// A misaligned tensor in the variant pack (qkv 2 bytes off) is refused at
// execution, and the path stops with one error line naming the call.
void test_misaligned_pointer_is_refused() {
    int B = 1, T = 8, NH = 2, HS = 64, W = 3 * NH * HS;
    char* qkv = (char*)gpu->alloc(gpu, ((size_t)B * T * W + 8) * 2, "test");
    void* out = gpu->alloc(gpu, (size_t)B * T * NH * HS * 2, "test");
    float* lse = (float*)gpu->alloc(gpu, (size_t)B * NH * T * 4, "test");
    std::string err;
    int status = run_in_child([&] { attention_cudnn_forward(gpu, out, lse, qkv + 2, B, T, NH, NH, HS); }, &err);
    CHECK(status == 1, "exit status %d, expected 1; stderr: %s", status, err.c_str());
    CHECK(err.find("train_gpt: error: attention (cuDNN) forward") != std::string::npos &&
              err.find("MISALIGNED") != std::string::npos && err.find("not 16-byte aligned") != std::string::npos,
          "stderr: %s", err.c_str());
    gpu->free(gpu, qkv);
    gpu->free(gpu, out);
    gpu->free(gpu, lse);
}

// ---- the plan cache, the workspace limit, the step's shape ----------------------------------------

// The fake's plan counts: built so far, alive now, most alive at once.
void plan_counts(int64_t* built, int64_t* alive, int64_t* most) {
    void (*plans)(int64_t*, int64_t*, int64_t*) = NULL;
    void* lib = dlopen(getenv("TRAIN_GPT_CUDNN_LIB"), RTLD_NOW | RTLD_NOLOAD);
    if (lib) *(void**)&plans = dlsym(lib, "cuda_sim_cudnn_plans");
    *built = *alive = *most = -1;
    if (plans) plans(built, alive, most);
}

// More shapes than the cache holds (12 shapes, 24 plans, 16 slots): never
// fatal, every result right against the float64 reference, plans freed as
// they leave the cache (the fake refuses a 17th live one), and a shape that
// was evicted is built again and still right.
void test_plan_cache_is_bounded() {
    int64_t built0, alive0, most0, built, alive, most;
    plan_counts(&built0, &alive0, &most0);
    CHECK(built0 >= 0, "the fake library has no plan counts");
    for (int T = 1; T <= 12; T++) check_shape(1, T, 1, 1, 64);
    check_shape(1, 1, 1, 1, 64);  // evicted by now: built again
    plan_counts(&built, &alive, &most);
    printf("# plans: %lld built, %lld alive, at most %lld alive\n", (long long)built, (long long)alive, (long long)most);
    CHECK(built - built0 == 26, "%lld plans built for 13 forward+backward calls of 12 shapes (want 26)",
          (long long)(built - built0));
    CHECK(most <= 16 && alive <= 16, "at most %lld plans alive (%lld now): the cache holds 16", (long long)most,
          (long long)alive);
}

// TRAIN_GPT_CUDNN_WORKSPACE caps the workspace: at B=1 T=40 NH=2 HS=64 the
// fake's forward asks 4416 bytes, its deterministic backward B*NH*T*T*2 =
// 6400; with a 5K limit the backward's engine is skipped: --attention cudnn
// stops naming the size, auto runs the backward natively (forward on cuDNN).
// A malformed value is one error line naming the variable.
void test_workspace_limit() {
    int B = 1, T = 40, NH = 2, HS = 64, W = 3 * NH * HS;
    void* qkv = gpu->alloc(gpu, (size_t)B * T * W * 2, "test");
    void* out = gpu->alloc(gpu, (size_t)B * T * NH * HS * 2, "test");
    setenv("TRAIN_GPT_CUDNN_WORKSPACE", "5K", 1);
    std::string err;
    int status = run_in_child([&] { attention_cudnn_use(gpu, 1, B, T, NH, NH, HS, qkv, out, qkv, out); }, &err);
    CHECK(status == 1 && err.find("--attention cudnn: cannot run the backward of B=1 T=40 NH=2 NKV=2 HS=64: cuDNN's "
                                  "engines need 6.2 KiB of workspace, over the limit of 5 KiB "
                                  "(TRAIN_GPT_CUDNN_WORKSPACE raises it)") != std::string::npos,
          "exit %d: %s", status, err.c_str());
    cuda_attention_select(gpu, 0, 1);  // auto
    CHECK(attention_cudnn_use(gpu, 0, B, T, NH, NH, HS, out, qkv, qkv, qkv) == 1, "auto: the forward left cuDNN");
    CHECK(attention_cudnn_use(gpu, 1, B, T, NH, NH, HS, qkv, out, qkv, out) == 0, "auto: the backward took cuDNN");
    setenv("TRAIN_GPT_CUDNN_WORKSPACE", "5 K", 1);
    status = run_in_child([&] { attention_cudnn_use(gpu, 1, B, T + 1, NH, NH, HS, qkv, out, qkv, out); }, &err);
    CHECK(status == 1 && err.find("TRAIN_GPT_CUDNN_WORKSPACE='5 K' is not a size") != std::string::npos, "exit %d: %s",
          status, err.c_str());
    unsetenv("TRAIN_GPT_CUDNN_WORKSPACE");
    cuda_attention_select(gpu, 1, 1);  // cudnn again
    gpu->free(gpu, qkv);
    gpu->free(gpu, out);
}

// A plan is built for one shape: run with another shape's (smaller) buffers,
// the fake refuses it and the path stops naming the call.
void test_plan_is_for_one_shape() {
    int B = 2, T = 24, NH = 2, HS = 64, W = 3 * NH * HS;
    void* qkv = gpu->alloc(gpu, (size_t)1 * T * W * 2, "test");  // buffers for B = 1
    void* out = gpu->alloc(gpu, (size_t)1 * T * NH * HS * 2, "test");
    float* lse = (float*)gpu->alloc(gpu, (size_t)1 * NH * T * 4, "test");
    std::string err;
    int status = run_in_child([&] { attention_cudnn_forward(gpu, out, lse, qkv, B, T, NH, NH, HS); }, &err);
    CHECK(status == 1 && err.find("train_gpt: error: attention (cuDNN) forward, B=2 T=24") != std::string::npos &&
              err.find("reaches past its device allocation") != std::string::npos,
          "exit %d: %s", status, err.c_str());
    gpu->free(gpu, qkv);
    gpu->free(gpu, out);
    gpu->free(gpu, lse);
}

// reserve_scratch's call (attention_cudnn_scratch_bytes) builds the step's
// two plans, returns the larger workspace (the backward's D, 256-byte
// rounded, plus its B*NH*T*T*2 dP: 512 + 4608 at B=2 T=24 NH=2) and declares
// the shape: from then on only it runs on cuDNN, any other shape natively
// (and builds no plan). Last: the declaration stays for the process.
void test_scratch_declares_the_step_shape() {
    int B = 2, T = 24, NH = 2, HS = 64, W = 3 * NH * HS;
    size_t bytes = attention_cudnn_scratch_bytes(gpu, B, T, NH, NH, HS);
    CHECK(bytes == 512 + 4608, "scratch %zu bytes, want %d", bytes, 512 + 4608);
    void* qkv = gpu->alloc(gpu, (size_t)B * T * W * 2, "test");
    int64_t built0, built, alive, most;
    plan_counts(&built0, &alive, &most);
    CHECK(attention_cudnn_use(gpu, 0, B, T, NH, NH, HS, qkv, qkv, qkv, qkv) == 1, "the step's shape left cuDNN");
    CHECK(attention_cudnn_use(gpu, 1, B, T, NH, NH, HS, qkv, qkv, qkv, qkv) == 1, "the step's backward left cuDNN");
    for (int t = 1; t <= 5; t++)
        CHECK(attention_cudnn_use(gpu, 0, 1, t, NH, NH, HS, qkv, qkv, qkv, qkv) == 0, "B=1 T=%d went to cuDNN", t);
    CHECK(attention_cudnn_use(gpu, 0, B - 1, T, NH, NH, HS, qkv, qkv, qkv, qkv) == 0, "a short batch went to cuDNN");
    plan_counts(&built, &alive, &most);
    CHECK(built == built0, "%lld plans built after the declaration", (long long)(built - built0));
    gpu->free(gpu, qkv);
}

// ---- the fake library rejects what cuDNN would ---------------------------------------------------

struct Fake {
    void* lib;
    cudnnStatus_t (*create)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*);
    cudnnStatus_t (*set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                         const void*);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*handle)(cudnnHandle_t*);
    void (*last_error)(char*, size_t);
};

Fake fake() {
    Fake f;
    f.lib = dlopen(getenv("TRAIN_GPT_CUDNN_LIB"), RTLD_NOW | RTLD_LOCAL);
    if (!f.lib) {
        fprintf(stderr, "test setup: cannot load %s\n", getenv("TRAIN_GPT_CUDNN_LIB"));
        exit(2);
    }
    *(void**)&f.create = dlsym(f.lib, "cudnnBackendCreateDescriptor");
    *(void**)&f.set = dlsym(f.lib, "cudnnBackendSetAttribute");
    *(void**)&f.finalize = dlsym(f.lib, "cudnnBackendFinalize");
    *(void**)&f.handle = dlsym(f.lib, "cudnnCreate");
    *(void**)&f.last_error = dlsym(f.lib, "cudnnGetLastErrorString");
    return f;
}

// A tensor descriptor; skip names an attribute to leave out (0: none).
cudnnBackendDescriptor_t make_tensor(Fake& f, int64_t uid, const int64_t dims[4], const int64_t strides[4],
                                     bool is_virtual, int skip, cudnnStatus_t* st) {
    cudnnBackendDescriptor_t t;
    f.create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t);
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    int64_t align = 16;
    f.set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    f.set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    f.set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
    if (skip != CUDNN_ATTR_TENSOR_UNIQUE_ID) f.set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    f.set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    f.set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    *st = f.finalize(t);
    return t;
}

// The status was the rejection expected and the error text names the problem.
void expect_rejected(Fake& f, cudnnStatus_t st, const char* fragment) {
    char msg[1024] = "";
    f.last_error(msg, sizeof msg);
    CHECK(st != CUDNN_STATUS_SUCCESS, "accepted; expected a rejection mentioning '%s'", fragment);
    CHECK(strstr(msg, fragment) != NULL, "error '%s' does not mention '%s'", msg, fragment);
}

const int64_t kDims[4] = {2, 3, 5, 8}, kPacked[4] = {120, 40, 8, 1};

void test_fake_rejects_overlapping_strides() {
    Fake f = fake();
    int64_t bad[4] = {120, 40, 4, 1};  // rows 4 apart but 8 wide
    cudnnStatus_t st;
    make_tensor(f, 1, kDims, bad, false, 0, &st);
    expect_rejected(f, st, "two elements at one address");
    make_tensor(f, 1, kDims, kPacked, false, 0, &st);
    CHECK(st == CUDNN_STATUS_SUCCESS, "a packed tensor was rejected");
}

void test_fake_rejects_missing_uid() {
    Fake f = fake();
    cudnnStatus_t st;
    make_tensor(f, 1, kDims, kPacked, false, CUDNN_ATTR_TENSOR_UNIQUE_ID, &st);
    expect_rejected(f, st, "UNIQUE_ID is not set");
}

void test_fake_rejects_matmul_without_output() {
    Fake f = fake();
    cudnnStatus_t st;
    int64_t bd[4] = {2, 3, 8, 4}, bs[4] = {96, 32, 4, 1};
    cudnnBackendDescriptor_t a = make_tensor(f, 1, kDims, kPacked, false, 0, &st);
    cudnnBackendDescriptor_t b = make_tensor(f, 2, bd, bs, false, 0, &st);
    cudnnBackendDescriptor_t m, op;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    f.create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, &m);
    f.set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    f.finalize(m);
    f.create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op);
    f.set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    f.set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    f.set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m);
    expect_rejected(f, f.finalize(op), "CDESC is not set");
    // and a C of the wrong shape
    cudnnBackendDescriptor_t c = make_tensor(f, 3, kDims, kPacked, false, 0, &st);
    f.set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    expect_rejected(f, f.finalize(op), "shapes do not agree");
}

void test_fake_rejects_select_without_mask_and_late_attributes() {
    Fake f = fake();
    cudnnStatus_t st;
    cudnnBackendDescriptor_t x = make_tensor(f, 1, kDims, kPacked, false, 0, &st);
    cudnnBackendDescriptor_t y = make_tensor(f, 2, kDims, kPacked, true, 0, &st);
    cudnnBackendDescriptor_t pw, op;
    cudnnPointwiseMode_t mode = CUDNN_POINTWISE_BINARY_SELECT;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    f.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw);
    f.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    f.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    CHECK(f.finalize(pw) == CUDNN_STATUS_SUCCESS, "pointwise descriptor rejected");
    expect_rejected(f, f.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec), "after finalize");
    f.create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op);
    f.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    f.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    f.set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    f.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    expect_rejected(f, f.finalize(op), "TDESC is not set");
    // an attribute of the wrong attribute type
    expect_rejected(f, f.set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_INT64, 1, &kDims[0]),
                    "takes attribute type");
}

// Two tensors with one unique id, and a graph that is not the attention pattern.
void test_fake_rejects_bad_graphs() {
    Fake f = fake();
    cudnnStatus_t st;
    cudnnHandle_t h;
    f.handle(&h);
    cudnnBackendDescriptor_t x = make_tensor(f, 1, kDims, kPacked, false, 0, &st);
    cudnnBackendDescriptor_t y = make_tensor(f, 1, kDims, kPacked, false, 0, &st);  // same uid
    cudnnBackendDescriptor_t z = make_tensor(f, 3, kDims, kPacked, false, 0, &st);
    cudnnPointwiseMode_t mode = CUDNN_POINTWISE_EXP;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t pw, op, op2, graph;
    f.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw);
    f.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    f.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    f.finalize(pw);
    auto exp_op = [&](cudnnBackendDescriptor_t in, cudnnBackendDescriptor_t out, cudnnBackendDescriptor_t* o) {
        f.create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, o);
        f.set(*o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
        f.set(*o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in);
        f.set(*o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
        return f.finalize(*o);
    };
    CHECK(exp_op(x, y, &op) == CUDNN_STATUS_SUCCESS, "exp operation rejected");
    f.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph);
    f.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    f.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
    expect_rejected(f, f.finalize(graph), "names two different tensors");

    CHECK(exp_op(x, z, &op2) == CUDNN_STATUS_SUCCESS, "exp operation rejected");
    f.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph);
    f.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    f.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op2);
    CHECK(f.finalize(graph) == CUDNN_STATUS_SUCCESS, "a one-operation graph was rejected");
    cudnnBackendDescriptor_t heur;
    cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    f.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur);
    f.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    f.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
    expect_rejected(f, f.finalize(heur), "not the fused attention");
}

}  // namespace

int main(int argc, char** argv) {
    // The fake library beside the test programs: build/sim/libcudnn_sim.so.
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 2;
    exe[n] = 0;
    std::string lib = std::string(dirname(dirname(exe))) + "/libcudnn_sim.so";
    setenv("TRAIN_GPT_CUDNN_LIB", lib.c_str(), 0);
    gpu = cuda_backend_create(DTYPE_BF16);
    cuda_attention_select(gpu, 1, 1);  // cudnn
    RUN(test_mha_hs64);
    RUN(test_mha_hs128);
    RUN(test_gqa_hs128);
    RUN(test_mqa_hs64);
    RUN(test_single_token);
    RUN(test_backend_op_matches_cpu);
    RUN(test_misaligned_pointer_is_refused);
    RUN(test_fake_rejects_overlapping_strides);
    RUN(test_fake_rejects_missing_uid);
    RUN(test_fake_rejects_matmul_without_output);
    RUN(test_fake_rejects_select_without_mask_and_late_attributes);
    RUN(test_fake_rejects_bad_graphs);
    RUN(test_plan_cache_is_bounded);
    RUN(test_workspace_limit);
    RUN(test_plan_is_for_one_shape);
    RUN(test_scratch_declares_the_step_shape);  // last: it declares a step shape for the process
    gpu->destroy(gpu);
    return TESTS_DONE();
}
