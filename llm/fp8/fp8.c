// fp8.c: FP8 training state and the FP8 linear layer (see fp8.h).
#include "llm/fp8/fp8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/fp8_format.h"

static const char* GEMM_NAMES[FP8_NUM_GEMMS] = {"qkv", "attproj", "fc", "fcproj"};

const char* fp8_gemm_name(Fp8Gemm g) { return GEMM_NAMES[g]; }
static const char* RECIPE_NAMES[] = {"current", "delayed", "blockwise", "mxfp8", "nvfp4", "auto"};

const char* fp8_recipe_name(Fp8Recipe r) { return (unsigned)r <= FP8_RECIPE_AUTO ? RECIPE_NAMES[r] : "?"; }

int fp8_recipe_lookup(const char* s) {
    for (int r = 0; s && r < FP8_RECIPE_AUTO; r++)
        if (!strcmp(s, RECIPE_NAMES[r])) return r;
    return -1;
}

Fp8Recipe fp8_parse_recipe(const char* s) {
    if (fp8_recipe_lookup(s) >= 0) return (Fp8Recipe)fp8_recipe_lookup(s);
    fatal("--fp8-recipe '%s' is not one of current, delayed, blockwise, mxfp8, nvfp4", s);
}

int fp8_recipe_is_block(Fp8Recipe r) { return r == FP8_BLOCKWISE || r == FP8_MXFP8 || r == FP8_NVFP4; }

int fp8_recipe_skip(Fp8Recipe r, uint8_t* skip, int L) {
    if (r != FP8_NVFP4 || L <= 0) return 0;
    int n = (15 * L + 50) / 100;  // 15% of the layers, to the nearest layer: 12 layers 2, 32 layers 5, 2 layers 0
    for (int l = L - n; skip && l < L; l++) skip[l] |= (1 << FP8_NUM_GEMMS) - 1;
    return n;
}

Nvfp4Format fp8_nvfp4_format(Fp8Role role, int hadamard, uint64_t key) {
    // arXiv 2509.25149: 16x16 weight blocks, so that the forward GEMM (along
    // C) and the input gradient (along OC) read the same quantised weight;
    // 1x16 along K for the rest; stochastic rounding for the gradients only.
    Nvfp4Format f;
    f.br = role == FP8_WEIGHT ? NVFP4_BLOCK : 1;
    f.bc = NVFP4_BLOCK;
    f.hadamard = hadamard;
    f.stochastic = role == FP8_GRAD;
    f.rng_key = key;
    return f;
}

Fp8BlockFormat fp8_block_format(Fp8Recipe r, Fp8Role role) {
    Fp8BlockFormat f;
    if (r == FP8_MXFP8) {
        f.scale = FP8_BLOCK_E8M0;  // every operand 1x32 along K
        f.br = 1;
        f.bc = 32;
    } else {
        // DeepSeek-V3: weights in 128x128 blocks (the same blocks whichever
        // way a GEMM reads them), activations and gradients in 1x128.
        f.scale = FP8_BLOCK_FP32;
        f.br = role == FP8_WEIGHT ? 128 : 1;
        f.bc = 128;
    }
    return f;
}

// ---------------------------------------------------------------------------
// which recipe runs where

Fp8Recipe fp8_resolve_recipe(Fp8Recipe asked, const Fp8Device* d, char* why, size_t whysize) {
    if (asked != FP8_RECIPE_AUTO) {
        snprintf(why, whysize, "--fp8-recipe %s", fp8_recipe_name(asked));
        return asked;
    }
    if (!d->gpu) {
        snprintf(why, whysize, "auto: the CPU backend emulates every recipe; per-tensor current scaling unless "
                 "--fp8-recipe names another");
        return FP8_CURRENT;
    }
    if (d->major == 10 && d->block_gemms) {
        snprintf(why, whysize, "auto: %s (compute capability %d.%d) scales 1x32 blocks natively", d->name, d->major,
                 d->minor);
        return FP8_MXFP8;
    }
    if (d->major == 10) {
        snprintf(why, whysize, "auto: %s (compute capability %d.%d) would take mxfp8, but this build's CUDA backend "
                 "has no block-scaled GEMMs yet", d->name, d->major, d->minor);
        return FP8_CURRENT;
    }
    snprintf(why, whysize, "auto: %s (compute capability %d.%d): per-tensor current scaling", d->name, d->major,
             d->minor);
    return FP8_CURRENT;
}

