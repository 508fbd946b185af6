// checkpoint.c: the checkpoint policy: schedule, background writer, commit
// protocol, pruning, resume, and the stop on SIGTERM/SIGINT.
#include "llm/checkpoint/checkpoint.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llm/arch/arch.h"
#include "llm/checkpoint/ckpt_comm.h"
#include "llm/checkpoint/ckpt_files.h"
#include "llm/checkpoint/ckpt_lock.h"
#include "llm/checkpoint/ckpt_manifest.h"
#include "llm/checkpoint/ckpt_state.h"
#include "llm/checkpoint/fault_inject.h"
#include "llm/checkpoint/llmc_io.h"
#include "llm/hf/hf.h"
#include "llm/util/atomic_dir.h"
#include "llm/util/strbuf.h"
#include "llm/checkpoint/signals.h"

struct Checkpointer {
    const TrainConfig* cfg;
    Trainer* tr;
    const CkptComm* comm;   // points at comm_table, or the single-process table
    CkptComm comm_table;
    char* dir;              // NULL: checkpoints are off
    CkptLock lock;          // rank 0's lock of dir
    char* model_dir;        // NULL: no final weights
    int steps_done;         // optimizer steps completed so far
    int last_saved_step;    // newest complete checkpoint of this lineage in dir, or -1
    int last_started_step;  // newest save started (complete or in flight), or -1
    int stop_signal;        // the signal that stopped the run, once all ranks agreed
    Manifest layout;        // the model's layout; every save fills in the rest
    CkptSnapshot snap;      // the state being written

    // The save in flight (at most one).
    int in_flight, threaded;
    pthread_t thread;
    atomic_int worker_done;
    int pending_step;
    char* pending_dir;
    CkptFileEntry entries[2];  // this rank's files: its shard, and model.bin on rank 0
    int num_entries;
    int err;
    char msg[CKPT_MSG_SIZE];
    double pause_seconds, write_seconds;
};

static double mib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

// ---------------------------------------------------------------------------
// setup

static char* resolve_checkpoint_dir(const char* flag) {
    if (!config_dir_is_auto(flag)) return flag[0] ? xstrdup(flag) : NULL;
    const char* env = getenv("TRAIN_GPT_CHECKPOINT_DIR");
    if (env) return env[0] ? xstrdup(env) : NULL;
    if (is_dir("/opt/ml/checkpoints")) return xstrdup("/opt/ml/checkpoints");
    return xstrdup("checkpoints");
}

static char* resolve_model_dir(const char* flag) {
    if (!config_dir_is_auto(flag)) return flag[0] ? xstrdup(flag) : NULL;
    const char* env = getenv("SM_MODEL_DIR");
    if (env && env[0]) return xstrdup(env);
    if (is_dir("/opt/ml/model")) return xstrdup("/opt/ml/model");
    return NULL;
}

static int list_steps(Checkpointer* ck, int** steps);
static int step_complete(const Checkpointer* ck, int step);

// Before any training: every rank can write to the directory, and rank 0
// holds its lock (one run per directory).
static void claim_dir(Checkpointer* ck) {
    char msg[CKPT_MSG_SIZE];
    if (ckpt_probe_writable(ck->dir, msg, sizeof msg))
        fatal("--checkpoint-dir %s is not writable (%s); checked before training, so that no step is lost at the "
              "first save",
              ck->dir, msg);
    if (ck->comm->rank == 0) {
        int e = ckpt_lock_take(&ck->lock, ck->dir, msg, sizeof msg);
        if (e == EWOULDBLOCK)
            fatal("--checkpoint-dir %s is in use by another run (%s, holding %s/%s): two runs in one directory "
                  "would delete each other's checkpoints; wait for it, stop it, or pass another --checkpoint-dir",
                  ck->dir, msg, ck->dir, CKPT_LOCK_NAME);
        if (e) fatal("--checkpoint-dir %s: cannot take its lock: %s", ck->dir, msg);
    }
    ck->comm->barrier(ck->comm->ctx);
}

// Before any training, on rank 0 (the one that writes them): every output
// of the run's end can be written, so that a read-only or mistyped path
// fails now rather than after the last step, when the weights would be lost.
static void probe_outputs(const Checkpointer* ck) {
    if (ck->comm->rank != 0) return;
    char msg[8192];
    const char* why = "checked before training, so that the trained weights are not lost at the end";
    if (ck->cfg->export_path[0] && atomic_file_probe(ck->cfg->export_path, msg, sizeof msg))
        fatal("--export %s is not writable (%s); %s", ck->cfg->export_path, msg, why);
    if (ck->cfg->export_hf[0] && atomic_dir_probe(ck->cfg->export_hf, msg, sizeof msg))
        fatal("--export-hf %s is not writable (%s); %s", ck->cfg->export_hf, msg, why);
    if (ck->model_dir && atomic_dir_probe(ck->model_dir, msg, sizeof msg))
        fatal("--model-dir %s is not writable (%s); %s", ck->model_dir, msg, why);
}

