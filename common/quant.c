/* quant.c — storage formats and their byte counts (dt_quant.h). */
#include "dt_quant.h"

#include <string.h>

static const char *const k_store_names[] = {"fp32", "bf16", "fp16", "nf4", "fp4", "int8"};
#define N_STORES ((int)(sizeof k_store_names / sizeof k_store_names[0]))

#define FP32_BYTES 4
#define CODES_PER_BYTE 2   /* two 4-bit codes per uint8 (quant_storage=torch.uint8, the default) */
#define NESTED_OFFSET_BYTES FP32_BYTES   /* QuantState.offset: absmax.mean(), one fp32 scalar */

const char *dt_storage_name(dt_storage s) { return (unsigned)s < (unsigned)N_STORES ? k_store_names[s] : "?"; }

int dt_storage_parse(const char *s, dt_storage *out, dt_error *err) {
    for (int i = 0; i < N_STORES; i++)
        if (s && !strcmp(s, k_store_names[i])) {
            *out = (dt_storage)i;
            return DT_OK;
        }
    return dt_errorf(err, DT_EINVAL, "unknown storage format '%s' (fp32, bf16, fp16, nf4, fp4 or int8)", s ? s : "");
}

int dt_storage_is_quantized(dt_storage s) { return s == DT_STORAGE_NF4 || s == DT_STORAGE_FP4 || s == DT_STORAGE_INT8; }

dt_storage dt_storage_of_dtype(dt_dtype t) {
    return t == DT_DTYPE_BF16 ? DT_STORAGE_BF16 : t == DT_DTYPE_FP16 ? DT_STORAGE_FP16 : DT_STORAGE_FP32;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t dt_storage_tensor_bytes(dt_storage s, int64_t rows, int64_t cols, int double_quant, int64_t block) {
    const int64_t n = rows * cols;
    if (n <= 0) return 0;
    switch (s) {
    case DT_STORAGE_FP32: return FP32_BYTES * n;
    case DT_STORAGE_BF16:
    case DT_STORAGE_FP16: return 2 * n;
    case DT_STORAGE_INT8: return n + FP32_BYTES * rows;   /* Int8Params CB [rows, cols] int8 + SCB [rows] fp32 */
    case DT_STORAGE_NF4:
    case DT_STORAGE_FP4: {
        const int64_t nb = ceil_div(n, block > 0 ? block : DT_QUANT_BLOCK);
        int64_t bytes = ceil_div(n, CODES_PER_BYTE) + FP32_BYTES * DT_QUANT_4BIT_CODES;
        if (!double_quant) return bytes + FP32_BYTES * nb;
        /* quantize_blockwise(absmax - offset, blocksize=256): uint8 per block, fp32 absmax
         * per 256 blocks, the dynamic map, and the offset */
        return bytes + nb + FP32_BYTES * ceil_div(nb, DT_QUANT_NESTED_BLOCK) + FP32_BYTES * DT_QUANT_DYNAMIC_CODES +
               NESTED_OFFSET_BYTES;
    }
    }
    return 0;
}
