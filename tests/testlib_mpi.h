// testlib_mpi.h: testlib.h's RUN for test programs that also run under
// mpirun: every rank runs the case, a case fails if it failed on any rank,
// and the case's name ends in _w<ranks>. The including program defines
// `static Comm* comm` (llm/parallel/comm.h) before using MPI_RUN.
#pragma once

#include "llm/parallel/comm.h"
#include "tests/testlib.h"

#define MPI_RUN(fn)                                                                               \
    do {                                                                                          \
        testlib_case_failed = 0;                                                                  \
        testlib_first[0] = 0;                                                                     \
        fn();                                                                                     \
        double failed_ = testlib_case_failed;                                                     \
        comm_host_sum(comm, COMM_WORLD, &failed_, 1);                                             \
        testlib_cases++;                                                                          \
        if (failed_ > 0) {                                                                        \
            testlib_failures++;                                                                   \
            printf("FAIL %s_w%d: %s\n", #fn, comm->world,                                         \
                   testlib_first[0] ? testlib_first : "failed on another rank");                  \
        } else {                                                                                  \
            printf("ok %s_w%d\n", #fn, comm->world);                                              \
        }                                                                                         \
        fflush(stdout);                                                                           \
    } while (0)
