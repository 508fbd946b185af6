// prepare_shards.h: a text corpus to token shards with a tiktoken-compatible
// tokenizer, on all cores, in bounded memory (dev/prepare_data's corpus mode).
//
// Every document is encoded as tiktoken's encode_ordinary does and preceded
// by the end-of-text token (as llm.c's data scripts do), so eot separates
// documents. A document goes to the validation split when the xxHash64 of its
// text falls under val_fraction: deterministic, independent of input order,
// and duplicates always land on the same side. Shards are llm.c's format:
// uint16 tokens (version 1) when the vocabulary fits, else uint32 (version 2);
// each holds shard_tokens tokens (the last of a split fewer), documents run
// on into the next. DIR/manifest.json, written last, lists the inputs, splits
// and shards. The same inputs and flags give the same bytes, whatever the
// thread count or memory limit.
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char* tokenizer;  // tiktoken rank file or llm.c's gpt2_tokenizer.bin
    const char* pattern;    // NULL: from the vocabulary
    const char* out_dir;
    const char* prefix;     // shard names: PREFIX_train_000000.bin, PREFIX_val_000000.bin
    const char* text_field; // .jsonl member holding the text
    char** inputs;
    int num_inputs;
    uint64_t shard_tokens;
    double val_fraction;
    size_t memory_mb;  // bound on the buffers (besides the tokenizer's tables)
    int threads;       // 0: all cores
    int progress;      // 1: a progress bar (stderr is a terminal), 0: a line every 10 s
} ShardOptions;

void prepare_shards(const ShardOptions* o);
