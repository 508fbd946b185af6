// attention_cudnn.cu: causal scaled-dot-product attention through cuDNN's
// fused flash attention, built with its C backend API (cudnn_graph.h: the
// cudnnBackend* descriptors; no cudnn-frontend, no C++ dependency).
//
// cuDNN is loaded at run time (dlopen of libcudnn_graph.so.9, searched in
// $TRAIN_GPT_CUDNN_LIB, the loader's path, the CUDA toolkit, /usr and Python
// wheels' site-packages/nvidia/cudnn/lib), so the binary runs without it.
// The harness build (CUDA_SIM) loads only $TRAIN_GPT_CUDNN_LIB: the fake
// library of tests/cuda_sim/cudnn, never a real one.
//
// The graphs are the pattern cuDNN's fused attention engines recognise (the
// one cudnn-frontend's SDPA node lowers to), over strided views of our packed
// qkv, so nothing is copied or transposed:
//   forward:  S = Q K^T (FP32) * scale; causal mask (row index >= column
//             index, else -inf); softmax as max, sub, exp, sum, div, with
//             stats = max + log(sum) (exactly our lse: natural-log LSE of the
//             scaled scores, so no conversion); O = P V with P in BF16.
//   backward: D = rowsum(dO * O) * 1 (FP32, in our workspace); P = exp(S*scale -
//             lse) masked; dV = P^T dO; dS = P * (dO V^T - D) * scale;
//             dK = dS^T Q; dQ = dS K, written directly (no FP32 dQ
//             accumulator with atomics: cuDNN's deterministic backward).
// With NKV < NH the K and V views have NKV heads (cuDNN broadcasts them over
// the query heads), and dK, dV are reduced over each group inside the graph.
//
// Plans are built once per shape and cached for the life of the process; the
// workspace (cuDNN's plus the backward's D) is the backend's scratch buffer,
// reserved at start-up with the others (attention_cudnn_scratch_bytes builds
// the run's two plans then and reads their workspace sizes). Engines: the
// heuristics' first deterministic one, but for the backward on Blackwell,
// where cuDNN's one deterministic engine is pinned with its knobs
// (blackwell_deterministic_engine).
#include <dlfcn.h>
#include <stdarg.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attention_cudnn.cuh"
#include "kernels/cudnn_workspace.h"

static AttentionMode g_choice = ATTN_AUTO;
static int g_chosen;  // --attention was applied (cuda_attention_select), or the environment read
static AttentionMode current_choice(void);
static int g_last_used;  // whether the last attention call went to cuDNN
static int g_verbose = 1;  // print the choice (rank 0 of a run)

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>

// ---- the library, through dlopen ----------------------------------------------------------------

typedef struct {
    void* lib;
    char path[512];
    size_t version;
    size_t (*GetVersion)(void);
    const char* (*GetErrorString)(cudnnStatus_t);
    void (*GetLastErrorString)(char*, size_t);  // optional (9.0 has it; NULL if absent)
    cudnnStatus_t (*Create)(cudnnHandle_t*);
    cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*);
    cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, const void*);
    cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                  cudnnBackendAttributeType_t, int64_t, int64_t*, void*);
    cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    cudnnHandle_t handle;
} CudnnApi;

static CudnnApi g_api;
static int g_tried;
static char g_why[768];  // why cuDNN is not available (empty when it is)

// Files to try, in order; the first that dlopens and has every symbol wins.
static int candidate_paths(char paths[][512], int max) {
    int n = 0;
    const char* env = getenv("TRAIN_GPT_CUDNN_LIB");
    if (env && *env) {
        snprintf(paths[n++], 512, "%s", env);
        return n;
    }
#ifdef CUDA_SIM
    return 0;  // the harness never loads a real cuDNN
#else
    snprintf(paths[n++], 512, "libcudnn_graph.so.9");  // LD_LIBRARY_PATH, rpath, ld.so.cache
    const char* cuda_home = getenv("CUDA_HOME");
    const char* dirs[] = {cuda_home, "/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu",
                          "/usr/lib/aarch64-linux-gnu", "/usr/lib64"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0] && n < max; i++) {
        if (!dirs[i]) continue;
        snprintf(paths[n++], 512, "%s%s/libcudnn_graph.so.9", dirs[i], dirs[i] == cuda_home ? "/lib64" : "");
    }
    const char* wheels[] = {"/usr/local/lib/python3*/dist-packages/nvidia/cudnn/lib/libcudnn_graph.so.9",
                            "/usr/lib/python3*/dist-packages/nvidia/cudnn/lib/libcudnn_graph.so.9",
                            "/usr/local/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9",
                            "/opt/conda/lib/python3*/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9"};
    for (size_t i = 0; i < sizeof wheels / sizeof wheels[0]; i++) {
        glob_t g;
        if (glob(wheels[i], 0, NULL, &g) == 0) {
            for (size_t k = 0; k < g.gl_pathc && n < max; k++) snprintf(paths[n++], 512, "%s", g.gl_pathv[k]);
        }
        globfree(&g);
    }
    return n;
#endif
}

#define CUDNN_SYM(field, name)                                                              \
    if (!(*(void**)&api.field = dlsym(lib, name))) {                                      \
        snprintf(g_why, sizeof g_why, "%.400s has no symbol %s (not cuDNN 9's graph library)", \
                 paths[i], name);                                                          \
        dlclose(lib);                                                                      \
        continue;                                                                          \
    }