int fp8_recipe_runs(Fp8Recipe r, const Fp8Device* d, char* why, size_t whysize) {
    if (!d->gpu || !fp8_recipe_is_block(r)) return 1;  // per-tensor FP8 needs 8.9+, checked with --precision fp8
    if (r == FP8_NVFP4) {
        // cuBLASLt's VEC16_UE4M3 scale mode (FP4 tensor cores, TN layout only): 10.x.
        if (d->major != 10)
            snprintf(why, whysize, "--fp8-recipe nvfp4: this GPU (%s, compute capability %d.%d) cannot run it: NVFP4's "
                     "FP4 tensor cores (cuBLASLt VEC16_UE4M3, TN only) need compute capability 10.x (Blackwell); use "
                     "%s here, or --device cpu to emulate nvfp4", d->name, d->major, d->minor,
                     d->major == 9 && d->minor == 0 ? "current or blockwise" : "current");
        else if (!d->nvfp4_gemms)
            snprintf(why, whysize, "--fp8-recipe nvfp4: this GPU (%s, compute capability %d.%d) could run it, but this "
                     "build's CUDA backend has no NVFP4 GEMMs yet (--device cpu emulates them)", d->name, d->major,
                     d->minor);
        return d->major == 10 && d->nvfp4_gemms;
    }
    // cuBLASLt's block scale modes: VEC128_32F / BLK128x128_32F on 9.0 only
    // (Blackwell runs DeepSeek's recipe as MXFP8), VEC32_UE8M0 on 10.x.
    int cc_ok = r == FP8_BLOCKWISE ? d->major == 9 && d->minor == 0 : d->major == 10;
    if (!cc_ok) {
        snprintf(why, whysize, "--fp8-recipe %s: this GPU (%s, compute capability %d.%d) cannot run it: %s",
                 fp8_recipe_name(r), d->name, d->major, d->minor,
                 r == FP8_BLOCKWISE ? "cuBLASLt's 1x128 and 128x128 FP32 block scales run on compute capability 9.0 "
                                      "(Hopper) only; use mxfp8 on 10.x, current elsewhere"
                                    : "MXFP8's block-scaled tensor cores need compute capability 10.x (Blackwell); "
                                      "use blockwise or current on 9.0");
        return 0;
    }
    if (!d->block_gemms) {
        snprintf(why, whysize, "--fp8-recipe %s: this GPU (%s, compute capability %d.%d) could run it, but this "
                 "build's CUDA backend has no block-scaled GEMMs yet (--device cpu emulates them)",
                 fp8_recipe_name(r), d->name, d->major, d->minor);
        return 0;
    }
    return 1;
}

// ---------------------------------------------------------------------------
// --fp8-skip

static int gemm_by_name(const char* s, size_t len) {
    for (int g = 0; g < FP8_NUM_GEMMS; g++)
        if (strlen(GEMM_NAMES[g]) == len && !strncmp(s, GEMM_NAMES[g], len)) return g;
    return -1;
}

// A layer number, `first` or `last`; -1 if it is none of those.
static int layer_by_name(const char* s, size_t len, int L) {
    if (len == 5 && !strncmp(s, "first", 5)) return 0;
    if (len == 4 && !strncmp(s, "last", 4)) return L - 1;
    if (len == 0 || len > 9) return -1;
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

// "L" or "L-M" into [*lo, *hi]; 0 if malformed.
static int parse_layer_range(const char* s, size_t len, int L, int* lo, int* hi) {
    const char* dash = memchr(s, '-', len);
    if (!dash) {
        *lo = *hi = layer_by_name(s, len, L);
        return *lo >= 0;
    }
    *lo = layer_by_name(s, (size_t)(dash - s), L);
    *hi = layer_by_name(dash + 1, len - (size_t)(dash - s) - 1, L);
    return *lo >= 0 && *hi >= 0;
}

uint8_t* fp8_parse_skip(const char* spec, int L) {
    uint8_t* skip = (uint8_t*)xcalloc((size_t)(L > 0 ? L : 1), 1);
    const char* p = spec ? spec : "";
    while (*p) {
        const char* end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) fatal("--fp8-skip '%s': an empty item", spec);
        const char* at = memchr(p, '@', len);
        int gemm_mask = 0, lo = 0, hi = L - 1;
        int g = gemm_by_name(p, at ? (size_t)(at - p) : len);
        if (at) {
            if (g < 0) fatal("--fp8-skip '%.*s': '%.*s' is not one of qkv, attproj, fc, fcproj", (int)len, p, (int)(at - p), p);
            if (!parse_layer_range(at + 1, len - (size_t)(at - p) - 1, L, &lo, &hi))
                fatal("--fp8-skip '%.*s': '%.*s' is not a layer or a range of layers (L, L-M, first, last)", (int)len, p,
                      (int)(len - (size_t)(at - p) - 1), at + 1);
            gemm_mask = 1 << g;
        } else if (g >= 0) {
            gemm_mask = 1 << g;
        } else if (parse_layer_range(p, len, L, &lo, &hi)) {
            gemm_mask = (1 << FP8_NUM_GEMMS) - 1;
        } else {
            fatal("--fp8-skip '%.*s' is neither a GEMM (qkv, attproj, fc, fcproj) nor layers (L, L-M, first, last), "
                  "nor GEMM@layers",
                  (int)len, p);
        }
        if (lo > hi || hi >= L)
            fatal("--fp8-skip '%.*s': layers %d-%d are outside the model's 0-%d", (int)len, p, lo, hi, L - 1);
        for (int l = lo; l <= hi; l++) skip[l] |= (uint8_t)gemm_mask;
        p += len;
        if (*p == ',') p++;
    }
    return skip;
}

// ---------------------------------------------------------------------------
// memory

