// schedule.h: the learning-rate schedule: linear warmup, then cosine decay
// from the peak to a floor, reached at the last step; or, with --llmc-compat,
// llm.c's cosine, computed as llm.c does in float, whose decay runs over
// total - warmup steps and so never reaches the floor (the last step is one
// step short of it).
#pragma once

#include <math.h>

typedef struct {
    double peak;        // learning rate after warmup
    double final_frac;  // the floor is peak * final_frac
    int warmup;         // steps of linear warmup
    int total;          // total optimizer steps
    int llmc;           // llm.c's schedule (llm.c's schedulers.h, "cosine")
} LRSchedule;

static inline double lr_at_llmc(const LRSchedule* s, int step) {
    float peak = (float)s->peak;
    if (step < s->warmup) return peak * ((float)(step + 1)) / s->warmup;
    float decay_ratio = ((float)(step - s->warmup)) / (s->total - s->warmup);
    float coeff = 0.5f * (1.0f + cosf((float)(M_PI * decay_ratio)));  // (M_PI is a double, as in llm.c)
    float min_lr = peak * (float)s->final_frac;
    return min_lr + coeff * (peak - min_lr);
}

// Learning rate of optimizer step `step` (0-based). Warmup reaches the peak
// at its last step ((step+1)/warmup), so step 0 already trains.
static inline double lr_at(const LRSchedule* s, int step) {
    if (s->llmc) return lr_at_llmc(s, step);
    if (step < s->warmup) return s->peak * (double)(step + 1) / (double)s->warmup;
    double floor_lr = s->peak * s->final_frac;
    int decay_steps = s->total - s->warmup;
    if (decay_steps <= 1) return s->peak;
    double progress = (double)(step - s->warmup) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    return floor_lr + 0.5 * (1.0 + cos(M_PI * progress)) * (s->peak - floor_lr);
}
