// test_checkpoint.c: the checkpoint format below the binary: the JSON
// reader, manifests (round trip and every consistency check, the guard's
// state), and resharding: state saved by N ranks at ZeRO stage s (ranks run
// as threads with real collectives) restored on M ranks at stage s', in FP32
// and with 16-bit parameters, compared element by element with what was saved.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "llm/arch/arch.h"
#include "llm/checkpoint/ckpt_comm.h"
#include "llm/checkpoint/ckpt_files.h"
#include "llm/checkpoint/ckpt_manifest.h"
#include "llm/checkpoint/ckpt_state.h"
#include "llm/config.h"
#include "llm/util/json_read.h"
#include "llm/checkpoint/llmc_io.h"
#include "llm/util/strbuf.h"
#include "tests/testlib.h"

static char tmp_root[256];

// ---------------------------------------------------------------------------
// JSON

static void json_reads_values(void) {
    const char* text =
        "{\"a\": 7, \"a\": [1, -2.5e3, 0, 18446744073709551615, -9223372036854775808],\n"
        " \"s\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\", \"t\": true, \"f\": false, \"n\": null,\n"
        " \"o\": {\"x\": {}, \"y\": []}}";
    char err[256];
    JsonValue* v = json_parse(text, strlen(text), err, sizeof err);
    CHECK(v != NULL, "parse failed: %s", err);
    if (!v) return;
    const JsonValue* a = json_get(v, "a");  // the last of two members named a, as Python's json.loads
    CHECK(a && a->type == JSON_ARRAY && a->count == 5, "array a");
    if (!a || a->type != JSON_ARRAY || a->count != 5) return;
    uint64_t u;
    int64_t i;
    CHECK(json_as_u64(&a->items[3], &u) && u == 18446744073709551615ull, "u64 max read exactly");
    CHECK(json_as_i64(&a->items[4], &i) && i == INT64_MIN, "i64 min read exactly");
    CHECK(a->items[1].number == -2500.0 && !json_as_i64(&a->items[1], &i), "a fraction is a number, not an integer");
    CHECK(!json_as_u64(&a->items[4], &u), "a negative number is not a u64");
    const char* s = json_get_string(v, "s");
    CHECK(s && strcmp(s, "q\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80") == 0, "escapes decoded: '%s'", s ? s : "(null)");
    CHECK(json_get(v, "t")->boolean == 1 && json_get(v, "f")->boolean == 0 && json_get(v, "n")->type == JSON_NULL,
          "literals");
    CHECK(json_get(json_get(v, "o"), "x")->type == JSON_OBJECT && json_get(json_get(v, "o"), "y")->count == 0, "nesting");
    CHECK(json_get(v, "missing") == NULL && json_get_string(v, "t") == NULL, "absent or mistyped members");
    json_value_free(v);
}

static void json_rejects_malformed(void) {
    char deep[300];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    deep[200] = 0;
    const char* bad[] = {"",          "{",           "[1,]",        "{\"a\":1,}",  "\"abc",   "01",
                         "nan",       "{\"a\" 1}",   "[1 2]",       "{1: 2}",      "\"\\x\"", "\"\\u12\"",
                         "\"\\ud800\"", "\"a\tb\"",  "[1] x",       "tru",         "-",       "1.",
                         "1e",        "\"\\u0000\"", deep};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char err[256] = "";
        JsonValue* v = json_parse(bad[k], strlen(bad[k]), err, sizeof err);
        CHECK(v == NULL, "accepted malformed JSON '%.20s'", bad[k]);
        CHECK(strncmp(err, "line ", 5) == 0, "message for '%.20s' does not name a line: '%s'", bad[k], err);
        json_value_free(v);
    }
    // The parser never reads past the length it is given.
    char err[256];
    JsonValue* v = json_parse("[1, 2]garbage", 6, err, sizeof err);
    CHECK(v && v->count == 2, "length-bounded parse");
    json_value_free(v);
}

static void json_writes_strings(void) {
    StrBuf sb = {0};
    sb_json_string(&sb, "a\"b\\c\nd\x01");
    CHECK(sb.data && strcmp(sb.data, "\"a\\\"b\\\\c\\nd\\u0001\"") == 0, "escaped: %s", sb.data);
    char err[256];
    JsonValue* v = json_parse(sb.data, sb.len, err, sizeof err);
    CHECK(v && v->type == JSON_STRING && strcmp(v->text, "a\"b\\c\nd\x01") == 0, "round trip");
    json_value_free(v);
    for (int i = 0; i < 2000; i++) sb_printf(&sb, "%d,", i);  // growth
    CHECK(sb.len == strlen(sb.data) && strstr(sb.data, "1999,") != NULL, "builder grows");
    sb_free(&sb);
}

// ---------------------------------------------------------------------------
// a tiny model whose every state value is known

static GPTConfig tiny_config(void) {
    GPTConfig c;
    memset(&c, 0, sizeof c);
    c.max_seq_len = 8;
    c.vocab_size = 200;  // padded to 256
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 64;
    gpt_config_finish(&c);
    return c;
}

// Value of array a (0 masters, 1 AdamW m, 2 AdamW v, 3 the 16-bit
// parameters) at element e of tensor i: exact in FP32, distinct per array.
static float canon(int a, int i, size_t e) {
    return (float)((long)((i * 131 + (long)e * 7 + a * 1009) % 4093) - 2046) / 64.0f;
}