// Loads cuDNN once; on failure g_why says why (and g_api.lib stays NULL).
static void cudnn_load(void) {
    if (g_tried) return;
    g_tried = 1;
    char paths[16][512];
    int n = candidate_paths(paths, 16);
    snprintf(g_why, sizeof g_why, "library not found (libcudnn_graph.so.9%s)",
#ifdef CUDA_SIM
             ": the harness loads only $TRAIN_GPT_CUDNN_LIB"
#else
             " in the loader's path, $CUDA_HOME, /usr/local/cuda, /usr/lib or a Python wheel; "
             "set TRAIN_GPT_CUDNN_LIB to its file"
#endif
    );
    for (int i = 0; i < n; i++) {
        void* lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            if (getenv("TRAIN_GPT_CUDNN_LIB")) snprintf(g_why, sizeof g_why, "cannot load %.300s: %.300s", paths[i], dlerror());
            continue;
        }
        CudnnApi api;
        memset(&api, 0, sizeof api);
        CUDNN_SYM(GetVersion, "cudnnGetVersion");
        CUDNN_SYM(GetErrorString, "cudnnGetErrorString");
        CUDNN_SYM(Create, "cudnnCreate");
        CUDNN_SYM(SetStream, "cudnnSetStream");
        CUDNN_SYM(CreateDescriptor, "cudnnBackendCreateDescriptor");
        CUDNN_SYM(DestroyDescriptor, "cudnnBackendDestroyDescriptor");
        CUDNN_SYM(SetAttribute, "cudnnBackendSetAttribute");
        CUDNN_SYM(GetAttribute, "cudnnBackendGetAttribute");
        CUDNN_SYM(Finalize, "cudnnBackendFinalize");
        CUDNN_SYM(Execute, "cudnnBackendExecute");
        *(void**)&api.GetLastErrorString = dlsym(lib, "cudnnGetLastErrorString");
        api.lib = lib;
        memcpy(api.path, paths[i], sizeof api.path);
        api.version = api.GetVersion();
        // 9.0 is the first release with the SDPA backward pattern used here
        // and ABI compatibility within the major version.
        if (api.version < 90000 || api.version >= 100000) {
            snprintf(g_why, sizeof g_why, "%.400s is cuDNN version %zu; the fused attention graphs need 9.x", paths[i],
                     api.version);
            dlclose(lib);
            continue;
        }
        cudnnStatus_t st = api.Create(&api.handle);
        if (st != CUDNN_STATUS_SUCCESS) {
            snprintf(g_why, sizeof g_why, "cudnnCreate failed with %s (%.400s)", api.GetErrorString(st), paths[i]);
            dlclose(lib);
            continue;
        }
        g_api = api;
        g_why[0] = 0;
        return;
    }
}

extern "C" size_t attention_cudnn_version(const char** why) {
    cudnn_load();
    if (why) *why = g_why;
    return g_api.lib ? g_api.version : 0;
}

// ---- graph building ---------------------------------------------------------------------------------

#define MAX_DESCS 96

// Every descriptor a graph makes, so that a failed build frees them all and
// a built plan keeps them alive. The first error is kept, with what failed.
typedef struct {
    cudnnBackendDescriptor_t d[MAX_DESCS];
    int n;
    cudnnStatus_t status;
    char err[512];
    int64_t next_uid;  // virtual tensors' unique ids
} Graph;

static void graph_fail(Graph* g, cudnnStatus_t st, const char* what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    g->status = st;
    char detail[256] = "";
    if (g_api.GetLastErrorString) g_api.GetLastErrorString(detail, sizeof detail);
    snprintf(g->err, sizeof g->err, "%s: %s%s%s", what, g_api.GetErrorString(st), detail[0] ? ": " : "", detail);
}

static cudnnBackendDescriptor_t make(Graph* g, cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->status != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->n == MAX_DESCS) fatal("attention (cuDNN): more than %d descriptors in one graph", MAX_DESCS);
    cudnnStatus_t st = g_api.CreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        graph_fail(g, st, "cudnnBackendCreateDescriptor");
        return NULL;
    }
    g->d[g->n++] = d;
    return d;
}

static void set(Graph* g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void* value, const char* what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = g_api.SetAttribute(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS) graph_fail(g, st, what);
}

static void finalize(Graph* g, cudnnBackendDescriptor_t d, const char* what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = g_api.Finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) graph_fail(g, st, what);
}

static void graph_free(Graph* g) {
    for (int i = g->n - 1; i >= 0; i--) g_api.DestroyDescriptor(g->d[i]);
    g->n = 0;
}

// Frees one descriptor of the graph now (an execution plan whose engine asked
// for too much workspace), so that it does not live on with the graph.
static void graph_drop(Graph* g, cudnnBackendDescriptor_t d) {
    for (int i = 0; i < g->n; i++) {
        if (g->d[i] != d) continue;
        g_api.DestroyDescriptor(d);
        memmove(&g->d[i], &g->d[i + 1], (size_t)(g->n - i - 1) * sizeof g->d[0]);
        g->n--;
        return;
    }
}

// Non-virtual tensors' unique ids (the variant pack names them); virtual
// tensors take ids from 100 up.
enum { UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_DO, UID_DQ, UID_DK, UID_DV, UID_D, UID_ONE };

typedef struct {
    cudnnBackendDescriptor_t d;
    int64_t dims[4], strides[4];
} Tensor;

