/* Fuzz target: the safetensors reader (engine/store/safetensors.c): header,
 * offsets, dtypes, and reading every tensor it accepted. */
#include "dt_fuzz.h"

#include "dt_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = dt_fuzz_file(data, size, path, sizeof path);
    dt_error err;
    dt_error_clear(&err);
    dt_st_file *f = NULL;
    if (dt_st_open(path, &f, &err) == DT_OK) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < dt_st_count(f); i++) {
            const dt_st_tensor *t = dt_st_get(f, i);
            const uint8_t *p = dt_st_data(f, t);
            if (p && t->end > t->begin) sink ^= p[0] ^ p[t->end - t->begin - 1];   /* every accepted range is readable */
            (void)dt_st_find(f, t->name);
        }
        (void)dt_st_metadata(f, "format");
        (void)sink;
        dt_st_close(f);
    }
    close(fd);
    return 0;
}
