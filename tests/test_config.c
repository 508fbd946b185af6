// test_config.c: the flag table (llm/config.c): enum flags parse into the
// enums their modules use, in the same order; the value names written to logs
// and manifests read back as the same value; --help shows every enum's values
// and every range from the table itself. (Bad values and the checks across
// flags, which are fatal, are tests/test_flags.sh's.)
#include <stdio.h>
#include <string.h>

#include "llm/config.h"
#include "llm/fp8/fp8.h"
#include "llm/plan/planner.h"
#include "llm/recompute.h"
#include "tests/testlib.h"

static TrainConfig parse(int argc, char** argv) {
    TrainConfig cfg;
    config_parse(&cfg, argc, argv);
    return cfg;
}

static int same(const char* a, const char* b) { return a && b && strcmp(a, b) == 0; }

// The names config.c gives each value are those of the module that owns the enum.
static void enum_order_matches_modules(void) {
    for (int m = RECOMPUTE_NONE; m <= RECOMPUTE_FULL; m++)
        CHECK(same(config_enum_name("recompute", m), recompute_mode_name((RecomputeMode)m)), "recompute %d: %s vs %s",
              m, config_enum_name("recompute", m), recompute_mode_name((RecomputeMode)m));
    for (int r = FP8_CURRENT; r <= FP8_RECIPE_AUTO; r++)
        CHECK(same(config_enum_name("fp8-recipe", r), fp8_recipe_name((Fp8Recipe)r)), "fp8 recipe %d", r);
    CHECK(same(config_enum_name("precision", PRECISION_FP32), precision_name(PREC_FP32)), "fp32");
    CHECK(same(config_enum_name("precision", PRECISION_BF16), precision_name(PREC_BF16)), "bf16");
    CHECK(same(config_enum_name("precision", PRECISION_FP8), precision_name(PREC_FP8)), "fp8");
    CHECK(same(config_enum_name("precision", PRECISION_AUTO), "auto"), "auto");
    CHECK(same(config_enum_name("device", DEVICE_AUTO), "auto") && same(config_enum_name("device", DEVICE_CPU), "cpu") &&
              same(config_enum_name("device", DEVICE_CUDA), "cuda"),
          "device names");
    CHECK(same(config_enum_name("on-divergence", ON_DIVERGENCE_ROLLBACK), "rollback"), "on-divergence");
    CHECK(same(config_enum_name("shard-scope", SHARD_SCOPE_NODE), "node"), "shard-scope");
    CHECK(same(config_enum_name("export-dtype", EXPORT_BF16), "bf16"), "export-dtype");
    CHECK(config_enum_name("export-dtype", 2) == NULL && config_enum_name("export-dtype", -1) == NULL,
          "a value past the list has no name");
    CHECK(config_enum_name("steps", 0) == NULL && config_enum_name("no-such-flag", 0) == NULL, "not an enum");
}

static void enum_values_parse(void) {
    char* argv[] = {"t", "--device", "cpu", "--precision=fp8", "--recompute", "selective", "--on-divergence",
                    "rollback", "--shard-scope", "node", "--export-dtype", "bf16", "--fp8-recipe", "delayed"};
    TrainConfig cfg = parse((int)(sizeof argv / sizeof argv[0]), argv);
    CHECK(cfg.device == DEVICE_CPU && cfg.precision == PRECISION_FP8 && cfg.recompute == RECOMPUTE_SELECTIVE &&
              cfg.on_divergence == ON_DIVERGENCE_ROLLBACK && cfg.shard_scope == SHARD_SCOPE_NODE &&
              cfg.export_dtype == EXPORT_BF16 && (Fp8Recipe)cfg.fp8_recipe == FP8_DELAYED,
          "parsed %d %d %d %d %d %d %d", cfg.device, cfg.precision, cfg.recompute, cfg.on_divergence, cfg.shard_scope,
          cfg.export_dtype, cfg.fp8_recipe);
    config_free(&cfg);
    char* none[] = {"t"};
    cfg = parse(1, none);
    CHECK(cfg.device == DEVICE_AUTO && cfg.precision == PRECISION_AUTO && cfg.recompute == RECOMPUTE_NONE &&
              cfg.on_divergence == ON_DIVERGENCE_STOP && cfg.shard_scope == SHARD_SCOPE_WORLD &&
              cfg.export_dtype == EXPORT_FP32 && (Fp8Recipe)cfg.fp8_recipe == FP8_RECIPE_AUTO,
          "defaults");
    CHECK(config_resume_mode(&cfg) == RESUME_AUTO, "resume default");
    config_set(&cfg, "resume", "never", "");
    CHECK(config_resume_mode(&cfg) == RESUME_NEVER, "resume never");
    config_set(&cfg, "resume", "checkpoints/step_00000010", "");
    CHECK(config_resume_mode(&cfg) == RESUME_DIR, "resume DIR");
    CHECK(config_dir_is_auto(cfg.checkpoint_dir) && !config_dir_is_auto("ckpt"), "checkpoint-dir auto");
    config_free(&cfg);
}