// Array a over the whole flat layout (padding, and the padded vocabulary
// rows, zero as in training).
static float* canonical_flat(const ParamLayout* pl, int a) {
    GPTConfig c = tiny_config();
    float* f = (float*)xcalloc(pl->total, sizeof(float));
    for (int i = 0; i < pl->num_tensors; i++) {
        const ParamTensor* t = &pl->tensors[i];
        size_t n = t->kind == P_WTE ? (size_t)c.vocab_size * c.channels : t->count;
        for (size_t e = 0; e < n; e++) f[t->offset + e] = canon(a, i, e);
    }
    return f;
}

// A model of this rank (storage only: a "BF16" model is an FP32 CPU backend
// told to store 16-bit parameters, enough for checkpoint I/O).
static void make_model(GPT* m, int world, int rank, int stage, DType dtype) {
    Backend* be = cpu_backend_create(DTYPE_F32, 1);
    be->dtype = dtype;
    GPTConfig c = tiny_config();
    gpt_create(m, &c, be, 1, 8, world, rank, stage);
}

static void free_model(GPT* m) {
    Backend* be = m->be;
    gpt_free(m);
    be->destroy(be);
}

static void fill_model(GPT* m) {
    const ParamLayout* pl = &m->layout;
    float* arr[4];
    for (int a = 0; a < 4; a++) arr[a] = canonical_flat(pl, a);
    // Parameters: every element, or (ZeRO-3) the owned pieces at the state index.
    for (int u = 0; u < pl->num_units; u++) {
        size_t lo = pl->unit_begin[u], off = lo, len = unit_size(pl, u);
        if (gpt_params_sharded(m)) len = gpt_owned_piece(m, u, &lo, &off);
        for (size_t k = 0; k < len; k++) {
            if (m->dtype == DTYPE_F32) ((float*)m->params)[off + k] = arr[0][lo + k];
            else ((uint16_t*)m->params)[off + k] = f32_to_bf16(arr[3][lo + k]);
        }
    }
    for (int u = 0; u < pl->num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        memcpy((float*)m->adam_m + off, arr[1] + lo, len * sizeof(float));
        memcpy((float*)m->adam_v + off, arr[2] + lo, len * sizeof(float));
        if (m->master) memcpy(m->master + off, arr[0] + lo, len * sizeof(float));
    }
    m->adam_step = 17;
    for (int a = 0; a < 4; a++) free(arr[a]);
}

// Every value of the model against what a checkpoint of fill_model's values
// must restore; returns the number of mismatches.
static long check_model(const GPT* m, DType saved_dtype) {
    const ParamLayout* pl = &m->layout;
    float* arr[4];
    for (int a = 0; a < 4; a++) arr[a] = canonical_flat(pl, a);
    long bad = 0;
    for (int u = 0; u < pl->num_units; u++) {
        size_t lo = pl->unit_begin[u], off = lo, len = unit_size(pl, u);
        if (gpt_params_sharded(m)) len = gpt_owned_piece(m, u, &lo, &off);
        for (size_t k = 0; k < len; k++) {
            size_t x = lo + k;
            if (m->dtype == DTYPE_F32) {
                bad += ((float*)m->params)[off + k] != arr[0][x];  // the masters are the parameters
            } else {
                // 16-bit parameters saved as such come back exactly; from an FP32
                // checkpoint they are rounded from the masters.
                float want = saved_dtype == m->dtype ? arr[3][x] : arr[0][x];
                bad += ((uint16_t*)m->params)[off + k] != f32_to_bf16(want);
            }
        }
    }
    for (int u = 0; u < pl->num_units; u++) {
        size_t lo, off, len = gpt_owned_piece(m, u, &lo, &off);
        for (size_t k = 0; k < len; k++) {
            bad += ((float*)m->adam_m)[off + k] != arr[1][lo + k];
            bad += ((float*)m->adam_v)[off + k] != arr[2][lo + k];
            if (m->master) bad += m->master[off + k] != arr[0][lo + k];
        }
    }
    bad += m->adam_step != 17;
    for (int a = 0; a < 4; a++) free(arr[a]);
    return bad;
}

// ---------------------------------------------------------------------------
// ranks as threads, with real collectives

#define MAX_RANKS 8
typedef struct {
    pthread_barrier_t barrier;
    const void* slot[MAX_RANKS];
    int world, shards;  // ranks; ranks per copy of the model (consecutive ranks share one)
} Shared;
typedef struct {
    Shared* sh;
    int rank;
} RankCtx;

