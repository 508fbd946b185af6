// fake_cudnn.cpp: libcudnn_sim.so, the cuDNN graph library on the CPU for the
// harness (tests/cuda_sim): exactly the backend calls kernels/cuda/
// attention_cudnn.cu makes, checked the way cuDNN documents them, then the
// graph interpreted in double. The harness build of train_gpt dlopens it
// through TRAIN_GPT_CUDNN_LIB (it never loads a real cuDNN).
//
// What it checks, failing loudly (a line on stderr starting "fake cuDNN:",
// the same text from cudnnGetLastErrorString, and a non-success status):
// - attributes: known to the descriptor type, of the documented attribute
//   type and element count, never set after finalize; descriptor values of
//   the right descriptor type and already finalized;
// - tensors: data type, unique id, alignment, dimensions and strides all set,
//   rank 4, positive, strides describing a layout with no two elements at
//   one address; by-value tensors are scalars and not virtual;
// - operations: every required input and output, shapes that agree
//   (broadcast over size-1 dimensions, key/value heads dividing query heads),
//   comparison outputs BOOLEAN, index outputs INT32, a select's mask BOOLEAN,
//   reshapes that keep the memory footprint;
// - the graph: unique ids naming one tensor each, no tensor written twice,
//   every virtual tensor written and read, no cycle; the operation sequence
//   of the fused attention forward or backward (MHA or grouped-query),
//   BF16/FP16 Q, K, V, O with the head dimension's stride 1, FP32 stats;
// - heuristics, plans, variant packs: the documented attributes, every
//   non-virtual tensor given a pointer (aligned as declared) and no other,
//   the workspace when the plan needs one.
// - plans: one per shape, as the library builds them (a plan's tensors are
//   fixed); executing one, every tensor and the workspace must lie inside
//   one device allocation of the harness (cuda_sim_device_range), so a plan
//   run with another shape's buffers is caught; at most
//   CUDA_SIM_CUDNN_MAX_PLANS (default 16, the caller's cache) execution plans
//   alive at once, so a cache that never frees is caught.
// - workspace, per engine, what cuDNN's engines ask for: the forward, an FP32
//   row per query and head; the backward's nondeterministic engine, an FP32
//   dQ accumulator (b, h, s, d + 1); its deterministic engines (dQ written
//   directly), dP in BF16, b * h * s * s * 2 bytes, the T^2 figure that
//   makes long sequences need gigabytes.
// Heuristics offer backward graphs a nondeterministic engine first (as the
// real library may); executing it fails, so a caller that does not filter
// engines by their numerical notes is caught. The workspace is poisoned
// before each run, so a caller that keeps data in it is caught too. On
// Blackwell (CUDA_SIM_CC=10x) a backward runs only on the engine cuDNN makes
// deterministic there (pinned by global index with its knobs), so a caller
// that leaves the backward to the heuristics is caught as well.
#include <cudnn_graph.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kMagic = 0x636e6e64;
constexpr int kGlobalEngines = 24;  // engines an attention graph has, by global index
char g_last_error[1024];
int64_t g_graph_count, g_exec_count;
int64_t g_plans_built, g_live_plans, g_most_live_plans;  // finalized execution plans: ever, alive, most alive

// The most execution plans alive at once: CUDA_SIM_CUDNN_MAX_PLANS, default
// 16 (kernels/cuda/attention_cudnn.cu's cache).
int64_t max_live_plans() {
    const char* v = getenv("CUDA_SIM_CUDNN_MAX_PLANS");
    return v && v[0] ? atoll(v) : 16;
}

// Whether [p, p + bytes) is device memory of the harness (its runtime, linked
// into the program that loaded this library, exports the check); true where
// the program has no harness.
bool device_range(const void* p, int64_t bytes) {
    static auto check = (int (*)(const void*, size_t))dlsym(RTLD_DEFAULT, "cuda_sim_device_range");
    return !check || check(p, (size_t)bytes);
}

cudnnStatus_t fail(cudnnStatus_t st, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fake cuDNN: %s\n", g_last_error);
    return st;
}

struct Attr {
    cudnnBackendAttributeType_t type;
    int64_t count;
    std::vector<char> bytes;
};

struct Desc;

// The emulated engine behind an engine config (and an engine descriptor).
struct Engine {
    int id = -1;
    bool nondeterministic = false;
    bool pinned = false;               // named by global index (not from heuristics)
    std::map<int, int64_t> knobs;      // knob type -> choice, from the engine config
};

struct Desc {
    uint32_t magic = kMagic;
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    std::map<int, Attr> attrs;
    // tensor
    cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
    int64_t dims[4] = {0}, strides[4] = {0}, uid = 0, align = 0, span = 0;
    bool is_virtual = false, by_value = false;
    // engine config / engine
    Engine engine;
    // plan
    Desc* graph = nullptr;
    int64_t workspace = 0;
};

const char* type_name(cudnnBackendDescriptorType_t t) {
    switch (t) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return "TENSOR";
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: return "POINTWISE";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return "OPERATION_POINTWISE";
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: return "REDUCTION";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return "OPERATION_REDUCTION";
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR: return "MATMUL";
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return "OPERATION_MATMUL";
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return "OPERATION_RESHAPE";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return "OPERATIONGRAPH";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: return "ENGINEHEUR";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: return "ENGINECFG";
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return "ENGINE";
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: return "KNOB_CHOICE";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: return "EXECUTION_PLAN";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return "VARIANT_PACK";
    default: return NULL;
    }
}

// The attributes each emulated descriptor type takes: name, attribute type,
// the least and most elements (-1: any number).
struct AttrRule {
    cudnnBackendDescriptorType_t desc;
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t min, max;
    cudnnBackendDescriptorType_t value_desc;  // for descriptor-valued attributes
};

