// train.cu: main(). Reads as the table of contents of training:
// configuration -> backend -> model and data -> the loop -> final outputs.
// No kernel code lives here; every step is a call into llm/ (model, trainer,
// report) which in turn calls the backend through kernels/ops.h.
//
// Compiled by nvcc in CUDA builds and by gcc as C otherwise, so it keeps to
// the common subset of C and C++.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/checkpoint.h"
#include "llm/config.h"
#include "llm/device.h"
#include "llm/llmc_io.h"
#include "llm/report.h"
#include "llm/trainer.h"

int main(int argc, char** argv) {
    // 1. Configuration: flags with defaults that train the bundled demo.
    TrainConfig cfg;
    config_parse(&cfg, argc, argv);

    // 2. The compute backend: a GPU when present, else the CPU reference.
    Backend* be = backend_open(cfg.device, cfg.precision, cfg.threads);

    // 3. Model, data, tokenizer, batch geometry; print what we are about to do.
    Trainer tr;
    trainer_setup(&tr, &cfg, be);
    report_run_summary(&tr);

    // 4. Checkpoints: continue from the newest complete one (--resume auto);
    //    SIGTERM/SIGINT from here on end the run with a checkpoint.
    Checkpointer* ck = checkpointer_create(&cfg, &tr);
    checkpoint_resume(ck);

    // 5. The loop: evaluate and sample on schedule, then one optimizer step,
    //    then a checkpoint when one is due.
    int stopped = 0;
    for (int step = tr.first_step; step < cfg.steps && !stopped; step++) {
        if (tr.has_val && every(step, cfg.val_every)) report_validation(&tr, step, trainer_validate(&tr));
        if (every(step, cfg.sample_every)) {
            char* text = trainer_sample(&tr, step);
            report_sample(&tr, step, text);
            free(text);
        }
        StepResult r = trainer_step(&tr, step);
        if (step % cfg.log_every == 0 || step + 1 == cfg.steps) report_step(&tr, step, &r);
        stopped = checkpoint_after_step(ck, step + 1);
    }
    checkpoint_end(ck);  // the last step's checkpoint; waits for background writes
    if (stopped) {       // a stop signal: the checkpoint is what matters, and the clock is running
        checkpointer_free(ck);
        trainer_free(&tr);
        be->destroy(be);
        return 0;
    }

    // 6. Final validation and sample, then the weights for other tools.
    if (tr.has_val) report_validation(&tr, cfg.steps, trainer_validate(&tr));
    if (cfg.sample_every > 0) {
        char* text = trainer_sample(&tr, cfg.steps);
        report_sample(&tr, cfg.steps, text);
        free(text);
    }
    if (cfg.export_path[0]) {
        llmc_save_weights(&tr.model, cfg.export_path, strcmp(cfg.export_dtype, "bf16") == 0 ? DTYPE_BF16 : DTYPE_F32);
        printf("exported weights to %s (llm.c format, %s)\n", cfg.export_path, cfg.export_dtype);
    }
    checkpoint_export_model_dir(ck);

    checkpointer_free(ck);
    trainer_free(&tr);
    be->destroy(be);
    return 0;
}