static void t_barrier(void* ctx) { pthread_barrier_wait(&((RankCtx*)ctx)->sh->barrier); }
static void t_allreduce_max(void* ctx, int64_t* v, int n) {
    RankCtx* c = (RankCtx*)ctx;
    int64_t tmp[16];
    c->sh->slot[c->rank] = v;
    t_barrier(ctx);
    for (int i = 0; i < n; i++) {
        tmp[i] = v[i];
        for (int r = 0; r < c->sh->world; r++) tmp[i] = ((const int64_t*)c->sh->slot[r])[i] > tmp[i] ? ((const int64_t*)c->sh->slot[r])[i] : tmp[i];
    }
    t_barrier(ctx);
    memcpy(v, tmp, (size_t)n * sizeof(int64_t));
}
static void t_broadcast(void* ctx, void* buf, size_t bytes) {
    RankCtx* c = (RankCtx*)ctx;
    if (c->rank == 0) c->sh->slot[0] = buf;
    t_barrier(ctx);
    if (c->rank != 0) memcpy(buf, c->sh->slot[0], bytes);
    t_barrier(ctx);
}
static void t_gather(void* ctx, const void* send, size_t bytes, void* recv) {
    RankCtx* c = (RankCtx*)ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(ctx);
    if (c->rank == 0)
        for (int r = 0; r < c->sh->world; r++) memcpy((char*)recv + (size_t)r * bytes, c->sh->slot[r], bytes);
    t_barrier(ctx);
}
// The writers are ranks 0 .. shards-1 (the first copy); rank r is shard r % shards.
static void t_gather_shards(void* ctx, const void* send, size_t bytes, void* recv) {
    RankCtx* c = (RankCtx*)ctx;
    c->sh->slot[c->rank] = send;
    t_barrier(ctx);
    if (c->rank == 0)
        for (int r = 0; r < c->sh->shards; r++) memcpy((char*)recv + (size_t)r * bytes, c->sh->slot[r], bytes);
    t_barrier(ctx);
}

typedef struct {
    Shared* sh;
    int rank, stage;
    DType dtype;
    const char* dir;
} SaveJob;

// What the checkpointer does on each rank for one save: snapshot, write this
// rank's files, gather their entries, rank 0 writes the manifest.
static void* save_rank(void* arg) {
    SaveJob* j = (SaveJob*)arg;
    RankCtx ctx = {j->sh, j->rank};
    int world = j->sh->world, shards = j->sh->shards;
    CkptComm comm = {j->rank, world, j->rank % shards, shards, j->rank < shards, &ctx,
                     t_barrier, t_allreduce_max, t_broadcast, t_gather, t_gather_shards};
    GPT m;
    make_model(&m, shards, comm.shard, j->stage, j->dtype);
    fill_model(&m);
    CkptSnapshot snap;
    memset(&snap, 0, sizeof snap);
    ckpt_snapshot_take(&snap, &m, &comm, 17, 12345);
    Manifest man;
    manifest_describe(&man, &m);
    CkptFileEntry mine[2];
    memset(mine, 0, sizeof mine);
    mine[0].shard = mine[1].shard = -2;  // unused
    char msg[CKPT_MSG_SIZE];
    if (comm.writes && ckpt_write_shard(&snap, &man, j->dir, &mine[0], msg, sizeof msg)) fatal("%s", msg);
    if (j->rank == 0 && ckpt_write_weights(&snap, j->dir, CKPT_WEIGHTS_NAME, DTYPE_F32, 17, &mine[1], msg, sizeof msg))
        fatal("%s", msg);
    CkptFileEntry all[2 * MAX_RANKS];
    comm.gather(comm.ctx, mine, sizeof mine, all);
    if (j->rank == 0) {
        man.step = 17;
        man.adam_step = 17;
        man.data_position = 12345;
        man.windows_per_epoch = 1000;
        man.world = world;
        for (int i = 0; i < 2 * world; i++)
            if (all[i].shard >= -1) manifest_add_file(&man, &all[i]);
        // The flags of such a run: its stage, and its shard groups (the
        // manifest's checks hold them against world and layout_world).
        TrainConfig cfg;
        char stage[16], group[16];
        snprintf(stage, sizeof stage, "%d", j->stage);
        snprintf(group, sizeof group, "%d", shards < world ? shards : 0);
        char* argv[] = {(char*)"test", (char*)"--zero", stage, (char*)"--shard-group", group};
        config_parse(&cfg, 5, argv);
        manifest_set_config(&man, &cfg);
        config_free(&cfg);
        char* json = manifest_to_json(&man);
        CkptWriter w;
        ckpt_writer_open(&w, j->dir, CKPT_MANIFEST_NAME, -1, 5);
        ckpt_writer_write(&w, json, strlen(json));
        if (ckpt_writer_commit(&w)) fatal("%s", w.msg);
        free(json);
    }
    manifest_free(&man);
    ckpt_snapshot_free(&snap);
    free_model(&m);
    return NULL;
}

// Saves from `world` ranks (threads), the model sharded over groups of `shards`.
static void save_checkpoint_hybrid(const char* dir, int world, int shards, int stage, DType dtype) {
    int e = ckpt_mkdirs(dir);
    if (e) fatal("mkdir %s: %s", dir, strerror(e));
    Shared sh;
    memset(&sh, 0, sizeof sh);
    sh.world = world;
    sh.shards = shards;
    pthread_barrier_init(&sh.barrier, NULL, (unsigned)world);
    pthread_t th[MAX_RANKS];
    SaveJob jobs[MAX_RANKS];
    for (int r = 0; r < world; r++) {
        jobs[r] = (SaveJob){&sh, r, stage, dtype, dir};
        pthread_create(&th[r], NULL, save_rank, &jobs[r]);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&sh.barrier);
}

static void save_checkpoint(const char* dir, int world, int stage, DType dtype) {
    save_checkpoint_hybrid(dir, world, world, stage, dtype);
}