// Offset of GEMM g's FP8 weight in a layer's slot, in elements (bytes);
// g = FP8_NUM_GEMMS gives the slot's size (12 C^2 for GPT-2).
static size_t gemm_offset(const Fp8Shapes* sh, int g) {
    size_t off = 0;
    for (int j = 0; j < g; j++) off += sh->rows[j] * sh->cols[j];
    return off;
}
// The widest input or output of the four GEMMs (4C for GPT-2): the cast buffers' width.
static size_t widest_activation(const Fp8Shapes* sh) {
    size_t w = 0;
    for (int g = 0; g < FP8_NUM_GEMMS; g++) {
        w = sh->rows[g] > w ? sh->rows[g] : w;
        w = sh->cols[g] > w ? sh->cols[g] : w;
    }
    return w;
}

static int weight_slots(int L, int zero_stage) { return zero_stage >= 3 ? (L < 2 ? L : 2) : L; }
static int cast_buffers(Fp8Support support) { return support == FP8_TN_ONLY ? 3 : 2; }

// The block-scaled recipes keep no FP8 weights or cast buffers (the
// backend's block GEMM quantises its operands itself) and only the per-tensor
// arrays every state has; the CPU's largest GEMM scratch is its three GEMMs'
// largest at a full micro-batch, and so is the CUDA block GEMM's buffer.
static Fp8Bytes block_state_bytes(const Fp8Shapes* sh, int B, int T, Fp8Recipe recipe, const uint8_t* skip) {
    Fp8Bytes b;
    b.weights = 0;
    b.casts = 0;
    b.scaling = (size_t)12 * sh->layers * 3 * sizeof(float);
    b.cpu_gemm_scratch = 0;
    b.gpu_block_buffer = 0;
    int used = 0, N = B * T;
    int kept = fp8_recipe_skip(recipe, NULL, sh->layers);  // the recipe's own BF16 layers
    for (int l = 0; l < sh->layers - kept; l++) used |= ~(skip ? skip[l] : 0) & ((1 << FP8_NUM_GEMMS) - 1);
    for (int g = 0; g < FP8_NUM_GEMMS; g++) {
        if (!(used & (1 << g))) continue;
        int OC = (int)sh->rows[g], C = (int)sh->cols[g];
        size_t (*scratch)(int, int, int) =
            recipe == FP8_NVFP4 ? cpu_nvfp4_matmul_scratch_bytes : cpu_fp8_block_matmul_scratch_bytes;
        size_t f = scratch(N, OC, C), d = scratch(N, C, OC), w = scratch(OC, C, N);
        size_t m = f > d ? f : d;
        m = m > w ? m : w;
        b.cpu_gemm_scratch = m > b.cpu_gemm_scratch ? m : b.cpu_gemm_scratch;
        // The GPU's: both operands' codes and scales, for the forward, dweight and
        // dinp GEMMs (nvfp4's are billed by fp8_nvfp4_gpu_bytes).
        if (recipe == FP8_NVFP4) continue;
        Fp8BlockFormat fx = fp8_block_format(recipe, FP8_INPUT), fw = fp8_block_format(recipe, FP8_WEIGHT);
        size_t gf = fp8_block_gpu_operand_bytes(N, C, fx) + fp8_block_gpu_operand_bytes(OC, C, fw);
        size_t gw = fp8_block_gpu_operand_bytes(OC, N, fx) + fp8_block_gpu_operand_bytes(C, N, fx);
        size_t gd = fp8_block_gpu_operand_bytes(N, OC, fx) + fp8_block_gpu_operand_bytes(C, OC, fw);
        size_t g2 = gf > gw ? gf : gw;
        g2 = g2 > gd ? g2 : gd;
        b.gpu_block_buffer = g2 > b.gpu_block_buffer ? g2 : b.gpu_block_buffer;
    }
    return b;
}

size_t fp8_nvfp4_bytes(size_t n) { return (n + 1) / 2 + (n + NVFP4_BLOCK - 1) / NVFP4_BLOCK; }

Fp8Bytes fp8_nvfp4_gpu_bytes(const Fp8Shapes* sh, int B, int T, int zero_stage, const uint8_t* skip) {
    Fp8Bytes b = block_state_bytes(sh, B, T, FP8_NVFP4, skip);
    b.cpu_gemm_scratch = 0;
    size_t slot = 0;
    for (int g = 0; g < FP8_NUM_GEMMS; g++) slot += 2 * (fp8_nvfp4_bytes(sh->rows[g] * sh->cols[g]) + 2 * sizeof(float));
    b.weights = round_up(slot, 256) * (size_t)weight_slots(sh->layers, zero_stage);
    b.casts = 4 * round_up(fp8_nvfp4_bytes((size_t)B * T * widest_activation(sh)), 256);
    return b;
}

