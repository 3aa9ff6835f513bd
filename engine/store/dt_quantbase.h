/* dt_quantbase.h — QLoRA's quantised base on disk (engine/model/dt_lm.h DT_LM_SET_QUANT,
 * docs/finetune.md "QLoRA in dtrun").
 *
 * In: a model's float weights (a Hugging Face directory or .safetensors file, by name, any of
 * F32 / BF16 / F16) quantised on load as bitsandbytes quantises them when transformers loads
 * with a BitsAndBytesConfig; or, from a file that holds them quantised (a dtrun QLoRA
 * checkpoint's model.safetensors), their bytes as they are, checked against the plan's format.
 *
 * Out (a checkpoint's model.safetensors, beside the trained and the unquantised base tensors):
 * each quantised weight W (its Hugging Face key) in bitsandbytes' serialised form, as
 * Linear4bit's state dict holds it (bitsandbytes nn/modules.py Params4bit, functional.py
 * QuantState.as_dict(packed=True)):
 *   W                                     U8 [(n + 1) / 2, 1]  the packed codes
 *   W.absmax                              F32 [nb], or U8 [nb] when double-quantised
 *   W.quant_map                           F32 [16]             the code book
 *   W.nested_absmax, W.nested_quant_map   F32 [nnb], F32 [256] (double quantisation)
 *   W.quant_state.bitsandbytes__nf4|fp4   U8 [len]             json.dumps of quant_type,
 *                                         blocksize, dtype, shape (and nested_blocksize,
 *                                         nested_dtype, nested_offset), as pack_dict_to_tensor
 * These bytes are the checkpoint's fingerprint of the quantised base: a resume re-quantises the
 * base from output.init (or the seed) and requires every byte equal. */
#ifndef DT_QUANTBASE_H
#define DT_QUANTBASE_H

#include "dt_error.h"
#include "dt_lm.h"
#include "dt_safetensors.h"

/* g's quantised set from path (a directory or a .safetensors file): quantised from the float
 * weights, or read as stored when path holds them in the form above. pdt: the model's param
 * dtype (the quant state's "dtype"). DT_OK at once when g has no quantised set; DT_EINVAL naming
 * the file and tensor for a missing or misshapen one, or a stored state of another format,
 * block or shape (the fix: plan the --quant / --double-quant / --quant-block it was made with). */
int dt_quantbase_load(dt_lm *g, dt_dtype pdt, const char *path, dt_error *err);
/* Adds the quantised set's tensors to w, with their data (with_data) or as layout only (for a
 * streaming writer, then dt_quantbase_put). */
int dt_quantbase_add(dt_st_writer *w, dt_lm *g, dt_dtype pdt, int with_data, dt_error *err);
int dt_quantbase_put(dt_lm *g, dt_dtype pdt, dt_st_stream *s, dt_error *err);
/* Every byte of g's quantised set equals what file (a checkpoint's model.safetensors) holds:
 * DT_EINVAL naming the file and the first tensor that differs or is missing. */
int dt_quantbase_check(dt_lm *g, dt_dtype pdt, const char *file, dt_error *err);

#endif