// ONE / MANY: a plain attribute of 1 or lo..hi elements; DESC / DESCS: one
// or lo..hi descriptors of the named type.
#define ONE(dt, attr, type) {CUDNN_BACKEND_##dt##_DESCRIPTOR, CUDNN_ATTR_##attr, CUDNN_TYPE_##type, 1, 1, {}}
#define MANY(dt, attr, type, lo, hi) {CUDNN_BACKEND_##dt##_DESCRIPTOR, CUDNN_ATTR_##attr, CUDNN_TYPE_##type, lo, hi, {}}
#define DESCS(dt, attr, of, lo, hi)                                                                                \
    {CUDNN_BACKEND_##dt##_DESCRIPTOR, CUDNN_ATTR_##attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, lo, hi, CUDNN_BACKEND_##of##_DESCRIPTOR}
#define DESC(dt, attr, of) DESCS(dt, attr, of, 1, 1)
const AttrRule kRules[] = {
    ONE(TENSOR, TENSOR_DATA_TYPE, DATA_TYPE),
    MANY(TENSOR, TENSOR_DIMENSIONS, INT64, 1, 8),
    MANY(TENSOR, TENSOR_STRIDES, INT64, 1, 8),
    ONE(TENSOR, TENSOR_UNIQUE_ID, INT64),
    ONE(TENSOR, TENSOR_BYTE_ALIGNMENT, INT64),
    ONE(TENSOR, TENSOR_IS_VIRTUAL, BOOLEAN),
    ONE(TENSOR, TENSOR_IS_BY_VALUE, BOOLEAN),
    ONE(POINTWISE, POINTWISE_MODE, POINTWISE_MODE),
    ONE(POINTWISE, POINTWISE_MATH_PREC, DATA_TYPE),
    ONE(POINTWISE, POINTWISE_AXIS, INT64),
    DESC(OPERATION_POINTWISE, OPERATION_POINTWISE_PW_DESCRIPTOR, POINTWISE),
    DESC(OPERATION_POINTWISE, OPERATION_POINTWISE_XDESC, TENSOR),
    DESC(OPERATION_POINTWISE, OPERATION_POINTWISE_BDESC, TENSOR),
    DESC(OPERATION_POINTWISE, OPERATION_POINTWISE_TDESC, TENSOR),
    DESC(OPERATION_POINTWISE, OPERATION_POINTWISE_YDESC, TENSOR),
    ONE(REDUCTION, REDUCTION_OPERATOR, REDUCTION_OPERATOR_TYPE),
    ONE(REDUCTION, REDUCTION_COMP_TYPE, DATA_TYPE),
    DESC(OPERATION_REDUCTION, OPERATION_REDUCTION_XDESC, TENSOR),
    DESC(OPERATION_REDUCTION, OPERATION_REDUCTION_YDESC, TENSOR),
    DESC(OPERATION_REDUCTION, OPERATION_REDUCTION_DESC, REDUCTION),
    ONE(MATMUL, MATMUL_COMP_TYPE, DATA_TYPE),
    DESC(OPERATION_MATMUL, OPERATION_MATMUL_ADESC, TENSOR),
    DESC(OPERATION_MATMUL, OPERATION_MATMUL_BDESC, TENSOR),
    DESC(OPERATION_MATMUL, OPERATION_MATMUL_CDESC, TENSOR),
    DESC(OPERATION_MATMUL, OPERATION_MATMUL_DESC, MATMUL),
    DESC(OPERATION_RESHAPE, OPERATION_RESHAPE_XDESC, TENSOR),
    DESC(OPERATION_RESHAPE, OPERATION_RESHAPE_YDESC, TENSOR),
    ONE(OPERATIONGRAPH, OPERATIONGRAPH_HANDLE, HANDLE),
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, -1,
     {}},  // operations of any type
    DESC(ENGINEHEUR, ENGINEHEUR_OPERATION_GRAPH, OPERATIONGRAPH),
    ONE(ENGINEHEUR, ENGINEHEUR_MODE, HEUR_MODE),
    DESC(ENGINE, ENGINE_OPERATION_GRAPH, OPERATIONGRAPH),
    ONE(ENGINE, ENGINE_GLOBAL_INDEX, INT64),
    ONE(KNOB_CHOICE, KNOB_CHOICE_KNOB_TYPE, KNOB_TYPE),
    ONE(KNOB_CHOICE, KNOB_CHOICE_KNOB_VALUE, INT64),
    DESC(ENGINECFG, ENGINECFG_ENGINE, ENGINE),
    DESCS(ENGINECFG, ENGINECFG_KNOB_CHOICES, KNOB_CHOICE, 1, CUDNN_KNOB_TYPE_COUNTS),
    ONE(EXECUTION_PLAN, EXECUTION_PLAN_HANDLE, HANDLE),
    DESC(EXECUTION_PLAN, EXECUTION_PLAN_ENGINE_CONFIG, ENGINECFG),
    MANY(VARIANT_PACK, VARIANT_PACK_UNIQUE_IDS, INT64, 1, -1),
    MANY(VARIANT_PACK, VARIANT_PACK_DATA_POINTERS, VOID_PTR, 1, -1),
    ONE(VARIANT_PACK, VARIANT_PACK_WORKSPACE, VOID_PTR),
};
#undef ONE
#undef MANY
#undef DESCS
#undef DESC

size_t elem_size(cudnnBackendAttributeType_t t) {
    switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_KNOB_TYPE: return sizeof(cudnnBackendKnobType_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    default: return 0;
    }
}

Desc* as_desc(const void* p) {
    Desc* d = (Desc*)p;
    return d && d->magic == kMagic ? d : nullptr;
}

// Attribute values, once set.
template <typename T>
const T* get(const Desc* d, int name, int64_t* count = nullptr) {
    auto it = d->attrs.find(name);
    if (it == d->attrs.end()) return nullptr;
    if (count) *count = it->second.count;
    return (const T*)it->second.bytes.data();
}
Desc* get_desc(const Desc* d, int name) {
    const cudnnBackendDescriptor_t* v = get<cudnnBackendDescriptor_t>(d, name);
    return v ? as_desc(*v) : nullptr;
}

// ---- finalize: descriptors one by one ---------------------------------------------------------------

int64_t dtype_bytes(cudnnDataType_t t) {
    switch (t) {
    case CUDNN_DATA_FLOAT: case CUDNN_DATA_INT32: return 4;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_BOOLEAN: return 1;
    case CUDNN_DATA_INT64: return 8;
    default: return 0;
    }
}

cudnnStatus_t finalize_tensor(Desc* t) {
    const char* missing = !t->attrs.count(CUDNN_ATTR_TENSOR_DATA_TYPE)      ? "DATA_TYPE"
                          : !t->attrs.count(CUDNN_ATTR_TENSOR_DIMENSIONS)   ? "DIMENSIONS"
                          : !t->attrs.count(CUDNN_ATTR_TENSOR_STRIDES)      ? "STRIDES"
                          : !t->attrs.count(CUDNN_ATTR_TENSOR_UNIQUE_ID)    ? "UNIQUE_ID"
                          : !t->attrs.count(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT) ? "BYTE_ALIGNMENT"
                                                                            : nullptr;
    if (missing) return fail(CUDNN_STATUS_BAD_PARAM, "tensor: CUDNN_ATTR_TENSOR_%s is not set", missing);
    int64_t nd = 0, ns = 0;
    const int64_t* dims = get<int64_t>(t, CUDNN_ATTR_TENSOR_DIMENSIONS, &nd);
    const int64_t* strides = get<int64_t>(t, CUDNN_ATTR_TENSOR_STRIDES, &ns);
    t->uid = *get<int64_t>(t, CUDNN_ATTR_TENSOR_UNIQUE_ID);
    t->dtype = *get<cudnnDataType_t>(t, CUDNN_ATTR_TENSOR_DATA_TYPE);
    t->align = *get<int64_t>(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
    const bool* v = get<bool>(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
    const bool* bv = get<bool>(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
    t->is_virtual = v && *v;
    t->by_value = bv && *bv;
    if (nd != ns)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: %lld dimensions but %lld strides", (long long)t->uid,
                    (long long)nd, (long long)ns);
    if (nd != 4)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "tensor uid %lld: rank %lld (the attention graphs use rank 4)",
                    (long long)t->uid, (long long)nd);
    if (!dtype_bytes(t->dtype))
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "tensor uid %lld: data type %d not emulated",
                    (long long)t->uid, (int)t->dtype);
    if (t->align <= 0 || (t->align & (t->align - 1)))
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: byte alignment %lld is not a power of two",
                    (long long)t->uid, (long long)t->align);
    t->span = 1;
    for (int i = 0; i < 4; i++) {
        if (dims[i] <= 0 || strides[i] <= 0)
            return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: dimension %d is %lld with stride %lld",
                        (long long)t->uid, i, (long long)dims[i], (long long)strides[i]);
        t->dims[i] = dims[i];
        t->strides[i] = strides[i];
        t->span += (dims[i] - 1) * strides[i];
    }
    // No two elements at one address: sorted by stride, each stride reaches
    // past everything the smaller ones span.
    int order[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (strides[order[j]] < strides[order[i]]) std::swap(order[i], order[j]);
    int64_t reach = 1;
    for (int k = 0; k < 4; k++) {
        int i = order[k];
        if (dims[i] == 1) continue;
        if (strides[i] < reach)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "tensor uid %lld: strides (%lld,%lld,%lld,%lld) of dims (%lld,%lld,%lld,%lld) put two "
                        "elements at one address",
                        (long long)t->uid, (long long)strides[0], (long long)strides[1], (long long)strides[2],
                        (long long)strides[3], (long long)dims[0], (long long)dims[1], (long long)dims[2],
                        (long long)dims[3]);
        reach = strides[i] * dims[i];
    }
    if (t->by_value) {
        if (t->is_virtual) return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: virtual and by value", (long long)t->uid);
        if (t->span != 1 || dims[0] * dims[1] * dims[2] * dims[3] != 1)
            return fail(CUDNN_STATUS_BAD_PARAM, "tensor uid %lld: a by-value tensor must be a scalar", (long long)t->uid);
    }
    return CUDNN_STATUS_SUCCESS;
}

