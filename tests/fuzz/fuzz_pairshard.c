/* Fuzz target: the pair-shard reader (engine/data/pairshard.c, dt_pairshard.h) and a batch
 * of what it accepted (truncation to a short sequence, the prompt-length refusal). An input
 * with the DTPS magic gets its two CRC-32C sums made right before it is read, so mutations reach
 * the header's counts, the index and the tokens instead of stopping at the checksum (whose
 * refusal tests/engine/test_objectives.sh covers). */
#include "dt_fuzz_crc.h"

#include "dt_pairshard.h"

#define FUZZ_VOCAB 1500   /* qwen2-mini's, the corpus' tokenizer */
#define FUZZ_T 8          /* a short sequence: sides are cut, long prompts refused */
#define PAYLOAD_CRC_AT 96 /* dt_pairshard.h's table */
#define HEADER_CRC_SPAN 100

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64];
    int fd = dt_fuzz_shard_file(data, size, DT_PAIRSHARD_MAGIC, PAYLOAD_CRC_AT, HEADER_CRC_SPAN, path, sizeof path);
    dt_error err;
    dt_error_clear(&err);
    dt_pairset *s = NULL;
    const dt_pairset_opts o = {.vocab = FUZZ_VOCAB};
    if (dt_pairset_open(path, &o, &s, &err) == DT_OK) {
        int64_t idx[2] = {0, dt_pairset_count(s) - 1}, cut = 0;
        int32_t ids[2 * 2 * FUZZ_T], tg[2 * 2 * FUZZ_T];
        if (dt_pairset_count(s) > 0) {
            (void)dt_pairset_check_len(s, FUZZ_T, &err);
            (void)dt_pairset_batch(s, idx, 2, FUZZ_T, ids, tg, &cut, &err);
        }
        dt_pairset_free(s);
    }
    close(fd);
    return 0;
}
