/* Fuzz target: the token-shard reader (engine/run/data.c, llm.c shard format),
 * then a loader over what it accepted. */
#include "dt_fuzz.h"

#include "dt_data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = dt_fuzz_file(data, size, path, sizeof path);
    dt_error err;
    dt_error_clear(&err);
    dt_corpus *c = NULL;
    if (dt_corpus_open(path, "llmc", 50257, &c, &err) == DT_OK) {
        dt_loader *l = NULL;
        if (dt_loader_create(c, 4, 1, 0, -1, 1, 7, 0, 1, "fuzz", &l, &err) == DT_OK) dt_loader_free(l);
        dt_corpus_free(c);
    }
    close(fd);
    return 0;
}
