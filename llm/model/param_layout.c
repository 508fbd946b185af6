// param_layout.c: the flat parameter layout: which tensors, in which order,
// at which offsets, cut into units (see layout.h). The architecture says
// which kinds it has and their shapes; the placement is the same for all.
#include <stdlib.h>
#include <string.h>

#include "llm/model/block.h"

static const char* PARAM_NAMES[NUM_PARAM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lm_head"};

const char* param_kind_name(ParamKind k) { return PARAM_NAMES[k]; }

int param_kind_is_per_layer(ParamKind k) {
    return k != P_WTE && k != P_WPE && k != P_LNFW && k != P_LNFB && k != P_LMHEAD;
}

static KindList unit_kinds(const GPTConfig* c, UnitRole role) { return gpt_block(c)->unit_kinds(c, role); }

static int kind_position(KindList list, ParamKind k) {
    for (int i = 0; i < list.n; i++)
        if (list.kinds[i] == k) return i;
    return -1;
}

int gpt_has_kind(const GPTConfig* c, ParamKind k) {
    for (int r = UNIT_EMBED; r <= UNIT_FINAL; r++)
        if (kind_position(unit_kinds(c, (UnitRole)r), k) >= 0) return 1;
    return 0;
}

size_t gpt_kind_elems(const GPTConfig* c, ParamKind k) {
    if (!gpt_has_kind(c, k)) return 0;
    int rows, cols;
    gpt_block(c)->param_shape(c, k, &rows, &cols);
    return (size_t)rows * cols;
}

// Summed over the tensor shapes, with wte and lm_head counted at V rather than Vp rows.
size_t gpt_num_params(const GPTConfig* c) {
    size_t n = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        if (!gpt_has_kind(c, (ParamKind)k)) continue;
        int rows, cols;
        gpt_block(c)->param_shape(c, (ParamKind)k, &rows, &cols);
        if (k == P_WTE || k == P_LMHEAD) rows = c->vocab_size;
        n += (size_t)rows * cols * (param_kind_is_per_layer((ParamKind)k) ? (size_t)c->num_layers : 1);
    }
    return n;
}

int param_tensor_index(const GPTConfig* c, ParamKind kind, int layer) {
    KindList e = unit_kinds(c, UNIT_EMBED), l = unit_kinds(c, UNIT_LAYER), f = unit_kinds(c, UNIT_FINAL);
    int i;
    if ((i = kind_position(e, kind)) >= 0) return i;
    if ((i = kind_position(l, kind)) >= 0) return e.n + l.n * layer + i;
    if ((i = kind_position(f, kind)) >= 0) return e.n + l.n * c->num_layers + i;
    fatal("internal: a %s model has no %s tensor", gpt_block(c)->name, param_kind_name(kind));
}

static void add_tensor(ParamLayout* pl, const GPTConfig* c, ParamKind k, int layer) {
    ParamTensor* t = &pl->tensors[pl->num_tensors++];
    t->kind = k;
    t->layer = layer;
    t->unit = pl->num_units;
    gpt_block(c)->param_shape(c, k, &t->rows, &t->cols);
    t->count = (size_t)t->rows * t->cols;
    t->decay = t->rows > 1;
    t->offset = round_up(pl->total, PARAM_ALIGN);
    pl->total = t->offset + t->count;
}

// Closes the current unit: pads it to a multiple of PARAM_ALIGN * world.
static void end_unit(ParamLayout* pl) {
    size_t begin = pl->unit_begin[pl->num_units];
    size_t size = round_up(pl->total - begin, (size_t)PARAM_ALIGN * pl->world);
    if (size == 0) size = (size_t)PARAM_ALIGN * pl->world;
    pl->total = begin + size;
    pl->unit_begin[++pl->num_units] = pl->total;
}

void param_layout_build(ParamLayout* pl, const GPTConfig* c, int world) {
    if (world <= 0) fatal("internal: parameter layout for %d ranks", world);
    pl->num_tensors = 0;
    pl->num_units = 0;
    pl->total = 0;
    pl->world = world;
    KindList e = unit_kinds(c, UNIT_EMBED), lk = unit_kinds(c, UNIT_LAYER), f = unit_kinds(c, UNIT_FINAL);
    pl->tensors = (ParamTensor*)xcalloc((size_t)e.n + f.n + (size_t)lk.n * c->num_layers, sizeof(ParamTensor));
    pl->unit_begin = (size_t*)xcalloc((size_t)c->num_layers + 3, sizeof(size_t));
    for (int i = 0; i < e.n; i++) add_tensor(pl, c, e.kinds[i], -1);
    end_unit(pl);
    for (int l = 0; l < c->num_layers; l++) {
        for (int i = 0; i < lk.n; i++) add_tensor(pl, c, lk.kinds[i], l);
        end_unit(pl);
    }
    for (int i = 0; i < f.n; i++) add_tensor(pl, c, f.kinds[i], -1);
    end_unit(pl);
}

void param_layout_free(ParamLayout* pl) {
    free(pl->tensors);
    free(pl->unit_begin);
    pl->tensors = NULL;
    pl->unit_begin = NULL;
    pl->num_tensors = 0;
    pl->num_units = 0;
}
