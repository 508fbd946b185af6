// hf_config.c: a Hugging Face config.json, read into our model shape and
// written from it (GPT-2: model_type "gpt2"; Llama: model_type "llama").
// Keys that only matter to training in transformers (dropout, initializer
// range, token ids) are ignored on read; keys whose value would change the
// model's math into one we cannot run are refused, naming the key.
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/arch/arch.h"
#include "llm/hf/hf.h"
#include "llm/util/json_read.h"
#include "llm/util/strbuf.h"

int hf_is_folder(const char* path) { return is_dir(path); }

static int ends_with(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

void hf_refuse_folder_file(const char* path) {
    if (ends_with(path, ".safetensors") || ends_with(path, "config.json") || ends_with(path, "index.json"))
        fatal("--init-from %s: give the Hugging Face folder (the directory holding config.json), not one of its files",
              path);
}

typedef struct {
    const char* path;  // DIR/config.json, for messages
    const JsonValue* root;
} Cfg;

static int has(const Cfg* c, const char* key) {
    const JsonValue* v = json_get(c->root, key);
    return v && v->type != JSON_NULL;
}

static int get_int(const Cfg* c, const char* key, int required, int def) {
    const JsonValue* v = json_get(c->root, key);
    if (!v || v->type == JSON_NULL) {
        if (required) fatal("%s: missing key \"%s\"", c->path, key);
        return def;
    }
    int x;
    if (!json_get_int(c->root, key, &x)) fatal("%s: \"%s\" is not an integer", c->path, key);
    return x;
}

static double get_num(const Cfg* c, const char* key, double def) {
    const JsonValue* v = json_get(c->root, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type != JSON_NUMBER) fatal("%s: \"%s\" is not a number", c->path, key);
    return v->number;
}

static int get_bool(const Cfg* c, const char* key, int def) {
    const JsonValue* v = json_get(c->root, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type != JSON_BOOL) fatal("%s: \"%s\" is not true or false", c->path, key);
    return v->boolean;
}

static const char* get_str(const Cfg* c, const char* key, const char* def) {
    const JsonValue* v = json_get(c->root, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type != JSON_STRING) fatal("%s: \"%s\" is not a string", c->path, key);
    return v->text;
}

// A boolean option the model does not have: absent or false only.
static void refuse_true(const Cfg* c, const char* key, const char* why) {
    if (get_bool(c, key, 0)) fatal("%s: \"%s\": true is not supported (%s)", c->path, key, why);
}

// GPT-2's LayerNorm uses eps 1e-5 (the kernels' LN_EPS).
static void require_eps(const Cfg* c, const char* key) {
    double eps = get_num(c, key, 1e-5);
    if (fabs(eps - 1e-5) > 1e-9) fatal("%s: \"%s\" %g is not supported (the model's LayerNorm uses 1e-05)", c->path, key, eps);
}

// get_int for a count or a size: fatal unless it is positive.
static int get_positive(const Cfg* c, const char* key, int required, int def) {
    int v = get_int(c, key, required, def);
    if (v <= 0) fatal("%s: \"%s\" must be positive (got %d)", c->path, key, v);
    return v;
}

static void read_gpt2(const Cfg* c, GPTConfig* m) {
    m->arch = ARCH_GPT2;
    m->channels = get_positive(c, "n_embd", 1, 0);
    m->num_heads = get_positive(c, "n_head", 1, 0);
    m->num_layers = get_positive(c, "n_layer", 1, 0);
    m->max_seq_len = get_positive(c, "n_positions", 1, 0);
    m->vocab_size = get_positive(c, "vocab_size", 1, 0);
    if (m->channels % m->num_heads != 0)
        fatal("%s: \"n_embd\" %d is not divisible by \"n_head\" %d", c->path, m->channels, m->num_heads);
    int inner = get_int(c, "n_inner", 0, 4 * m->channels);
    if (inner != 4 * m->channels)
        fatal("%s: \"n_inner\" %d is not supported (the MLP is 4 x n_embd = %d)", c->path, inner, 4 * m->channels);
    const char* act = get_str(c, "activation_function", "gelu_new");
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        fatal("%s: \"activation_function\" \"%s\" is not supported (GELU's tanh form: gelu_new)", c->path, act);
    require_eps(c, "layer_norm_epsilon");
    if (!get_bool(c, "tie_word_embeddings", 1))
        fatal("%s: \"tie_word_embeddings\": false is not supported for GPT-2 (its LM head is wte)", c->path);
    if (!get_bool(c, "scale_attn_weights", 1))
        fatal("%s: \"scale_attn_weights\": false is not supported (attention scales by 1/sqrt(head size))", c->path);
    refuse_true(c, "scale_attn_by_inverse_layer_idx", "attention scales by 1/sqrt(head size) only");
    refuse_true(c, "add_cross_attention", "a decoder only model");
}

static void read_llama(const Cfg* c, GPTConfig* m) {
    m->arch = ARCH_LLAMA;
    m->channels = get_positive(c, "hidden_size", 1, 0);
    m->num_heads = get_positive(c, "num_attention_heads", 1, 0);
    m->num_layers = get_positive(c, "num_hidden_layers", 1, 0);
    m->mlp_hidden = get_positive(c, "intermediate_size", 1, 0);
    m->vocab_size = get_positive(c, "vocab_size", 1, 0);
    m->max_seq_len = get_positive(c, "max_position_embeddings", 0, 2048);
    m->num_kv_heads = get_positive(c, "num_key_value_heads", 0, m->num_heads);
    if (m->channels % m->num_heads != 0)
        fatal("%s: \"hidden_size\" %d is not divisible by \"num_attention_heads\" %d", c->path, m->channels, m->num_heads);
    if (m->num_heads % m->num_kv_heads != 0)
        fatal("%s: \"num_attention_heads\" %d is not divisible by \"num_key_value_heads\" %d", c->path, m->num_heads,
              m->num_kv_heads);
    int hs = m->channels / m->num_heads;
    if (has(c, "head_dim") && get_int(c, "head_dim", 0, hs) != hs)
        fatal("%s: \"head_dim\" %d is not supported (it must be hidden_size / num_attention_heads = %d)", c->path,
              get_int(c, "head_dim", 0, hs), hs);
    if (hs % 2 != 0) fatal("%s: head size %d (hidden_size / num_attention_heads) is odd; RoPE needs it even", c->path, hs);
    const char* act = get_str(c, "hidden_act", "silu");
    if (strcmp(act, "silu")) fatal("%s: \"hidden_act\" \"%s\" is not supported (SwiGLU: silu)", c->path, act);
    refuse_true(c, "attention_bias", "the attention projections have no biases");
    refuse_true(c, "mlp_bias", "the MLP has no biases");
    double eps = get_num(c, "rms_norm_eps", 1e-6);
    if (!(eps > 0 && eps <= 1e-2)) fatal("%s: \"rms_norm_eps\" %g is not in (0, 0.01]", c->path, eps);
    m->norm_eps = (float)eps;
    m->tie_embeddings = get_bool(c, "tie_word_embeddings", 0);
    double theta = get_num(c, "rope_theta", 10000.0);
    if (!(theta > 1.0)) fatal("%s: \"rope_theta\" %g must be greater than 1", c->path, theta);
    m->rope_theta = (float)theta;
    const JsonValue* rs = json_get(c->root, "rope_scaling");
    if (rs && rs->type != JSON_NULL) {
        if (rs->type != JSON_OBJECT) fatal("%s: \"rope_scaling\" is not an object or null", c->path);
        Cfg s = {c->path, rs};
        const char* type = get_str(&s, "rope_type", get_str(&s, "type", ""));
        if (!strcmp(type, "default")) return;
        if (strcmp(type, "llama3"))
            fatal("%s: \"rope_scaling\" type \"%s\" is not supported (llama3 or none)", c->path, type);
        m->rope_scaling.factor = (float)get_num(&s, "factor", 0);
        m->rope_scaling.low_freq_factor = (float)get_num(&s, "low_freq_factor", 0);
        m->rope_scaling.high_freq_factor = (float)get_num(&s, "high_freq_factor", 0);
        m->rope_scaling.original_max_pos = get_int(&s, "original_max_position_embeddings", 0, 0);
        const RopeScaling* r = &m->rope_scaling;
        if (!(r->factor > 0) || !(r->low_freq_factor > 0) || !(r->high_freq_factor > r->low_freq_factor) ||
            r->original_max_pos <= 0)
            fatal("%s: \"rope_scaling\" (llama3) needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                  "original_max_position_embeddings > 0",
                  c->path);
    }
}

// The shape comes from config.json, the values from the safetensors files:
// a shape the files cannot hold (an intermediate_size of 1e9) is refused
// here, before the model's memory is allocated, rather than by the
// allocator. At least one byte per parameter: the files' dtypes take 2 or 4,
// which leaves room for the vocabulary's padding rows (not in the files).
static void check_size_against_files(const char* dir, const char* path, const GPTConfig* m) {
    int64_t bytes = 0;
    int files = 0;
    DIR* d = opendir(dir);
    struct dirent* de;
    while (d && (de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 12 || strcmp(de->d_name + n - 12, ".safetensors") != 0) continue;
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        int64_t s = file_size(p);
        bytes += s > 0 ? s : 0;
        files++;
    }
    if (d) closedir(d);
    if (!files) return;  // (the weights' reader names what is missing)
    size_t params = gpt_num_params(m);
    if ((double)params <= (double)bytes) return;
    if (m->arch == ARCH_LLAMA)
        fatal("%s: \"hidden_size\" %d, \"intermediate_size\" %d, \"num_hidden_layers\" %d and \"vocab_size\" %d describe "
              "%zu parameters, more than the folder's safetensors files (%lld bytes) hold",
              path, m->channels, m->mlp_hidden, m->num_layers, m->vocab_size, params, (long long)bytes);
    fatal("%s: \"n_embd\" %d, \"n_layer\" %d and \"vocab_size\" %d describe %zu parameters, more than the folder's "
          "safetensors files (%lld bytes) hold",
          path, m->channels, m->num_layers, m->vocab_size, params, (long long)bytes);
}

void hf_read_config(const char* dir, GPTConfig* out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int64_t size = file_size(path);
    if (size < 0) fatal("%s: no such file (a Hugging Face model folder has config.json)", path);
    if (size > (64 << 20)) fatal("%s: %lld bytes, too large for a config file", path, (long long)size);
    FILE* f = xfopen(path, "rb");
    char* text = (char*)xmalloc((size_t)size + 1);
    xfread(text, (size_t)size, f, path, "config");
    fclose(f);
    char err[160];
    JsonValue* root = json_parse(text, (size_t)size, err, sizeof err);
    free(text);
    if (!root) fatal("%s: not valid JSON: %s", path, err);
    if (root->type != JSON_OBJECT) fatal("%s: not a JSON object", path);
    Cfg c = {path, root};
    const char* type = get_str(&c, "model_type", NULL);
    if (!type) fatal("%s: missing key \"model_type\" (gpt2 or llama)", path);
    const JsonValue* arch = json_get(root, "architectures");
    if (arch && arch->type != JSON_NULL) {
        if (arch->type != JSON_ARRAY || arch->count != 1 || arch->items[0].type != JSON_STRING)
            fatal("%s: \"architectures\" is not a list of one name", path);
        const char* a = arch->items[0].text;
        int ok = !strcmp(type, "gpt2") ? !strcmp(a, "GPT2LMHeadModel") || !strcmp(a, "GPT2Model")
                                       : !strcmp(a, "LlamaForCausalLM") || !strcmp(a, "LlamaModel");
        if (!ok) fatal("%s: \"architectures\" [\"%s\"] is not supported with model_type \"%s\"", path, a, type);
    }
    GPTConfig m;
    memset(&m, 0, sizeof m);
    if (!strcmp(type, "gpt2")) read_gpt2(&c, &m);
    else if (!strcmp(type, "llama")) read_llama(&c, &m);
    else fatal("%s: \"model_type\" \"%s\" is not supported (gpt2 or llama)", path, type);
    json_value_free(root);
    char why[160];
    if (gpt_config_invalid(&m, why, sizeof why)) fatal("%s: the model it describes is out of range: %s", path, why);
    gpt_config_finish(&m);
    check_size_against_files(dir, path, &m);
    *out = m;
}

// The shortest decimal that reads back as the same float (1e-05, not 9.99999975e-06).
static const char* short_float(char* buf, size_t size, float v) {
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, size, "%.*g", digits, (double)v);
        if ((float)strtod(buf, NULL) == v) break;
    }
    return buf;
}