// Loads the checkpoint in dir on every rank of a world of M at a stage and
// checks every value; returns the mismatches.
static long restore_and_check(const char* dir, int world, int stage, DType dtype, DType saved_dtype) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MANIFEST_NAME);
    size_t len;
    char* text = test_read_file(path, &len);
    if (!text) return -1;
    long bad = 0;
    for (int r = 0; r < world; r++) {
        GPT m;
        make_model(&m, world, r, stage, dtype);
        Manifest man;
        char why[1024];
        if (!manifest_parse(text, len, &man, why, sizeof why)) {
            printf("# %s\n", why);
            bad = -1;
        } else {
            if (!manifest_matches_model(&man, &m, why, sizeof why)) bad = -1;
            for (int i = 0; i < man.num_files; i++)
                if (!ckpt_verify_file(dir, &man.files[i], why, sizeof why)) bad = -1;
            if (bad >= 0) {
                ckpt_restore(&m, &man, dir);
                bad += check_model(&m, saved_dtype);
            }
            manifest_free(&man);
        }
        free_model(&m);
    }
    free(text);
    return bad;
}

static int files_equal(const char* a, const char* b) {
    size_t la = 0, lb = 0;
    char* x = test_read_file(a, &la);
    char* y = test_read_file(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

// ---------------------------------------------------------------------------
// resharding

static void reshard_fp32_across_worlds_and_stages(void) {
    struct { int n, s; } saves[] = {{1, 0}, {2, 1}, {3, 0}, {4, 1}, {2, 3}, {3, 2}};
    struct { int m, s; } loads[] = {{1, 0}, {2, 1}, {3, 1}, {3, 0}, {5, 1}, {3, 3}, {2, 2}};
    char first_weights[600] = "";
    for (size_t i = 0; i < sizeof saves / sizeof saves[0]; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/fp32_n%d_z%d", tmp_root, saves[i].n, saves[i].s);
        save_checkpoint(dir, saves[i].n, saves[i].s, DTYPE_F32);
        for (size_t j = 0; j < sizeof loads / sizeof loads[0]; j++) {
            long bad = restore_and_check(dir, loads[j].m, loads[j].s, DTYPE_F32, DTYPE_F32);
            CHECK(bad == 0, "saved by %d ranks at ZeRO %d, loaded on %d at ZeRO %d: %ld values differ", saves[i].n,
                  saves[i].s, loads[j].m, loads[j].s, bad);
        }
        // model.bin holds the weights in llm.c's order, whatever the world.
        char weights[600];
        snprintf(weights, sizeof weights, "%s/%s", dir, CKPT_WEIGHTS_NAME);
        if (!first_weights[0]) snprintf(first_weights, sizeof first_weights, "%s", weights);
        else CHECK(files_equal(first_weights, weights), "model.bin from %d ranks differs from 1 rank's", saves[i].n);
    }
    // ... and is a model file llm.c tools read: load it and compare.
    GPT m;
    make_model(&m, 1, 0, 0, DTYPE_F32);
    llmc_load_weights(&m, first_weights);
    float* want = canonical_flat(&m.layout, 0);
    CHECK(memcmp(m.params, want, m.layout.total * sizeof(float)) == 0, "model.bin does not hold the masters");
    free(want);
    free_model(&m);
}

static void reshard_16bit_and_precision_changes(void) {
    char dir16[512], dir32[512];
    snprintf(dir16, sizeof dir16, "%s/bf16_n2_z1", tmp_root);
    snprintf(dir32, sizeof dir32, "%s/fp32_n3_z1", tmp_root);
    save_checkpoint(dir16, 2, 1, DTYPE_BF16);
    save_checkpoint(dir32, 3, 1, DTYPE_F32);
    long bad = restore_and_check(dir16, 3, 1, DTYPE_BF16, DTYPE_BF16);
    CHECK(bad == 0, "bf16 2 ranks ZeRO 1 -> 3 ranks ZeRO 1: %ld values differ", bad);
    bad = restore_and_check(dir16, 1, 0, DTYPE_BF16, DTYPE_BF16);
    CHECK(bad == 0, "bf16 2 ranks ZeRO 1 -> 1 rank: %ld values differ", bad);
    bad = restore_and_check(dir16, 2, 0, DTYPE_F32, DTYPE_BF16);
    CHECK(bad == 0, "bf16 checkpoint into an fp32 run (parameters = masters): %ld values differ", bad);
    bad = restore_and_check(dir32, 2, 1, DTYPE_BF16, DTYPE_F32);
    CHECK(bad == 0, "fp32 checkpoint into a bf16 run (parameters rounded from masters): %ld values differ", bad);
    // ZeRO-3 keeps only its parameter pieces, 16-bit ones included.
    char dir16z3[512];
    snprintf(dir16z3, sizeof dir16z3, "%s/bf16_n3_z3", tmp_root);
    save_checkpoint(dir16z3, 3, 3, DTYPE_BF16);
    bad = restore_and_check(dir16z3, 2, 3, DTYPE_BF16, DTYPE_BF16);
    CHECK(bad == 0, "bf16 3 ranks ZeRO 3 -> 2 ranks ZeRO 3: %ld values differ", bad);
    bad = restore_and_check(dir16z3, 2, 1, DTYPE_BF16, DTYPE_BF16);
    CHECK(bad == 0, "bf16 3 ranks ZeRO 3 -> 2 ranks ZeRO 1: %ld values differ", bad);
    bad = restore_and_check(dir32, 4, 3, DTYPE_BF16, DTYPE_F32);
    CHECK(bad == 0, "fp32 ZeRO 1 checkpoint into a bf16 ZeRO 3 run: %ld values differ", bad);
}

// ---------------------------------------------------------------------------
// manifests

static void manifest_round_trip(void) {
    GPT m;
    make_model(&m, 2, 1, 1, DTYPE_BF16);
    Manifest a;
    manifest_describe(&a, &m);
    a.step = 123456;
    a.adam_step = 123450;
    a.seed = 18446744073709551557ull;
    a.data_position = (1ull << 40) + 3;
    a.windows_per_epoch = 999;
    a.tokens_per_step = 524288;
    CkptFileEntry e[3];
    memset(e, 0, sizeof e);
    for (int s = 0; s < 2; s++) {
        ckpt_shard_name(e[s].name, sizeof e[s].name, s, 2);
        e[s].shard = s;
        e[s].bytes = manifest_shard_bytes(&a);
        e[s].xxh3 = 0xfedcba9876543210ull + (uint64_t)s;
    }
    snprintf(e[2].name, sizeof e[2].name, "%s", CKPT_WEIGHTS_NAME);
    e[2].shard = -1;
    e[2].bytes = 1234;
    e[2].xxh3 = 0x1ull;
    for (int i = 0; i < 3; i++) manifest_add_file(&a, &e[i]);
    TrainConfig cfg;
    char* argv[] = {(char*)"test", (char*)"--lr", (char*)"0.0003", (char*)"--train-data", (char*)"a \"b\"\\c*.bin"};
    config_parse(&cfg, 5, argv);
    manifest_set_config(&a, &cfg);
    config_free(&cfg);
    char* json = manifest_to_json(&a);
    Manifest b;
    char why[1024] = "";
    int ok = manifest_parse(json, strlen(json), &b, why, sizeof why);
    CHECK(ok, "parse of a written manifest failed: %.300s", why);
    if (ok) {
        CHECK(b.step == a.step && b.adam_step == a.adam_step && b.seed == a.seed && b.data_position == a.data_position &&
                  b.windows_per_epoch == 999 && b.tokens_per_step == 524288,
              "scalars");
        CHECK(b.world == 2 && b.layout_world == 2 && b.zero_stage == 1 && strcmp(b.precision, "bf16") == 0, "world");
        CHECK(memcmp(&a.model, &b.model, sizeof a.model) == 0, "model");
        CHECK(b.num_units == a.num_units && memcmp(a.unit_begin, b.unit_begin, ((size_t)a.num_units + 1) * 8) == 0, "units");
        CHECK(b.num_tensors == a.num_tensors && memcmp(a.tensors, b.tensors, (size_t)a.num_tensors * sizeof(CkptTensor)) == 0,
              "tensors");
        CHECK(b.num_sections == 4 && memcmp(a.sections, b.sections, 4 * sizeof(CkptSection)) == 0, "sections");
        CHECK(b.num_files == 3 && memcmp(a.files, b.files, 3 * sizeof(CkptFileEntry)) == 0, "files");
        int found = 0;
        for (int i = 0; i < b.num_flags; i++) {
            if (!strcmp(b.flag_names[i], "lr")) found += strcmp(b.flag_values[i], "0.00029999999999999997") == 0;
            if (!strcmp(b.flag_names[i], "train-data")) found += strcmp(b.flag_values[i], "a \"b\"\\c*.bin") == 0;
        }
        CHECK(found == 2 && b.num_flags == config_num_flags(), "config: %d of 2 flags exact, %d flags", found, b.num_flags);
        CHECK(manifest_matches_model(&b, &m, why, sizeof why), "matches its own model: %.300s", why);
        manifest_free(&b);
    }
    // Another shape is refused, with both shapes named.
    GPT other;
    Backend* be = cpu_backend_create(DTYPE_F32, 1);
    GPTConfig c = tiny_config();
    c.num_layers = 3;
    gpt_create(&other, &c, be, 1, 8, 1, 0, 0);
    Manifest pa;
    manifest_parse(json, strlen(json), &pa, why, sizeof why);
    CHECK(!manifest_matches_model(&pa, &other, why, sizeof why) && strstr(why, "layers 2") && strstr(why, "layers 3"),
          "shape mismatch message: %.300s", why);
    manifest_free(&pa);
    gpt_free(&other);
    be->destroy(be);
    free(json);
    manifest_free(&a);
    free_model(&m);
}

// The seal: a change of any one byte, or a manifest without its seal line
// (a torn write, an edit that dropped it), is refused; a version 1 manifest
// (written before seals) is still read.
// Removes text from `from` up to (not including) `to`, both found in order.
static void cut_between(char* text, const char* from, const char* to) {
    char* a = strstr(text, from);
    char* b = a ? strstr(a, to) : NULL;
    CHECK(a && b, "'%s' .. '%s' in the manifest", from, to);
    if (a && b) memmove(a, b, strlen(b) + 1);
}

static void manifest_seal_guards_every_byte(const char* good) {
    size_t len = strlen(good), body_len = manifest_seal_offset(good, len);
    char* text = xstrdup(good);
    char why[1024];
    Manifest b;
    long accepted = 0, tried = 0;
    // Every byte of the body (and digit of the seal) in turn, changed into
    // another character that keeps the JSON valid where it can: a digit into
    // another digit, anything else into a space where whitespace is.
    for (size_t i = 0; i < len; i += 7) {
        char was = text[i];
        if (was >= '0' && was <= '9') text[i] = (char)('0' + (was - '0' + 1) % 10);
        else if (was == ' ') text[i] = '\t';
        else if (was >= 'a' && was <= 'z') text[i] = (char)(was == 'z' ? 'a' : was + 1);
        else continue;
        tried++;
        if (manifest_parse(text, len, &b, why, sizeof why)) {
            accepted++;
            manifest_free(&b);
        }
        text[i] = was;
    }
    CHECK(tried > 500 && accepted == 0, "%ld of %ld one-byte edits accepted", accepted, tried);
    // The digit of step 6, not sealed again: named as a seal mismatch.
    char* at = strstr(text, "\"step\": 6");
    at[8] = '7';
    CHECK(!manifest_parse(text, len, &b, why, sizeof why) && strstr(why, "seal mismatch"), "step edit: '%.300s'", why);
    at[8] = '6';
    // Without the seal line but valid JSON (the last member's comma dropped).
    snprintf(text + body_len - 2, len - body_len + 2, "\n}\n");
    CHECK(!manifest_parse(text, strlen(text), &b, why, sizeof why) && strstr(why, "seal (the last line"),
          "no seal: '%.300s'", why);
    // The same, relabelled version 1: refused, since it holds what only a
    // sealed version 2 manifest holds (the seal's bypass).
    char* v = strstr(text, "\"version\": 2");
    v[11] = '1';
    CHECK(!manifest_parse(text, strlen(text), &b, why, sizeof why) && strstr(why, "'version' 1 (unsealed), but it holds 'data.epoch'"),
          "a relabelled version 2 manifest: '%.300s'", why);
    // What a version 1 program wrote (no epoch and window_in_epoch, no
    // Llama's model members): read.
    cut_between(text, ", \"epoch\": ", ", \"tokens_per_step\"");
    cut_between(text, "\"arch\": ", "\"layers\"");
    cut_between(text, "\"kv_heads\": ", "\"vocab_size\"");
    int ok = manifest_parse(text, strlen(text), &b, why, sizeof why);
    CHECK(ok && b.step == 6, "an unsealed version 1 manifest is refused: '%.300s'", why);
    if (ok) manifest_free(&b);
    free(text);
}

// Each edit of a good manifest must be refused with a message naming the problem.
static void manifest_rejects_inconsistent(void) {
    GPT m;
    make_model(&m, 2, 0, 1, DTYPE_F32);
    Manifest a;
    manifest_describe(&a, &m);
    CkptFileEntry e;
    memset(&e, 0, sizeof e);
    for (int s = 0; s < 2; s++) {
        ckpt_shard_name(e.name, sizeof e.name, s, 2);
        e.shard = s;
        e.bytes = manifest_shard_bytes(&a);
        manifest_add_file(&a, &e);
    }
    snprintf(e.name, sizeof e.name, "%s", CKPT_WEIGHTS_NAME);
    e.shard = -1;
    manifest_add_file(&a, &e);
    TrainConfig cfg;
    char* argv[] = {(char*)"test"};
    config_parse(&cfg, 1, argv);
    manifest_set_config(&a, &cfg);
    config_free(&cfg);
    a.step = 6;
    a.adam_step = 6;
    a.data_position = 1000;
    a.windows_per_epoch = 300;
    char* good = manifest_to_json(&a);
    size_t body_len = manifest_seal_offset(good, strlen(good));
    CHECK(body_len < strlen(good), "a written manifest has no seal");
    char shard1[64];
    ckpt_shard_name(shard1, sizeof shard1, 1, 2);
    char bytes_field[64];
    snprintf(bytes_field, sizeof bytes_field, "\"bytes\": %lld", (long long)manifest_shard_bytes(&a));
    char section_field[128], section_moved[128];
    snprintf(section_field, sizeof section_field, "\"name\": \"adam_m\", \"dtype\": \"fp32\", \"offset\": %lld",
             (long long)a.sections[1].offset);
    snprintf(section_moved, sizeof section_moved, "\"name\": \"adam_m\", \"dtype\": \"fp32\", \"offset\": %lld",
             (long long)a.sections[1].offset + 4);
    struct { const char* from; const char* to; const char* why; } edits[] = {
        {"\"train_gpt checkpoint\"", "\"something else\"", "not a train_gpt checkpoint manifest"},
        {"\"version\": 2", "\"version\": 3", "newer than this program"},
        {"\"adam_step\": 6", "\"adam_step\": 7", "'adam_step' 7 is more than 'step' 6"},
        {"\"train_position\": 1000", "\"train_position\": 1001", "is epoch 3 window 101 of 300"},
        {"\"epoch\": 3", "\"epoch\": 2", "records epoch 2 window 100"},
        {section_field, section_moved, "section adam_m is at offset"},
        {"\"layer\": 0, \"unit\": 1, \"offset\": 0", "\"layer\": 0, \"unit\": 1, \"offset\": 64", "the model's layout"},
        {"\"name\": \"ln1w\", \"layer\": 0, \"unit\": 1", "\"name\": \"ln1w\", \"layer\": 0, \"unit\": 2",
         "tensor 2 is ln1w (layer 0) in unit 2"},
        {"\"padded_vocab_size\": 256", "\"padded_vocab_size\": 384", "vocab_size 200 pads to 256"},
        {"\"layout_world\": 2", "\"layout_world\": 3", "multiples of layout_world"},
        {"\"shard\": 1, ", "\"shard\": 0, ", "listed twice"},
        {shard1, "shard_00001_of_00003.bin", "should be named"},
        {bytes_field, "\"bytes\": 12", "the sections need"},
        {"\"xxh3\": \"", "\"xxh3\": \"zz", "16 hex digits"},
        {"\"name\": \"model.bin\"", "\"name\": \"../model.bin\"", "no valid name"},
        {"\"offset\": 0, \"elements\": 16384", "\"offset\": 0, \"elements\": 99999999", "lies outside its unit"},
        {"\"name\": \"adam_v\"", "\"name\": \"adam_w\"", "section 'adam_v' is missing"},
        {"\"name\": \"adam_v\", \"dtype\": \"fp32\"", "\"name\": \"adam_v\", \"dtype\": \"bf16\"",
         "sections 'adam_m' and 'adam_v' have different dtypes"},
        {"\"name\": \"master\", \"dtype\": \"fp32\"", "\"name\": \"master\", \"dtype\": \"bf16\"",
         "section 'master' is bf16, not fp32"},
        {"\"name\": \"adam_v\", \"dtype\": \"fp32\"", "\"name\": \"adam_v\", \"dtype\": \"fp8_e4m3\"",
         "section 'adam_v' is fp8_e4m3, not fp32 or bf16"},
        {"\"shard_elements\": ", "\"shard_elements\": 1", "is not the layout's"},
        {"\"data\": {", "\"datum\": {", "'data' lacks"},
        {"\"layers\": 2", "\"layers\": -2", "'layers'"},
        {"\"zero_stage\": 1", "\"zero_stage\": 7", "'zero_stage' 7 is not a ZeRO stage"},
        {"\"world\": 2", "\"world\": 3", "'layout_world' 2 (shards) does not divide 'world' 3"},
        {"\"precision\": \"fp32\"", "\"precision\": \"bf16\"", "'precision' bf16, but 'sections' has no \"params\""},
        // Contradictions with the run's own flags (issue 29).
        {"\"zero_stage\": 1", "\"zero_stage\": 2", "'zero_stage' 2, but the run's 'config.zero' is 1"},
        {"\"world\": 2", "\"world\": 4", "'layout_world' 2 (shards), but 'config.shard-scope' world cuts the model over all 'world' 4 ranks"},
        {"\"shard-group\": 0", "\"shard-group\": 1", "'layout_world' 2 (shards), but 'world' 2 ranks in groups of 'config.shard-group' 1 make 1 shards"},
    };
    for (size_t k = 0; k < sizeof edits / sizeof edits[0]; k++) {
        const char* at = strstr(good, edits[k].from);
        CHECK(at != NULL && at < good + body_len, "edit %zu: '%s' not in the manifest", k, edits[k].from);
        if (!at || at >= good + body_len) continue;
        // Edited and sealed again: the checks behind the seal must catch it.
        size_t n = body_len + strlen(edits[k].to) + 1;
        char* body = (char*)xmalloc(n);
        snprintf(body, n, "%.*s%s%.*s", (int)(at - good), good, edits[k].to,
                 (int)(good + body_len - at - strlen(edits[k].from)), at + strlen(edits[k].from));
        char* text = manifest_seal(body, strlen(body));
        free(body);
        Manifest b;
        char why[1024] = "";
        int ok = manifest_parse(text, strlen(text), &b, why, sizeof why);
        CHECK(!ok && strstr(why, edits[k].why), "edit %zu ('%.100s'): %s, message '%.300s'", k, edits[k].to,
              ok ? "accepted" : "refused", why);
        if (ok) manifest_free(&b);
        free(text);
    }
    // And the unedited text is accepted (the edits, not the base, are what fail).
    Manifest b;
    char why[1024] = "";
    CHECK(manifest_parse(good, strlen(good), &b, why, sizeof why), "good manifest refused: %.300s", why);
    manifest_free(&b);
    manifest_seal_guards_every_byte(good);
    free(good);
    manifest_free(&a);
    free_model(&m);
}

// A flipped byte, a truncation, a missing file: each named by verification.
static void verify_detects_damage(void) {
    char dir[512], path[600], why[CKPT_MSG_SIZE];
    snprintf(dir, sizeof dir, "%s/verify", tmp_root);
    ckpt_mkdirs(dir);
    CkptWriter w;
    ckpt_writer_open(&w, dir, "f.bin", 0, 0);
    unsigned char data[10000];
    for (int i = 0; i < 10000; i++) data[i] = (unsigned char)(i * 7);
    ckpt_writer_write(&w, data, sizeof data);
    CHECK(ckpt_writer_commit(&w) == 0, "commit");
    CkptFileEntry e = w.entry;
    CHECK(e.bytes == 10000 && ckpt_verify_file(dir, &e, why, sizeof why), "fresh file verifies: %.400s", why);
    snprintf(path, sizeof path, "%s/f.bin", dir);
    FILE* f = fopen(path, "r+b");
    fseek(f, 6000, SEEK_SET);
    fputc(data[6000] ^ 0x10, f);
    fclose(f);
    CHECK(!ckpt_verify_file(dir, &e, why, sizeof why) && strstr(why, "f.bin: checksum mismatch"), "flip: %.400s", why);
    CHECK(truncate(path, 9999) == 0, "truncate");
    CHECK(!ckpt_verify_file(dir, &e, why, sizeof why) && strstr(why, "9999 bytes, the manifest lists 10000 (truncated)"),
          "truncation: %.400s", why);
    unlink(path);
    CHECK(!ckpt_verify_file(dir, &e, why, sizeof why) && strstr(why, "f.bin: missing"), "missing: %.400s", why);
    // No temporary file is left behind by a committed write.
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/f.bin.tmp.%ld", dir, (long)getpid());
    CHECK(!file_exists(tmp), "temporary file left behind");
}

// Hybrid sharding: 4 ranks, two copies of the model each cut over 2 ranks.
// Only the first copy writes; the checkpoint is a 2-shard one.
static void reshard_from_hybrid_sharding(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hybrid_4x2", tmp_root);
    save_checkpoint_hybrid(dir, 4, 2, 1, DTYPE_F32);
    char path[600];
    snprintf(path, sizeof path, "%s/shard_00001_of_00002.bin", dir);
    CHECK(file_exists(path), "shard 1 of 2 missing");
    snprintf(path, sizeof path, "%s/shard_00002_of_00004.bin", dir);
    CHECK(!file_exists(path), "a second copy wrote a shard");
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MANIFEST_NAME);
    char* text = test_read_file(path, &len);
    Manifest man;
    char why[1024];
    CHECK(text && manifest_parse(text, len, &man, why, sizeof why), "manifest: %.300s", why);
    if (text) {
        CHECK(man.world == 4 && man.layout_world == 2 && man.num_files == 3, "world %d, layout world %d, %d files",
              man.world, man.layout_world, man.num_files);
        manifest_free(&man);
    }
    free(text);
    long bad = restore_and_check(dir, 3, 1, DTYPE_F32, DTYPE_F32);
    CHECK(bad == 0, "hybrid 4 (2 x 2) -> 3 ranks ZeRO 1: %ld values differ", bad);
    bad = restore_and_check(dir, 1, 0, DTYPE_F32, DTYPE_F32);
    CHECK(bad == 0, "hybrid 4 (2 x 2) -> 1 rank: %ld values differ", bad);
}

// The guard's loss window and counters survive a manifest: exactly with the
// same --spike-window, the newest losses with a smaller one.
static void manifest_guard_state(void) {
    TrainConfig cfg;
    char* argv[] = {(char*)"test", (char*)"--spike-window", (char*)"4", (char*)"--zero", (char*)"0"};  // (the model's stage)
    config_parse(&cfg, 5, argv);
    Guard g;
    guard_init(&g, &cfg);
    double losses[] = {5.25, 4.125, 0.1 + 0.2, 3.0 / 7.0, 2.5, 1e-300};  // six into a ring of 4
    for (int i = 0; i < 6; i++) guard_check(&g, i + 1, losses[i], 1.0);
    GPT m;
    make_model(&m, 1, 0, 0, DTYPE_F32);
    Manifest a;
    manifest_describe(&a, &m);
    CkptFileEntry e;
    memset(&e, 0, sizeof e);
    ckpt_shard_name(e.name, sizeof e.name, 0, 1);
    e.bytes = manifest_shard_bytes(&a);
    manifest_add_file(&a, &e);
    snprintf(e.name, sizeof e.name, "%s", CKPT_WEIGHTS_NAME);
    e.shard = -1;
    manifest_add_file(&a, &e);
    manifest_set_config(&a, &cfg);
    manifest_set_guard(&a, &g);
    char* json = manifest_to_json(&a);
    Manifest b;
    char why[1024] = "";
    CHECK(manifest_parse(json, strlen(json), &b, why, sizeof why), "parse: %.300s", why);
    Guard same;
    guard_init(&same, &cfg);
    manifest_restore_guard(&b, &same);
    CHECK(same.filled == g.filled && same.next == g.next && memcmp(same.history, g.history, 4 * sizeof(double)) == 0,
          "same window: ring restored slot for slot");
    CHECK(same.skipped == g.skipped && same.bad_in_row == g.bad_in_row && same.spikes == g.spikes, "counters");
    char* argv3[] = {(char*)"test", (char*)"--spike-window", (char*)"3"};
    TrainConfig cfg3;
    config_parse(&cfg3, 3, argv3);
    Guard small;
    guard_init(&small, &cfg3);
    manifest_restore_guard(&b, &small);
    CHECK(small.filled == 3 && small.next == 0 && small.history[0] == 3.0 / 7.0 && small.history[1] == 2.5 &&
              small.history[2] == 1e-300,
          "smaller window: the newest 3 losses, oldest first (%g %g %g)", small.history[0], small.history[1],
          small.history[2]);
    guard_free(&g);
    guard_free(&same);
    guard_free(&small);
    config_free(&cfg);
    config_free(&cfg3);
    manifest_free(&b);
    manifest_free(&a);
    free(json);
    free_model(&m);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_checkpoint.XXXXXX");
    if (!mkdtemp(tmp_root)) fatal("mkdtemp failed");
    RUN(json_reads_values);
    RUN(json_rejects_malformed);
    RUN(json_writes_strings);
    RUN(manifest_round_trip);
    RUN(manifest_rejects_inconsistent);
    RUN(manifest_guard_state);
    RUN(verify_detects_damage);
    RUN(reshard_fp32_across_worlds_and_stages);
    RUN(reshard_16bit_and_precision_changes);
    RUN(reshard_from_hybrid_sharding);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp_root);
    return TESTS_DONE();
}
