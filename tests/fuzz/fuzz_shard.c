/* Fuzz target: the token-shard reader (engine/data/data.c: llm.c shards and dtrun's v2
 * shards, dt_shard.h), then a loader over what it accepted, with the loss mask. A v2
 * input gets its two CRC-32C sums made right before it is read, so mutations reach the
 * header's fields and the tokens instead of stopping at the checksum (whose refusal the
 * unit tests cover: tests/engine/test_data.c). */
#include "dt_fuzz_crc.h"

#include "dt_data.h"

#define PAYLOAD_CRC_AT 96   /* dt_shard.h's table */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = dt_fuzz_shard_file(data, size, DT_SHARD2_MAGIC, PAYLOAD_CRC_AT, DT_SHARD2_CRC_SPAN, path, sizeof path);
    dt_error err;
    dt_error_clear(&err);
    dt_corpus *c = NULL;
    if (dt_corpus_open(path, "llmc", 50257, &c, &err) == DT_OK) {
        dt_loader *l = NULL;
        if (dt_loader_create(c, 4, 1, 0, -1, 1, 7, 0, 1, "fuzz", &l, &err) == DT_OK) {
            int32_t in[4], tg[4];
            uint8_t m[4];
            dt_loader_next_masked(l, in, tg, m);
            dt_loader_free(l);
        }
        dt_corpus_free(c);
    }
    close(fd);
    return 0;
}