// A rank-4 tensor: real (uid > 0 given), virtual (uid 0), or a host scalar
// passed by value (dims and strides all 1).
static Tensor tensor(Graph* g, int64_t uid, cudnnDataType_t type, const int64_t dims[4], const int64_t strides[4],
                     int by_value) {
    Tensor t;
    memcpy(t.dims, dims, sizeof t.dims);
    memcpy(t.strides, strides, sizeof t.strides);
    t.d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    bool is_virtual = uid == 0;
    if (is_virtual) uid = g->next_uid++;
    int64_t align = 16;
    set(g, t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
    set(g, t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dimensions");
    set(g, t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    set(g, t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor unique id");
    set(g, t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(g, t.d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual flag");
    if (by_value) {
        bool yes = true;
        set(g, t.d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor by-value flag");
    }
    finalize(g, t.d, "tensor descriptor");
    return t;
}

// A virtual FP32 (or `type`) tensor of the given shape, packed row-major.
static Tensor virt(Graph* g, cudnnDataType_t type, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    int64_t dims[4] = {d0, d1, d2, d3};
    int64_t strides[4] = {d1 * d2 * d3, d2 * d3, d3, 1};
    return tensor(g, 0, type, dims, strides, 0);
}

static Tensor like(Graph* g, cudnnDataType_t type, const Tensor* t) {
    return virt(g, type, t->dims[0], t->dims[1], t->dims[2], t->dims[3]);
}

static Tensor scalar(Graph* g, int64_t uid) {
    int64_t one[4] = {1, 1, 1, 1};
    return tensor(g, uid, CUDNN_DATA_FLOAT, one, one, 1);
}

// The graph's operations, in the order they are added.
typedef struct {
    cudnnBackendDescriptor_t ops[40];
    int n;
} OpList;

static void add_op(Graph* g, OpList* ops, cudnnBackendDescriptor_t op, const char* what) {
    finalize(g, op, what);
    if (ops->n == 40) fatal("attention (cuDNN): more than 40 operations in one graph");
    ops->ops[ops->n++] = op;
}

// y = mode(x[, b[, t]]): the pointwise operation (math in FP32, or BOOLEAN
// for comparisons); axis for GEN_INDEX.
static void pointwise(Graph* g, OpList* ops, cudnnPointwiseMode_t mode, const Tensor* x, const Tensor* b,
                      const Tensor* t, const Tensor* y, int64_t axis, const char* what) {
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnDataType_t prec = mode == CUDNN_POINTWISE_CMP_GE ? CUDNN_DATA_BOOLEAN : CUDNN_DATA_FLOAT;
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    finalize(g, pw, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d, what);
    if (b) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d, what);
    if (t) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->d, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d, what);
    add_op(g, ops, op, what);
}

// y = reduce(x) over the dimensions where y has 1 (or fewer heads: a group sum).
static void reduction(Graph* g, OpList* ops, cudnnReduceTensorOp_t mode, const Tensor* x, const Tensor* y,
                      const char* what) {
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, what);
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    finalize(g, r, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d, what);
    add_op(g, ops, op, what);
}

// c = a @ b over the last two dimensions (FP32 accumulation), batched over the first two.
static void matmul(Graph* g, OpList* ops, const Tensor* a, const Tensor* b, const Tensor* c, const char* what) {
    cudnnBackendDescriptor_t m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    finalize(g, m, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a->d, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c->d, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, what);
    add_op(g, ops, op, what);
}

// y = x seen through y's dimensions and strides (a transposed view).
static void reshape(Graph* g, OpList* ops, const Tensor* x, const Tensor* y, const char* what) {
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d, what);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d, what);
    add_op(g, ops, op, what);
}

// The same tensor seen with its last two dimensions swapped (virtual).
static Tensor transposed(Graph* g, cudnnDataType_t type, const Tensor* t) {
    int64_t dims[4] = {t->dims[0], t->dims[1], t->dims[3], t->dims[2]};
    int64_t strides[4] = {t->strides[0], t->strides[1], t->strides[3], t->strides[2]};
    return tensor(g, 0, type, dims, strides, 0);
}

// The strided views of the packed buffers: (B, heads, T, HS) of qkv-like
// (W = (NH + 2 NKV) * HS elements per token) or out-like (NH * HS) rows.
static Tensor heads_view(Graph* g, int64_t uid, int B, int T, int heads, int HS, int64_t row, int kt) {
    int64_t dims[4] = {B, heads, T, HS};
    int64_t strides[4] = {(int64_t)T * row, HS, row, 1};
    if (kt) {  // K^T: (B, heads, HS, T)
        dims[2] = HS, dims[3] = T;
        strides[2] = 1, strides[3] = row;
    }
    return tensor(g, uid, CUDNN_DATA_BFLOAT16, dims, strides, 0);
}

// S (B, NH, T, T) -> causal mask: S where row >= column, else -inf.
static Tensor causal_mask(Graph* g, OpList* ops, const Tensor* s, const Tensor* neg_inf) {
    Tensor row = like(g, CUDNN_DATA_INT32, s), col = like(g, CUDNN_DATA_INT32, s);
    Tensor keep = like(g, CUDNN_DATA_BOOLEAN, s), masked = like(g, CUDNN_DATA_FLOAT, s);
    pointwise(g, ops, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, &row, 2, "row index");
    pointwise(g, ops, CUDNN_POINTWISE_GEN_INDEX, s, NULL, NULL, &col, 3, "column index");
    pointwise(g, ops, CUDNN_POINTWISE_CMP_GE, &row, &col, NULL, &keep, 0, "causal comparison");
    pointwise(g, ops, CUDNN_POINTWISE_BINARY_SELECT, s, neg_inf, &keep, &masked, 0, "causal select");
    return masked;
}

static void forward_graph(Graph* g, OpList* ops, int B, int T, int NH, int NKV, int HS) {
    int64_t W = (int64_t)(NH + 2 * NKV) * HS;
    Tensor q = heads_view(g, UID_Q, B, T, NH, HS, W, 0);
    Tensor kt = heads_view(g, UID_K, B, T, NKV, HS, W, 1);
    Tensor v = heads_view(g, UID_V, B, T, NKV, HS, W, 0);
    Tensor o = heads_view(g, UID_O, B, T, NH, HS, (int64_t)NH * HS, 0);
    int64_t sd[4] = {B, NH, T, 1}, ss[4] = {(int64_t)NH * T, T, 1, 1};
    Tensor stats = tensor(g, UID_STATS, CUDNN_DATA_FLOAT, sd, ss, 0);
    Tensor scale = scalar(g, UID_SCALE), neg_inf = scalar(g, UID_NEG_INF);

    Tensor s = virt(g, CUDNN_DATA_FLOAT, B, NH, T, T), s_scaled = like(g, CUDNN_DATA_FLOAT, &s);
    matmul(g, ops, &q, &kt, &s, "Q K^T");
    pointwise(g, ops, CUDNN_POINTWISE_MUL, &s, &scale, NULL, &s_scaled, 0, "scale");
    Tensor masked = causal_mask(g, ops, &s_scaled, &neg_inf);
    Tensor mx = virt(g, CUDNN_DATA_FLOAT, B, NH, T, 1), sum = like(g, CUDNN_DATA_FLOAT, &mx);
    Tensor lg = like(g, CUDNN_DATA_FLOAT, &mx);
    Tensor sub = like(g, CUDNN_DATA_FLOAT, &s), ex = like(g, CUDNN_DATA_FLOAT, &s);
    Tensor p = like(g, CUDNN_DATA_BFLOAT16, &s);  // P in BF16: the second product's input type
    reduction(g, ops, CUDNN_REDUCE_TENSOR_MAX, &masked, &mx, "row max");
    pointwise(g, ops, CUDNN_POINTWISE_SUB, &masked, &mx, NULL, &sub, 0, "minus max");
    pointwise(g, ops, CUDNN_POINTWISE_EXP, &sub, NULL, NULL, &ex, 0, "exp");
    reduction(g, ops, CUDNN_REDUCE_TENSOR_ADD, &ex, &sum, "row sum");
    pointwise(g, ops, CUDNN_POINTWISE_LOG, &sum, NULL, NULL, &lg, 0, "log of sum");
    pointwise(g, ops, CUDNN_POINTWISE_ADD, &mx, &lg, NULL, &stats, 0, "stats");
    pointwise(g, ops, CUDNN_POINTWISE_DIV, &ex, &sum, NULL, &p, 0, "softmax");
    matmul(g, ops, &p, &v, &o, "P V");
}

static void backward_graph(Graph* g, OpList* ops, int B, int T, int NH, int NKV, int HS) {
    int64_t W = (int64_t)(NH + 2 * NKV) * HS, C = (int64_t)NH * HS;
    Tensor q = heads_view(g, UID_Q, B, T, NH, HS, W, 0);
    Tensor kt = heads_view(g, UID_K, B, T, NKV, HS, W, 1);
    Tensor vt = heads_view(g, UID_V, B, T, NKV, HS, W, 1);
    Tensor o = heads_view(g, UID_O, B, T, NH, HS, C, 0);
    Tensor dout = heads_view(g, UID_DO, B, T, NH, HS, C, 0);
    Tensor dq = heads_view(g, UID_DQ, B, T, NH, HS, W, 0);
    Tensor dk = heads_view(g, UID_DK, B, T, NKV, HS, W, 0);
    Tensor dv = heads_view(g, UID_DV, B, T, NKV, HS, W, 0);
    int64_t sd[4] = {B, NH, T, 1}, ss[4] = {(int64_t)NH * T, T, 1, 1};
    Tensor stats = tensor(g, UID_STATS, CUDNN_DATA_FLOAT, sd, ss, 0);
    Tensor dsum = tensor(g, UID_D, CUDNN_DATA_FLOAT, sd, ss, 0);  // D = rowsum(dO * O), our workspace
    Tensor scale = scalar(g, UID_SCALE), neg_inf = scalar(g, UID_NEG_INF), one = scalar(g, UID_ONE);

    // D = rowsum(dO * O) * 1 (the factor is where dropout's 1/(1-p) would go;
    // cudnn-frontend's graph has it, and the engines match that pattern)
    Tensor prod = virt(g, CUDNN_DATA_FLOAT, B, NH, T, HS), rowsum = virt(g, CUDNN_DATA_FLOAT, B, NH, T, 1);
    pointwise(g, ops, CUDNN_POINTWISE_MUL, &dout, &o, NULL, &prod, 0, "dO * O");
    reduction(g, ops, CUDNN_REDUCE_TENSOR_ADD, &prod, &rowsum, "rowsum(dO * O)");
    pointwise(g, ops, CUDNN_POINTWISE_MUL, &rowsum, &one, NULL, &dsum, 0, "D");

    // P = exp(S * scale - lse), causal
    Tensor s = virt(g, CUDNN_DATA_FLOAT, B, NH, T, T), s_scaled = like(g, CUDNN_DATA_FLOAT, &s);
    Tensor s_lse = like(g, CUDNN_DATA_FLOAT, &s), p = like(g, CUDNN_DATA_FLOAT, &s);
    matmul(g, ops, &q, &kt, &s, "Q K^T");
    pointwise(g, ops, CUDNN_POINTWISE_MUL, &s, &scale, NULL, &s_scaled, 0, "scale");
    pointwise(g, ops, CUDNN_POINTWISE_SUB, &s_scaled, &stats, NULL, &s_lse, 0, "minus lse");
    Tensor masked = causal_mask(g, ops, &s_lse, &neg_inf);
    pointwise(g, ops, CUDNN_POINTWISE_EXP, &masked, NULL, NULL, &p, 0, "P");

    // dV = P^T dO (summed over each group of query heads when NKV < NH)
    Tensor pt = transposed(g, CUDNN_DATA_BFLOAT16, &p);
    reshape(g, ops, &p, &pt, "P^T");
    if (NKV == NH) {
        matmul(g, ops, &pt, &dout, &dv, "dV = P^T dO");
    } else {
        Tensor dv_full = virt(g, CUDNN_DATA_BFLOAT16, B, NH, T, HS);  // the I/O type, as cudnn-frontend has it
        matmul(g, ops, &pt, &dout, &dv_full, "P^T dO per query head");
        reduction(g, ops, CUDNN_REDUCE_TENSOR_ADD, &dv_full, &dv, "dV = group sum");
    }

    // dS = P * (dO V^T - D) * scale
    Tensor dp = like(g, CUDNN_DATA_FLOAT, &s), dp_d = like(g, CUDNN_DATA_FLOAT, &s);
    Tensor ds_raw = like(g, CUDNN_DATA_FLOAT, &s), ds = like(g, CUDNN_DATA_FLOAT, &s);
    matmul(g, ops, &dout, &vt, &dp, "dO V^T");
    pointwise(g, ops, CUDNN_POINTWISE_SUB, &dp, &dsum, NULL, &dp_d, 0, "dP - D");
    pointwise(g, ops, CUDNN_POINTWISE_MUL, &dp_d, &p, NULL, &ds_raw, 0, "P * (dP - D)");
    pointwise(g, ops, CUDNN_POINTWISE_MUL, &ds_raw, &scale, NULL, &ds, 0, "dS scale");

    // dK = dS^T Q (group sum when NKV < NH)
    Tensor dst = transposed(g, CUDNN_DATA_BFLOAT16, &ds);
    reshape(g, ops, &ds, &dst, "dS^T");
    if (NKV == NH) {
        matmul(g, ops, &dst, &q, &dk, "dK = dS^T Q");
    } else {
        Tensor dk_full = virt(g, CUDNN_DATA_BFLOAT16, B, NH, T, HS);
        matmul(g, ops, &dst, &q, &dk_full, "dS^T Q per query head");
        reduction(g, ops, CUDNN_REDUCE_TENSOR_ADD, &dk_full, &dk, "dK = group sum");
    }

    // dQ = dS K, straight into dqkv: no FP32 accumulator, no atomics.
    Tensor k = transposed(g, CUDNN_DATA_BFLOAT16, &kt);
    reshape(g, ops, &kt, &k, "K from K^T");
    matmul(g, ops, &ds, &k, &dq, "dQ = dS K");
}

// ---- plans ------------------------------------------------------------------------------------------

typedef struct {
    int used;  // the slot holds a shape (its plan, or the reason it has none)
    int backward, B, T, NH, NKV, HS;
    int cc_major, cc_minor;  // the GPU's compute capability (Blackwell's backward engine is pinned)
    Graph g;  // every descriptor, kept alive with the plan
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
    int over_limit;     // every engine that could run it asked for more workspace than the limit
    uint64_t last_use;  // the cache's clock at the last lookup (least recently used is evicted)
} Plan;

// The plan cache: at most PLAN_CACHE shapes (forward and backward count
// apart), the least recently used freed to make room. A training run needs
// two (its step's forward and backward); benchmarks and op tests more.
// tests/cuda_sim/cudnn's fake cuDNN refuses more live plans than this.
#define PLAN_CACHE 16
static Plan g_plans[PLAN_CACHE];
static uint64_t g_clock;

// Whether an engine config's engine says it is not deterministic.
static int nondeterministic(Graph* g, cudnnBackendDescriptor_t cfg) {
    cudnnBackendDescriptor_t engine = make(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (!engine) return 1;
    int64_t n = 0;
    if (g_api.GetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) !=
        CUDNN_STATUS_SUCCESS)
        return 1;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    n = 0;
    if (g_api.GetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                           CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
        return 1;
    for (int64_t i = 0; i < n; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return 1;
    return 0;
}

// Blackwell (compute capability 10.x): no engine config the heuristics return
// for the attention backward is deterministic. cuDNN's deterministic backward
// there (from 9.18.0) is one engine, named by its global index (5 on 10.0 to
// 10.3, 17 on later 10.x), with fixed knob choices: what cudnn-frontend's SDPA
// backward selects for set_deterministic_algorithm(true) (its
// override_heuristics_query), since the backend API has no single switch for
// it. The graph is the same deterministic one (dQ written directly, no FP32
// accumulator). Returns the number of knobs, 0 where this cuDNN has none
// (before 9.18.0).
typedef struct {
    cudnnBackendKnobType_t type;
    int64_t value;
} KnobChoice;
static int blackwell_deterministic_engine(size_t version, int cc_minor, int64_t* engine, KnobChoice knobs[6]) {
    if (version < 91800) return 0;
    *engine = cc_minor > 3 ? 17 : 5;
    if (version >= 92300) {  // the knob set of 9.23 on
        const KnobChoice k[6] = {{CUDNN_KNOB_TYPE_TILE_M, 3},     {CUDNN_KNOB_TYPE_TILE_N, 2},
                                 {CUDNN_KNOB_TYPE_KERNEL_CFG, 2}, {CUDNN_KNOB_TYPE_STREAM_K, 0},
                                 {CUDNN_KNOB_TYPE_TILE_CGA_M, 0}, {CUDNN_KNOB_TYPE_STAGES, 2}};
        memcpy(knobs, k, sizeof k);
        return 6;
    }
    const KnobChoice k[2] = {{CUDNN_KNOB_TYPE_KERNEL_CFG, 31}, {CUDNN_KNOB_TYPE_STAGES, 2}};
    memcpy(knobs, k, sizeof k);
    return 2;
}

// The engine config of blackwell_deterministic_engine for this graph, or NULL
// with the reason in g->err.
static cudnnBackendDescriptor_t blackwell_deterministic_config(Graph* g, cudnnBackendDescriptor_t graph, int cc_minor) {
    int64_t id = 0;
    KnobChoice knobs[6];
    int n = blackwell_deterministic_engine(g_api.version, cc_minor, &id, knobs);
    if (!n) {
        if (g->status == CUDNN_STATUS_SUCCESS) {
            g->status = CUDNN_STATUS_NOT_SUPPORTED;
            snprintf(g->err, sizeof g->err,
                     "cuDNN %zu has no deterministic attention backward on Blackwell (9.18.0 or newer has)", g_api.version);
        }
        return NULL;
    }
    cudnnBackendDescriptor_t engine = make(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    set(g, engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "engine graph");
    set(g, engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &id, "engine global index");
    finalize(g, engine, "deterministic Blackwell engine");
    cudnnBackendDescriptor_t choices[6];
    for (int i = 0; i < n; i++) {
        choices[i] = make(g, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
        set(g, choices[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &knobs[i].type, "knob type");
        set(g, choices[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &knobs[i].value, "knob value");
        finalize(g, choices[i], "knob choice");
    }
    cudnnBackendDescriptor_t cfg = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    set(g, cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engine, "engine config engine");
    set(g, cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, choices, "engine config knobs");
    finalize(g, cfg, "deterministic Blackwell engine config");
    return g->status == CUDNN_STATUS_SUCCESS ? cfg : NULL;
}

// The engine configs cuDNN's heuristics (mode A) propose for the graph, best
// first, at most 8, into cfgs; their count (0 with the reason in g->err).
static int64_t heuristics_configs(Graph* g, cudnnBackendDescriptor_t graph, cudnnBackendDescriptor_t cfgs[8]) {
    int64_t count = 0;
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    finalize(g, heur, "engine heuristics");
    if (g->status == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t st = g_api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                              &count, NULL);
        if (st != CUDNN_STATUS_SUCCESS) graph_fail(g, st, "heuristics results");
    }
    if (g->status == CUDNN_STATUS_SUCCESS && count == 0)
        snprintf(g->err, sizeof g->err, "no cuDNN engine supports this attention graph"), g->status = CUDNN_STATUS_NOT_SUPPORTED;
    if (count > 8) count = 8;
    for (int64_t i = 0; i < count; i++) cfgs[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (g->status == CUDNN_STATUS_SUCCESS) {
        int64_t got = 0;
        cudnnStatus_t st =
            g_api.GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
        if (st != CUDNN_STATUS_SUCCESS) graph_fail(g, st, "heuristics results");
        count = got;
    }
    return count;
}

// Builds the graph and its plan: the first engine config of cuDNN's
// heuristics (mode A) that finalizes and is deterministic; the backward on
// Blackwell takes the pinned deterministic engine instead. On failure, the
// reason is in p->g.err and every descriptor is freed.
static int plan_build(Plan* p) {
    Graph* g = &p->g;
    memset(g, 0, sizeof *g);
    g->next_uid = 100;
    OpList ops;
    ops.n = 0;
    if (p->backward) backward_graph(g, &ops, p->B, p->T, p->NH, p->NKV, p->HS);
    else forward_graph(g, &ops, p->B, p->T, p->NH, p->NKV, p->HS);

    cudnnBackendDescriptor_t graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_api.handle, "operation graph handle");
    set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.n, ops.ops, "operation graph");
    finalize(g, graph, "operation graph");
    int pinned = p->backward && p->cc_major == 10;
    cudnnBackendDescriptor_t cfgs[8];
    int64_t count = 0;
    if (pinned) {
        cfgs[0] = blackwell_deterministic_config(g, graph, p->cc_minor);
        count = cfgs[0] ? 1 : 0;
    } else {
        count = heuristics_configs(g, graph, cfgs);
    }
    p->plan = NULL;
    int skipped_nondeterministic = 0;
    size_t limit = cudnn_workspace_limit(), least_over = 0;  // the smallest workspace asked for over the limit
    for (int64_t i = 0; i < count && g->status == CUDNN_STATUS_SUCCESS && !p->plan; i++) {
        if (!pinned && nondeterministic(g, cfgs[i])) {  // the pinned engine is deterministic by its knobs
            skipped_nondeterministic++;
            continue;
        }
        cudnnBackendDescriptor_t plan = make(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_api.handle, "plan handle");
        set(g, plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i],
            "plan engine config");
        if (g->status != CUDNN_STATUS_SUCCESS) break;
        cudnnStatus_t st = g_api.Finalize(plan);
        if (st != CUDNN_STATUS_SUCCESS) {  // this engine cannot run it; try the next
            graph_fail(g, st, "execution plan");
            if (i + 1 < count) g->status = CUDNN_STATUS_SUCCESS;
            continue;
        }
        int64_t n = 0, ws = 0;
        st = g_api.GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
        if (st != CUDNN_STATUS_SUCCESS) {
            graph_fail(g, st, "plan workspace size");
        } else if ((size_t)ws > limit) {  // over the limit: free this plan now and try the next engine
            if (!least_over || (size_t)ws < least_over) least_over = (size_t)ws;
            graph_drop(g, plan);
        } else {
            p->plan = plan;
            p->workspace = ws;
        }
    }
    if (!p->plan && g->status == CUDNN_STATUS_SUCCESS) {
        g->status = CUDNN_STATUS_NOT_SUPPORTED;
        if (least_over) {
            char need[32], lim[32];
            p->over_limit = 1;
            snprintf(g->err, sizeof g->err, "cuDNN's engines need %s of workspace, over the limit of %s (%s raises it)",
                     cudnn_bytes_text(need, sizeof need, least_over), cudnn_bytes_text(lim, sizeof lim, limit),
                     CUDNN_WORKSPACE_ENV);
        } else {
            snprintf(g->err, sizeof g->err, "no deterministic cuDNN engine for this graph (%d nondeterministic skipped)",
                     skipped_nondeterministic);
        }
    }
    if (!p->plan) {
        graph_free(g);
        return 0;
    }
    return 1;
}

// The cached plan of this shape (NULL with *why set when cuDNN cannot run
// it: failures are cached too, so each shape is tried once while it stays in
// the cache). A shape not in the cache is built when `build` is set (else
// NULL, *why empty), in a free slot or the least recently used one, whose
// plan is freed after the stream has drained (a plan in flight stays alive).
static Plan* plan_for(Backend* be, int backward, int B, int T, int NH, int NKV, int HS, int build, const char** why) {
    Plan* slot = NULL;  // a free slot, else the least recently used
    for (int i = 0; i < PLAN_CACHE; i++) {
        Plan* p = &g_plans[i];
        if (p->used && p->backward == backward && p->B == B && p->T == T && p->NH == NH && p->NKV == NKV &&
            p->HS == HS) {
            p->last_use = ++g_clock;
            *why = p->g.err;
            return p->plan ? p : NULL;
        }
        if (!slot || (slot->used && (!p->used || p->last_use < slot->last_use))) slot = p;
    }
    *why = "";
    if (!build) return NULL;
    if (slot->used) {
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
        graph_free(&slot->g);
    }
    memset(slot, 0, sizeof *slot);
    slot->used = 1, slot->last_use = ++g_clock;
    slot->backward = backward, slot->B = B, slot->T = T, slot->NH = NH, slot->NKV = NKV, slot->HS = HS;
    slot->cc_major = cuda_state(be)->cc_major, slot->cc_minor = cuda_state(be)->cc_minor;
    plan_build(slot);
    *why = slot->g.err;
    return slot->plan ? slot : NULL;
}

static void execute(Backend* be, Plan* p, const int64_t* uids, void* const* ptrs, int n, void* workspace,
                    const char* what) {
    Graph vp_g;
    memset(&vp_g, 0, sizeof vp_g);
    cudnnBackendDescriptor_t vp = make(&vp_g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    set(&vp_g, vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant pack ids");
    set(&vp_g, vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pack pointers");
    set(&vp_g, vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "variant pack workspace");
    finalize(&vp_g, vp, "variant pack");
    if (vp_g.status == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t st = g_api.SetStream(g_api.handle, cuda_stream(be));
        if (st != CUDNN_STATUS_SUCCESS) graph_fail(&vp_g, st, "cudnnSetStream");
    }
    if (vp_g.status == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t st = g_api.Execute(g_api.handle, p->plan, vp);
        if (st != CUDNN_STATUS_SUCCESS) graph_fail(&vp_g, st, "cudnnBackendExecute");
    }
    if (vp_g.status != CUDNN_STATUS_SUCCESS)
        fatal("attention (cuDNN) %s, B=%d T=%d NH=%d NKV=%d HS=%d: %s", what, p->B, p->T, p->NH, p->NKV, p->HS,
              vp_g.err);
    graph_free(&vp_g);
}

// The backward's D (B, NH, T) FP32 ahead of cuDNN's workspace in the
// scratch, rounded to 256 bytes so that the workspace stays aligned.
static size_t backward_d_bytes(int B, int T, int NH) { return ((size_t)B * NH * T * sizeof(float) + 255) / 256 * 256; }

// The masked scores' value: -inf, or the lowest float before cuDNN 9.10
// (which preferred a finite mask value, as cudnn-frontend notes).
static float neg_inf_value(void) { return g_api.version >= 91000 ? -INFINITY : -3.402823466e38f; }
static const float kOne = 1.0f;

void attention_cudnn_forward(Backend* be, void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                             int HS) {
    const char* why;
    Plan* p = plan_for(be, 0, B, T, NH, NKV, HS, 1, &why);
    if (!p) fatal("attention (cuDNN) forward, B=%d T=%d NH=%d NKV=%d HS=%d: %s", B, T, NH, NKV, HS, why);
    float scale = 1.0f / sqrtf((float)HS);
    const bf16* base = (const bf16*)qkv;
    float neg_inf = neg_inf_value();
    int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF};
    void* ptrs[] = {(void*)base, (void*)(base + (size_t)NH * HS), (void*)(base + (size_t)(NH + NKV) * HS), out,
                    lse, &scale, &neg_inf};
    void* ws = p->workspace ? cuda_scratch(be, (size_t)p->workspace) : NULL;
    execute(be, p, uids, ptrs, 7, ws, "forward");
}

void attention_cudnn_backward(Backend* be, void* dqkv, const void* dout, const void* qkv, const void* out,
                              const float* lse, int B, int T, int NH, int NKV, int HS) {
    const char* why;
    Plan* p = plan_for(be, 1, B, T, NH, NKV, HS, 1, &why);
    if (!p) fatal("attention (cuDNN) backward, B=%d T=%d NH=%d NKV=%d HS=%d: %s", B, T, NH, NKV, HS, why);
    float scale = 1.0f / sqrtf((float)HS);
    // The scratch buffer holds D (B, NH, T) then cuDNN's workspace.
    size_t d_bytes = backward_d_bytes(B, T, NH);
    char* scratch = (char*)cuda_scratch(be, d_bytes + (size_t)p->workspace);
    const bf16* base = (const bf16*)qkv;
    bf16* dbase = (bf16*)dqkv;
    float neg_inf = neg_inf_value();
    int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_D, UID_DQ, UID_DK, UID_DV, UID_SCALE,
                      UID_NEG_INF, UID_ONE};
    void* ptrs[] = {(void*)base,
                    (void*)(base + (size_t)NH * HS),
                    (void*)(base + (size_t)(NH + NKV) * HS),
                    (void*)out,
                    (void*)dout,
                    (void*)lse,
                    scratch,
                    dbase,
                    dbase + (size_t)NH * HS,
                    dbase + (size_t)(NH + NKV) * HS,
                    &scale,
                    &neg_inf,
                    (void*)&kOne};
    execute(be, p, uids, ptrs, 13, p->workspace ? scratch + d_bytes : NULL, "backward");
}

// ---- the choice -------------------------------------------------------------------------------------

// Why cuDNN cannot take this shape ("" if it can), short of building the plan.
static const char* unsupported(Backend* be, int T, int NH, int NKV, int HS) {
    static char why[256];
    const char* lib_why;
    if (!attention_cudnn_version(&lib_why)) return lib_why;
    CudaState* s = cuda_state(be);
    if (be->dtype != DTYPE_BF16) return "cuDNN's fused attention runs in bf16 (this run computes in fp32)";
    if (s->cc_major < 8) return "cuDNN's fused attention needs compute capability 8.0 or newer";
    if (HS % 8 != 0 || HS > 128) {
        snprintf(why, sizeof why, "head size %d is not supported (a multiple of 8 up to 128)", HS);
        return why;
    }
    if (NKV <= 0 || NH % NKV != 0) {
        snprintf(why, sizeof why, "NH=%d is not a multiple of NKV=%d", NH, NKV);
        return why;
    }
    (void)T;
    return "";
}

// The training step's shape, once reserve_scratch has declared it: the one
// shape that runs on cuDNN from then on. Every other shape (sampling,
// --generate, the multiple-choice eval, a short last validation batch)
// changes from call to call and would build a plan, in the middle of the run,
// for each: those run on the native kernels. A program that declares none
// (op tests, benchmarks) builds plans on first use, in the bounded cache.
static struct {
    int set, B, T, NH, NKV, HS;
} g_step;

// One line per kind of note, the first time (rank 0): the choice (with the
// variable shapes' route), a direction's fallback. Never one per call.
enum { NOTE_CUDNN = 1, NOTE_NATIVE_FWD = 2, NOTE_NATIVE_BWD = 4 };
static unsigned g_noted;
static void note(unsigned kind, const char* fmt, ...) {
    if (!g_verbose || (g_noted & kind)) return;
    g_noted |= kind;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

// Whether this call goes to cuDNN: "" in *why and its plan (built here only
// at the step's shape, or in a program that declared none), else the reason;
// *both: the reason holds for forward and backward alike (no library, fp32,
// the head size, alignment), not for this plan alone.
static Plan* decide(Backend* be, int backward, int B, int T, int NH, int NKV, int HS, int aligned, const char** why,
                    int* both) {
    *both = 1;
    *why = unsupported(be, T, NH, NKV, HS);
    if (**why) return NULL;
    if (!aligned) {
        *why = "a tensor is not 16-byte aligned";
        return NULL;
    }
    *both = 0;
    Plan* p = plan_for(be, backward, B, T, NH, NKV, HS, 1, why);
    if (p) *why = "";
    return p;
}

static int is_step_shape(int B, int T, int NH, int NKV, int HS) {
    return g_step.B == B && g_step.T == T && g_step.NH == NH && g_step.NKV == NKV && g_step.HS == HS;
}

// Prints the choice once, or the reason a direction runs natively; fatal
// under --attention cudnn.
static int settle(int backward, int B, int T, int NH, int NKV, int HS, const char* why, int both) {
    const char* dir = backward ? "backward" : "forward";
    if (*why && current_choice() == ATTN_CUDNN)
        fatal("--attention cudnn: cannot run the %s of B=%d T=%d NH=%d NKV=%d HS=%d: %s", dir, B, T, NH, NKV, HS, why);
    if (!*why && g_step.set)  // said once, at start-up: a note in mid-run would land inside --generate's text
        note(NOTE_CUDNN, "attention: cuDNN %zu fused attention (%s) for the training step (B=%d T=%d); other shapes "
             "(sampling, generation, evaluation, a short last validation batch) run natively", g_api.version,
             g_api.path, g_step.B, g_step.T);
    else if (!*why) note(NOTE_CUDNN, "attention: cuDNN %zu fused attention (%s)", g_api.version, g_api.path);
    else if (both) note(NOTE_NATIVE_FWD | NOTE_NATIVE_BWD, "attention: native kernels (cuDNN not used: %s)", why);
    else note(backward ? NOTE_NATIVE_BWD : NOTE_NATIVE_FWD, "attention: native kernels (cuDNN not used for the %s: %s)",
              dir, why);
    return !*why;
}

size_t attention_cudnn_scratch_bytes(Backend* be, int B, int T, int NH, int NKV, int HS) {
    if (current_choice() == ATTN_NATIVE) return 0;
    g_step.set = 1, g_step.B = B, g_step.T = T, g_step.NH = NH, g_step.NKV = NKV, g_step.HS = HS;
    // Both plans now, so that no step builds one; the choice is printed here, once.
    const char* why;
    int both;
    Plan* f = decide(be, 0, B, T, NH, NKV, HS, 1, &why, &both);
    settle(0, B, T, NH, NKV, HS, why, both);
    Plan* b = decide(be, 1, B, T, NH, NKV, HS, 1, &why, &both);
    settle(1, B, T, NH, NKV, HS, why, both);
    size_t fwd = f ? (size_t)f->workspace : 0, bwd = b ? backward_d_bytes(B, T, NH) + (size_t)b->workspace : 0;
    return bwd > fwd ? bwd : fwd;
}

int attention_cudnn_use(Backend* be, int backward, int B, int T, int NH, int NKV, int HS, const void* p0,
                        const void* p1, const void* p2, const void* p3) {
    g_last_used = 0;
    if (current_choice() == ATTN_NATIVE) return 0;
    if (g_step.set && !is_step_shape(B, T, NH, NKV, HS)) return 0;  // the start-up line said so
    int aligned = aligned_to(p0, 16) && aligned_to(p1, 16) && aligned_to(p2, 16) && aligned_to(p3, 16);
    const char* why;
    int both;
    decide(be, backward, B, T, NH, NKV, HS, aligned, &why, &both);
    g_last_used = settle(backward, B, T, NH, NKV, HS, why, both);
    return g_last_used;
}

#else  // no cudnn_graph.h at build time

extern "C" size_t attention_cudnn_version(const char** why) {
    if (why) *why = "this binary was built without cuDNN's headers (cudnn_graph.h)";
    return 0;
}
int attention_cudnn_use(Backend*, int, int, int, int, int, int, const void*, const void*, const void*,
                        const void*) {
    static int announced;
    const char* why;
    attention_cudnn_version(&why);
    if (current_choice() == ATTN_CUDNN) fatal("--attention cudnn: %s", why);
    if (current_choice() == ATTN_AUTO && g_verbose && !announced++) printf("attention: native kernels (cuDNN not used: %s)\n", why);
    return 0;
}
size_t attention_cudnn_scratch_bytes(Backend*, int, int, int, int, int) { return 0; }
void attention_cudnn_forward(Backend*, void*, float*, const void*, int, int, int, int, int) {
    fatal("attention (cuDNN): this binary was built without cuDNN's headers");
}
void attention_cudnn_backward(Backend*, void*, const void*, const void*, const void*, const float*, int, int, int,
                              int, int) {
    fatal("attention (cuDNN): this binary was built without cuDNN's headers");
}

#endif

extern "C" int attention_cudnn_last_used(void) { return g_last_used; }

extern "C" void cuda_attention_select(Backend* be, int choice, int verbose) {
    (void)be;
    g_verbose = verbose;
    if (choice < ATTN_AUTO || choice > ATTN_NATIVE) fatal("internal: attention choice %d is not 0, 1 or 2", choice);
    g_choice = (AttentionMode)choice;
    g_chosen = 1;
    if (g_choice == ATTN_CUDNN) {
        const char* why;
        if (!attention_cudnn_version(&why)) fatal("--attention cudnn: %s", why);
    }
}

// The choice: --attention's (train_gpt applies it at start-up), else, in a
// program without the flag (the GPU tests, bench_gpu), $TRAIN_GPT_ATTENTION
// (auto, cudnn or native; auto when unset): the GPU check forces native
// with it so that the native kernels' long-sequence paths run on a GPU too.
static AttentionMode current_choice(void) {
    if (!g_chosen) {
        const char* e = getenv("TRAIN_GPT_ATTENTION");
        const char* names[] = {"auto", "cudnn", "native"};
        int c = 0;
        if (e && *e) {
            while (c < 3 && strcmp(e, names[c])) c++;
            if (c == 3) fatal("TRAIN_GPT_ATTENTION='%s' is not one of auto, cudnn, native", e);
        }
        cuda_attention_select(NULL, c, g_verbose);
    }
    return g_choice;
}