Fp8Bytes fp8_state_bytes(const Fp8Shapes* sh, int B, int T, int zero_stage, Fp8Support support,
                         Fp8Recipe recipe, int history, const uint8_t* skip) {
    Fp8Bytes b;
    size_t L = (size_t)sh->layers, n = 12 * L;
    if (fp8_recipe_is_block(recipe)) return block_state_bytes(sh, B, T, recipe, skip);
    size_t slot = gemm_offset(sh, FP8_NUM_GEMMS) * (support == FP8_TN_ONLY ? 2 : 1);
    b.weights = round_up(slot, 256) * (size_t)weight_slots(sh->layers, zero_stage);
    b.scaling = n * (3 + (recipe == FP8_DELAYED ? (size_t)history : 0)) * sizeof(float);
    b.casts = (size_t)cast_buffers(support) * round_up((size_t)B * T * widest_activation(sh), 256);
    // The largest FP8 GEMM any layer runs, at a full micro-batch.
    int used = 0;
    for (int l = 0; l < sh->layers; l++) used |= ~(skip ? skip[l] : 0) & ((1 << FP8_NUM_GEMMS) - 1);
    b.cpu_gemm_scratch = 0;
    b.gpu_block_buffer = 0;
    for (int g = 0; g < FP8_NUM_GEMMS; g++) {
        if (!(used & (1 << g))) continue;
        size_t rows = sh->rows[g], cols = sh->cols[g];
        size_t s = cpu_fp8_matmul_scratch_bytes(B * T, (int)cols, (int)rows);
        b.cpu_gemm_scratch = s > b.cpu_gemm_scratch ? s : b.cpu_gemm_scratch;
    }
    return b;
}

// ---------------------------------------------------------------------------
// creation

static int tensor_index(const Fp8State* s, int l, Fp8Gemm g, Fp8Role role) {
    return (role * s->L + l) * FP8_NUM_GEMMS + g;
}

static void read_spike_hook(Fp8State* s) {
    s->spike_step = -1;
    const char* env = getenv("TRAIN_GPT_FP8_SPIKE");
    if (!env || !env[0]) return;
    char gemm[16];
    if (sscanf(env, "%d,%d,%15[a-z],%f", &s->spike_step, &s->spike_layer, gemm, &s->spike_factor) != 4 ||
        (s->spike_gemm = gemm_by_name(gemm, strlen(gemm))) < 0 || s->spike_layer < 0 || s->spike_layer >= s->L)
        fatal("TRAIN_GPT_FP8_SPIKE='%s' is not STEP,LAYER,GEMM,FACTOR (e.g. 5,0,fc,1000)", env);
    warn("TRAIN_GPT_FP8_SPIKE: layer %d's %s input will be multiplied by %g at step %d (a test hook)", s->spike_layer,
         gemm, s->spike_factor, s->spike_step);
}

void fp8_create(Fp8State* s, Backend* be, const Fp8Shapes* shapes, int B, int T, int zero_stage, const Fp8Options* o) {
    memset(s, 0, sizeof *s);
    if (be->fp8_support == FP8_NONE) fatal("--precision fp8: the %s backend has no FP8 GEMMs on this device", be->name);
    if (o->recipe == FP8_NVFP4 && !be->nvfp4_matmul)
        fatal("--fp8-recipe nvfp4: the %s backend has no NVFP4 GEMMs", be->name);
    if (fp8_recipe_is_block(o->recipe) && o->recipe != FP8_NVFP4 && !be->fp8_block_matmul)
        fatal("--fp8-recipe %s: the %s backend has no block-scaled FP8 GEMMs", fp8_recipe_name(o->recipe), be->name);
    if (o->recipe == FP8_RECIPE_AUTO || (unsigned)o->recipe > FP8_RECIPE_AUTO)
        fatal("fp8_create: recipe %d is not resolved (fp8_resolve_recipe)", (int)o->recipe);
    if (o->recipe == FP8_DELAYED && o->history < 1)
        fatal("--fp8-amax-history must be at least 1 (got %d)", o->history);
    if (o->margin < 0 || o->margin > 31) fatal("--fp8-margin must be in 0..31 (got %d)", o->margin);
    s->opt = *o;
    s->shapes = *shapes;
    s->be = be;
    s->L = shapes->layers;
    s->n = 12 * s->L;
    s->tn_only = be->fp8_support == FP8_TN_ONLY;
    s->skip = (uint8_t*)xcalloc((size_t)s->L, 1);
    if (o->skip) memcpy(s->skip, o->skip, (size_t)s->L);
    fp8_recipe_skip(o->recipe, s->skip, s->L);
    s->opt.skip = s->skip;

    Fp8Bytes b = fp8_state_bytes(shapes, B, T, zero_stage, be->fp8_support, o->recipe, o->history, NULL);
    // One allocation for the scaling state: amax | scale | scale_inv | history.
    float* st = (float*)be->alloc(be, b.scaling, "FP8 scaling state");
    s->amax = st;
    s->scale = st + s->n;
    s->scale_inv = st + 2 * s->n;
    s->history = o->recipe == FP8_DELAYED ? st + 3 * s->n : NULL;
    be->zero(be, st, b.scaling);
    float* ones = (float*)xmalloc(2 * (size_t)s->n * sizeof(float));
    for (int i = 0; i < 2 * s->n; i++) ones[i] = 1.0f;
    be->to_device(be, s->scale, ones, 2 * (size_t)s->n * sizeof(float));  // scale and scale_inv start at 1
    free(ones);

    s->block = fp8_recipe_is_block(o->recipe);
    s->slots = s->block ? 0 : weight_slots(s->L, zero_stage);
    s->slot_bytes = b.weights / (size_t)(s->slots ? s->slots : 1);
    s->weights = s->block ? NULL : (uint8_t*)be->alloc(be, b.weights, "FP8 weights");
    s->slot_layer = (int*)xmalloc((size_t)(s->slots ? s->slots : 1) * sizeof(int));
    s->slot_version = (uint64_t*)xcalloc((size_t)(s->slots ? s->slots : 1) * FP8_NUM_GEMMS, sizeof(uint64_t));
    for (int k = 0; k < s->slots; k++) s->slot_layer[k] = -1;
    s->amax_version = (uint64_t*)xcalloc((size_t)s->L * FP8_NUM_GEMMS, sizeof(uint64_t));
    s->version = 1;  // nothing has been cast or measured yet (all records say 0)

    size_t cast_bytes = b.casts / (size_t)cast_buffers(be->fp8_support);
    for (int k = 0; k < cast_buffers(be->fp8_support) && !s->block; k++)
        s->cast[k] = be->alloc(be, cast_bytes, "FP8 cast buffer");
    read_spike_hook(s);
}