// Step directories without a manifest older than the newest complete
// checkpoint can never be resumed: what a kill left of a prune (manifest
// deleted, files not yet) or of an old interrupted save. Removed now, under
// the lock, so that they neither linger nor get uploaded.
static void remove_dead_steps(Checkpointer* ck) {
    const CkptComm* comm = ck->comm;
    int* steps = NULL;
    int n = list_steps(ck, &steps);
    int* victims = (int*)xcalloc((size_t)n + 1, sizeof(int));
    int64_t nv = 0;
    if (comm->rank == 0) {
        int newest_complete = -1;
        for (int i = 0; i < n && newest_complete < 0; i++)
            if (step_complete(ck, steps[i])) newest_complete = steps[i];
        for (int i = 0; i < n; i++)
            if (steps[i] < newest_complete && !step_complete(ck, steps[i])) victims[nv++] = steps[i];
    }
    comm->broadcast(comm->ctx, &nv, sizeof nv);
    if (nv) comm->broadcast(comm->ctx, victims, (size_t)nv * sizeof(int));
    for (int i = 0; i < nv; i++) {
        char* d = ckpt_step_dir(ck->dir, victims[i]);
        int e = ckpt_remove_dir(d);
        if (comm->rank == 0) {
            if (e) warn("cannot delete %s (no manifest: an interrupted save or prune): %s", d, strerror(e));
            else printf("ckpt      | removed %s: no manifest, left by an interrupted save or prune\n", d);
        }
        free(d);
    }
    comm->barrier(comm->ctx);
    free(victims);
    free(steps);
}

Checkpointer* checkpointer_create(const TrainConfig* cfg, Trainer* tr) {
    fault_inject_init();

    Checkpointer* ck = (Checkpointer*)xcalloc(1, sizeof(Checkpointer));
    ck->cfg = cfg;
    ck->tr = tr;
    ck->comm_table = ckpt_comm_mpi(tr->comm);
    ck->comm = &ck->comm_table;
    ck->dir = resolve_checkpoint_dir(cfg->checkpoint_dir);
    ck->model_dir = resolve_model_dir(cfg->model_dir);
    // Saves are collective: every rank must agree that there are checkpoints
    // (the defaults look at each node's disk and environment). Only rank 0
    // writes the final weights, so its --model-dir decides.
    const CkptComm* comm = ck->comm;
    int64_t on_off[2] = {ck->dir != NULL, ck->dir == NULL};
    comm->allreduce_max(comm->ctx, on_off, 2);
    if (on_off[0] && on_off[1])
        fatal("--checkpoint-dir %s resolves to a directory on some ranks and to none on others (their environment "
              "or disks differ): pass --checkpoint-dir explicitly",
              cfg->checkpoint_dir);
    int64_t has_model_dir = ck->model_dir != NULL;
    comm->broadcast(comm->ctx, &has_model_dir, sizeof has_model_dir);
    if (!has_model_dir) {
        free(ck->model_dir);
        ck->model_dir = NULL;
    } else if (!ck->model_dir) {
        ck->model_dir = xstrdup("(rank 0's)");  // this rank takes part in gathering the weights only
    }
    ck->lock.fd = -1;
    // --generate reads checkpoints and writes nothing: no probe, no lock, and
    // a missing directory is not created.
    if (!cfg->generate) probe_outputs(ck);
    if (ck->dir && !cfg->generate) {
        claim_dir(ck);
        remove_dead_steps(ck);
    }
    ck->steps_done = tr->first_step;
    ck->last_saved_step = ck->last_started_step = -1;
    atomic_init(&ck->worker_done, 0);
    manifest_describe(&ck->layout, &tr->model);
    manifest_set_config(&ck->layout, cfg);
    signals_install();
    return ck;
}

// ---------------------------------------------------------------------------
// checking a checkpoint

