// ckpt_state.c: snapshot, shard and weight writers, and the resharding restore.
#include "llm/checkpoint/ckpt_state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "llm/checkpoint/fault_inject.h"
#include "llm/fp8/fp8.h"
#include "llm/checkpoint/llmc_io.h"

// ---------------------------------------------------------------------------
// snapshot

// Where this rank's shard starts in unit u (flat index), and where that is in
// the rank's optimizer-state arrays.
static size_t shard_piece(const GPT* m, int shard, int u, size_t* state_index) {
    const ParamLayout* pl = &m->layout;
    size_t chunk = unit_chunk(pl, u);
    size_t x = pl->unit_begin[u] + (size_t)shard * chunk;
    size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
    if (x < lo || x + chunk > lo + len)
        fatal("internal: rank %d does not hold shard %d of unit %d (ZeRO stage %d)", m->rank, shard, u, m->zero_stage);
    *state_index = off + (x - lo);
    return x;
}

// Elements of the largest unit: the size of a buffer that holds any one unit.
static size_t largest_unit(const ParamLayout* pl) {
    size_t biggest = 0;
    for (int u = 0; u < pl->num_units; u++) biggest = unit_size(pl, u) > biggest ? unit_size(pl, u) : biggest;
    return biggest;
}

void ckpt_snapshot_take(CkptSnapshot* s, const GPT* m, const CkptComm* comm, int step, uint64_t data_position) {
    const ParamLayout* pl = &m->layout;
    Backend* be = m->be;
    if (comm->shards != pl->world || comm->shard != m->rank)
        fatal("internal: checkpoint shard %d of %d, but the model is rank %d of %d", comm->shard, comm->shards, m->rank,
              pl->world);
    int64_t elements = (int64_t)(pl->total / (size_t)pl->world);
    size_t ms = dtype_size(m->adam_dtype);
    if (s->elements != elements || s->adam_dtype != m->adam_dtype) {
        ckpt_snapshot_free(s);
        s->elements = elements;
        s->adam_dtype = m->adam_dtype;
        if (comm->writes) {
            s->master = (float*)xmalloc((size_t)elements * sizeof(float));
            s->adam_m = xmalloc((size_t)elements * ms);
            s->adam_v = xmalloc((size_t)elements * ms);
            if (m->dtype != DTYPE_F32) s->params16 = xmalloc((size_t)elements * dtype_size(m->dtype));
        }
        if (comm->rank == 0) {
            s->weights_elements = llmc_num_elements(&m->config);
            s->weights = (float*)xmalloc(s->weights_elements * sizeof(float));
        }
    }
    s->step = step;
    s->adam_step = m->adam_step;
    s->data_position = data_position;
    s->shard = comm->writes ? comm->shard : -1;
    s->params16_dtype = m->dtype;
    s->model = m->config;

    size_t es = dtype_size(m->dtype), at = 0;
    for (int u = 0; comm->writes && u < pl->num_units; u++) {
        size_t chunk = unit_chunk(pl, u), si;
        size_t x = shard_piece(m, s->shard, u, &si);
        // ZeRO-3 keeps only the parameter shard, at the optimizer state's index.
        size_t pi = gpt_params_sharded(m) ? si : x;
        // FP32 runs have no separate masters: the parameters are the FP32 values.
        if (m->master) be->to_host(be, s->master + at, m->master + si, chunk * sizeof(float));
        else be->to_host(be, s->master + at, (const char*)m->params + pi * es, chunk * sizeof(float));
        be->to_host(be, (char*)s->adam_m + at * ms, (const char*)m->adam_m + si * ms, chunk * ms);
        be->to_host(be, (char*)s->adam_v + at * ms, (const char*)m->adam_v + si * ms, chunk * ms);
        if (s->params16) be->to_host(be, (char*)s->params16 + at * es, (const char*)m->params + pi * es, chunk * es);
        at += chunk;
    }

    // The FP32 weights for model.bin: the writers' master chunks of each
    // unit, gathered on rank 0 and put in llm.c's order.
    size_t* llmc_off = NULL;
    float* unit_buf = NULL;
    size_t biggest = largest_unit(pl);
    if (comm->rank == 0) {
        llmc_off = (size_t*)xmalloc((size_t)pl->num_tensors * sizeof(size_t));
        llmc_tensor_offsets(m, llmc_off);
        unit_buf = (float*)xmalloc(biggest * sizeof(float));
    }
    at = 0;
    for (int u = 0; u < pl->num_units; u++) {
        size_t chunk = unit_chunk(pl, u);
        comm->gather_shards(comm->ctx, comm->writes ? s->master + at : NULL, chunk * sizeof(float), unit_buf);
        at += chunk;
        if (comm->rank != 0) continue;
        for (int i = 0; i < pl->num_tensors; i++) {
            const ParamTensor* t = &pl->tensors[i];
            if (t->unit != u) continue;
            memcpy(s->weights + llmc_off[i], unit_buf + (t->offset - pl->unit_begin[u]), t->count * sizeof(float));
        }
    }
    free(llmc_off);
    free(unit_buf);
}

