// train.cu: main(). Reads as the table of contents of training:
// configuration -> backend -> model and data -> the loop -> final outputs.
// No kernel code lives here; every step is a call into llm/ (model, trainer,
// report) which in turn calls the backend through kernels/ops.h.
//
// Plain C, compiled the same way in every build: the CUDA parts are reached
// through kernels/cuda_seam.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm/checkpoint/checkpoint.h"
#include "llm/parallel/comm.h"
#include "llm/config.h"
#include "llm/eval.h"
#include "llm/generate.h"
#include "llm/platform/device.h"
#include "llm/checkpoint/divergence.h"
#include "llm/plan/plan_cli.h"
#include "llm/precision.h"
#include "llm/report/report.h"
#include "llm/platform/sagemaker.h"
#include "llm/trainer.h"
#include "llm/parallel/watchdog.h"

int main(int argc, char** argv) {
    // 0. The ranks: MPI tells this process who it is (a world of one without mpirun).
    //    Inside a SageMaker training container a fatal error from here on is also
    //    reported to SageMaker.
    sagemaker_detect();
    Comm* comm = comm_init(&argc, &argv);

    // 1. Configuration: flags with defaults that train the bundled demo; inside
    //    SageMaker also its hyperparameters, data channels and output folders.
    TrainConfig cfg;
    config_parse(&cfg, argc, argv);
    sagemaker_configure(&cfg);
    config_check(&cfg);  // the checks across flags, once every source has set them
    // This rank's GPU (by its local rank) becomes current before anything else touches CUDA.
    device_select_gpu(cfg.device, comm->local_rank);
    // --plan: the memory bill and the recommended configuration; no data, no model.
    if (cfg.plan) {
        int status = plan_command(&cfg);
        comm_finalize(comm);
        return status;
    }
    // --auto: the recommendation fills in the settings not given explicitly.
    if (cfg.auto_plan) plan_auto(&cfg);
    // --precision auto: bf16 or fp8 by model size on GPUs, fp32 on the CPU.
    precision_resolve(&cfg);
    // No collective may hang for ever from here on (--collective-timeout).
    watchdog_start(cfg.collective_timeout, comm->rank, comm->world);

    // 2. The compute backend: a GPU when present (this rank's, by local rank), else the CPU reference.
    Backend* be = backend_open(cfg.device, cfg.precision, cfg.threads, comm->local_rank, comm->local_world);
    backend_choose_attention(be, cfg.attention, comm->rank == 0);  // cuDNN's fused attention or ours (--attention)

    // 3. Sharding over the ranks, model, data, tokenizer, batch geometry; print what we are about to do.
    Trainer tr;
    trainer_setup(&tr, &cfg, be, comm);

    // 4. Checkpoints: continue from the newest complete one (--resume auto);
    //    SIGTERM/SIGINT from here on end the run with a checkpoint.
    EvalFile* eval = eval_open(&tr);  // --eval-data: multiple-choice accuracy
    Checkpointer* ck = checkpointer_create(&cfg, &tr);
    divergence_check_flags(&cfg, ck);
    checkpoint_resume(ck);
    // --generate: continue --prompt with these weights, and stop.
    if (cfg.generate) {
        generate_run(&tr);
        checkpointer_free(ck);
        eval_close(eval);
        trainer_free(&tr);
        comm_finalize(comm);
        be->destroy(be);
        return 0;
    }
    RankReducer across_ranks = comm_rank_reducer(comm);  // memory and telemetry: min/max over the ranks
    report_set_reducer(&across_ranks);
    report_open(&tr);
    report_run_summary(&tr);
    sagemaker_report(&cfg, tr.rank);

    // 5. The loop: evaluate and sample on schedule, then one optimizer step,
    //    then a checkpoint when one is due. After --max-bad-steps skipped
    //    steps in a row: stop, or roll back to the newest checkpoint.
    int stopped = 0;
    for (int step = tr.first_step; step < cfg.steps && !stopped; step++) {
        watchdog_set_step(step + 1);
        if (tr.has_val && every(step, cfg.val_every)) {
            double val_loss = trainer_validate(&tr);
            if (!tr.stop_requested) report_validation(&tr, step, val_loss);  // (not a partial one)
        }
        if (eval && every(step, cfg.eval_every) && !tr.stop_requested) eval_and_report(&tr, step, eval);
        // (context parallelism holds no whole sequence to sample from)
        if (tr.cp == 1 && every(step, cfg.sample_every) && !tr.stop_requested) {
            char* text = trainer_sample(&tr, step);
            report_sample(&tr, step, text);
            free(text);
        }
        // A stop signal during validation or sampling: checkpoint the steps done, now.
        if (tr.stop_requested) {
            stopped = checkpoint_after_step(ck, step);
            break;
        }
        StepResult r = trainer_step(&tr, step);
        report_step(&tr, step, &r);
        if (guard_exhausted(&tr.guard)) {
            step = divergence_recover(ck, &tr, step + 1) - 1;  // exit 1, or go on after the checkpoint's step
            continue;
        }
        stopped = checkpoint_after_step(ck, step + 1);
    }
    checkpoint_end(ck);  // the last step's checkpoint; waits for background writes

    // 6. Final validation and sample, then the weights for other tools;
    //    after a stop signal only the checkpoint matters, and the clock runs.
    if (!stopped) {
        if (tr.has_val) {
            double val_loss = trainer_validate(&tr);
            if (!tr.stop_requested) report_validation(&tr, cfg.steps, val_loss);
        }
        if (eval && !tr.stop_requested) eval_and_report(&tr, cfg.steps, eval);
        if (tr.cp == 1 && cfg.sample_every > 0 && !tr.stop_requested) {
            char* text = trainer_sample(&tr, cfg.steps);
            report_sample(&tr, cfg.steps, text);
            free(text);
        }
        if (cfg.export_path[0]) {
            trainer_export(&tr, cfg.export_path, cfg.export_dtype == EXPORT_BF16 ? DTYPE_BF16 : DTYPE_F32);
            printf("exported weights to %s (llm.c format, %s)\n", cfg.export_path, config_enum_name("export-dtype", cfg.export_dtype));
        }
        if (cfg.export_hf[0]) {
            trainer_export_hf(&tr, cfg.export_hf, cfg.export_hf_dtype == EXPORT_BF16 ? DTYPE_BF16 : DTYPE_F32);
            printf("exported weights to %s (Hugging Face folder, %s)\n", cfg.export_hf,
                   config_enum_name("export-hf-dtype", cfg.export_hf_dtype));
        }
        checkpoint_export_model_dir(ck);
        report_memory_peak(&tr);
    }

    report_close(&tr);
    checkpointer_free(ck);
    eval_close(eval);
    trainer_free(&tr);
    comm_finalize(comm);
    be->destroy(be);
    return 0;
}