static char* read_text_file(const char* path, size_t limit, char* why, size_t whysize) {
    int64_t size = file_size(path);
    if (size < 0) {
        snprintf(why, whysize, "%s: missing", path);
        return NULL;
    }
    if ((size_t)size > limit) {
        snprintf(why, whysize, "%s: %lld bytes, too large for a manifest", path, (long long)size);
        return NULL;
    }
    FILE* f = fopen(path, "rb");
    if (!f) {
        snprintf(why, whysize, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char* text = (char*)xmalloc((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) {
        snprintf(why, whysize, "%s: read error", path);
        free(text);
        return NULL;
    }
    text[size] = 0;
    return text;
}

// Reads, checks and verifies the checkpoint in dir for this model. Returns 1
// with *man filled; else 0 with the problem in why (the same text on every
// rank) and *had_manifest telling an interrupted save from a damaged one.
static int check_checkpoint(Checkpointer* ck, const char* dir, int expect_step, Manifest* man, int* had_manifest,
                            char* why, size_t whysize) {
    const CkptComm* comm = ck->comm;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MANIFEST_NAME);
    why[0] = 0;
    // Rank 0 reads the manifest; the others get its text (on node-local
    // disks, only rank 0's node may have it).
    char* text = NULL;
    int64_t state[2] = {0, 0};  // {manifest exists, it was read}
    if (comm->rank == 0) {
        state[0] = file_exists(path);
        text = read_text_file(path, 64u << 20, why, whysize);
        state[1] = text != NULL;
    }
    comm->broadcast(comm->ctx, state, sizeof state);
    *had_manifest = (int)state[0];
    if (!state[1]) {
        if (!state[0])
            snprintf(why, whysize, "%s: missing (%s)", path,
                     expect_step >= 0 ? "the save of this checkpoint did not finish" : "not a complete checkpoint");
        char* w = ckpt_broadcast_string(comm, comm->rank == 0 ? xstrdup(why) : NULL);
        snprintf(why, whysize, "%s", w);
        free(w);
        return 0;
    }
    text = ckpt_broadcast_string(comm, text);
    char problem[2048];
    int ok = manifest_parse(text, strlen(text), man, problem, sizeof problem);
    free(text);
    if (!ok) {
        snprintf(why, whysize, "%s: %s", path, problem);
        return 0;
    }
    if (!manifest_matches_model(man, &ck->tr->model, problem, sizeof problem)) {
        snprintf(why, whysize, "%s: %s", path, problem);
        manifest_free(man);
        return 0;
    }
    if (expect_step >= 0 && man->step != expect_step) {
        snprintf(why, whysize, "%s: records step %d, but the directory is for step %d", path, man->step, expect_step);
        manifest_free(man);
        return 0;
    }
    // Verify every file, spread over the ranks; the rank that finds a
    // problem passes its message to rank 0, which passes it to all.
    char mine[CKPT_MSG_SIZE] = "";
    int64_t bad = 0;
    for (int i = 0; i < man->num_files && !bad; i++)
        if (i % comm->world == comm->rank && !ckpt_verify_file(dir, &man->files[i], mine, sizeof mine))
            bad = comm->rank + 1;
    int64_t who = bad;
    comm->allreduce_max(comm->ctx, &who, 1);
    if (who == 0) return 1;
    char* all = comm->rank == 0 ? (char*)xmalloc((size_t)comm->world * sizeof mine) : NULL;
    comm->gather(comm->ctx, mine, sizeof mine, all);
    char* w = ckpt_broadcast_string(comm, comm->rank == 0 ? xstrdup(all + (who - 1) * (int64_t)sizeof mine) : NULL);
    snprintf(why, whysize, "%s", w);
    free(w);
    free(all);
    manifest_free(man);
    return 0;
}

// Whether two paths name the same directory.
static int same_dir(const char* a, const char* b) {
    char ra[PATH_MAX], rb[PATH_MAX];
    return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

// One line listing the flags that differ from the checkpoint's run.
static void report_changed_flags(const Manifest* man, const TrainConfig* cfg) {
    StrBuf sb = {0};
    int n = 0;
    for (int i = 0; i < config_num_flags(); i++) {
        const char* name = config_flag_name(i);
        if (!strcmp(name, "resume")) continue;  // how this run was started, not what it trains
        char now[4096];
        config_flag_value(cfg, i, now, sizeof now);
        for (int j = 0; j < man->num_flags; j++) {
            if (strcmp(man->flag_names[j], name) != 0 || strcmp(man->flag_values[j], now) == 0) continue;
            sb_printf(&sb, "%s--%s %s -> %s", n++ ? ", " : "", name, man->flag_values[j], now);
        }
    }
    if (n) printf("resume    | flags changed since the checkpoint: %s\n", sb.data);
    sb_free(&sb);
}

// What a resume and a rollback both take from a checkpoint: weights, masters,
// AdamW state and step, the guard's loss window (with its counters, or this
// run's kept), and FP8's scales and amax histories. Returns whether the FP8
// state was restored; when not, fp8_why says why.
static int restore_state(Checkpointer* ck, const char* dir, const Manifest* man, int keep_guard_counters,
                         char* fp8_why, size_t whysize) {
    Trainer* tr = ck->tr;
    ckpt_restore(&tr->model, man, dir);
    if (keep_guard_counters) manifest_restore_guard_window(man, &tr->guard);
    else manifest_restore_guard(man, &tr->guard);
    ck->steps_done = man->step;
    return tr->model.fp8 && manifest_restore_fp8(man, tr->model.fp8, fp8_why, whysize);
}

static void load_checkpoint(Checkpointer* ck, const char* dir, const Manifest* man) {
    Trainer* tr = ck->tr;
    char fp8_why[256] = "";
    int fp8_restored = restore_state(ck, dir, man, 0, fp8_why, sizeof fp8_why);
    dataloader_set_position(&tr->train, man->data_position);
    tr->first_step = man->step;
    if (ck->dir) {
        char* own = ckpt_step_dir(ck->dir, man->step);
        if (same_dir(dir, own)) ck->last_saved_step = ck->last_started_step = man->step;
        free(own);
    }
    if (ck->comm->rank != 0) return;
    printf("resume    | %s: step %d of %d, written by %d rank%s at ZeRO %d in %s", dir, man->step, ck->cfg->steps,
           man->world, man->world == 1 ? "" : "s", man->zero_stage, man->precision);
    const GPT* m = &tr->model;
    if (man->layout_world != m->layout.world || man->zero_stage != m->zero_stage)
        printf(" (resharded to %d rank%s at ZeRO %d)", m->world, m->world == 1 ? "" : "s", m->zero_stage);
    printf(" | data position %llu\n", (unsigned long long)man->data_position);
    if (man->windows_per_epoch != tr->train.windows_per_epoch)
        printf("resume    | the training data changed: %llu windows per epoch, the checkpoint's run had %llu\n",
               (unsigned long long)tr->train.windows_per_epoch, (unsigned long long)man->windows_per_epoch);
    report_changed_flags(man, ck->cfg);
    // Delayed scaling loses its amax histories; any recipe says when the checkpoint's differs.
    if (tr->model.fp8 && !fp8_restored)
        printf("resume    | FP8 scaling starts afresh: %s\n", fp8_why);
    if (man->step >= ck->cfg->steps)
        printf("resume    | the checkpoint is at step %d of --steps %d: nothing left to train\n", man->step,
               ck->cfg->steps);
    fflush(stdout);
}

// The steps of the checkpoint directories, newest first, as rank 0 sees them.
static int list_steps(Checkpointer* ck, int** steps) {
    int64_t n = 0;
    if (ck->comm->rank == 0) n = ckpt_list_steps(ck->dir, steps);
    ck->comm->broadcast(ck->comm->ctx, &n, sizeof n);
    if (ck->comm->rank != 0) *steps = (int*)xcalloc((size_t)n + 1, sizeof(int));
    if (n) ck->comm->broadcast(ck->comm->ctx, *steps, (size_t)n * sizeof(int));
    return (int)n;
}

// Whether the directory of `step` holds a manifest (a complete save), on this rank's disk.
static int step_complete(const Checkpointer* ck, int step) {
    char* d = ckpt_step_dir(ck->dir, step);
    int complete = ckpt_has_manifest(d);
    free(d);
    return complete;
}

// Restores as --resume asks; returns 1 when a checkpoint was loaded.
static int resume(Checkpointer* ck) {
    ResumeMode mode = config_resume_mode(ck->cfg);
    const char* dir = ck->cfg->resume;  // with RESUME_DIR
    Manifest man;
    char why[CKPT_MSG_SIZE + 2048];
    int had_manifest;
    if (mode == RESUME_NEVER) {
        int* steps = NULL;
        int n = ck->dir ? list_steps(ck, &steps) : 0;
        for (int i = 0; i < n && ck->comm->rank == 0; i++) {
            if (!step_complete(ck, steps[i])) continue;
            warn("--resume never: %s already holds checkpoints (newest: step %d); this run replaces those of the "
                 "steps it saves, and --resume auto may later pick an older run's newer step",
                 ck->dir, steps[i]);
            break;
        }
        free(steps);
        return 0;
    }
    if (mode == RESUME_DIR) {
        // A directory named for a step must hold that step's checkpoint.
        int named_step = -1;
        ckpt_step_of_dir(dir, &named_step);
        if (!check_checkpoint(ck, dir, named_step, &man, &had_manifest, why, sizeof why)) fatal("--resume %s: %s", dir, why);
        load_checkpoint(ck, dir, &man);
        manifest_free(&man);
        return 1;
    }
    if (!ck->dir) return 0;
    int* steps = NULL;
    int n = list_steps(ck, &steps);
    int damaged = 0;
    for (int i = 0; i < n; i++) {
        char* d = ckpt_step_dir(ck->dir, steps[i]);
        int ok = check_checkpoint(ck, d, steps[i], &man, &had_manifest, why, sizeof why);
        if (ok) {
            load_checkpoint(ck, d, &man);
            manifest_free(&man);
            free(d);
            free(steps);
            return 1;
        }
        damaged += had_manifest;
        if (ck->comm->rank == 0)
            warn("%s; skipping checkpoint step %d%s", why, steps[i],
                 i + 1 < n ? ", trying the one before" : "");
        free(d);
    }
    free(steps);
    // Only interrupted saves (or nothing): a fresh start. But never start
    // over silently on top of complete checkpoints that failed to verify:
    // this run would later prune them.
    if (damaged)
        fatal("--resume auto: none of the %d complete checkpoint%s in '%s' is usable (see the warnings above); "
              "repair or move them, name one with --resume DIR, or pass --resume never to start over",
              damaged, damaged == 1 ? "" : "s", ck->dir);
    return 0;
}

void checkpoint_resume(Checkpointer* ck) {
    int loaded = resume(ck);
    // --generate from random weights would print noise and exit 0.
    if (!ck->cfg->generate || loaded || ck->cfg->init_from[0]) return;
    char where[4200];
    if (config_resume_mode(ck->cfg) == RESUME_NEVER) snprintf(where, sizeof where, "--resume never loads none");
    else if (!ck->dir) snprintf(where, sizeof where, "checkpoints are off (--checkpoint-dir '')");
    else snprintf(where, sizeof where, "no complete checkpoint in %s%s", ck->dir, is_dir(ck->dir) ? "" : " (it does not exist)");
    fatal("--generate: no weights to generate from: %s; point --checkpoint-dir (or --resume DIR) at a run's "
          "checkpoints, or pass --init-from FILE|DIR",
          where);
}

// ---------------------------------------------------------------------------
// saving

// This rank's files; in the background thread for async saves. Touches
// nothing but the snapshot and the save's own fields.
static void write_files(Checkpointer* ck) {
    double t0 = now_seconds();
    ck->num_entries = 0;
    ck->err = 0;
    if (ck->snap.shard >= 0)
        ck->err = ckpt_write_shard(&ck->snap, &ck->layout, ck->pending_dir, &ck->entries[ck->num_entries++], ck->msg,
                                   sizeof ck->msg);
    if (!ck->err && ck->comm->rank == 0)
        ck->err = ckpt_write_weights(&ck->snap, ck->pending_dir, CKPT_WEIGHTS_NAME, DTYPE_F32, ck->pending_step,
                                     &ck->entries[ck->num_entries++], ck->msg, sizeof ck->msg);
    ck->write_seconds = now_seconds() - t0;
}

static void* writer_thread(void* arg) {
    Checkpointer* ck = (Checkpointer*)arg;
    write_files(ck);
    atomic_store(&ck->worker_done, 1);
    return NULL;
}

// Deletes older checkpoints beyond --keep-last, after `newest` is complete:
// rank 0 picks them; every rank deletes the manifests (its own node's
// copies) first, and only after all have, the files.
static void prune(Checkpointer* ck, int newest) {
    const CkptComm* comm = ck->comm;
    if (ck->cfg->keep_last <= 0) return;
    int* steps = NULL;
    int n = list_steps(ck, &steps);
    int* victims = (int*)xcalloc((size_t)n + 1, sizeof(int));
    int64_t nv = 0;
    if (comm->rank == 0) {
        int kept = 1;  // newest itself
        for (int i = 0; i < n; i++) {
            // Newer steps belong to another lineage (or were resumed from an
            // older step on purpose): not ours to delete.
            if (steps[i] >= newest) continue;
            if (step_complete(ck, steps[i]) && kept < ck->cfg->keep_last) kept++;
            else victims[nv++] = steps[i];  // older than keep-last, or an interrupted save
        }
    }
    comm->broadcast(comm->ctx, &nv, sizeof nv);
    if (nv) comm->broadcast(comm->ctx, victims, (size_t)nv * sizeof(int));
    for (int i = 0; i < nv; i++) {
        char* d = ckpt_step_dir(ck->dir, victims[i]);
        int e = ckpt_remove_manifest(d);
        if (e) warn("cannot delete %s/%s: %s (the old checkpoint stays)", d, CKPT_MANIFEST_NAME, strerror(e));
        free(d);
        fault_crash_point(CRASH_MID_PRUNE, newest);
    }
    comm->barrier(comm->ctx);
    for (int i = 0; i < nv; i++) {
        char* d = ckpt_step_dir(ck->dir, victims[i]);
        int e = ckpt_remove_dir(d);
        if (e) warn("cannot delete all of %s: %s", d, strerror(e));
        free(d);
    }
    free(victims);
    free(steps);
}

// The end of a failed save's message: whether there is an older complete
// checkpoint to resume from (on this rank's disk; no collective, since the
// run is about to stop).
static const char* older_checkpoints(const Checkpointer* ck, int failed_step) {
    int* steps = NULL;
    int n = ckpt_list_steps(ck->dir, &steps), some = 0;
    for (int i = 0; i < n && !some; i++) some = steps[i] != failed_step && step_complete(ck, steps[i]);
    free(steps);
    return some ? "older checkpoints are intact" : "there is no older checkpoint (none was complete before this save)";
}

// Completes the save in flight: waits for this rank's files, agrees with the
// other ranks that every file is in place, writes the manifest, prunes.
static void commit_save(Checkpointer* ck) {
    const CkptComm* comm = ck->comm;
    int step = ck->pending_step;
    int threaded = ck->threaded;
    if (threaded) pthread_join(ck->thread, NULL);
    ck->in_flight = ck->threaded = 0;

    int64_t failed = ck->err != 0;
    comm->allreduce_max(comm->ctx, &failed, 1);
    if (failed) {
        ckpt_remove_dir(ck->pending_dir);  // an abandoned save leaves nothing to upload
        const char* older = older_checkpoints(ck, step);
        if (ck->err == ENOSPC)
            fatal("checkpoint of step %d: %s; %s (a save needs room for one checkpoint more than --keep-last %d "
                  "keeps)",
                  step, ck->msg, older, ck->cfg->keep_last);
        if (ck->err) fatal("checkpoint of step %d: %s; %s", step, ck->msg, older);
        fatal("checkpoint of step %d: writing failed on another rank; %s", step, older);
    }
    fault_crash_point(CRASH_BEFORE_MANIFEST, step);

    // Rank 0 learns every rank's files (the gather is also the barrier that
    // makes the manifest come after every shard).
    CkptFileEntry mine[2];
    memset(mine, 0, sizeof mine);
    for (int i = 0; i < 2; i++) mine[i].shard = -2;  // unused slot
    memcpy(mine, ck->entries, (size_t)ck->num_entries * sizeof(CkptFileEntry));
    CkptFileEntry* all = comm->rank == 0 ? (CkptFileEntry*)xmalloc((size_t)comm->world * sizeof mine) : NULL;
    comm->gather(comm->ctx, mine, sizeof mine, all);
    comm->barrier(comm->ctx);

    int64_t status = 0;
    int64_t total_bytes = 0;
    if (comm->rank == 0) {
        Manifest* man = &ck->layout;
        const Trainer* tr = ck->tr;
        man->step = step;
        man->adam_step = ck->snap.adam_step;
        man->world = comm->world;
        man->zero_stage = tr->model.zero_stage;
        man->seed = (uint64_t)ck->cfg->seed;
        man->data_position = ck->snap.data_position;
        man->windows_per_epoch = tr->train.windows_per_epoch;
        man->tokens_per_step = tr->tokens_per_step;
        free(man->files);
        man->files = NULL;
        man->num_files = 0;
        for (int i = 0; i < 2 * comm->world; i++) {
            if (all[i].shard < -1) continue;
            manifest_add_file(man, &all[i]);
            total_bytes += all[i].bytes;
        }
        char* json = manifest_to_json(man);
        CkptWriter w;
        if (ckpt_writer_open(&w, ck->pending_dir, CKPT_MANIFEST_NAME, -1, step) == 0) {
            ckpt_writer_write(&w, json, strlen(json));
            if (!w.err) fault_crash_point(CRASH_MID_MANIFEST, step);
            ckpt_writer_commit(&w);
        }
        if (w.err) {
            status = 1;
            snprintf(ck->msg, sizeof ck->msg, "%s", w.msg);
            ckpt_writer_abort(&w);
        }
        total_bytes += w.entry.bytes;
        free(json);
    }
    free(all);
    comm->broadcast(comm->ctx, &status, sizeof status);
    if (status) {
        ckpt_remove_dir(ck->pending_dir);
        if (comm->rank == 0) fatal("checkpoint of step %d: %s; %s", step, ck->msg, older_checkpoints(ck, step));
        fatal("checkpoint of step %d: rank 0 could not write the manifest", step);
    }
    fault_crash_point(CRASH_AFTER_MANIFEST, step);
    ck->last_saved_step = step;
    if (comm->rank == 0) {
        printf("ckpt      | step %d saved to %s | %.1f MiB | training paused %.3f s", step, ck->pending_dir,
               mib(total_bytes), ck->pause_seconds);
        if (threaded) printf(" | written in the background in %.3f s", ck->write_seconds);
        printf("\n");
        fflush(stdout);
    }
    prune(ck, step);
    free(ck->pending_dir);
    ck->pending_dir = NULL;
}

static void wait_for_save(Checkpointer* ck) {
    if (ck->in_flight) commit_save(ck);
}

// Makes step_S/ ready: a complete checkpoint of the same step (from another
// run in this directory) stops being complete before any of its files is
// replaced; each rank clears what an interrupted save of its own files left.
static void prepare_dir(Checkpointer* ck, const char* dir) {
    const CkptComm* comm = ck->comm;
    if (comm->rank == 0 && ckpt_has_manifest(dir)) {
        int e = ckpt_remove_manifest(dir);
        if (e) fatal("cannot replace the checkpoint in %s: deleting its manifest failed: %s", dir, strerror(e));
    }
    comm->barrier(comm->ctx);
    int e = ckpt_mkdirs(dir);
    if (e) fatal("cannot create checkpoint directory '%s': %s", dir, strerror(e));
    fsync_dir_of(dir);  // the new directory's entry in its parent, durable like the files in it
    if (comm->writes) {
        char name[64];
        ckpt_shard_name(name, sizeof name, comm->shard, comm->shards);
        ckpt_remove_stale_temps(dir, name);
    }
    if (comm->rank == 0) {
        ckpt_remove_stale_temps(dir, CKPT_WEIGHTS_NAME);
        ckpt_remove_stale_temps(dir, CKPT_MANIFEST_NAME);
    }
}

static void start_save(Checkpointer* ck, int step, int background) {
    wait_for_save(ck);
    double t0 = now_seconds();
    ck->pending_step = ck->last_started_step = step;
    ck->pending_dir = ckpt_step_dir(ck->dir, step);
    prepare_dir(ck, ck->pending_dir);
    ckpt_snapshot_take(&ck->snap, &ck->tr->model, ck->comm, step, dataloader_position(&ck->tr->train));
    manifest_set_guard(&ck->layout, &ck->tr->guard);  // also part of the state at this step
    manifest_set_fp8(&ck->layout, ck->tr->model.fp8);  // and FP8's scales and amax histories
    ck->in_flight = 1;
    ck->threaded = 0;
    atomic_store(&ck->worker_done, 0);
    if (background) {
        // The stop signals go to the training thread, never to the writer.
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGINT);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        int e = pthread_create(&ck->thread, NULL, writer_thread, ck);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (e) fatal("cannot start the checkpoint writer thread: %s", strerror(e));
        ck->threaded = 1;
        ck->pause_seconds = now_seconds() - t0;
        return;
    }
    write_files(ck);
    ck->pause_seconds = now_seconds() - t0;
    commit_save(ck);
}

static const char* signal_name(int sig) { return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : strsignal(sig); }

// $TRAIN_GPT_STOP_FILE: where a launcher learns that a stop signal ended the
// run with a complete checkpoint (scripts/sagemaker/entrypoint.sh makes its
// exit status 0 then, whatever mpirun says). One line: "step N DIR".
static void report_stop_file(const Checkpointer* ck) {
    const char* path = getenv("TRAIN_GPT_STOP_FILE");
    if (!path || !path[0]) return;
    char line[4200];
    int n = snprintf(line, sizeof line, "step %d %s/step_%08d\n", ck->last_saved_step, ck->dir, ck->last_saved_step);
    AtomicFile af;
    int e = atomic_file_try_open(&af, path);
    if (!e) e = atomic_file_try_write(&af, line, (size_t)n);
    if (!e) e = atomic_file_try_commit(&af);
    if (e) warn("TRAIN_GPT_STOP_FILE %s: %s (the launcher will not know that the stop was clean)", path, strerror(e));
}

int checkpoint_after_step(Checkpointer* ck, int steps_done) {
    const CkptComm* comm = ck->comm;
    ck->steps_done = steps_done;
    // One small reduction per step: did any rank get a stop signal, and is
    // any rank still writing the save in flight.
    int64_t v[2] = {signals_stop_requested(), ck->in_flight && ck->threaded && !atomic_load(&ck->worker_done)};
    comm->allreduce_max(comm->ctx, v, 2);
    if (ck->in_flight && v[1] == 0) commit_save(ck);
    int every = ck->cfg->checkpoint_every;
    int due = v[0] != 0 || (every > 0 && steps_done % every == 0);
    if (ck->dir && due && steps_done != ck->last_started_step) start_save(ck, steps_done, ck->cfg->async_checkpoint && !v[0]);
    if (!v[0]) return 0;
    ck->stop_signal = (int)v[0];
    wait_for_save(ck);
    if (comm->rank == 0) {
        if (ck->dir && ck->last_saved_step == steps_done) report_stop_file(ck);
        if (ck->dir) printf("stop      | %s after step %d: checkpoint in %s/step_%08d; exiting\n", signal_name(ck->stop_signal),
                            steps_done, ck->dir, ck->last_saved_step);
        else printf("stop      | %s after step %d: checkpoints are off (--checkpoint-dir ''); exiting without one\n",
                    signal_name(ck->stop_signal), steps_done);
        fflush(stdout);
    }
    return 1;
}

void checkpoint_end(Checkpointer* ck) {
    if (ck->dir && ck->steps_done != ck->last_started_step) start_save(ck, ck->steps_done, 0);
    wait_for_save(ck);
}

void checkpoint_export_model_dir(Checkpointer* ck) {
    if (!ck->model_dir) return;
    wait_for_save(ck);
    // The final checkpoint's snapshot holds these weights already.
    if (!ck->snap.master || ck->snap.step != ck->steps_done)
        ckpt_snapshot_take(&ck->snap, &ck->tr->model, ck->comm, ck->steps_done, dataloader_position(&ck->tr->train));
    if (ck->comm->rank != 0) return;
    // The folder is replaced as a whole (llm/util/atomic_dir.h): written
    // beside the old one and swapped in, so that a kill leaves either.
    AtomicDir ad;
    char err[8192];
    if (atomic_dir_begin(&ad, ck->model_dir, HF_MODEL_FILES, err, sizeof err)) fatal("--model-dir %s: %s", ck->model_dir, err);
    const char* into = atomic_dir_path(&ad);
    DType dt = ck->cfg->export_dtype == EXPORT_BF16 ? DTYPE_BF16 : DTYPE_F32;
    const GPT* m = &ck->tr->model;
    // llm.c's model.bin describes GPT-2 only; a Llama's final weights are the
    // Hugging Face folder alone (what SageMaker's model.tar.gz is served from).
    ModelFormat format = ck->cfg->model_format;
    int64_t bin_bytes = -1;
    if (m->config.arch == ARCH_GPT2 && format != MODEL_FORMAT_HF) {
        CkptFileEntry entry;
        char msg[CKPT_MSG_SIZE];
        if (ckpt_write_weights(&ck->snap, into, "model.bin", dt, -1, &entry, msg, sizeof msg))
            fatal("--model-dir: %s (the previous %s is untouched)", msg, ck->model_dir);
        bin_bytes = entry.bytes;
    }
    if (format != MODEL_FORMAT_LLMC) {
        // The same values as a Hugging Face folder (config.json,
        // model.safetensors) beside it, so that transformers loads them as
        // they are: the snapshot's weights are in llm.c's order, the
        // folder's writer takes the flat layout.
        float* flat = (float*)xmalloc(m->layout.total * sizeof(float));
        llmc_to_flat(m, ck->snap.weights, flat);
        hf_write_files(m, flat, into, dt, ck->tr->has_tok ? ck->tr->tok.eot : -1);
        free(flat);
    }
    if (atomic_dir_commit(&ad, err, sizeof err)) fatal("--model-dir %s: %s", ck->model_dir, err);
    if (bin_bytes >= 0)
        printf("model     | final weights in %s/model.bin (llm.c format, %s, %.1f MiB)\n", ck->model_dir, dtype_name(dt),
               mib(bin_bytes));
    if (format != MODEL_FORMAT_LLMC)
        printf("model     | final weights in %s/ as a Hugging Face folder (config.json, model.safetensors, %s)\n",
               ck->model_dir, dtype_name(dt));
    fflush(stdout);
}

void checkpointer_free(Checkpointer* ck) {
    if (!ck) return;
    wait_for_save(ck);
    ckpt_snapshot_free(&ck->snap);
    manifest_free(&ck->layout);
    ckpt_lock_release(&ck->lock);
    free(ck->dir);
    free(ck->model_dir);
    free(ck);
}

// ---------------------------------------------------------------------------
// rollback (--on-divergence rollback, llm/checkpoint/divergence.h)

int checkpoint_rollback(Checkpointer* ck, int steps_done) {
    wait_for_save(ck);
    if (!ck->dir) return -1;
    Trainer* tr = ck->tr;
    Manifest man;
    char why[CKPT_MSG_SIZE + 2048];
    int had_manifest, found = -1;
    int* steps = NULL;
    int n = list_steps(ck, &steps);
    for (int i = 0; i < n && found < 0; i++) {
        if (steps[i] > steps_done) continue;  // another lineage's future
        char* d = ckpt_step_dir(ck->dir, steps[i]);
        if (check_checkpoint(ck, d, steps[i], &man, &had_manifest, why, sizeof why)) {
            // As a resume, but the data position stays where it is, so the
            // batches that diverged are not read again, and the guard's
            // counters keep counting this run.
            char fp8_why[256] = "";
            int fp8_restored = restore_state(ck, d, &man, 1, fp8_why, sizeof fp8_why);
            zero_params_changed(&tr->zero);
            if (tr->model.fp8 && !fp8_restored && tr->model.fp8->opt.recipe == FP8_DELAYED && ck->comm->rank == 0)
                printf("rollback  | FP8 scaling keeps its current state: %s\n", fp8_why);
            tr->guard.bad_in_row = 0;
            found = man.step;
            manifest_free(&man);
        } else if (had_manifest && ck->comm->rank == 0) {
            warn("%s; not rolling back to checkpoint step %d, trying the one before", why, steps[i]);
        }
        free(d);
    }
    free(steps);
    return found;
}

const char* checkpoint_dir(const Checkpointer* ck) { return ck->dir; }
