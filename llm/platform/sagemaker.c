// sagemaker.c: the SageMaker training-container contract (see sagemaker.h):
// hyperparameters, hosts, channels, checkpoint and model folders, failure file.
#include "llm/platform/sagemaker.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm/util/json_read.h"

// What was found, kept for sagemaker_report().
typedef struct {
    int active;
    char root[1024];
    // resourceconfig.json
    int have_resources;
    char* current_host;
    char** hosts;  // sorted, as SageMaker's own MPI launcher orders them
    int num_hosts, host_index;
    char* interface;
    char* instance_type;
    // hyperparameters.json
    int have_hyperparameters;
    int num_applied, num_reserved;
    char applied[1024];     // names, space separated (truncated for printing)
    char overridden[512];   // names the command line overrode
    // channels and folders
    char* train_dir;
    char* val_dir;
    char* tokenizer_dir;
    char* checkpoint_dir;
    char* model_dir;
} SageMaker;

static SageMaker sm;

static char* path_join(const char* a, const char* b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char* p = (char*)xmalloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

// Reads and parses a JSON file; fatal, naming the file, if it cannot.
static JsonValue* read_json_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) fatal("cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, len = 0, got;
    char* text = (char*)xmalloc(cap);
    while ((got = fread(text + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) text = (char*)xrealloc(text, cap *= 2);
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) fatal("%s: read error", path);
    char err[256];
    JsonValue* doc = json_parse(text, len, err, sizeof err);
    free(text);
    if (!doc) fatal("%s: invalid JSON: %s", path, err);
    return doc;
}

static const char* json_kind(JsonType type) {
    switch (type) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "a boolean";
    case JSON_NUMBER: return "a number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "an array";
    case JSON_OBJECT: return "an object";
    }
    return "?";
}

// ---- detection and the failure file -------------------------------------------------------------

const char* sagemaker_root(void) {
    const char* r = getenv("TRAIN_GPT_SM_ROOT");
    return r && r[0] ? r : "/opt/ml";
}

int sagemaker_active(void) { return sm.active; }

// The MPI rank of this process as the launcher exported it, or -1 in a world
// of one: the failure hook may run before (or without) the communicator.
static int launcher_rank(void) {
    static const char* vars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                    {"PMIX_RANK", "PMIX_SIZE"},
                                    {"PMI_RANK", "PMI_SIZE"},
                                    {"SLURM_PROCID", "SLURM_NTASKS"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        long r, n;
        const char* rank = getenv(vars[i][0]);
        const char* size = getenv(vars[i][1]);
        if (rank && size && parse_long(rank, &r) && parse_long(size, &n)) return n > 1 ? (int)r : -1;
    }
    return -1;
}

static int write_all(int fd, const char* s, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return 0;
        }
        s += w;
        n -= (size_t)w;
    }
    return 1;
}

// Runs inside fatal(): plain system calls only, every failure ignored (the
// error line is already on stderr, which SageMaker sends to CloudWatch).
void sagemaker_write_failure(const char* message) {
    char dir[1100], final_path[1200], tmp_path[1200], text[2400];
    snprintf(dir, sizeof dir, "%s/output", sm.root[0] ? sm.root : sagemaker_root());
    mkdir(dir, 0755);  // exists in a real job; harmless otherwise
    snprintf(final_path, sizeof final_path, "%s/failure", dir);
    snprintf(tmp_path, sizeof tmp_path, "%s/.failure.%ld.tmp", dir, (long)getpid());

    int n;
    int rank = launcher_rank();
    if (sm.current_host && rank >= 0) n = snprintf(text, sizeof text, "%s (host %s, rank %d)\n", message, sm.current_host, rank);
    else if (rank >= 0) n = snprintf(text, sizeof text, "%s (rank %d)\n", message, rank);
    else if (sm.current_host) n = snprintf(text, sizeof text, "%s (host %s)\n", message, sm.current_host);
    else n = snprintf(text, sizeof text, "%s\n", message);
    if (n < 0) return;
    if ((size_t)n >= sizeof text) n = (int)sizeof text - 1;

    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    int ok = write_all(fd, text, (size_t)n) && fsync(fd) == 0;
    close(fd);
    if (ok) {
        // link() publishes the complete file only if no failure is there yet;
        // where hard links are unsupported, rename() publishes it (last wins).
        if (link(tmp_path, final_path) != 0 && errno != EEXIST) {
            if (rename(tmp_path, final_path) == 0) return;
        }
    }
    unlink(tmp_path);
}

