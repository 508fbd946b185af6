// test_sagemaker.c: the mapping of hyperparameters.json onto the flag table,
// and the failure file. The fatal paths (unknown keys, wrong types, bad
// values) run through the real binary in tests/test_sagemaker.sh.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llm/config.h"
#include "llm/platform/sagemaker.h"
#include "tests/testlib.h"

static char tmp_dir[256];

static char* print_config(const TrainConfig* cfg) {
    char* text = NULL;
    size_t size = 0;
    FILE* f = open_memstream(&text, &size);
    config_print(cfg, f, "");
    fclose(f);
    return text;
}

static void parse_args(TrainConfig* cfg, int argc, const char** argv) { config_parse(cfg, argc, (char**)argv); }

static const char* write_json(const char* name, const char* text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE* f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

// Whether v is inside the flag's range ("[lo, hi)" etc.; NULL: anything).
static int in_range(const char* range, double v) {
    char open, close;
    char lo_text[32], hi_text[32];
    if (!range || sscanf(range, " %c %31[^, ] , %31[^])] %c", &open, lo_text, hi_text, &close) != 4) return 1;
    double lo = strtod(lo_text, NULL), hi = strtod(hi_text, NULL);
    return (open == '(' ? v > lo : v >= lo) && (close == ')' ? v < hi : v <= hi);
}

// A value of the flag's type that differs from its default and that the flag
// accepts (config_flag_allowed): another name of an enum; 0 <-> 1 (booleans
// included), other integers and reals doubled, else moved half way to the
// end of the range; strings extended.
static void other_value(const char* def, const char* allowed, char* out, size_t size) {
    long l;
    double d;
    if (allowed && strchr(allowed, '|')) {
        const char* p = allowed;
        for (;;) {
            size_t len = strcspn(p, "|");
            if (len != strlen(def) || strncmp(p, def, len) != 0) {
                snprintf(out, size, "%.*s", (int)len, p);
                return;
            }
            p += len + (p[len] == '|');
        }
    }
    if (parse_long(def, &l)) {
        long v = l == 0 || l == 1 ? 1 - l : 2 * l;
        if (!in_range(allowed, (double)v)) v = l + 1;
        if (!in_range(allowed, (double)v)) v = l - 1;
        snprintf(out, size, "%ld", v);
    } else if (parse_double(def, &d)) {
        double v = 2 * d;
        if (!in_range(allowed, v)) v = d + (1 - d) / 2;  // the ranges that end have their end at 1
        snprintf(out, size, "%.17g", v);
    } else {
        snprintf(out, size, "%sx", def);
    }
}

static const char* allowed_of(const char* name) {
    for (int i = 0; i < config_num_flags(); i++)
        if (!strcmp(config_flag_name(i), name)) return config_flag_allowed(i);
    return NULL;
}

// Every flag of the table (taken from config_print, so a new flag is covered
// without editing this test) is a hyperparameter, spelled with '-' or '_',
// and `{"flag": "value"}` gives exactly the configuration `--flag value` gives.
static void every_flag_is_a_hyperparameter(void) {
    TrainConfig defaults;
    const char* argv0[] = {"train_gpt"};
    parse_args(&defaults, 1, argv0);
    char* listing = print_config(&defaults);
    int flags = 0;
    for (char* line = strtok(listing, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], def[256] = "", value[300], key[128], json[700];
        if (sscanf(line, "%127s %255[^\n]", name, def) < 1) continue;
        other_value(def, allowed_of(name), value, sizeof value);

        TrainConfig by_flag, by_file;
        const char* argv[] = {"train_gpt", NULL, value};
        char dashed[140];
        snprintf(dashed, sizeof dashed, "--%s", name);
        argv[1] = dashed;
        parse_args(&by_flag, 3, argv);
        char* want = print_config(&by_flag);

        snprintf(key, sizeof key, "%s", name);
        if (flags % 2)
            for (char* c = key; *c; c++)
                if (*c == '-') *c = '_';
        snprintf(json, sizeof json, "{\"%s\": \"%s\"}", key, value);
        parse_args(&by_file, 1, argv0);
        int applied = sagemaker_apply_hyperparameters(&by_file, write_json("hp.json", json));
        char* got = print_config(&by_file);

        CHECK(applied == 1, "%.200s: %d applied", json, applied);
        CHECK(strcmp(got, want) == 0, "%.200s configures differently from %s %.100s", json, dashed, value);
        CHECK(config_is_set(&by_file, name), "%.200s: --%s not marked as set", json, name);
        CHECK(strcmp(want, print_config(&defaults)) != 0, "%s %s did not change the configuration", dashed, value);
        free(want);
        free(got);
        flags++;
    }
    CHECK(flags >= 30, "only %d flags listed by config_print", flags);
    free(listing);
}

// SageMaker writes strings; numbers, booleans and doubly quoted strings (the
// SDK's framework estimators json.dumps each value) mean the same.
static void value_types(void) {
    TrainConfig cfg;
    const char* argv0[] = {"train_gpt"};
    parse_args(&cfg, 1, argv0);
    const char* path = write_json("types.json",
                                  "{\"model\": \"\\\"d6\\\"\", \"steps\": 7, \"shuffle\": false, \"lr\": \"6e-4\",\n"
                                  " \"micro_batch\": \"3\", \"grad-clip\": 0.5, \"train-data\": \"/data/x_*.bin\",\n"
                                  " \"val-data\": \"\", \"seed\": \"-5\", \"sagemaker_program\": \"train.sh\"}");
    int applied = sagemaker_apply_hyperparameters(&cfg, path);
    CHECK(applied == 9, "applied %d of 9", applied);
    CHECK(strcmp(cfg.model, "d6") == 0, "model '%s'", cfg.model);
    CHECK(cfg.steps == 7 && cfg.shuffle == 0 && cfg.micro_batch == 3 && cfg.seed == -5, "ints/bools: %d %d %d %ld",
          cfg.steps, cfg.shuffle, cfg.micro_batch, cfg.seed);
    CHECK(cfg.lr == 6e-4 && cfg.grad_clip == 0.5, "reals: %g %g", cfg.lr, cfg.grad_clip);
    CHECK(strcmp(cfg.train_data, "/data/x_*.bin") == 0 && cfg.val_data[0] == 0, "strings: '%s' '%s'", cfg.train_data,
          cfg.val_data);
}

// Flags on the command line win over the file; the rest of the file applies.
static void command_line_wins(void) {
    TrainConfig cfg;
    const char* argv[] = {"train_gpt", "--steps", "5", "--lr=0.25"};
    parse_args(&cfg, 4, argv);
    int applied = sagemaker_apply_hyperparameters(
        &cfg, write_json("cli.json", "{\"steps\": \"9\", \"lr\": \"0.5\", \"warmup\": \"2\", \"sagemaker_mpi_enabled\": \"true\"}"));
    CHECK(applied == 1, "applied %d, want 1 (warmup)", applied);
    CHECK(cfg.steps == 5 && cfg.lr == 0.25 && cfg.warmup == 2, "steps %d lr %g warmup %d", cfg.steps, cfg.lr, cfg.warmup);
}

// The first failure on a host is kept whole; a later one does not replace it
// and leaves no temporary file behind.
static void failure_file_first_writer_wins(void) {
    char root[300], path[400];
    snprintf(root, sizeof root, "%s/opt_ml", tmp_dir);
    mkdir(root, 0755);
    setenv("TRAIN_GPT_SM_ROOT", root, 1);
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
    sagemaker_write_failure("--steps: 'x' is not an integer");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    sagemaker_write_failure("a consequence");
    snprintf(path, sizeof path, "%s/output/failure", root);
    FILE* f = fopen(path, "r");
    char text[256] = "";
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    CHECK(strcmp(text, "--steps: 'x' is not an integer (rank 3)\n") == 0, "failure file holds '%s'", text);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s/output' | wc -l) -eq 1", root);
    CHECK(system(cmd) == 0, "temporary files left in %s/output", root);
    unsetenv("TRAIN_GPT_SM_ROOT");
}

int main(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_sagemaker.XXXXXX");
    if (!mkdtemp(tmp_dir)) return 1;
    RUN(every_flag_is_a_hyperparameter);
    RUN(value_types);
    RUN(command_line_wins);
    RUN(failure_file_first_writer_wins);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
    return TESTS_DONE();
}
