// version.h: which build of train_gpt this is, so that a run can be cited.
#pragma once

#include "llm/util/util.h"

EXTERN_C_BEGIN

// `git describe --always --dirty` of the tree the binary was built from
// (e.g. "f07a9b5-dirty"), or "unknown" when it was built outside git.
const char* train_gpt_version(void);

EXTERN_C_END
