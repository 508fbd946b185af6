// hf_logits.c: a helper of tests/test_hf.sh (not a test itself): loads a
// Hugging Face model folder with --init-from's reader (llm/hf/) on the CPU
// backend in FP32, runs the model over the tokens of one sequence, and writes
// what transformers is compared against.
//   hf_logits DIR TOKENS OUT
// TOKENS: int32 ids x[0..T] (T + 1 of them); OUT: T x V float32 logits of
// the inputs x[0..T-1] (the real vocabulary, padding dropped), then the mean
// cross-entropy of predicting x[1..T] as one float32.
#include <stdio.h>
#include <stdlib.h>

#include "llm/arch/arch.h"
#include "llm/model/model.h"
#include "llm/hf/hf.h"

int main(int argc, char** argv) {
    if (argc != 4) fatal("usage: hf_logits DIR TOKENS OUT");
    int64_t bytes = file_size(argv[2]);
    if (bytes < 8 || bytes % 4) fatal("%s: want at least 2 int32 token ids", argv[2]);
    int T = (int)(bytes / 4) - 1;
    int32_t* tok = (int32_t*)xmalloc((size_t)bytes);
    FILE* f = xfopen(argv[2], "rb");
    xfread(tok, (size_t)bytes, f, argv[2], "tokens");
    fclose(f);

    GPTConfig c;
    hf_read_config(argv[1], &c);
    if (T > c.max_seq_len) fatal("%d tokens exceed the model's %d positions", T, c.max_seq_len);
    Backend* be = cpu_backend_create(DTYPE_F32, 0);
    GPT m;
    gpt_create(&m, &c, be, 1, T, 1, 0, 0);
    hf_load_weights(&m, argv[1]);
    be->to_device(be, m.inputs, tok, (size_t)T * 4);
    be->to_device(be, m.targets, tok + 1, (size_t)T * 4);
    gpt_forward(&m, m.inputs, m.targets, 1, T, 0.0f);
    gpt_accumulate_loss(&m, 1, T, 0);
    float sum;
    be->to_host(be, &sum, m.scalars, 4);
    int V = c.vocab_size, Vp = c.padded_vocab_size;
    float* row = (float*)xmalloc((size_t)Vp * 4);
    FILE* out = xfopen(argv[3], "wb");
    for (int t = 0; t < T; t++) {
        gpt_logits_row(&m, t, row);
        xfwrite(row, (size_t)V * 4, out, argv[3]);
    }
    float mean = sum / T;
    xfwrite(&mean, 4, out, argv[3]);
    xfclose(out, argv[3]);
    printf("hf_logits: %s: %s, %d tokens, loss %.6f\n", argv[1], arch_name(c.arch), T, mean);
    free(row);
    free(tok);
    gpt_free(&m);
    be->destroy(be);
    return 0;
}
