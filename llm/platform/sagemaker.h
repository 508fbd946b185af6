// sagemaker.h: running inside an Amazon SageMaker training container without
// SageMaker's Python toolkit.
//
// SageMaker describes a job to the container through files under /opt/ml
// (the SM_* environment variables exist only where its Python toolkit runs,
// so the files are the source of truth for a C program):
//
//   input/config/hyperparameters.json  flag values, as JSON strings
//   input/config/resourceconfig.json   current_host, hosts, network_interface_name
//   input/config/checkpointconfig.json LocalPath of the S3-synced checkpoint folder
//   input/data/<channel>/              the data channels: train, val (or validation), tokenizer
//   checkpoints/                       synced with checkpoint_s3_uri (default LocalPath)
//   model/                             tarred and uploaded once at the end of the job
//   output/failure                     its first 1,024 bytes become the job's FailureReason
//
// The container is detected by the directory <root>/input/config, where root
// is /opt/ml or $TRAIN_GPT_SM_ROOT (which makes all of it testable with a fake
// tree). Outside SageMaker none of this does anything.
#pragma once

#include "llm/config.h"
#include "llm/util/util.h"

EXTERN_C_BEGIN

// Detects the container and, inside one, registers the fatal hook that
// writes <root>/output/failure. Call first in main(), before the flags are
// parsed, so that a bad flag is also reported to SageMaker. Returns 1 inside.
int sagemaker_detect(void);
// Whether sagemaker_detect() found a container.
int sagemaker_active(void);
// /opt/ml, or $TRAIN_GPT_SM_ROOT when set.
const char* sagemaker_root(void);

// Inside the container: reads resourceconfig.json, applies
// hyperparameters.json (flags given on the command line win), points
// --train-data, --val-data and --tokenizer at the channels, --checkpoint-dir
// at the S3-synced folder, --model-dir at the model folder and --log-dir at
// output/data (unless given), and sets NCCL_SOCKET_IFNAME to the job's
// network interface unless already set. Outside: does nothing.
void sagemaker_configure(TrainConfig* cfg);

// Prints what was taken from SageMaker (rank 0 only).
void sagemaker_report(const TrainConfig* cfg, int rank);

// ---- the pieces, exposed for tests --------------------------------------------------------------

// Applies one hyperparameters.json onto cfg through the flag table. Keys are
// flag names without the dashes ('_' also accepted for '-'); values may be
// strings (SageMaker writes every value as one; a JSON-quoted string inside
// is unquoted, as the SDK's framework estimators write them), numbers or
// booleans. Keys starting with "sagemaker_" belong to the SageMaker SDK and
// are skipped. A flag already given on the command line keeps its value.
// Fatal on unknown keys (naming all of them), on values of the wrong JSON
// type, and on values the flag does not accept. Returns the number applied.
int sagemaker_apply_hyperparameters(TrainConfig* cfg, const char* path);

// Writes the failure reason for SageMaker, atomically, the first writer on a
// host winning: the first fatal error is the cause, later ones (other ranks
// torn down by it) are consequences. Safe to call from a fatal hook.
void sagemaker_write_failure(const char* message);

EXTERN_C_END