bool is_binary(cudnnPointwiseMode_t m) {
    return m == CUDNN_POINTWISE_ADD || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_MUL ||
           m == CUDNN_POINTWISE_DIV || m == CUDNN_POINTWISE_CMP_GE;
}
bool is_unary(cudnnPointwiseMode_t m) {
    return m == CUDNN_POINTWISE_EXP || m == CUDNN_POINTWISE_LOG || m == CUDNN_POINTWISE_IDENTITY ||
           m == CUDNN_POINTWISE_GEN_INDEX;
}

// Whether a's shape broadcasts to b's: each dimension equal or 1.
bool broadcasts(const Desc* a, const Desc* b) {
    for (int i = 0; i < 4; i++)
        if (a->dims[i] != b->dims[i] && a->dims[i] != 1) return false;
    return true;
}

std::string shape(const Desc* t) {
    char buf[96];
    snprintf(buf, sizeof buf, "uid %lld (%lld,%lld,%lld,%lld)", (long long)t->uid, (long long)t->dims[0],
             (long long)t->dims[1], (long long)t->dims[2], (long long)t->dims[3]);
    return buf;
}

cudnnStatus_t finalize_op(Desc* op) {
    switch (op->type) {
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: {
        const cudnnPointwiseMode_t* m = get<cudnnPointwiseMode_t>(op, CUDNN_ATTR_POINTWISE_MODE);
        if (!m) return fail(CUDNN_STATUS_BAD_PARAM, "pointwise: CUDNN_ATTR_POINTWISE_MODE is not set");
        if (!get<cudnnDataType_t>(op, CUDNN_ATTR_POINTWISE_MATH_PREC))
            return fail(CUDNN_STATUS_BAD_PARAM, "pointwise: CUDNN_ATTR_POINTWISE_MATH_PREC is not set");
        if (!is_unary(*m) && !is_binary(*m) && *m != CUDNN_POINTWISE_BINARY_SELECT)
            return fail(CUDNN_STATUS_NOT_SUPPORTED, "pointwise: mode %d not emulated", (int)*m);
        if (*m == CUDNN_POINTWISE_GEN_INDEX && !op->attrs.count(CUDNN_ATTR_POINTWISE_AXIS))
            return fail(CUDNN_STATUS_BAD_PARAM, "pointwise GEN_INDEX: CUDNN_ATTR_POINTWISE_AXIS is not set");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        Desc* pw = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
        Desc* x = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
        Desc* b = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
        Desc* t = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
        Desc* y = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        if (!pw || !x || !y)
            return fail(CUDNN_STATUS_BAD_PARAM, "pointwise operation: %s is not set",
                        !pw ? "PW_DESCRIPTOR" : !x ? "XDESC" : "YDESC");
        cudnnPointwiseMode_t m = *get<cudnnPointwiseMode_t>(pw, CUDNN_ATTR_POINTWISE_MODE);
        bool select = m == CUDNN_POINTWISE_BINARY_SELECT;
        if ((is_binary(m) || select) != (b != nullptr))
            return fail(CUDNN_STATUS_BAD_PARAM, "pointwise mode %d on %s: BDESC %s", (int)m, shape(y).c_str(),
                        b ? "given to a unary mode" : "is not set");
        if (select != (t != nullptr))
            return fail(CUDNN_STATUS_BAD_PARAM, "pointwise mode %d on %s: TDESC %s", (int)m, shape(y).c_str(),
                        t ? "given to a mode without a mask" : "is not set (BINARY_SELECT's mask)");
        if (!broadcasts(x, y) || (b && !broadcasts(b, y)) || (t && !broadcasts(t, y)))
            return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "pointwise mode %d: inputs %s%s%s do not broadcast to %s",
                        (int)m, shape(x).c_str(), b ? ", " : "", b ? shape(b).c_str() : "", shape(y).c_str());
        if (m == CUDNN_POINTWISE_GEN_INDEX) {
            int64_t axis = *get<int64_t>(pw, CUDNN_ATTR_POINTWISE_AXIS);
            if (axis < 0 || axis > 3 || y->dtype != CUDNN_DATA_INT32)
                return fail(CUDNN_STATUS_BAD_PARAM, "GEN_INDEX: axis %lld of %s, output type %d (INT32 needed)",
                            (long long)axis, shape(y).c_str(), (int)y->dtype);
        }
        if (m == CUDNN_POINTWISE_CMP_GE && y->dtype != CUDNN_DATA_BOOLEAN)
            return fail(CUDNN_STATUS_BAD_PARAM, "CMP_GE: output %s is not BOOLEAN", shape(y).c_str());
        if (select && t->dtype != CUDNN_DATA_BOOLEAN)
            return fail(CUDNN_STATUS_BAD_PARAM, "BINARY_SELECT: mask %s is not BOOLEAN", shape(t).c_str());
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR: {
        const cudnnReduceTensorOp_t* m = get<cudnnReduceTensorOp_t>(op, CUDNN_ATTR_REDUCTION_OPERATOR);
        if (!m || !op->attrs.count(CUDNN_ATTR_REDUCTION_COMP_TYPE))
            return fail(CUDNN_STATUS_BAD_PARAM, "reduction: %s is not set", !m ? "OPERATOR" : "COMP_TYPE");
        if (*m != CUDNN_REDUCE_TENSOR_ADD && *m != CUDNN_REDUCE_TENSOR_MAX)
            return fail(CUDNN_STATUS_NOT_SUPPORTED, "reduction: operator %d not emulated", (int)*m);
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        Desc* x = get_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
        Desc* y = get_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
        if (!x || !y || !get_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC))
            return fail(CUDNN_STATUS_BAD_PARAM, "reduction operation: %s is not set", !x ? "XDESC" : !y ? "YDESC" : "DESC");
        for (int i = 0; i < 4; i++)
            if (y->dims[i] != x->dims[i] && (y->dims[i] > x->dims[i] || x->dims[i] % y->dims[i]))
                return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "reduction of %s into %s: dimension %d",
                            shape(x).c_str(), shape(y).c_str(), i);
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
        if (!op->attrs.count(CUDNN_ATTR_MATMUL_COMP_TYPE))
            return fail(CUDNN_STATUS_BAD_PARAM, "matmul: CUDNN_ATTR_MATMUL_COMP_TYPE is not set");
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        Desc* a = get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
        Desc* b = get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
        Desc* c = get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
        if (!a || !b || !c || !get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC))
            return fail(CUDNN_STATUS_BAD_PARAM, "matmul operation: %s is not set",
                        !a ? "ADESC" : !b ? "BDESC" : !c ? "CDESC" : "DESC");
        bool ok = a->dims[2] == c->dims[2] && b->dims[3] == c->dims[3] && a->dims[3] == b->dims[2];
        for (int i = 0; i < 2; i++)
            ok = ok && c->dims[i] % a->dims[i] == 0 && c->dims[i] % b->dims[i] == 0;
        if (!ok)
            return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "matmul %s x %s -> %s: shapes do not agree",
                        shape(a).c_str(), shape(b).c_str(), shape(c).c_str());
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: {
        Desc* x = get_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
        Desc* y = get_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
        if (!x || !y) return fail(CUDNN_STATUS_BAD_PARAM, "reshape operation: %s is not set", !x ? "XDESC" : "YDESC");
        int64_t nx = x->dims[0] * x->dims[1] * x->dims[2] * x->dims[3];
        int64_t ny = y->dims[0] * y->dims[1] * y->dims[2] * y->dims[3];
        if (nx != ny || x->span != y->span)
            return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "reshape %s -> %s changes the memory footprint",
                        shape(x).c_str(), shape(y).c_str());
        return CUDNN_STATUS_SUCCESS;
    }
    default: return CUDNN_STATUS_SUCCESS;
    }
}