static void failure_hook(const char* message) { sagemaker_write_failure(message); }

int sagemaker_detect(void) {
    const char* root = sagemaker_root();
    snprintf(sm.root, sizeof sm.root, "%s", root);
    char* config = path_join(root, "input/config");
    sm.active = is_dir(config);
    free(config);
    if (sm.active) add_fatal_hook(failure_hook);
    return sm.active;
}

// ---- hyperparameters.json ------------------------------------------------------------------------

// Appends a name to a space-separated list, ending it with "..." when full.
static void append_name(char* list, size_t size, const char* name) {
    size_t used = strlen(list);
    if (used >= 3 && strcmp(list + used - 3, "...") == 0) return;
    if (used + strlen(name) + 6 > size) {
        if (used + 5 <= size) strcat(list, used ? " ..." : "...");
        return;
    }
    if (used) strcat(list, " ");
    strcat(list, name);
}

// The flag a key names: '_' spelled as '-' (Python users write micro_batch).
static void flag_name_of(const char* key, char* out, size_t size) {
    snprintf(out, size, "%s", key);
    for (char* c = out; *c; c++)
        if (*c == '_') *c = '-';
}

static int is_reserved_key(const char* key) { return strncmp(key, "sagemaker_", 10) == 0; }

// The text a hyperparameter's value stands for, as it would be typed after the flag.
static char* value_text(const JsonValue* v) {
    if (v->type == JSON_BOOL) return xstrdup(v->boolean ? "true" : "false");
    if (v->type == JSON_NUMBER) return xstrdup(v->text);
    // JSON_STRING. The SDK's framework estimators json.dumps every value, so a
    // string arrives quoted twice ("\"gpt2-124M\""); take the inner string.
    size_t n = strlen(v->text);
    if (n >= 2 && v->text[0] == '"' && v->text[n - 1] == '"') {
        char err[64];
        JsonValue* inner = json_parse(v->text, n, err, sizeof err);
        char* s = inner && inner->type == JSON_STRING ? xstrdup(inner->text) : NULL;
        json_value_free(inner);
        if (s) return s;
    }
    return xstrdup(v->text);
}