char* hf_config_json(const GPTConfig* c, DType dtype, int eot_id) {
    char eps[32], theta[32];
    short_float(eps, sizeof eps, c->norm_eps > 0 ? c->norm_eps : 1e-5f);
    short_float(theta, sizeof theta, c->rope_theta);
    StrBuf sb = {0};
    char ids[96] = "";
    if (eot_id >= 0) snprintf(ids, sizeof ids, "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n", eot_id, eot_id);
    const char* td = dtype == DTYPE_BF16 ? "bfloat16" : "float32";
    if (c->arch == ARCH_GPT2) {
        sb_printf(&sb,
                  "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                  "  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"n_layer\": %d,\n  \"n_positions\": %d,\n"
                  "  \"n_ctx\": %d,\n  \"n_inner\": null,\n  \"vocab_size\": %d,\n"
                  "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                  "  \"attn_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"resid_pdrop\": 0.0,\n"
                  "  \"scale_attn_weights\": true,\n  \"tie_word_embeddings\": true,\n"
                  "  \"initializer_range\": 0.02,\n%s  \"torch_dtype\": \"%s\"\n}\n",
                  c->channels, c->num_heads, c->num_layers, c->max_seq_len, c->max_seq_len, c->vocab_size, ids, td);
    } else {
        sb_printf(&sb,
                  "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                  "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_attention_heads\": %d,\n"
                  "  \"num_key_value_heads\": %d,\n  \"num_hidden_layers\": %d,\n  \"vocab_size\": %d,\n"
                  "  \"max_position_embeddings\": %d,\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": %s,\n"
                  "  \"rope_theta\": %s,\n",
                  c->channels, c->mlp_hidden, c->num_heads, c->num_kv_heads, c->num_layers, c->vocab_size,
                  c->max_seq_len, eps, theta);
        char f[3][32];
        if (c->rope_scaling.factor > 0)
            sb_printf(&sb,
                      "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
                      "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d},\n",
                      short_float(f[0], 32, c->rope_scaling.factor), short_float(f[1], 32, c->rope_scaling.low_freq_factor),
                      short_float(f[2], 32, c->rope_scaling.high_freq_factor), c->rope_scaling.original_max_pos);
        else
            sb_printf(&sb, "  \"rope_scaling\": null,\n");
        sb_printf(&sb,
                  "  \"tie_word_embeddings\": %s,\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                  "  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n%s  \"torch_dtype\": \"%s\"\n}\n",
                  c->tie_embeddings ? "true" : "false", ids, td);
    }
    return sb.data;
}
