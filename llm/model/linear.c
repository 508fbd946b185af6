// linear.c: the linear layer, the one place that chooses between the
// model's 16-bit (or FP32) GEMMs and FP8 ones, and the FP8 state's link to
// the model: which weight is which linear layer, and the amaxes the block's
// ops measure for it.
//
// With FP8 training on (m->fp8, llm/fp8/fp8.h), each of a block's four linear
// layers runs its GEMMs in FP8 unless --fp8-skip names it; the producers of
// their inputs and output gradients (norms, the MLP activation, ...) write
// those tensors' amaxes into the slots linear_input_amax / linear_grad_amax
// name (NULL when FP8 is off).
#include "llm/fp8/fp8.h"
#include "llm/model/internal.h"

// The weight tensor of each linear layer, in the flat layout.
static const ParamKind LINEAR_WEIGHT[NUM_LINEARS] = {P_QKVW, P_ATTPROJW, P_FCW, P_FCPROJW};

// The FP8 state names the linear layers by its own enum, in the same order.
_Static_assert((int)LINEAR_QKV == (int)FP8_QKV && (int)LINEAR_ATTPROJ == (int)FP8_ATTPROJ &&
                   (int)LINEAR_FC == (int)FP8_FC && (int)LINEAR_FCPROJ == (int)FP8_FCPROJ &&
                   (int)NUM_LINEARS == (int)FP8_NUM_GEMMS,
               "BlockLinear and Fp8Gemm must agree");

void gpt_fp8_shapes(const GPTConfig* c, Fp8Shapes* s) {
    s->layers = c->num_layers;
    for (int g = 0; g < NUM_LINEARS; g++) {
        int rows, cols;
        gpt_block(c)->param_shape(c, LINEAR_WEIGHT[g], &rows, &cols);
        s->rows[g] = (size_t)rows;
        s->cols[g] = (size_t)cols;
    }
}

Fp8Bytes gpt_fp8_bytes(const GPTConfig* c, int B, int T, int zero_stage, Fp8Support support, Fp8Recipe recipe,
                       int history, const uint8_t* skip) {
    Fp8Shapes s;
    gpt_fp8_shapes(c, &s);
    return fp8_state_bytes(&s, B, T, zero_stage, support, recipe, history, skip);
}

void gpt_enable_fp8(GPT* m, Fp8State* s, const Fp8Options* o) {
    Fp8Shapes shapes;
    gpt_fp8_shapes(&m->config, &shapes);
    fp8_create(s, m->be, &shapes, m->B, m->T, m->zero_stage, o);
    m->fp8 = s;
}

void gpt_disable_fp8(GPT* m) {
    if (!m->fp8) return;
    fp8_free(m->fp8);
    m->fp8 = NULL;
}

float* gpt_weight_update_amax(GPT* m, ParamKind kind, int layer) {
    for (int g = 0; g < NUM_LINEARS; g++)
        if (LINEAR_WEIGHT[g] == kind) return fp8_amax_slot(m->fp8, layer, (Fp8Gemm)g, FP8_WEIGHT);
    return NULL;
}

float* linear_input_amax(const Pass* p, int l, BlockLinear g) { return fp8_amax_slot(p->m->fp8, l, (Fp8Gemm)g, FP8_INPUT); }
float* linear_grad_amax(const Pass* p, int l, BlockLinear g) { return fp8_amax_slot(p->m->fp8, l, (Fp8Gemm)g, FP8_GRAD); }

void linear_measure_input(const Pass* p, int l, BlockLinear g, const void* x, size_t n) {
    float* amax = linear_input_amax(p, l, g);
    if (amax) p->be->amax(p->be, amax, x, n);
}

void linear_measure_grad(const Pass* p, int l, BlockLinear g, const void* dy, size_t n) {
    float* amax = linear_grad_amax(p, l, g);
    if (amax) p->be->amax(p->be, amax, dy, n);
}

void linear_forward(const Pass* p, int l, BlockLinear g, void* out, void* pre_gelu, float* out_amax, void* inp,
                    const void* weight, const void* bias, int C, int OC) {
    if (fp8_gemm_on(p->m->fp8, l, (Fp8Gemm)g, p->N)) {
        fp8_linear_forward(p->m->fp8, l, (Fp8Gemm)g, out, pre_gelu, out_amax, inp, weight, bias, p->N, C, OC);
        return;
    }
    p->be->matmul_forward(p->be, out, pre_gelu, inp, weight, bias, p->N, C, OC);
    // A GELU fused into the GEMM's epilogue measures nothing: a pass of its own.
    if (out_amax) p->be->amax(p->be, out_amax, out, (size_t)p->N * OC);
}

// When the input was recomputed into the buffer that receives the input
// gradient, the weight gradient reads it first, then dinp overwrites it:
// the same bits as one call (ops.h: each product is the same alone or
// together; the FP8 path quantises the input before it writes dinp).
void linear_backward(const Pass* p, int l, BlockLinear g, void* dinp, void* dweight, void* dbias, const void* dout,
                     const void* inp, const void* weight, int C, int OC) {
    Backend* be = p->be;
    if (fp8_gemm_on(p->m->fp8, l, (Fp8Gemm)g, p->N)) {
        fp8_linear_backward(p->m->fp8, l, (Fp8Gemm)g, dinp, dweight, dbias, dout, inp, weight, p->N, C, OC);
    } else if (dinp && dinp == inp) {
        be->matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, p->N, C, OC);
        be->matmul_backward(be, dinp, NULL, NULL, dout, NULL, weight, p->N, C, OC);
    } else {
        be->matmul_backward(be, dinp, dweight, dbias, dout, inp, weight, p->N, C, OC);
    }
}

// The weight and bias gradients first (they read inp, which dinp may
// overwrite), then the GELU-gradient GEMM. Under FP8 the three ops run
// apart: the FP8 GEMM writes no epilogue.
void linear_backward_gelu(const Pass* p, int l, BlockLinear g, void* dinp, void* dweight, void* dbias,
                          const void* dout, const void* inp, const void* weight, const void* pre_gelu,
                          void* pre_dbias, float* dinp_amax, int C, int OC) {
    Backend* be = p->be;
    size_t n = (size_t)p->N * C;
    if (fp8_gemm_on(p->m->fp8, l, (Fp8Gemm)g, p->N)) {
        fp8_linear_backward(p->m->fp8, l, (Fp8Gemm)g, dinp, dweight, dbias, dout, inp, weight, p->N, C, OC);
        be->gelu_backward(be, dinp, pre_gelu, dinp, n, dinp_amax);
        // pre_dbias (C) += column sums of dinp (N, C)
        if (pre_dbias) be->matmul_backward(be, NULL, NULL, pre_dbias, dinp, NULL, NULL, p->N, OC, C);
        return;
    }
    be->matmul_backward(be, NULL, dweight, dbias, dout, inp, weight, p->N, C, OC);
    be->matmul_backward_dgelu(be, dinp, pre_dbias, dout, pre_gelu, weight, p->N, C, OC, dinp_amax);
}
