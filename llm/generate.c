// generate.c: --generate (see generate.h): prompt -> tokens, then one forward
// per new token over the last --seq-len tokens (no KV cache), pick, print.
#include "llm/generate.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/util/rng.h"

static int compare_desc(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int generate_pick(const float* logits, int V, double temperature, int top_k, float u) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    // Only logits at or above the k-th largest take part (all of them when top_k is 0 or >= V).
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float* sorted = (float*)xmalloc((size_t)V * sizeof *sorted);
        memcpy(sorted, logits, (size_t)V * sizeof *sorted);
        qsort(sorted, (size_t)V, sizeof *sorted, compare_desc);
        cut = sorted[top_k - 1];
        free(sorted);
    }
    double mx = logits[best], total = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] >= cut) total += exp(((double)logits[i] - mx) / temperature);
    double target = u * total, cum = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (logits[i] < cut) continue;
        cum += exp(((double)logits[i] - mx) / temperature);
        last = i;
        if (cum > target) return i;
    }
    return last;  // u * total rounded up to the total
}

// The prompt as tokens: encoded text, or (no tokenizer) space-separated ids;
// an empty prompt is the end-of-text token.
static int32_t* prompt_tokens(Trainer* tr, int V, int* n) {
    const char* p = tr->cfg->prompt;
    int32_t* toks = NULL;
    size_t count = 0;
    if (tr->has_tok && p[0]) {
        count = tokenizer_encode(&tr->tok, p, strlen(p), &toks);
    } else if (p[0]) {
        toks = (int32_t*)xmalloc((strlen(p) / 2 + 1) * sizeof *toks);
        for (const char* s = p; *s;) {
            while (*s == ' ') s++;
            if (!*s) break;
            char* end;
            long id = strtol(s, &end, 10);
            if (end == s || (*end && *end != ' ') || id < 0 || id >= V)
                fatal("--prompt '%s': without a --tokenizer it must be token ids below %d separated by spaces", p, V);
            toks[count++] = (int32_t)id;
            s = end;
        }
    }
    if (count == 0) {
        free(toks);
        toks = (int32_t*)xmalloc(sizeof *toks);
        toks[0] = tr->has_tok ? tr->tok.eot : V - 1;
        count = 1;
    }
    *n = (int)count;
    return toks;
}

int generate_run(Trainer* tr) {
    const TrainConfig* cfg = tr->cfg;
    GPT* m = &tr->model;
    int V = m->config.vocab_size, T = tr->T, n_new = cfg->sample_tokens;
    if (cfg->temperature < 0) fatal("--temperature must not be negative (got %g)", cfg->temperature);
    if (cfg->top_k < 0) fatal("--top-k must not be negative (got %d)", cfg->top_k);
    int n;
    int32_t* prompt = prompt_tokens(tr, V, &n);
    int32_t* toks = (int32_t*)xmalloc((size_t)(n + n_new) * sizeof *toks);
    memcpy(toks, prompt, (size_t)n * sizeof *toks);
    free(prompt);
    float* logits = (float*)xmalloc((size_t)m->config.padded_vocab_size * sizeof *logits);
    uint64_t key = rng_key((uint64_t)cfg->seed, 0x6E4E, 0);
    char buf[1024];
    if (tr->rank == 0) {
        printf("generate  | %d prompt tokens, %d new | temperature %g | top-k %d | seed %ld\n", n, n_new,
               cfg->temperature, cfg->top_k, cfg->seed);
        fputs(cfg->prompt, stdout);
    }
    for (int i = 0; i < n_new; i++) {
        int len = n + i, ctx = len < T ? len : T;
        tr->be->to_device(tr->be, m->inputs, toks + (len - ctx), (size_t)ctx * sizeof *toks);
        gpt_forward(m, m->inputs, NULL, 1, ctx, 0.0f);
        gpt_logits_row(m, ctx - 1, logits);
        int next = generate_pick(logits, V, cfg->temperature, cfg->top_k, rng_uniform(key, (uint64_t)i));
        toks[len] = next;
        if (tr->rank != 0) continue;
        if (tr->has_tok) {
            size_t b = tokenizer_decode_token(&tr->tok, next, buf, sizeof buf);
            fwrite(buf, 1, b, stdout);
        } else {
            printf("%s%d", i == 0 && !cfg->prompt[0] ? "" : " ", next);
        }
        fflush(stdout);  // stream each token as it comes
    }
    if (tr->rank == 0) {
        printf("\n");
        fflush(stdout);
    }
    free(logits);
    free(toks);
    return n_new;
}