// Every flag's value as text (what manifests and the metrics log hold) sets
// the same value again: enums by name, numbers with every digit.
static void values_round_trip_as_text(void) {
    char* argv[] = {"t", "--precision", "bf16", "--recompute", "full", "--beta2", "0.987654321", "--zero", "3"};
    TrainConfig a = parse((int)(sizeof argv / sizeof argv[0]), argv);
    char* none[] = {"t"};
    TrainConfig b = parse(1, none);
    for (int i = 0; i < config_num_flags(); i++) {
        char v[4096];
        config_flag_value(&a, i, v, sizeof v);
        config_set(&b, config_flag_name(i), v, "");
    }
    for (int i = 0; i < config_num_flags(); i++) {
        char va[4096], vb[4096];
        config_flag_value(&a, i, va, sizeof va);
        config_flag_value(&b, i, vb, sizeof vb);
        CHECK(strcmp(va, vb) == 0, "--%s: %.100s vs %.100s", config_flag_name(i), va, vb);
    }
    CHECK(b.precision == PRECISION_BF16 && b.recompute == RECOMPUTE_FULL && b.beta2 == 0.987654321 && b.zero_stage == 3,
          "values after the round trip");
    char v[64];
    for (int i = 0; i < config_num_flags(); i++)
        if (!strcmp(config_flag_name(i), "precision")) {
            config_flag_value(&a, i, v, sizeof v);
            CHECK(!strcmp(v, "bf16") && config_flag_is_string(i), "precision as text: '%s'", v);
        }
    config_free(&a);
    config_free(&b);
}

// The line of --help for one flag, from "--name " on.
static const char* help_line(const char* help, const char* flag, char* line, size_t size) {
    char key[64];
    snprintf(key, sizeof key, "  --%s ", flag);
    const char* p = strstr(help, key);
    if (!p) return NULL;
    const char* end = strchr(p, '\n');
    snprintf(line, size, "%.*s", (int)(end ? end - p : (long)strlen(p)), p);
    return line;
}

static void help_shows_values_and_ranges(void) {
    char* text = NULL;
    size_t len = 0;
    FILE* f = open_memstream(&text, &len);
    config_print_help(f);
    fclose(f);
    char line[2048];
    CHECK(help_line(text, "precision", line, sizeof line) && strstr(line, "--precision fp32|bf16|fp8|auto"), "%.200s", line);
    CHECK(help_line(text, "recompute", line, sizeof line) && strstr(line, "--recompute none|selective|full"), "%.200s", line);
    CHECK(help_line(text, "beta1", line, sizeof line) && strstr(line, "{[0, 1)}"), "beta1: %.200s", line);
    CHECK(help_line(text, "eps", line, sizeof line) && strstr(line, "{(0, inf)}"), "eps: %.200s", line);
    CHECK(help_line(text, "threads", line, sizeof line) && strstr(line, "{[0, 1024]}"), "threads: %.200s", line);
    // The planner's longest sequence is the table's bound on --seq-len and --max-seq-len.
    char bound[64];
    snprintf(bound, sizeof bound, "{[1, %d]}", PLAN_MAX_SEQ_LEN);
    CHECK(help_line(text, "seq-len", line, sizeof line) && strstr(line, bound), "seq-len: %.200s", line);
    snprintf(bound, sizeof bound, "{[0, %d]}", PLAN_MAX_SEQ_LEN);
    CHECK(help_line(text, "max-seq-len", line, sizeof line) && strstr(line, bound), "max-seq-len: %.200s", line);
    free(text);
}

int main(void) {
    RUN(enum_order_matches_modules);
    RUN(enum_values_parse);
    RUN(values_round_trip_as_text);
    RUN(help_shows_values_and_ranges);
    return testlib_failures;
}
