/* dt_quant4.h — bitsandbytes' blockwise quantisation on the host: the NF4 / FP4
 * weights QLoRA trains over (functional.py quantize_4bit / dequantize_4bit) and the
 * 8-bit double quantisation of their absmax (quantize_blockwise with the dynamic map),
 * bit for bit as bitsandbytes' CPU back-end computes them (tests/kernels/test_quant4.c
 * against scripts/gen_quant_goldens.py's goldens). Formats, block sizes and byte counts:
 * common/dt_quant.h. Every size is in elements; no function allocates. */
#ifndef DT_QUANT4_H
#define DT_QUANT4_H

#include <stdint.h>

#include "dt_dtype.h"
#include "dt_quant.h"

/* The 16 values of fmt's code book (DT_STORAGE_NF4 or DT_STORAGE_FP4) in code order, as
 * bitsandbytes' get_4bit_type returns them (FP4: the e2m1 values divided by their
 * largest, 12). */
void dt_quant4_code(dt_storage fmt, float code[DT_QUANT_4BIT_CODES]);
/* The 8-bit signed dynamic map (create_dynamic_map(signed=True), 256 sorted values). */
void dt_quant_dynamic_map(float map[DT_QUANT_DYNAMIC_CODES]);
/* Blocks of `block` elements covering n (the last may be partial). */
int64_t dt_quant_blocks(int64_t n, int64_t block);

/* x [n] (the weight's values in fp32; a bf16 / fp16 weight converted exactly) ->
 * packed [(n + 1) / 2] (two codes a byte, the first in the high nibble), absmax
 * [dt_quant_blocks(n, block)] fp32. */
void dt_quant4_quantize(const float *x, int64_t n, dt_storage fmt, int64_t block, uint8_t *packed, float *absmax);
/* packed, absmax -> out [n] fp32 (code x absmax, the code as bitsandbytes' kernels hold it:
 * FP4's code 8 is -0.0; the caller rounds to its dtype). */
void dt_quant4_dequantize(const uint8_t *packed, const float *absmax, int64_t n, dt_storage fmt, int64_t block,
                          float *out);
/* The same into out [n] of dtype dt: DT_DTYPE_FP32 (float) or DT_DTYPE_BF16 (dt_bf16, the fp32
 * value rounded to nearest even, as bitsandbytes' dequantize_4bit to a bf16 quant state). */
void dt_quant4_dequantize_as(const uint8_t *packed, const float *absmax, int64_t n, dt_storage fmt, int64_t block,
                             dt_dtype dt, void *out);

/* Double quantisation of nb fp32 absmax values (compress_statistics): offset = their mean,
 * qabsmax [nb] the 8-bit codes of absmax - offset in blocks of DT_QUANT_NESTED_BLOCK,
 * nested_absmax [dt_quant_blocks(nb, DT_QUANT_NESTED_BLOCK)] fp32. */
void dt_quant4_double(const float *absmax, int64_t nb, uint8_t *qabsmax, float *nested_absmax, float *offset);
/* The inverse: absmax [nb] = map[qabsmax] x nested_absmax + offset. */
void dt_quant4_undouble(const uint8_t *qabsmax, const float *nested_absmax, float offset, int64_t nb, float *absmax);
/* dt_quant4_dequantize of a double-quantised weight, each block's absmax undoubled as
 * dt_quant4_undouble computes it (map: dt_quant_dynamic_map's) and used at once, so no
 * [nb] absmax is materialised; the same values bit for bit. Blocks run in parallel. */
void dt_quant4_dequantize_nested(const uint8_t *packed, const uint8_t *qabsmax, const float *nested_absmax, float offset,
                                 const float map[DT_QUANT_DYNAMIC_CODES], int64_t n, dt_storage fmt, int64_t block,
                                 float *out);
/* The same into out [n] of dtype dt (DT_DTYPE_FP32 or DT_DTYPE_BF16), as dt_quant4_dequantize_as. */
void dt_quant4_dequantize_nested_as(const uint8_t *packed, const uint8_t *qabsmax, const float *nested_absmax,
                                    float offset, const float map[DT_QUANT_DYNAMIC_CODES], int64_t n, dt_storage fmt,
                                    int64_t block, dt_dtype dt, void *out);

#endif