int sagemaker_apply_hyperparameters(TrainConfig* cfg, const char* path) {
    JsonValue* doc = read_json_file(path);
    if (doc->type != JSON_OBJECT)
        fatal("%s: expected an object of hyperparameters, found %s", path, json_kind(doc->type));

    // Unknown keys first, all of them in one message, before any value is judged.
    char unknown[1024] = "";
    int num_unknown = 0;
    for (int i = 0; i < doc->count; i++) {
        char name[256];
        if (is_reserved_key(doc->keys[i])) continue;
        flag_name_of(doc->keys[i], name, sizeof name);
        if (!config_has_flag(name)) {
            char quoted[300];
            snprintf(quoted, sizeof quoted, "'%s'", doc->keys[i]);
            append_name(unknown, sizeof unknown, quoted);
            num_unknown++;
        }
        for (int j = 0; j < i; j++) {
            char other[256];
            flag_name_of(doc->keys[j], other, sizeof other);
            if (strcmp(doc->keys[j], doc->keys[i]) == 0) fatal("%s: hyperparameter '%s' is given twice", path, doc->keys[i]);
            if (strcmp(name, other) == 0)
                fatal("%s: '%s' and '%s' name the same flag --%s", path, doc->keys[j], doc->keys[i], name);
        }
    }
    if (num_unknown)
        fatal("%s: unknown hyperparameter%s %s (keys are train_gpt's flags without the dashes; see --help)", path,
              num_unknown > 1 ? "s" : "", unknown);

    int applied = 0;
    for (int i = 0; i < doc->count; i++) {
        const char* key = doc->keys[i];
        const JsonValue* v = &doc->items[i];
        if (is_reserved_key(key)) {
            sm.num_reserved++;
            continue;
        }
        if (v->type != JSON_STRING && v->type != JSON_NUMBER && v->type != JSON_BOOL)
            fatal("%s: hyperparameter '%s' is %s; expected a string, number or boolean", path, key,
                  json_kind(v->type));
        char name[256];
        flag_name_of(key, name, sizeof name);
        if (config_is_set(cfg, name)) {
            append_name(sm.overridden, sizeof sm.overridden, name);
            continue;
        }
        char* value = value_text(v);
        config_set(cfg, name, value, "hyperparameters.json: ");
        free(value);
        append_name(sm.applied, sizeof sm.applied, name);
        applied++;
    }
    json_value_free(doc);
    sm.num_applied += applied;
    sm.have_hyperparameters = 1;
    return applied;
}

// ---- resourceconfig.json -------------------------------------------------------------------------

static const char* required_string(const JsonValue* doc, const char* key, const char* path) {
    const JsonValue* v = json_get(doc, key);
    if (!v) fatal("%s: missing \"%s\"", path, key);
    if (v->type != JSON_STRING || !v->text[0]) fatal("%s: \"%s\" must be a non-empty string", path, key);
    return v->text;
}

