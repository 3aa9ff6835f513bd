/* dt_quant.h — how a parameter tensor is stored: a float dtype, or one of
 * bitsandbytes' quantised formats with its quantisation state, and the exact bytes
 * that costs. The planner reads the sizes (docs/memory-model.md "Fine-tuning");
 * the kernels that produce and read the bytes live in the engine's kernel room
 * (engine/device/dt_quant4.h). Sources: bitsandbytes functional.py quantize_4bit /
 * quantize_blockwise, nn/modules.py Params4bit / Int8Params; Dettmers et al. 2023,
 * "QLoRA", arXiv 2305.14314, §2-3. All sizes are bytes unless a name says elements. */
#ifndef DT_QUANT_H
#define DT_QUANT_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_precision.h"

typedef enum {
    DT_STORAGE_FP32 = 0,
    DT_STORAGE_BF16 = 1,
    DT_STORAGE_FP16 = 2,
    DT_STORAGE_NF4 = 3,    /* 4-bit NormalFloat codes, two per byte, absmax per block */
    DT_STORAGE_FP4 = 4,    /* bitsandbytes' 4-bit float (1 sign, 2 exponent, 1 mantissa bits) */
    DT_STORAGE_INT8 = 5    /* LLM.int8 (Linear8bitLt): int8 per element, fp32 scale per row */
} dt_storage;

/* bitsandbytes' defaults (Params4bit blocksize=64; quantize_4bit compress_statistics
 * quantises the absmax with quantize_blockwise(blocksize=256)). */
#define DT_QUANT_BLOCK 64
#define DT_QUANT_NESTED_BLOCK 256
#define DT_QUANT_4BIT_CODES 16     /* the NF4 / FP4 code book: 16 fp32 values (quant_map) */
#define DT_QUANT_DYNAMIC_CODES 256 /* the 8-bit dynamic map of the nested absmax (nested_quant_map) */

const char *dt_storage_name(dt_storage s);   /* "fp32" | "bf16" | "fp16" | "nf4" | "fp4" | "int8" */
int dt_storage_parse(const char *s, dt_storage *out, dt_error *err);
int dt_storage_is_quantized(dt_storage s);
dt_storage dt_storage_of_dtype(dt_dtype t);

/* Bytes of one [rows, cols] weight stored as s, with its quantisation state:
 *   float dtypes: rows x cols x size;
 *   NF4 / FP4 (n = rows x cols, nb = ceil(n / block)): ceil(n / 2) packed bytes + the
 *     16-value fp32 code book + either nb fp32 absmax (double_quant 0) or nb uint8
 *     quantised absmax + ceil(nb / 256) fp32 nested absmax + the 256-value fp32 dynamic
 *     map + the fp32 nested offset (double_quant 1);
 *   INT8: n bytes + rows fp32 scales (SCB).
 * block: absmax block size in elements (DT_QUANT_BLOCK). */
int64_t dt_storage_tensor_bytes(dt_storage s, int64_t rows, int64_t cols, int double_quant, int64_t block);

#endif