// ---- the operation graph --------------------------------------------------------------------------

// One operation with its inputs and output, in a uniform form.
struct Node {
    Desc* op;
    char kind[24];  // "matmul", "reshape", "max", "sum", or the pointwise mode's name
    std::vector<Desc*> in;
    Desc* out;
    cudnnPointwiseMode_t mode;
    int64_t axis;
};

const char* pw_name(cudnnPointwiseMode_t m) {
    switch (m) {
    case CUDNN_POINTWISE_ADD: return "add";
    case CUDNN_POINTWISE_SUB: return "sub";
    case CUDNN_POINTWISE_MUL: return "mul";
    case CUDNN_POINTWISE_DIV: return "div";
    case CUDNN_POINTWISE_EXP: return "exp";
    case CUDNN_POINTWISE_LOG: return "log";
    case CUDNN_POINTWISE_IDENTITY: return "identity";
    case CUDNN_POINTWISE_CMP_GE: return "ge";
    case CUDNN_POINTWISE_GEN_INDEX: return "index";
    case CUDNN_POINTWISE_BINARY_SELECT: return "select";
    default: return "?";
    }
}

Node node_of(Desc* op) {
    Node n{};
    n.op = op;
    switch (op->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        Desc* pw = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
        n.mode = *get<cudnnPointwiseMode_t>(pw, CUDNN_ATTR_POINTWISE_MODE);
        const int64_t* axis = get<int64_t>(pw, CUDNN_ATTR_POINTWISE_AXIS);
        n.axis = axis ? *axis : 0;
        snprintf(n.kind, sizeof n.kind, "%s", pw_name(n.mode));
        n.in.push_back(get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC));
        if (Desc* b = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC)) n.in.push_back(b);
        if (Desc* t = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC)) n.in.push_back(t);
        n.out = get_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        break;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        Desc* r = get_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
        bool mx = *get<cudnnReduceTensorOp_t>(r, CUDNN_ATTR_REDUCTION_OPERATOR) == CUDNN_REDUCE_TENSOR_MAX;
        snprintf(n.kind, sizeof n.kind, "%s", mx ? "max" : "sum");
        n.in.push_back(get_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC));
        n.out = get_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
        break;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        snprintf(n.kind, sizeof n.kind, "matmul");
        n.in.push_back(get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC));
        n.in.push_back(get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC));
        n.out = get_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
        break;
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
        snprintf(n.kind, sizeof n.kind, "reshape");
        n.in.push_back(get_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC));
        n.out = get_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
        break;
    default: break;
    }
    return n;
}

struct GraphInfo {
    std::vector<Node> nodes;              // in execution order
    std::map<int64_t, Desc*> tensors;     // every tensor by unique id
    bool backward = false;
};
std::map<Desc*, std::shared_ptr<GraphInfo>> g_graphs;

// The operation sequences of cuDNN's fused attention that this code
// emulates: causal forward with stats, and the deterministic backward (MHA,
// or grouped-query with the dK and dV group sums).
const char* kForward = "matmul mul index index ge select max sub exp sum log add div matmul";
const char* kBackwardMha =
    "mul sum mul matmul mul sub index index ge select exp reshape matmul matmul sub mul mul reshape matmul reshape "
    "matmul";
const char* kBackwardGqa =
    "mul sum mul matmul mul sub index index ge select exp reshape matmul sum matmul sub mul mul reshape matmul sum "
    "reshape matmul";

