// schedule.h: the learning-rate schedule: linear warmup, then cosine decay
// from the peak to a floor, reached at the last step.
#pragma once

#include <math.h>

typedef struct {
    double peak;        // learning rate after warmup
    double final_frac;  // the floor is peak * final_frac
    int warmup;         // steps of linear warmup
    int total;          // total optimizer steps
} LRSchedule;

// Learning rate of optimizer step `step` (0-based). Warmup reaches the peak
// at its last step ((step+1)/warmup), so step 0 already trains.
static inline double lr_at(const LRSchedule* s, int step) {
    if (step < s->warmup) return s->peak * (double)(step + 1) / (double)s->warmup;
    double floor_lr = s->peak * s->final_frac;
    int decay_steps = s->total - s->warmup;
    if (decay_steps <= 1) return s->peak;
    double progress = (double)(step - s->warmup) / (double)(decay_steps - 1);
    if (progress > 1.0) progress = 1.0;
    return floor_lr + 0.5 * (1.0 + cos(M_PI * progress)) * (s->peak - floor_lr);
}