void fp8_free(Fp8State* s) {
    Backend* be = s->be;
    if (!be) return;
    be->free(be, s->amax);
    if (s->weights) be->free(be, s->weights);
    for (int k = 0; k < 3; k++)
        if (s->cast[k]) be->free(be, s->cast[k]);
    free(s->skip);
    free(s->slot_layer);
    free(s->slot_version);
    free(s->amax_version);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------
// the model's hooks

int fp8_gemm_on(const Fp8State* s, int l, Fp8Gemm g, int N) {
    return s && !(s->skip[l] & (1 << g)) && N % 16 == 0;
}

float* fp8_amax_slot(Fp8State* s, int l, Fp8Gemm g, Fp8Role role) {
    // The block-scaled recipes take every amax per block, inside their GEMMs.
    if (!s || s->block || l < 0 || l >= s->L || (s->skip[l] & (1 << g))) return NULL;
    return &s->amax[tensor_index(s, l, g, role)];
}

// The amaxes of one pass start from zero: the inputs' in forward, the
// gradients' in backward (the weights' belong to the update). A tensor's own
// amax is then that of this micro-batch alone, whatever the ranks and
// micro-batches; delayed scaling folds each pass's into the step's history
// row when the pass ends.
static void pass_begins(Fp8State* s, Fp8Role role) {
    if (s) s->be->zero(s->be, &s->amax[tensor_index(s, 0, 0, role)], (size_t)4 * s->L * sizeof(float));
}
static void pass_ends(Fp8State* s, Fp8Role role) {
    if (!s || !s->history) return;
    size_t t = (size_t)tensor_index(s, 0, 0, role);
    s->be->fp8_amax_fold(s->be, &s->history[(size_t)s->pos * s->n + t], &s->amax[t], (size_t)4 * s->L);
}
void fp8_begin_forward(Fp8State* s) { pass_begins(s, FP8_INPUT); }
void fp8_end_forward(Fp8State* s) { pass_ends(s, FP8_INPUT); }
void fp8_begin_backward(Fp8State* s) { pass_begins(s, FP8_GRAD); }
void fp8_end_backward(Fp8State* s) {
    pass_ends(s, FP8_GRAD);
    if (s) s->sr_pass++;  // the step's next backward pass (micro-batch) draws new bits
}

// The amax a quantisation derives its scale from, or NULL to use the stored
// scale: current scaling always; delayed scaling until its first step is in.
static const float* scale_source(Fp8State* s, int l, Fp8Gemm g, Fp8Role role) {
    if (s->history && s->steps_recorded > 0) return NULL;
    return &s->amax[tensor_index(s, l, g, role)];
}

static void quantize(Fp8State* s, int l, Fp8Gemm g, Fp8Role role, void* q, void* qt, const void* x, int rows,
                     int cols) {
    int t = tensor_index(s, l, g, role);
    s->be->fp8_quantize(s->be, q, qt, role == FP8_GRAD ? DTYPE_FP8_E5M2 : DTYPE_FP8_E4M3, x, rows, cols,
                        scale_source(s, l, g, role), &s->scale[t], &s->scale_inv[t]);
}

static Fp8Tensor operand(Fp8State* s, int l, Fp8Gemm g, Fp8Role role, const void* q, const void* qt) {
    Fp8Tensor o;
    o.q = q;
    o.qt = qt;
    o.type = role == FP8_GRAD ? DTYPE_FP8_E5M2 : DTYPE_FP8_E4M3;
    o.scale_inv = &s->scale_inv[tensor_index(s, l, g, role)];
    return o;
}

// The FP8 copy of layer l's weight for GEMM g (and its transpose on TN-only
// backends), cast from the 16-bit weight when the slot does not hold this
// version of it. Every rank holds the whole weight here (at ZeRO-3 the
// gathered unit), so a first-use amax pass needs no communication.
static Fp8Tensor fp8_weight(Fp8State* s, int l, Fp8Gemm g, const void* weight) {
    Backend* be = s->be;
    int k = s->slots == s->L ? l : l % 2;
    size_t rows = s->shapes.rows[g], cols = s->shapes.cols[g];
    uint8_t* q = s->weights + (size_t)k * s->slot_bytes + gemm_offset(&s->shapes, g);
    uint8_t* qt = s->tn_only ? q + gemm_offset(&s->shapes, FP8_NUM_GEMMS) : NULL;
    uint64_t* held = &s->slot_version[(size_t)k * FP8_NUM_GEMMS + g];
    if (s->slot_layer[k] != l) {
        for (int j = 0; j < FP8_NUM_GEMMS; j++) s->slot_version[(size_t)k * FP8_NUM_GEMMS + j] = 0;
        s->slot_layer[k] = l;
    }
    if (*held != s->version) {
        uint64_t* measured = &s->amax_version[(size_t)l * FP8_NUM_GEMMS + g];
        if (*measured != s->version) {
            // Set rather than updated (initialisation, loading): no AdamW amax; measure it.
            float* amax = &s->amax[tensor_index(s, l, g, FP8_WEIGHT)];
            be->zero(be, amax, sizeof(float));
            be->amax(be, amax, weight, rows * cols);
            *measured = s->version;
        }
        quantize(s, l, g, FP8_WEIGHT, q, qt, weight, (int)rows, (int)cols);
        *held = s->version;
    }
    return operand(s, l, g, FP8_WEIGHT, q, qt);
}

// Multiplies x (n elements of the backend's dtype) by a factor on the host
// and folds the new amax in: the spike test hook, never on in real runs.
static void apply_spike(Fp8State* s, void* x, size_t n, float* amax) {
    Backend* be = s->be;
    size_t es = dtype_size(be->dtype);
    void* h = xmalloc(n * es);
    be->to_host(be, h, x, n * es);
    float top = 0;
    for (size_t i = 0; i < n; i++) {
        float v;
        if (be->dtype == DTYPE_BF16) {
            uint16_t* p = (uint16_t*)h + i;
            *p = f32_to_bf16(bf16_to_f32(*p) * s->spike_factor);
            v = bf16_to_f32(*p);
        } else {
            float* p = (float*)h + i;
            *p *= s->spike_factor;
            v = *p;
        }
        top = fabsf(v) > top ? fabsf(v) : top;
    }
    be->to_device(be, x, h, n * es);
    free(h);
    if (!amax) return;  // block-scaled: no per-tensor amax to update
    float old;
    be->to_host(be, &old, amax, sizeof old);
    if (top > old) be->to_device(be, amax, &top, sizeof top);
}

void fp8_linear_forward(Fp8State* s, int l, Fp8Gemm g, void* out, void* pre_gelu, float* out_amax, void* inp,
                        const void* weight, const void* bias, int N, int C, int OC) {
    Backend* be = s->be;
    if (s->step == s->spike_step && l == s->spike_layer && (int)g == s->spike_gemm)
        apply_spike(s, inp, (size_t)N * C, fp8_amax_slot(s, l, g, FP8_INPUT));
    if (s->opt.recipe == FP8_NVFP4) {
        // out (N,OC) = X (N,C) @ W (OC,C)^T, both quantised along C, to nearest.
        be->nvfp4_matmul(be, pre_gelu ? pre_gelu : out, inp, 0, fp8_nvfp4_format(FP8_INPUT, 0, 0), weight, 0,
                         fp8_nvfp4_format(FP8_WEIGHT, 0, 0), bias, N, OC, C, 0.0f);
        if (pre_gelu) be->gelu_forward(be, out, pre_gelu, (size_t)N * OC, out_amax);
        return;
    }
    if (s->block) {
        // out (N,OC) = X (N,C) @ W (OC,C)^T, both quantised along C.
        be->fp8_block_matmul(be, pre_gelu ? pre_gelu : out, inp, 0, fp8_block_format(s->opt.recipe, FP8_INPUT), weight,
                             0, fp8_block_format(s->opt.recipe, FP8_WEIGHT), bias, N, OC, C, 0.0f);
        if (pre_gelu) be->gelu_forward(be, out, pre_gelu, (size_t)N * OC, out_amax);
        return;
    }
    quantize(s, l, g, FP8_INPUT, s->cast[0], NULL, inp, N, C);
    Fp8Tensor x = operand(s, l, g, FP8_INPUT, s->cast[0], NULL);
    Fp8Tensor w = fp8_weight(s, l, g, weight);
    be->fp8_matmul_forward(be, pre_gelu ? pre_gelu : out, &x, &w, bias, N, C, OC);
    if (pre_gelu) be->gelu_forward(be, out, pre_gelu, (size_t)N * OC, out_amax);
}

// The block-scaled backward: each GEMM reads its operands quantised along its
// own inner dimension, so the weight gradient's dY^T and X^T are column-wise
// copies (blocks along the tokens) and the input gradient's W^T one along OC.
static void block_linear_backward(Fp8State* s, void* dinp, void* dweight, void* dbias, const void* dout,
                                  const void* inp, const void* weight, int N, int C, int OC) {
    Backend* be = s->be;
    Fp8BlockFormat fa = fp8_block_format(s->opt.recipe, FP8_INPUT), fw = fp8_block_format(s->opt.recipe, FP8_WEIGHT);
    if (dbias) be->matmul_backward(be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
    // dW (OC,C) += dY^T (OC,N) @ X^T (C,N)^T: before dinp, which may overwrite inp.
    if (dweight) be->fp8_block_matmul(be, dweight, dout, 1, fa, inp, 1, fa, NULL, OC, C, N, 1.0f);
    // dX (N,C) = dY (N,OC) @ W^T (C,OC)^T
    if (dinp) be->fp8_block_matmul(be, dinp, dout, 0, fa, weight, 1, fw, NULL, N, C, OC, 0.0f);
}

// NVFP4's backward (arXiv 2509.25149): dY stochastically rounded in both
// GEMMs (its row-wise and column-wise copies draw different bits); the
// weight gradient's two operands Hadamard-transformed along the tokens (N is
// a multiple of 16: fp8_gemm_on), which cancels in dY^T X.
static void nvfp4_linear_backward(Fp8State* s, int l, Fp8Gemm g, void* dinp, void* dweight, void* dbias,
                                  const void* dout, const void* inp, const void* weight, int N, int C, int OC) {
    Backend* be = s->be;
    uint64_t tensor = ((uint64_t)l * FP8_NUM_GEMMS + (uint64_t)g) * 2;
    uint64_t key_row = nvfp4_rng_key(s->sr_seed, (uint64_t)s->step, (uint64_t)s->sr_pass, tensor);
    uint64_t key_col = nvfp4_rng_key(s->sr_seed, (uint64_t)s->step, (uint64_t)s->sr_pass, tensor + 1);
    if (dbias) be->matmul_backward(be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
    // dW (OC,C) += dY^T (OC,N) @ X^T (C,N)^T: before dinp, which may overwrite inp.
    if (dweight)
        be->nvfp4_matmul(be, dweight, dout, 1, fp8_nvfp4_format(FP8_GRAD, 1, key_col), inp, 1,
                         fp8_nvfp4_format(FP8_INPUT, 1, 0), NULL, OC, C, N, 1.0f);
    // dX (N,C) = dY (N,OC) @ W^T (C,OC)^T: the weight's 16x16 blocks read along OC.
    if (dinp)
        be->nvfp4_matmul(be, dinp, dout, 0, fp8_nvfp4_format(FP8_GRAD, 0, key_row), weight, 1,
                         fp8_nvfp4_format(FP8_WEIGHT, 0, 0), NULL, N, C, OC, 0.0f);
}

void fp8_linear_backward(Fp8State* s, int l, Fp8Gemm g, void* dinp, void* dweight, void* dbias, const void* dout,
                         const void* inp, const void* weight, int N, int C, int OC) {
    Backend* be = s->be;
    if (s->opt.recipe == FP8_NVFP4) {
        nvfp4_linear_backward(s, l, g, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    if (s->block) {
        block_linear_backward(s, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        return;
    }
    // Buffers: dY in cast[0]; then dY^T and X^T (TN-only) or X.
    void* dy_t = s->tn_only ? s->cast[1] : NULL;
    void* x_q = s->tn_only ? NULL : s->cast[1];
    void* x_qt = s->tn_only ? s->cast[2] : NULL;
    quantize(s, l, g, FP8_GRAD, s->cast[0], dweight ? dy_t : NULL, dout, N, OC);
    if (dbias) be->matmul_backward(be, NULL, NULL, dbias, dout, NULL, NULL, N, C, OC);
    // The input again, with the forward's scale (the same amax, or the
    // step's delayed scale): the codes the forward GEMM used. Before dinp
    // is written, which may overwrite inp.
    if (dweight) quantize(s, l, g, FP8_INPUT, x_q, x_qt, inp, N, C);
    Fp8Tensor dy = operand(s, l, g, FP8_GRAD, s->cast[0], dy_t);
    Fp8Tensor x = operand(s, l, g, FP8_INPUT, x_q, x_qt);
    Fp8Tensor w = dinp ? fp8_weight(s, l, g, weight) : operand(s, l, g, FP8_WEIGHT, NULL, NULL);
    be->fp8_matmul_backward(be, dinp, dweight, &dy, &x, &w, N, C, OC);
}

void fp8_before_update(Fp8State* s) {
    if (!s) return;
    s->be->zero(s->be, &s->amax[tensor_index(s, 0, 0, FP8_WEIGHT)], (size_t)4 * s->L * sizeof(float));
    s->version++;
    // AdamW writes the new weights' amaxes (this rank's pieces; fp8_end_step
    // completes them over the ranks).
    for (int i = 0; i < s->L * FP8_NUM_GEMMS; i++) s->amax_version[i] = s->version;
}

void fp8_params_changed(Fp8State* s) {
    if (s) s->version++;  // the weight amaxes no longer match: measured again at first use
}

// ---------------------------------------------------------------------------
// the trainer's hooks

void fp8_begin_step(Fp8State* s, int step) {
    if (!s) return;
    s->step = step;
    s->sr_pass = 0;
    if (s->history) s->be->zero(s->be, &s->history[(size_t)s->pos * s->n], (size_t)s->n * sizeof(float));
}

void fp8_set_micro_batch(Fp8State* s, int index) {
    if (s) s->sr_pass = index;
}

void fp8_end_step(Fp8State* s, Comm* comm) {
    if (!s) return;
    Backend* be = s->be;
    size_t w0 = (size_t)tensor_index(s, 0, 0, FP8_WEIGHT), nw = (size_t)4 * s->L;
    if (s->block) return;  // no scaling state outlives a GEMM
    if (comm) comm_wait_compute(comm);
    if (!s->history) {
        // Current scaling: only the weights' amaxes outlive the step.
        if (comm) comm_all_reduce_max(comm, COMM_WORLD, s->amax + w0, nw);
        if (comm) comm_compute_wait_all(comm);
        return;
    }
    float* row = &s->history[(size_t)s->pos * s->n];
    be->copy(be, row + w0, s->amax + w0, nw * sizeof(float));  // the new weights' amaxes join this step's
    if (comm) {
        comm_all_reduce_max(comm, COMM_WORLD, row, (size_t)s->n);
        comm_all_reduce_max(comm, COMM_WORLD, s->amax + w0, nw);
        comm_compute_wait_all(comm);
    }
    // Inputs and weights are E4M3 (the first 8 L tensors), gradients E5M2.
    size_t n43 = (size_t)8 * s->L;
    be->fp8_update_scales(be, s->scale, s->scale_inv, s->history, s->opt.history, (size_t)s->n, s->pos, n43,
                          DTYPE_FP8_E4M3, s->opt.margin);
    be->fp8_update_scales(be, s->scale + n43, s->scale_inv + n43, s->history + n43, s->opt.history, (size_t)s->n,
                          s->pos, (size_t)s->n - n43, DTYPE_FP8_E5M2, s->opt.margin);
    s->pos = (s->pos + 1) % s->opt.history;
    s->steps_recorded++;
}

// ---------------------------------------------------------------------------
// checkpoints

void fp8_snapshot_take(const Fp8State* s, Fp8Snapshot* out) {
    memset(out, 0, sizeof *out);
    out->recipe = s->opt.recipe;
    out->margin = s->opt.margin;
    out->tensors = s->n;
    if (!s->history) return;  // current scaling: nothing outlives a step but the weights' amaxes (see fp8.h)
    out->history = s->opt.history;
    out->pos = s->pos;
    out->steps_recorded = s->steps_recorded;
    size_t n = (size_t)s->n, h = (size_t)s->opt.history;
    out->scale = (float*)xmalloc(n * sizeof(float));
    out->scale_inv = (float*)xmalloc(n * sizeof(float));
    out->amax_history = (float*)xmalloc(h * n * sizeof(float));
    s->be->to_host(s->be, out->scale, s->scale, n * sizeof(float));
    s->be->to_host(s->be, out->scale_inv, s->scale_inv, n * sizeof(float));
    s->be->to_host(s->be, out->amax_history, s->history, h * n * sizeof(float));
}

int fp8_snapshot_restore(Fp8State* s, const Fp8Snapshot* snap, char* why, size_t whysize) {
    if (snap->recipe != s->opt.recipe) {
        snprintf(why, whysize, "it is for --fp8-recipe %s, this run uses %s", fp8_recipe_name(snap->recipe),
                 fp8_recipe_name(s->opt.recipe));
        return 0;
    }
    if (snap->margin != s->opt.margin) {
        snprintf(why, whysize, "it is for --fp8-margin %d, this run uses %d", snap->margin, s->opt.margin);
        return 0;
    }
    if (snap->tensors != s->n) {
        snprintf(why, whysize, "it has %d scaled tensors, this model %d", snap->tensors, s->n);
        return 0;
    }
    if (!s->history) return 1;
    if (snap->history != s->opt.history || !snap->amax_history) {
        snprintf(why, whysize, "its amax history has %d steps, this run's --fp8-amax-history %d", snap->history,
                 s->opt.history);
        return 0;
    }
    if (snap->pos < 0 || snap->pos >= snap->history || snap->steps_recorded < 0) {
        snprintf(why, whysize, "its history position %d is outside 0..%d", snap->pos, snap->history - 1);
        return 0;
    }
    size_t n = (size_t)s->n, h = (size_t)s->opt.history;
    s->pos = snap->pos;
    s->steps_recorded = snap->steps_recorded;
    s->be->to_device(s->be, s->scale, snap->scale, n * sizeof(float));
    s->be->to_device(s->be, s->scale_inv, snap->scale_inv, n * sizeof(float));
    s->be->to_device(s->be, s->history, snap->amax_history, h * n * sizeof(float));
    return 1;
}

void fp8_snapshot_free(Fp8Snapshot* snap) {
    free(snap->scale);
    free(snap->scale_inv);
    free(snap->amax_history);
    memset(snap, 0, sizeof *snap);
}