cudnnStatus_t check_attention_pattern(GraphInfo* g) {
    std::string seq;
    for (auto& n : g->nodes) seq += (seq.empty() ? "" : " ") + std::string(n.kind);
    bool fwd = seq == kForward, bwd = seq == kBackwardMha || seq == kBackwardGqa;
    if (!fwd && !bwd)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                    "no engine for this graph: operations \"%s\" are not the fused attention forward (\"%s\") or "
                    "backward pattern",
                    seq.c_str(), kForward);
    g->backward = bwd;
    // Q, K, V (and O, dO, dQ, dK, dV): BF16/FP16 with the head dimension contiguous; stats FP32 (b, h, s, 1).
    for (auto& [uid, t] : g->tensors) {
        if (t->is_virtual || t->by_value) continue;
        if (t->dtype == CUDNN_DATA_FLOAT) {  // stats (and the backward's D): one value per query row
            if (t->dims[3] != 1)
                return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "fused attention: FLOAT tensor %s is not a stats tensor (b, h, s, 1)",
                            shape(t).c_str());
        } else {
            if (t->dtype != CUDNN_DATA_BFLOAT16 && t->dtype != CUDNN_DATA_HALF)
                return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "fused attention: %s is not BF16 or FP16", shape(t).c_str());
            bool unit = t->strides[3] == 1 || t->strides[2] == 1;  // K^T views have the head dimension at 2
            int64_t hd = t->strides[3] == 1 ? t->dims[3] : t->dims[2];
            if (!unit)
                return fail(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT, "fused attention: %s has no unit stride in the head dimension",
                            shape(t).c_str());
            if (hd % 8 || hd > 256)
                return fail(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "fused attention: head dimension %lld (a multiple of 8, at most 256)",
                            (long long)hd);
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_graph(Desc* d) {
    if (!d->attrs.count(CUDNN_ATTR_OPERATIONGRAPH_HANDLE))
        return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: CUDNN_ATTR_OPERATIONGRAPH_HANDLE is not set");
    int64_t n = 0;
    const cudnnBackendDescriptor_t* ops = get<cudnnBackendDescriptor_t>(d, CUDNN_ATTR_OPERATIONGRAPH_OPS, &n);
    if (!ops) return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: CUDNN_ATTR_OPERATIONGRAPH_OPS is not set");
    auto g = std::make_shared<GraphInfo>();
    std::vector<Node> pending;
    std::map<Desc*, int> writers, readers;
    for (int64_t i = 0; i < n; i++) {
        Desc* op = as_desc(ops[i]);
        const char* tn = op ? type_name(op->type) : nullptr;
        if (!tn || strncmp(tn, "OPERATION_", 10) != 0)
            return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: element %lld is not an operation", (long long)i);
        Node node = node_of(op);
        std::vector<Desc*> all = node.in;
        all.push_back(node.out);
        for (Desc* t : all) {
            auto it = g->tensors.find(t->uid);
            if (it != g->tensors.end() && it->second != t)
                return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: unique id %lld names two different tensors",
                            (long long)t->uid);
            g->tensors[t->uid] = t;
        }
        for (Desc* t : node.in) readers[t]++;
        if (node.out->by_value)
            return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: %s (by value) is written by %s", shape(node.out).c_str(),
                        node.kind);
        if (writers[node.out]++)
            return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: %s is written by two operations", shape(node.out).c_str());
        pending.push_back(node);
    }
    for (auto& [uid, t] : g->tensors) {
        if (t->is_virtual && !writers[t])
            return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: virtual %s is read but never written", shape(t).c_str());
        if (t->is_virtual && !readers[t])
            return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: virtual %s is written but never read", shape(t).c_str());
    }
    // Execution order: an operation runs once every tensor it reads is ready.
    std::map<Desc*, bool> ready;
    for (auto& [uid, t] : g->tensors) ready[t] = !writers[t];
    while (!pending.empty()) {
        size_t before = pending.size();
        for (size_t i = 0; i < pending.size();) {
            bool ok = true;
            for (Desc* t : pending[i].in) ok = ok && ready[t];
            if (ok) {
                ready[pending[i].out] = true;
                g->nodes.push_back(pending[i]);
                pending.erase(pending.begin() + i);
            } else {
                i++;
            }
        }
        if (pending.size() == before) return fail(CUDNN_STATUS_BAD_PARAM, "operation graph: the operations form a cycle");
    }
    g_graphs[d] = g;
    g_graph_count++;
    return CUDNN_STATUS_SUCCESS;
}

// ---- heuristics, engines, plans ----------------------------------------------------------------------

cudnnStatus_t finalize_heur(Desc* d) {
    Desc* graph = get_desc(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (!graph || !d->attrs.count(CUDNN_ATTR_ENGINEHEUR_MODE))
        return fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: %s is not set", !graph ? "OPERATION_GRAPH" : "MODE");
    cudnnBackendHeurMode_t mode = *get<cudnnBackendHeurMode_t>(d, CUDNN_ATTR_ENGINEHEUR_MODE);
    if (mode != CUDNN_HEUR_MODE_A && mode != CUDNN_HEUR_MODE_B && mode != CUDNN_HEUR_MODE_FALLBACK)
        return fail(CUDNN_STATUS_BAD_PARAM, "engine heuristics: mode %d", (int)mode);
    d->graph = graph;
    return check_attention_pattern(g_graphs[graph].get());
}

// ---- Blackwell's deterministic backward ------------------------------------------------------------
// On compute capability 10.x no engine the heuristics return runs the
// attention backward deterministically; cuDNN 9.18.0 and newer have one
// deterministic engine, named by global index (5 on 10.0-10.3, 17 on later
// 10.x) with fixed knob choices (cudnn-frontend's set_deterministic_algorithm;
// the knob set changed in 9.23). Executing a backward on Blackwell with any
// other engine config fails here, so a caller that leaves it to the
// heuristics (or sets the wrong knobs) is caught. The device's compute
// capability is the harness's (CUDA_SIM_CC, default 90).
int sim_cc() {
    const char* v = getenv("CUDA_SIM_CC");
    return v && v[0] ? atoi(v) : 90;
}
// The emulated library's version: CUDA_SIM_CUDNN_VERSION (tests of the
// version checks), else the headers'.
size_t fake_version() {
    const char* v = getenv("CUDA_SIM_CUDNN_VERSION");
    return v ? (size_t)strtoul(v, NULL, 10) : (size_t)CUDNN_VERSION;
}
std::map<int, int64_t> blackwell_deterministic_knobs() {
    if (fake_version() >= 92300)
        return {{CUDNN_KNOB_TYPE_TILE_M, 3},   {CUDNN_KNOB_TYPE_TILE_N, 2},     {CUDNN_KNOB_TYPE_KERNEL_CFG, 2},
                {CUDNN_KNOB_TYPE_STREAM_K, 0}, {CUDNN_KNOB_TYPE_TILE_CGA_M, 0}, {CUDNN_KNOB_TYPE_STAGES, 2}};
    return {{CUDNN_KNOB_TYPE_KERNEL_CFG, 31}, {CUDNN_KNOB_TYPE_STAGES, 2}};
}
int blackwell_deterministic_engine() { return sim_cc() % 10 > 3 ? 17 : 5; }

// Why a backward plan on Blackwell would not be deterministic ("" when it is).
std::string blackwell_nondeterminism(const Engine& e) {
    char why[256];
    if (!e.pinned) {
        snprintf(why, sizeof why, "engine %d from the heuristics (none of them is deterministic on cc %d)", e.id,
                 sim_cc());
        return why;
    }
    if (e.id != blackwell_deterministic_engine()) {
        snprintf(why, sizeof why, "engine %d (the deterministic one is %d on cc %d)", e.id,
                 blackwell_deterministic_engine(), sim_cc());
        return why;
    }
    if (e.knobs != blackwell_deterministic_knobs()) {
        snprintf(why, sizeof why, "engine %d with %zu knob choices that are not its deterministic set for cuDNN %zu",
                 e.id, e.knobs.size(), fake_version());
        return why;
    }
    return "";
}

cudnnStatus_t finalize_engine(Desc* d) {
    Desc* graph = get_desc(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH);
    const int64_t* index = get<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX);
    if (!graph || !index)
        return fail(CUDNN_STATUS_BAD_PARAM, "engine: %s is not set", !graph ? "OPERATION_GRAPH" : "GLOBAL_INDEX");
    if (*index < 0 || *index >= kGlobalEngines)
        return fail(CUDNN_STATUS_BAD_PARAM, "engine: global index %lld is not below the graph's %d engines",
                    (long long)*index, kGlobalEngines);
    d->graph = graph;
    d->engine.id = (int)*index;
    d->engine.pinned = true;
    return check_attention_pattern(g_graphs[graph].get());
}

