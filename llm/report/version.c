// version.c: the build's version string. The Makefile passes it as
// -DTRAIN_GPT_VERSION to this one file only, so a new commit recompiles
// this object and relinks, nothing else.
#include "llm/report/version.h"

#ifndef TRAIN_GPT_VERSION
#define TRAIN_GPT_VERSION "unknown"
#endif

const char* train_gpt_version(void) { return TRAIN_GPT_VERSION; }