void ckpt_snapshot_free(CkptSnapshot* s) {
    free(s->master);
    free(s->adam_m);
    free(s->adam_v);
    free(s->params16);
    free(s->weights);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------
// writers

static int finish(CkptWriter* w, CkptFileEntry* entry, char* msg, size_t msgsize) {
    int e = w->err ? w->err : ckpt_writer_commit(w);
    if (e) {
        snprintf(msg, msgsize, "%s", w->msg);
        ckpt_writer_abort(w);
        return e;
    }
    *entry = w->entry;
    return 0;
}

int ckpt_write_shard(const CkptSnapshot* s, const Manifest* layout, const char* dir, CkptFileEntry* entry,
                     char* msg, size_t msgsize) {
    char name[64];
    ckpt_shard_name(name, sizeof name, s->shard, layout->layout_world);
    unsigned char header[CKPT_SHARD_HEADER_BYTES];
    memset(header, 0, sizeof header);
    int32_t h32[4] = {CKPT_VERSION, s->shard, layout->layout_world, layout->num_units};
    int64_t elements = s->elements;
    int32_t sections = layout->num_sections;
    memcpy(header, CKPT_SHARD_MAGIC, 8);
    memcpy(header + 8, h32, sizeof h32);
    memcpy(header + 24, &elements, sizeof elements);
    memcpy(header + 32, &sections, sizeof sections);

    CkptWriter w;
    if (ckpt_writer_open(&w, dir, name, s->shard, s->step)) {
        snprintf(msg, msgsize, "%s", w.msg);
        return w.err;
    }
    ckpt_writer_write(&w, header, sizeof header);
    int64_t at = CKPT_SHARD_HEADER_BYTES;
    for (int i = 0; i < layout->num_sections && !w.err; i++) {
        const CkptSection* sec = &layout->sections[i];
        const void* src = !strcmp(sec->name, "master") ? (const void*)s->master
                          : !strcmp(sec->name, "adam_m") ? (const void*)s->adam_m
                          : !strcmp(sec->name, "adam_v") ? (const void*)s->adam_v
                          : !strcmp(sec->name, "params") ? s->params16
                                                          : NULL;
        if (!src || sec->offset != at) fatal("internal: shard section %s does not match the snapshot", sec->name);
        size_t bytes = (size_t)elements * dtype_size(sec->dtype);
        ckpt_writer_write(&w, src, bytes);
        at += (int64_t)bytes;
        if (i == 0) fault_crash_point(CRASH_MID_SHARD, s->step);
    }
    return finish(&w, entry, msg, msgsize);
}

int ckpt_write_weights(const CkptSnapshot* s, const char* dir, const char* name, DType dtype, int step,
                       CkptFileEntry* entry, char* msg, size_t msgsize) {
    int32_t h[256];
    llmc_header(&s->model, dtype, h);
    CkptWriter w;
    if (ckpt_writer_open(&w, dir, name, -1, step)) {
        snprintf(msg, msgsize, "%s", w.msg);
        return w.err;
    }
    ckpt_writer_write(&w, h, sizeof h);
    if (dtype == DTYPE_F32) {
        ckpt_writer_write(&w, s->weights, s->weights_elements * sizeof(float));
    } else {
        size_t block = 1u << 20;
        uint16_t* raw = (uint16_t*)xmalloc(block * sizeof(uint16_t));
        for (size_t i = 0; i < s->weights_elements && !w.err; i += block) {
            size_t n = s->weights_elements - i < block ? s->weights_elements - i : block;
            for (size_t j = 0; j < n; j++) raw[j] = f32_to_bf16(s->weights[i + j]);
            ckpt_writer_write(&w, raw, n * sizeof(uint16_t));
        }
        free(raw);
    }
    return finish(&w, entry, msg, msgsize);
}

// ---------------------------------------------------------------------------
// restore

typedef struct {
    const Manifest* man;
    const char* dir;
    int* fds;  // per shard, opened on first use
} Reader;

static int shard_fd(Reader* r, int shard) {
    if (r->fds[shard] >= 0) return r->fds[shard];
    char name[64], path[4096];
    ckpt_shard_name(name, sizeof name, shard, r->man->layout_world);
    snprintf(path, sizeof path, "%s/%s", r->dir, name);
    r->fds[shard] = open(path, O_RDONLY);
    if (r->fds[shard] < 0) fatal("cannot open checkpoint file '%s': %s", path, strerror(errno));
    return r->fds[shard];
}

static void pread_full(Reader* r, int shard, void* dst, size_t bytes, int64_t offset) {
    int fd = shard_fd(r, shard);
    char* p = (char*)dst;
    while (bytes > 0) {
        ssize_t got = pread(fd, p, bytes, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            char name[64];
            ckpt_shard_name(name, sizeof name, shard, r->man->layout_world);
            fatal("%s/%s: %s at byte %lld (the file changed after it was verified?)", r->dir, name,
                  got < 0 ? strerror(errno) : "unexpected end of file", (long long)offset);
        }
        p += got;
        bytes -= (size_t)got;
        offset += got;
    }
}

// Fills dst with the values of a section for the model's flat elements
// [lo, hi) of unit u, reading each tensor's elements from wherever the
// checkpoint's layout put them. Padding reads as zero.
static void read_range(Reader* r, const GPT* m, int section, int u, size_t lo, size_t hi, void* dst) {
    const Manifest* man = r->man;
    const CkptSection* sec = &man->sections[section];
    size_t es = dtype_size(sec->dtype);
    int N = man->layout_world;
    memset(dst, 0, (hi - lo) * es);
    for (int i = 0; i < m->layout.num_tensors; i++) {
        const ParamTensor* t = &m->layout.tensors[i];
        if (t->unit != u) continue;
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->count < hi ? t->offset + t->count : hi;
        if (a >= b) continue;
        // The same tensor in the checkpoint (manifest_matches_model checked
        // that tensor i is the same tensor there).
        const CkptTensor* old = &man->tensors[i];
        int64_t old_begin = man->unit_begin[old->unit];
        int64_t chunk = (man->unit_begin[old->unit + 1] - old_begin) / N;
        int64_t rel = old->offset + (int64_t)(a - t->offset);  // position inside the old unit
        int64_t n = (int64_t)(b - a);
        char* out = (char*)dst + (a - lo) * es;
        while (n > 0) {
            int shard = (int)(rel / chunk);
            int64_t k = rel - (int64_t)shard * chunk;
            int64_t run = n < chunk - k ? n : chunk - k;
            // In shard files, unit u's chunk follows the chunks of earlier
            // units: it starts at unit_begin / N.
            pread_full(r, shard, out, (size_t)run * es, sec->offset + (old_begin / N + k) * (int64_t)es);
            out += run * (int64_t)es;
            rel += run;
            n -= run;
        }
    }
}

void ckpt_restore(GPT* m, const Manifest* man, const char* dir) {
    const ParamLayout* pl = &m->layout;
    Backend* be = m->be;
    fp8_params_changed(m->fp8);  // FP8 weight copies cast from the weights replaced here are stale
    Reader r = {man, dir, (int*)xmalloc((size_t)man->layout_world * sizeof(int))};
    for (int i = 0; i < man->layout_world; i++) r.fds[i] = -1;
    int s_master = manifest_section(man, "master");
    int s_params = manifest_section(man, "params");
    if (s_params >= 0 && man->sections[s_params].dtype != m->dtype) s_params = -1;
    size_t es = dtype_size(m->dtype);
    size_t biggest = largest_unit(pl);
    float* buf = (float*)xmalloc(biggest * sizeof(float));

    // Parameters: whole at ZeRO stages 0-2; at stage 3 the pieces this rank
    // owns, at the optimizer state's index.
    for (int u = 0; u < pl->num_units; u++) {
        size_t lo = pl->unit_begin[u], n = unit_size(pl, u), off = lo;
        if (gpt_params_sharded(m)) n = gpt_owned_piece(m, u, &lo, &off);
        void* dst = (char*)m->params + off * es;
        if (m->dtype == DTYPE_F32 || s_params >= 0) {
            // FP32: the masters are the parameters. 16-bit: the saved 16-bit values, exactly.
            read_range(&r, m, m->dtype == DTYPE_F32 ? s_master : s_params, u, lo, lo + n, buf);
            be->to_device(be, dst, buf, n * es);
        } else {
            // A checkpoint from an FP32 run (or another 16-bit type): round the masters.
            read_range(&r, m, s_master, u, lo, lo + n, buf);
            gpt_upload_f32_as(be, dst, m->dtype, buf, n);
        }
    }
    // Optimizer state: the pieces this rank owns, the moments converted where
    // the checkpoint's dtype is not the run's (--adam-dtype).
    const char* names[3] = {"adam_m", "adam_v", "master"};
    void* targets[3] = {m->adam_m, m->adam_v, m->master};
    DType want[3] = {m->adam_dtype, m->adam_dtype, DTYPE_F32};
    uint16_t* narrow = NULL;  // FP32 moments rounded to BF16
    float* wide = NULL;       // BF16 moments widened to FP32
    DType saved = man->sections[manifest_section(man, "adam_m")].dtype;
    if (saved != m->adam_dtype) {
        if (m->rank == 0)
            fprintf(stderr, "note: %s holds %s AdamW moments; converted to --adam-dtype %s\n", dir, dtype_name(saved),
                    dtype_name(m->adam_dtype));
        if (m->adam_dtype == DTYPE_BF16) narrow = (uint16_t*)xmalloc(biggest * sizeof(uint16_t));
        else wide = (float*)xmalloc(biggest * sizeof(float));
    }
    for (int u = 0; u < pl->num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        for (int k = 0; k < 3; k++) {
            if (!targets[k]) continue;  // no separate masters in FP32 runs
            int sec = manifest_section(man, names[k]);
            read_range(&r, m, sec, u, lo, lo + len, buf);
            const void* src = buf;
            if (man->sections[sec].dtype != want[k]) {
                if (narrow) {
                    for (size_t i = 0; i < len; i++) narrow[i] = f32_to_bf16(buf[i]);
                    src = narrow;
                } else {
                    for (size_t i = 0; i < len; i++) wide[i] = bf16_to_f32(((const uint16_t*)buf)[i]);
                    src = wide;
                }
            }
            size_t es_k = dtype_size(want[k]);
            be->to_device(be, (char*)targets[k] + off * es_k, src, len * es_k);
        }
    }
    free(narrow);
    free(wide);
    m->adam_step = man->adam_step;
    be->synchronize(be);
    for (int i = 0; i < man->layout_world; i++)
        if (r.fds[i] >= 0) close(r.fds[i]);
    free(r.fds);
    free(buf);
}