cudnnStatus_t finalize_knob(Desc* d) {
    if (!d->attrs.count(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) || !d->attrs.count(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE))
        return fail(CUDNN_STATUS_BAD_PARAM, "knob choice: the knob's type and value must both be set");
    return CUDNN_STATUS_SUCCESS;
}

// An engine config built by the caller (not a heuristics result): its engine
// and knob choices, each knob type once.
cudnnStatus_t finalize_cfg(Desc* d) {
    Desc* engine = get_desc(d, CUDNN_ATTR_ENGINECFG_ENGINE);
    if (!engine) return fail(CUDNN_STATUS_BAD_PARAM, "engine config: ENGINE is not set");
    d->graph = engine->graph;
    d->engine = engine->engine;
    int64_t n = 0;
    const cudnnBackendDescriptor_t* knobs = get<cudnnBackendDescriptor_t>(d, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, &n);
    for (int64_t i = 0; knobs && i < n; i++) {
        Desc* k = as_desc(knobs[i]);
        int type = (int)*get<cudnnBackendKnobType_t>(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE);
        if (d->engine.knobs.count(type)) return fail(CUDNN_STATUS_BAD_PARAM, "engine config: knob type %d chosen twice", type);
        d->engine.knobs[type] = *get<int64_t>(k, CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE);
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_plan(Desc* d) {
    Desc* cfg = get_desc(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (!cfg || !d->attrs.count(CUDNN_ATTR_EXECUTION_PLAN_HANDLE))
        return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: %s is not set", !cfg ? "ENGINE_CONFIG" : "HANDLE");
    if (!cfg->graph) return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: the engine config came from no heuristics");
    d->graph = cfg->graph;
    d->engine = cfg->engine;
    if (d->engine.pinned && fake_version() < 91800)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "execution plan: engine %d has no deterministic attention backward "
                    "before cuDNN 9.18.0 (this is %zu)", d->engine.id, fake_version());
    // Workspace, as each engine asks: forward, one FP32 row per query and
    // head; the backward's nondeterministic engine, an FP32 dQ accumulator
    // (b, h, sq, d) and softmax sums (b, h, sq); its deterministic ones (dQ
    // written directly), dP (b, h, sq, skv) in BF16.
    GraphInfo* g = g_graphs[d->graph].get();
    const Node* mm = nullptr;  // the first product: S = Q K^T, scores (b, h, sq, skv)
    for (auto& n : g->nodes)
        if (!mm && !strcmp(n.kind, "matmul")) mm = &n;
    const int64_t* sd = mm->out->dims;
    if (!g->backward) d->workspace = sd[0] * sd[1] * sd[2] * 4 + 4096;
    else if (d->engine.nondeterministic) d->workspace = sd[0] * sd[1] * sd[2] * (mm->in[0]->dims[3] + 1) * 4;
    else d->workspace = sd[0] * sd[1] * sd[2] * sd[3] * 2;
    if (g_live_plans >= max_live_plans())
        return fail(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, "execution plan: %lld plans alive already "
                    "(CUDA_SIM_CUDNN_MAX_PLANS): the caller's plan cache must free plans it no longer keeps",
                    (long long)g_live_plans);
    g_plans_built++;
    if (++g_live_plans > g_most_live_plans) g_most_live_plans = g_live_plans;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_pack(Desc* d) {
    int64_t ni = 0, np = 0;
    const int64_t* ids = get<int64_t>(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &ni);
    get<void*>(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, &np);
    if (!ids) return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: UNIQUE_IDS is not set");
    if (ni != np)
        return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: %lld unique ids but %lld data pointers", (long long)ni,
                    (long long)np);
    return CUDNN_STATUS_SUCCESS;
}

// ---- execution: the graph in double --------------------------------------------------------------

float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

// A tensor's memory: the caller's (typed) or, for virtual tensors, doubles
// rounded to the declared type where that type is narrower than FP32.
struct Store {
    Desc* t;
    void* user = nullptr;
    std::vector<double> v;
    double read(int64_t off) const {
        if (!user) return v[off];
        switch (t->dtype) {
        case CUDNN_DATA_FLOAT: return ((const float*)user)[off];
        case CUDNN_DATA_BFLOAT16: return bf16_to_float(((const uint16_t*)user)[off]);
        case CUDNN_DATA_INT32: return ((const int32_t*)user)[off];
        default: return 0;
        }
    }
    void write(int64_t off, double x) {
        if (!user) {
            v[off] = t->dtype == CUDNN_DATA_BFLOAT16 ? bf16_to_float(float_to_bf16((float)x)) : x;
            return;
        }
        switch (t->dtype) {
        case CUDNN_DATA_FLOAT: ((float*)user)[off] = (float)x; break;
        case CUDNN_DATA_BFLOAT16: ((uint16_t*)user)[off] = float_to_bf16((float)x); break;
        case CUDNN_DATA_INT32: ((int32_t*)user)[off] = (int32_t)x; break;
        default: break;
        }
    }
};

int64_t offset(const Desc* t, const int64_t idx[4]) {
    int64_t o = 0;
    for (int i = 0; i < 4; i++) o += (t->dims[i] == 1 ? 0 : idx[i]) * t->strides[i];
    return o;
}

// idx of the output -> the input's index: broadcast (size 1) or group (fewer heads).
void map_index(const Desc* in, const Desc* out, const int64_t o[4], int64_t i[4]) {
    for (int k = 0; k < 4; k++) i[k] = in->dims[k] == 1 ? 0 : o[k] / (out->dims[k] / in->dims[k]);
}

template <typename F>
void for_each(const Desc* t, F f) {
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < t->dims[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < t->dims[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < t->dims[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < t->dims[3]; idx[3]++) f(idx);
}

void run_node(const Node& n, std::map<Desc*, Store>& st) {
    Store& y = st[n.out];
    const Desc* yt = n.out;
    if (!strcmp(n.kind, "matmul")) {
        const Desc *a = n.in[0], *b = n.in[1];
        Store &sa = st[n.in[0]], &sb = st[n.in[1]];
        int64_t K = a->dims[3];
        for_each(yt, [&](const int64_t c[4]) {
            int64_t ia[4], ib[4];
            for (int k = 0; k < 2; k++) {  // batch dimensions: broadcast, or query heads over fewer kv heads
                ia[k] = a->dims[k] == 1 ? 0 : c[k] / (yt->dims[k] / a->dims[k]);
                ib[k] = b->dims[k] == 1 ? 0 : c[k] / (yt->dims[k] / b->dims[k]);
            }
            ia[2] = c[2];
            ib[3] = c[3];
            double acc = 0;
            for (int64_t k = 0; k < K; k++) {
                ia[3] = k, ib[2] = k;
                acc += sa.read(offset(a, ia)) * sb.read(offset(b, ib));
            }
            y.write(offset(yt, c), acc);
        });
    } else if (!strcmp(n.kind, "max") || !strcmp(n.kind, "sum")) {
        bool mx = !strcmp(n.kind, "max");
        const Desc* x = n.in[0];
        Store& sx = st[n.in[0]];
        std::vector<double> acc(yt->span, mx ? -INFINITY : 0.0);
        for_each(x, [&](const int64_t i[4]) {
            int64_t o[4];
            for (int k = 0; k < 4; k++) o[k] = yt->dims[k] == 1 ? 0 : i[k] / (x->dims[k] / yt->dims[k]);
            double v = sx.read(offset(x, i));
            double& a = acc[offset(yt, o)];
            a = mx ? fmax(a, v) : a + v;
        });
        for_each(yt, [&](const int64_t o[4]) { y.write(offset(yt, o), acc[offset(yt, o)]); });
    } else if (!strcmp(n.kind, "reshape")) {
        Store& sx = st[n.in[0]];
        for (int64_t off = 0; off < yt->span; off++) y.write(off, sx.read(off));  // same memory, new view
    } else {
        for_each(yt, [&](const int64_t o[4]) {
            double in[3] = {0, 0, 0};
            for (size_t k = 0; k < n.in.size(); k++) {
                int64_t i[4];
                map_index(n.in[k], yt, o, i);
                in[k] = st[n.in[k]].read(offset(n.in[k], i));
            }
            double r = 0;
            switch (n.mode) {
            case CUDNN_POINTWISE_ADD: r = in[0] + in[1]; break;
            case CUDNN_POINTWISE_SUB: r = in[0] - in[1]; break;
            case CUDNN_POINTWISE_MUL: r = in[0] * in[1]; break;
            case CUDNN_POINTWISE_DIV: r = in[0] / in[1]; break;
            case CUDNN_POINTWISE_EXP: r = exp(in[0]); break;
            case CUDNN_POINTWISE_LOG: r = log(in[0]); break;
            case CUDNN_POINTWISE_IDENTITY: r = in[0]; break;
            case CUDNN_POINTWISE_CMP_GE: r = in[0] >= in[1]; break;
            case CUDNN_POINTWISE_GEN_INDEX: r = (double)o[n.axis]; break;
            case CUDNN_POINTWISE_BINARY_SELECT: r = in[2] != 0 ? in[0] : in[1]; break;
            default: break;
            }
            y.write(offset(yt, o), r);
        });
    }
}

// A plan's execution recorded by a stream capture (the harness's
// cuda_sim_capture, graph.cpp): its tensors' pointers, and by-value scalars
// copied now, as the real library's kernel arguments are; it runs at each
// launch of the graph.
struct CapturedExecution {
    GraphInfo* g;
    std::map<Desc*, Store> st;
    void* workspace;
    int64_t workspace_bytes;
};
void run_captured(void* ctx) {
    CapturedExecution* c = (CapturedExecution*)ctx;
    if (c->workspace_bytes > 0) memset(c->workspace, 0xff, (size_t)c->workspace_bytes);
    std::map<Desc*, Store> st = c->st;
    for (auto& node : c->g->nodes) run_node(node, st);
    g_exec_count++;
}
void drop_captured(void* ctx) { delete (CapturedExecution*)ctx; }

cudnnStatus_t execute(Desc* plan, Desc* pack, cudaStream_t stream) {
    GraphInfo* g = g_graphs[plan->graph].get();
    int64_t n = 0;
    const int64_t* ids = get<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &n);
    void* const* ptrs = get<void*>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    void* const* ws = get<void*>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
    std::map<Desc*, Store> st;
    for (int64_t i = 0; i < n; i++) {
        auto it = g->tensors.find(ids[i]);
        if (it == g->tensors.end() || it->second->is_virtual)
            return fail(CUDNN_STATUS_BAD_PARAM, "execute: unique id %lld is not a non-virtual tensor of the graph",
                        (long long)ids[i]);
        Desc* t = it->second;
        if (st.count(t)) return fail(CUDNN_STATUS_BAD_PARAM, "execute: unique id %lld given twice", (long long)ids[i]);
        if (!ptrs[i]) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "execute: %s has a null pointer", shape(t).c_str());
        if (!t->by_value && (uintptr_t)ptrs[i] % t->align)
            return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, "execute: %s at %p is not %lld-byte aligned",
                        shape(t).c_str(), ptrs[i], (long long)t->align);
        if (!t->by_value && !device_range(ptrs[i], t->span * dtype_bytes(t->dtype)))
            return fail(CUDNN_STATUS_BAD_PARAM, "execute: %s at %p reaches past its device allocation (a plan is "
                        "built for one shape: this one was run with smaller buffers)", shape(t).c_str(), ptrs[i]);
        st[t] = Store{t, ptrs[i], {}};
    }
    for (auto& [uid, t] : g->tensors) {
        if (t->is_virtual) st[t] = Store{t, nullptr, std::vector<double>(t->span, NAN)};
        else if (!st.count(t)) return fail(CUDNN_STATUS_BAD_PARAM, "execute: no pointer for %s", shape(t).c_str());
    }
    if (plan->workspace > 0) {
        if (!ws || !*ws) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "execute: the plan needs %lld bytes of workspace and got none",
                                     (long long)plan->workspace);
        if (!device_range(*ws, plan->workspace))
            return fail(CUDNN_STATUS_BAD_PARAM, "execute: the workspace at %p is not %lld bytes of device memory",
                        *ws, (long long)plan->workspace);
        memset(*ws, 0xff, (size_t)plan->workspace);  // poison: nothing may live in the workspace between calls
    }
    if (plan->engine.nondeterministic)
        return fail(CUDNN_STATUS_NOT_SUPPORTED,
                    "execute: engine %d (nondeterministic: dQ accumulated with atomics) is not emulated; choose a "
                    "deterministic engine config", plan->engine.id);
    if (g->backward && sim_cc() / 10 == 10) {
        std::string why = blackwell_nondeterminism(plan->engine);
        if (!why.empty())
            return fail(CUDNN_STATUS_NOT_SUPPORTED, "execute: the attention backward on Blackwell with %s is not "
                        "deterministic (not emulated): pin engine %d with its deterministic knobs", why.c_str(),
                        blackwell_deterministic_engine());
    } else if (plan->engine.pinned) {
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "execute: a pinned engine (%d) is emulated only for Blackwell's "
                    "deterministic attention backward", plan->engine.id);
    }
    typedef int (*CaptureFn)(cudaStream_t, const char*, void (*)(void*), void*, void (*)(void*));
    static CaptureFn capture = (CaptureFn)dlsym(RTLD_DEFAULT, "cuda_sim_capture");
    if (capture) {
        CapturedExecution* c = new CapturedExecution{g, st, plan->workspace > 0 ? *ws : nullptr, plan->workspace};
        for (auto& [t, s] : c->st)
            if (t->by_value && s.user) {
                std::vector<double> v((size_t)t->span);
                for (int64_t i = 0; i < t->span; i++) v[(size_t)i] = s.read(i);
                s.user = nullptr;
                s.v = v;
            }
        int r = capture(stream, "cudnnBackendExecute", run_captured, c, drop_captured);  // frees c unless recorded
        if (r == 1) return CUDNN_STATUS_SUCCESS;
        if (r < 0) return fail(CUDNN_STATUS_EXECUTION_FAILED, "execute: the stream's capture is invalidated");
    }
    for (auto& node : g->nodes) run_node(node, st);
    g_exec_count++;
    return CUDNN_STATUS_SUCCESS;
}

