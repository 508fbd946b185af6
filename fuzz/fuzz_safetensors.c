// fuzz_safetensors.c: safetensors files (llm/hf/safetensors.c): the header's
// checks (length, JSON, dtypes, shapes, offsets tiling the data), then the
// values of every tensor small enough, as float32 (F32, F16, BF16; any other
// dtype must be refused in one line).
#include "fuzz/fuzz.h"
#include "llm/hf/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_input(data, size, ".safetensors");
    static StFile f;
    static float vals[4096];
    FUZZ_TRY {
        st_open(&f, path);
        for (int i = 0; i < f.num_tensors; i++) {
            const StTensor* t = &f.tensors[i];
            if (st_numel(t) > 4096) continue;
            if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && i > 0) continue;
            st_read_f32(&f, t, vals);  // tensor 0 of another dtype: the refusal is checked too
        }
        st_close(&f);
    } else {
        fuzz_expect_clean_error(path);
    }
    return 0;
}
