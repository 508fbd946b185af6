// efa.h: NCCL over EFA (Elastic Fabric Adapter), the network of AWS's GPU
// instances (p4d, p5, p5e, p5en, p6). NCCL reaches EFA only through the
// aws-ofi-nccl plugin; without it NCCL falls back to its TCP socket
// transport, silently, and a multi-node job hangs or runs far slower. So on
// an EFA instance type a run of more than one node reads which network NCCL
// chose and stops at once when it is the sockets (--allow-nccl-sockets 1
// lets it run anyway). scripts/sagemaker/entrypoint.sh does the matching
// checks before the run: the environment NCCL over EFA needs, and the
// plugin's library under the name NCCL looks for.
//
// The instance type is SageMaker's (resourceconfig.json's
// current_instance_type, under /opt/ml or $TRAIN_GPT_SM_ROOT) or
// $TRAIN_GPT_INSTANCE_TYPE. NCCL's choice is its log line "Using network
// NAME", which NCCL writes with NCCL_DEBUG=INFO: when NCCL_DEBUG is unset,
// the check sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET and
// NCCL_DEBUG_FILE to a file of its own for the start-up, then removes it.
#pragma once

#include <stddef.h>

#include "llm/util/util.h"

EXTERN_C_BEGIN

// Whether an instance type ("ml.p5.48xlarge", "p5.48xlarge") has EFA.
int efa_instance_type_has_efa(const char* type);
// The instance type this process runs on, or "" when it is not known.
void efa_instance_type(char* out, size_t size);
// The network NCCL's log says it uses ("Socket", "AWS Libfabric", "IB"), or
// "" when the log does not say.
void nccl_log_network(const char* log, char* out, size_t size);

// The decision: 1 with the reason in why when a run of `nodes` nodes on
// `type` communicates over NCCL's sockets between nodes, although it has EFA.
int efa_sockets_problem(const char* type, int nodes, const char* network, char* why, size_t whysize);

typedef struct {
    int active;        // this run is checked
    int own_log;       // the check set NCCL_DEBUG and owns the log file
    int nodes;
    char type[64];
    char log_path[256];
} EfaCheck;

// Before NCCL starts: decides whether to check, and sets up NCCL's log.
void efa_check_begin(EfaCheck* c, int nodes, int allow_sockets);
// After NCCL started: fatal when it chose its sockets between nodes.
void efa_check_end(EfaCheck* c);

EXTERN_C_END