static int compare_strings(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static void read_resources(const char* path) {
    JsonValue* doc = read_json_file(path);
    if (doc->type != JSON_OBJECT) fatal("%s: expected an object, found %s", path, json_kind(doc->type));
    sm.current_host = xstrdup(required_string(doc, "current_host", path));
    const JsonValue* hosts = json_get(doc, "hosts");
    if (!hosts || hosts->type != JSON_ARRAY || hosts->count == 0)
        fatal("%s: \"hosts\" must be a non-empty array of host names", path);
    sm.num_hosts = hosts->count;
    sm.hosts = (char**)xmalloc((size_t)sm.num_hosts * sizeof *sm.hosts);
    for (int i = 0; i < hosts->count; i++) {
        if (hosts->items[i].type != JSON_STRING || !hosts->items[i].text[0])
            fatal("%s: \"hosts\"[%d] must be a non-empty string", path, i);
        sm.hosts[i] = xstrdup(hosts->items[i].text);
    }
    // SageMaker lists them sorted already; sorting again makes host 0 (the
    // one that runs mpirun, see scripts/sagemaker/entrypoint.sh) certain.
    qsort(sm.hosts, (size_t)sm.num_hosts, sizeof *sm.hosts, compare_strings);
    sm.host_index = -1;
    for (int i = 0; i < sm.num_hosts; i++) {
        if (i > 0 && strcmp(sm.hosts[i], sm.hosts[i - 1]) == 0) fatal("%s: host '%s' is listed twice", path, sm.hosts[i]);
        if (strcmp(sm.hosts[i], sm.current_host) == 0) sm.host_index = i;
    }
    if (sm.host_index < 0) fatal("%s: current_host '%s' is not in \"hosts\"", path, sm.current_host);
    const JsonValue* iface = json_get(doc, "network_interface_name");
    if (iface && iface->type == JSON_STRING && iface->text[0]) sm.interface = xstrdup(iface->text);
    const JsonValue* type = json_get(doc, "current_instance_type");
    if (type && type->type == JSON_STRING && type->text[0]) sm.instance_type = xstrdup(type->text);
    json_value_free(doc);
    sm.have_resources = 1;
}

// ---- channels and folders ------------------------------------------------------------------------

// The directory of a data channel: $SM_CHANNEL_<NAME> when set, else
// <root>/input/data/<name> when it exists; NULL when the job has no such channel.
static char* channel_dir(const char* name) {
    char var[64] = "SM_CHANNEL_";
    size_t n = strlen(var);
    for (const char* c = name; *c && n + 1 < sizeof var; c++) var[n++] = (char)toupper((unsigned char)*c);
    var[n] = '\0';
    const char* env = getenv(var);
    if (env && env[0]) {
        if (!is_dir(env)) fatal("%s='%s' is not a directory", var, env);
        return xstrdup(env);
    }
    char sub[128];
    snprintf(sub, sizeof sub, "input/data/%s", name);
    char* dir = path_join(sm.root, sub);
    if (is_dir(dir)) return dir;
    // Pipe mode streams a channel through FIFOs named <channel>_<epoch>.
    char* fifo = (char*)xmalloc(strlen(dir) + 3);
    sprintf(fifo, "%s_0", dir);
    int piped = file_exists(fifo);
    free(fifo);
    if (piped)
        fatal("SageMaker channel '%s' uses Pipe input mode; train_gpt reads shard files: use File or FastFile mode",
              name);
    free(dir);
    return NULL;
}

// The glob for a channel's shards; fatal if it has none.
static char* channel_shards(const char* channel, const char* dir) {
    char* pattern = path_join(dir, "*.{bin,bin.zst}");
    glob_t g;
    int rc = glob(pattern, GLOB_BRACE, NULL, &g);
    size_t found = rc == 0 ? g.gl_pathc : 0;
    if (rc == 0) globfree(&g);
    if (found == 0) fatal("SageMaker channel '%s' (%s) holds no *.bin or *.bin.zst shards", channel, dir);
    return pattern;
}

// Sets a flag the command line and hyperparameters.json left alone.
static void set_default(TrainConfig* cfg, const char* flag, const char* value) {
    if (!config_is_set(cfg, flag) && !config_set(cfg, flag, value, "SageMaker: ")) fatal("internal: no flag --%s", flag);
}

static void configure_data(TrainConfig* cfg) {
    sm.train_dir = channel_dir("train");
    char* val = channel_dir("val");
    char* validation = channel_dir("validation");
    if (val && validation)
        fatal("SageMaker channels 'val' (%s) and 'validation' (%s) are both present; give one", val, validation);
    sm.val_dir = val ? val : validation;
    sm.tokenizer_dir = channel_dir("tokenizer");

    if (sm.train_dir) {
        char* p = channel_shards("train", sm.train_dir);
        set_default(cfg, "train-data", p);
        free(p);
    }
    if (sm.val_dir) {
        char* p = channel_shards(val ? "val" : "validation", sm.val_dir);
        set_default(cfg, "val-data", p);
        free(p);
    } else if (sm.train_dir) {
        // The default validation shards belong to the bundled demo corpus, not to this data.
        set_default(cfg, "val-data", "");
    }
    if (sm.tokenizer_dir) {
        char* p = path_join(sm.tokenizer_dir, "tokenizer.bin");
        if (!config_is_set(cfg, "tokenizer") && !file_exists(p))
            fatal("SageMaker channel 'tokenizer' (%s) has no tokenizer.bin", sm.tokenizer_dir);
        set_default(cfg, "tokenizer", p);
        free(p);
    } else if (sm.train_dir) {
        set_default(cfg, "tokenizer", "");
    }
}

static void configure_outputs(TrainConfig* cfg) {
    // Checkpoints: CheckpointConfig's LocalPath (the folder SageMaker syncs with S3).
    char* ckpt_config = path_join(sm.root, "input/config/checkpointconfig.json");
    if (file_exists(ckpt_config)) {
        JsonValue* doc = read_json_file(ckpt_config);
        const char* local = json_get_string(doc, "LocalPath");
        if (local && local[0]) sm.checkpoint_dir = xstrdup(local);
        json_value_free(doc);
    }
    free(ckpt_config);
    if (!sm.checkpoint_dir) sm.checkpoint_dir = path_join(sm.root, "checkpoints");
    // $TRAIN_GPT_CHECKPOINT_DIR (the job's Environment) is a choice made for
    // this job: it stays in force, as with --checkpoint-dir auto.
    const char* env_ckpt = getenv("TRAIN_GPT_CHECKPOINT_DIR");
    set_default(cfg, "checkpoint-dir", env_ckpt ? env_ckpt : sm.checkpoint_dir);

    // The metrics log: with the job's other output, uploaded as output.tar.gz at the end.
    const char* env_output = getenv("SM_OUTPUT_DATA_DIR");
    char* output_data = env_output && env_output[0] ? xstrdup(env_output) : path_join(sm.root, "output/data");
    set_default(cfg, "log-dir", output_data);
    free(output_data);

    // The final weights: into the model folder, which SageMaker uploads as model.tar.gz.
    const char* env_model = getenv("SM_MODEL_DIR");
    sm.model_dir = env_model && env_model[0] ? xstrdup(env_model) : path_join(sm.root, "model");
    set_default(cfg, "model-dir", sm.model_dir);
}

void sagemaker_configure(TrainConfig* cfg) {
    if (!sm.active) return;
    // Hosts first, so that any later failure names the host it happened on.
    char* rc = path_join(sm.root, "input/config/resourceconfig.json");
    if (file_exists(rc)) read_resources(rc);
    free(rc);
    char* hp = path_join(sm.root, "input/config/hyperparameters.json");
    if (file_exists(hp)) sagemaker_apply_hyperparameters(cfg, hp);
    free(hp);
    // NCCL bootstraps over TCP; SageMaker names the interface that reaches the other hosts.
    if (sm.interface) setenv("NCCL_SOCKET_IFNAME", sm.interface, 0);
    configure_data(cfg);
    configure_outputs(cfg);
}

void sagemaker_report(const TrainConfig* cfg, int rank) {
    if (!sm.active || rank != 0) return;
    printf("sagemaker | root %s", sm.root);
    if (sm.have_resources) {
        printf(" | host %s (%d of %d:", sm.current_host, sm.host_index + 1, sm.num_hosts);
        for (int i = 0; i < sm.num_hosts && i < 8; i++) printf(" %s", sm.hosts[i]);
        printf("%s)", sm.num_hosts > 8 ? " ..." : "");
        if (sm.instance_type) printf(" | %s", sm.instance_type);
        if (sm.interface) printf(" | interface %s", sm.interface);
    }
    printf("\n");
    if (sm.have_hyperparameters) {
        printf("sagemaker | hyperparameters.json: %d applied", sm.num_applied);
        if (sm.applied[0]) printf(" (%s)", sm.applied);
        if (sm.overridden[0]) printf(" | overridden by the command line: %s", sm.overridden);
        if (sm.num_reserved) printf(" | %d sagemaker_* keys left to the launcher", sm.num_reserved);
        printf("\n");
    }
    printf("sagemaker | channels: train %s | val %s | tokenizer %s\n", sm.train_dir ? sm.train_dir : "-",
           sm.val_dir ? sm.val_dir : "-", sm.tokenizer_dir ? sm.tokenizer_dir : "-");
    printf("sagemaker | checkpoints %s | final weights %s%s | metrics %s%s | failure reason %s/output/failure\n",
           cfg->checkpoint_dir[0] ? cfg->checkpoint_dir : "-", cfg->model_dir[0] ? cfg->model_dir : "-",
           cfg->model_dir[0] ? "/model.bin" : "", cfg->log_dir[0] ? cfg->log_dir : "-",
           cfg->log_dir[0] ? "/metrics.jsonl" : "", sm.root);
    fflush(stdout);
}