struct Handle {
    uint32_t magic = kMagic + 1;
    cudaStream_t stream = nullptr;
};

}  // namespace

// ---- the library's entry points ---------------------------------------------------------------------

extern "C" {

size_t cudnnGetVersion(void) { return fake_version(); }

const char* cudnnGetErrorString(cudnnStatus_t st) {
    switch (st) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED: return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
    case CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH: return "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN: return "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE: return "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE";
    case CUDNN_STATUS_NOT_SUPPORTED_LAYOUT: return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
    default: return "CUDNN_STATUS (other)";
    }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
    if (max_size == 0) return;
    snprintf(message, max_size, "%s", g_last_error);
    g_last_error[0] = 0;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
    if (!handle) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnCreate: null handle pointer");
    *handle = (cudnnHandle_t) new Handle();
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
    Handle* h = (Handle*)handle;
    if (!h || h->magic != kMagic + 1) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a handle");
    h->stream = stream;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* desc) {
    if (!desc) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "cudnnBackendCreateDescriptor: null pointer");
    if (!type_name(type)) return fail(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d is not emulated", (int)type);
    Desc* d = new Desc();
    d->type = type;
    *desc = d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc) {
    Desc* d = as_desc(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendDestroyDescriptor: not a descriptor");
    g_graphs.erase(d);
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && d->finalized) g_live_plans--;
    d->magic = 0;
    delete d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    Desc* d = as_desc(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: not a descriptor");
    if (d->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: attribute %d set after finalize", type_name(d->type), (int)name);
    const AttrRule* rule = nullptr;
    for (const AttrRule& r : kRules)
        if (r.desc == d->type && r.name == name) rule = &r;
    if (!rule)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s: attribute %d is not one this code uses (not emulated)",
                    type_name(d->type), (int)name);
    if (type != rule->type)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: attribute %d takes attribute type %d, not %d", type_name(d->type),
                    (int)name, (int)rule->type, (int)type);
    if (count < rule->min || (rule->max >= 0 && count > rule->max) || !value)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: attribute %d with %lld elements", type_name(d->type), (int)name,
                    (long long)count);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t i = 0; i < count; i++) {
            Desc* v = as_desc(((const cudnnBackendDescriptor_t*)value)[i]);
            if (!v) return fail(CUDNN_STATUS_BAD_PARAM, "%s: attribute %d element %lld is not a descriptor",
                                type_name(d->type), (int)name, (long long)i);
            if (rule->name != CUDNN_ATTR_OPERATIONGRAPH_OPS && v->type != rule->value_desc)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: attribute %d wants a %s descriptor, got %s",
                            type_name(d->type), (int)name, type_name(rule->value_desc), type_name(v->type));
            if (!v->finalized)
                return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "%s: attribute %d: the %s descriptor is not finalized",
                            type_name(d->type), (int)name, type_name(v->type));
        }
    }
    Attr a;
    a.type = type;
    a.count = count;
    a.bytes.assign((const char*)value, (const char*)value + count * elem_size(type));
    d->attrs[name] = a;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc) {
    Desc* d = as_desc(desc);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: not a descriptor");
    if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "%s: finalized twice", type_name(d->type));
    cudnnStatus_t st;
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: st = finalize_tensor(d); break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: st = finalize_graph(d); break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: st = finalize_heur(d); break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: st = finalize_plan(d); break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: st = finalize_pack(d); break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR: st = finalize_cfg(d); break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: st = finalize_engine(d); break;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR: st = finalize_knob(d); break;
    default: st = finalize_op(d); break;
    }
    if (st == CUDNN_STATUS_SUCCESS) d->finalized = true;
    return st;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* value) {
    Desc* d = as_desc(desc);
    if (!d || !count) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: bad descriptor or count pointer");
    if (!d->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "%s: attribute %d read before finalize", type_name(d->type),
                    (int)name);
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        // Backward graphs: a nondeterministic engine first, then the deterministic one.
        bool bwd = g_graphs[d->graph]->backward;
        int available = bwd ? 2 : 1;
        if (requested == 0) {  // how many there are (the documented way to ask)
            *count = available;
            return CUDNN_STATUS_SUCCESS;
        }
        *count = requested < available ? requested : available;
        for (int64_t i = 0; i < *count; i++) {
            Desc* cfg = as_desc(((cudnnBackendDescriptor_t*)value)[i]);
            if (!cfg || cfg->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return fail(CUDNN_STATUS_BAD_PARAM, "heuristics results: element %lld is not an ENGINECFG descriptor",
                            (long long)i);
            cfg->graph = d->graph;
            cfg->engine.id = (int)i;
            cfg->engine.nondeterministic = bwd && i == 0;
            cfg->finalized = true;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE &&
        type == CUDNN_TYPE_BACKEND_DESCRIPTOR && requested >= 1) {
        Desc* e = as_desc(*(cudnnBackendDescriptor_t*)value);
        if (!e || e->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
            return fail(CUDNN_STATUS_BAD_PARAM, "engine config's engine: the value is not an ENGINE descriptor");
        e->engine = d->engine;
        e->finalized = true;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE &&
        type == CUDNN_TYPE_NUMERICAL_NOTE) {
        cudnnBackendNumericalNote_t notes[2] = {CUDNN_NUMERICAL_NOTE_TENSOR_CORE, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC};
        int64_t n = d->engine.nondeterministic ? 2 : 1;
        *count = n < requested ? n : requested;
        memcpy(value, notes, *count * sizeof notes[0]);
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE &&
        type == CUDNN_TYPE_INT64 && requested >= 1) {
        *(int64_t*)value = d->workspace;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s: reading attribute %d (type %d) is not emulated", type_name(d->type),
                (int)name, (int)type);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
    Handle* h = (Handle*)handle;
    Desc* p = as_desc(plan);
    Desc* v = as_desc(pack);
    if (!h || h->magic != kMagic + 1) return fail(CUDNN_STATUS_BAD_PARAM, "execute: not a handle");
    if (!p || p->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !p->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM, "execute: not a finalized execution plan");
    if (!v || v->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || !v->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM, "execute: not a finalized variant pack");
    return execute(p, v, h->stream);
}

}  // extern "C"

// For the harness's tests: operation graphs finalized and plans executed so
// far (plans are built once per shape and cached).
extern "C" void cuda_sim_cudnn_counts(int64_t* graphs, int64_t* executions) {
    *graphs = g_graph_count;
    *executions = g_exec_count;
}

// Execution plans finalized so far, alive now, and the most alive at once.
extern "C" void cuda_sim_cudnn_plans(int64_t* built, int64_t* alive, int64_t* most) {
    *built = g_plans_built;
    *alive = g_live_plans;
    *most = g_most_live_plans;
}

// CUDA_SIM_CUDNN_STATS=1: one line at exit (the emulator's tests read it:
// how many plans a run built, and the most alive at once).
__attribute__((destructor)) static void print_stats() {
    const char* v = getenv("CUDA_SIM_CUDNN_STATS");
    if (v && v[0] == '1')
        fprintf(stderr, "fake cuDNN stats: %lld graphs, %lld plans built, at most %lld alive, %lld executions\n",
                (long long)g_graph_count, (long long)g_plans_built, (long long)g_most_live_plans,
                (long long)g_exec_count);
}
