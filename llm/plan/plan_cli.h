// plan_cli.h: --plan and --auto. The flags become a plan request (model,
// sequence, explicit choices, the device and the world size), the planner
// answers, the answer is printed, and --auto writes it into the settings of
// the run before the backend opens.
#pragma once

#include <stdio.h>

#include "llm/config.h"
#include "llm/plan/planner.h"

EXTERN_C_BEGIN

// Exit status of --plan when no configuration fits (0 when one does).
#define PLAN_EXIT_NOTHING_FITS 2

// --plan: prints the bill and the recommendation; returns the exit status.
// Opens no data and allocates no model.
int plan_command(const TrainConfig* cfg);

// --auto: fills micro-batch, recompute, ZeRO stage and precision (those not
// set explicitly) with the recommendation for the device this run trains on,
// and prints it. Fatal when nothing fits.
void plan_auto(TrainConfig* cfg);

// The world size and ranks per node from the MPI launcher's environment
// (Open MPI, or PMI), 0 when not launched by one.
void plan_mpi_world(int* world, int* local);

// Prints a bill as the table --plan shows (units: GiB, or MiB under 4 GiB).
void plan_print_bill(FILE* f, const PlanConfig* pc, const MemoryBill* b, const PlanDevice* dev);

EXTERN_C_END
