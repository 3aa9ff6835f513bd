/* dt_ckpt.h — model weights in Hugging Face form, and resumable training
 * checkpoints (docs/dtrun.md "Checkpoint format").
 *
 * A checkpoint is a directory OUT/ckpt-<step, 8 digits>/ holding
 *   model.safetensors          params in their dtype, HF GPT-2 names
 *                              ("transformer.h.0.attn.c_attn.weight", lm_head tied, not stored)
 *   config.json                HF GPT2Config, so transformers can load the directory
 *   optim-<rank>-of-<world>.safetensors
 *                              this rank's contiguous element range of the flat
 *                              optimizer state: "exp_avg", "exp_avg_sq" (moment dtype)
 *                              and "master" (fp32, when the preset has one)
 *   state.json                 step counters, loss-scaler state, data position and the
 *                              data's tokenizer fingerprint, RNG, the run id, and every
 *                              other file's size and CRC-32C ("files")
 * It is written as OUT/.ckpt-<step>.tmp/ (every file fsynced), renamed into place
 * and the parent directory fsynced, so a directory named ckpt-* is always complete.
 * After a save only the newest keep_last ckpt-* directories of the same run id
 * remain; checkpoints of other runs, and files dtrun did not write, are never
 * removed. Loading verifies every file it reads against its recorded sum and
 * state.json against itself, the plan's model and precision, and the files. */
#ifndef DT_CKPT_H
#define DT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "dt_data.h"
#include "dt_error.h"
#include "dt_lm.h"
#include "dt_model.h"
#include "dt_optim.h"
#include "dt_zero.h"

#define DT_CKPT_FORMAT "dtrun.ckpt/1"
#define DT_CKPT_PREFIX "ckpt-"
/* A LoRA run's PEFT adapter inside a checkpoint directory (engine/run/dt_runadapter.h writes
 * it; dt_ckpt_remove removes it with the checkpoint). */
#define DT_CKPT_ADAPTER_DIR "adapter"
#define DT_RUN_ID_LEN 16   /* hex digits of a run id */
#define DT_CKPT_FINGERPRINT_HEX (2 * DT_SHARD2_FINGERPRINT_BYTES)   /* state.json data.tokenizer_fingerprint */

/* Everything besides tensors that a bitwise-identical resume needs. */
typedef struct dt_train_state {
    int64_t step;            /* optimizer steps taken, skipped (overflowed) ones included */
    int64_t adam_step;       /* successful steps: AdamW bias correction t and the LR schedule */
    int64_t skipped_steps;   /* fp16 overflow skips */
    int64_t tokens;          /* training tokens consumed */
    dt_loss_scaler scaler;
    dt_loader_pos data;
    uint64_t rng;            /* the trainer's generator state */
    char run_id[DT_RUN_ID_LEN + 1];   /* the run (series of checkpoints) this state belongs to; "" unknown */
    /* the tokenizer fingerprint of the training shards (dt_corpus_fingerprint), lowercase
     * hex; "" when the data has none (text, llm.c shards) or the checkpoint is older */
    char data_fingerprint[DT_CKPT_FINGERPRINT_HEX + 1];
} dt_train_state;

/* ---- weights ---- */

/* Writes g's params with HF names (prefix "transformer.", param dtype): from
 * the flat buffer in place where the host addresses it, else streamed through
 * one dt_io_chunk_bytes() host buffer. */
int dt_weights_save(dt_lm *g, dt_dtype param_dtype, const char *path, dt_error *err);
/* Loads params from a .safetensors file (HF names with or without "transformer.",
 * F32/BF16/F16, converted to param_dtype; lm_head.weight and attn.bias buffers
 * ignored) or an llm.c .bin checkpoint (magic 20240326, version 3 fp32 or 5 bf16;
 * Linear [out, in] weights transposed to Conv1D [in, out], padded vocab rows
 * dropped; chosen by the file's magic). Shapes must match m; missing tensors are errors. */
int dt_weights_load(dt_lm *g, const dt_model *m, dt_dtype param_dtype, const char *path,
                    dt_error *err);
/* The same source (path: a .safetensors file, a Hugging Face directory, an
 * llm.c checkpoint; the same checks) into a ZeRO engine's shards instead of a
 * whole model: dt_zero_load_params reads each rank's elements straight from the
 * memory-mapped file, so under stage 3 no rank allocates the flat model (g may
 * be DT_LM_NO_FLAT); stages 0-2 fill their flat parameters, with no second
 * copy. Replaces dt_weights_load + dt_zero_init_from_model (the same shards,
 * bitwise). */
int dt_weights_load_zero(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype param_dtype, const char *path,
                         dt_error *err);
/* The same for a LoRA run started from a base model (a Hugging Face directory or
 * .safetensors file: the base set comes from dt_weights_load_base): the trained set's LoRA
 * adapters, which the base lacks, are drawn from seed as dt_zero_init_random draws them
 * (PEFT's init); its other tensors (modules_to_save) are read from path. */
int dt_weights_load_zero_seeded(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype param_dtype, const char *path,
                                uint64_t seed, dt_error *err);
/* A LoRA run that starts from a PEFT adapter (`dtrun --init-adapter`): the trained set as
 * dt_weights_load_zero_seeded reads it (path "" or NULL: every tensor drawn from seed, as
 * dt_zero_init_random), then every LoRA adapter (DT_TENSOR_ADAPTER) taken from a: each must be
 * there with the tensor's shape, and a must hold no adapter g lacks (DT_EINVAL naming it:
 * plan the same --lora-target). */
struct dt_adapter;
int dt_weights_load_zero_adapter(dt_zero *z, dt_lm *g, const dt_model *m, dt_dtype param_dtype, const char *path,
                                 const struct dt_adapter *a, uint64_t seed, dt_error *err);
/* The base set of g (its frozen tensors, dt_lm_base_tensor) from path: a Hugging Face
 * directory (config.json must be m) or a .safetensors file, by name, converted to
 * param_dtype; the base is replicated, so every rank reads all of it. DT_OK at once when
 * g has no base set. */
int dt_weights_load_base(dt_lm *g, const dt_model *m, dt_dtype param_dtype, const char *path, dt_error *err);
/* Writes a Hugging Face GPT2Config config.json for m. */
int dt_hf_config_write(const dt_model *m, const char *path, dt_error *err);

/* ---- checkpoints ---- */

/* Newest complete checkpoint under out_dir: *step = -1 and DT_OK when none. */
int dt_ckpt_latest(const char *out_dir, char *path, size_t path_len, int64_t *step, dt_error *err);
/* Removes a checkpoint directory's dtrun files (state.json first), then the
 * directory if nothing else is left in it. 0 when the directory is gone. */
int dt_ckpt_remove(const char *dir);

/* Reads and validates a checkpoint's state.json on its own: format, precision preset,
 * parameter count nparams, counters that add up, bounded numbers, the loss scaler,
 * the file sums' syntax (what dt_ckpt_load_zero checks before it reads any tensor). */
int dt_ckpt_state_read(const char *path, const dt_precision *prec, size_t nparams, dt_train_state *st,
                       dt_error *err);
/* ---- sharded checkpoints (ZeRO engine, docs/zero.md) ----
 * The same directory layout; optim-<rank>-of-<writers>.safetensors holds one
 * rank's valid optimizer elements ("master", "exp_avg", "exp_avg_sq")
 * concatenated, with metadata "ranges" = "flat_begin:count,..." naming the flat
 * parameters they belong to (stage 0: one file, the whole state). Weights are
 * consolidated in model.safetensors. state.json records world_size and
 * zero_stage. Collective: every rank calls save. st->run_id names the series
 * keep_last prunes. */
int dt_ckpt_save_zero(const char *out_dir, dt_lm *g, const dt_model *m, const dt_precision *prec,
                      dt_zero *z, dt_comm *c, const dt_train_state *st, const char *plan_json,
                      int64_t keep_last, char *saved_path, size_t saved_len, dt_error *err);
/* Loads weights (as dt_weights_load_zero: stage 3 reads only this rank's
 * shards, so g may be DT_LM_NO_FLAT), then takes from every shard file the
 * elements of this rank's ranges, whatever world size and stage wrote them
 * (resharding); every file is read through its mapping a dt_io_chunk_bytes()
 * piece at a time, its pages released after each; single-rank
 * checkpoints of earlier versions load too. Before use it checks state.json
 * (counters, loss scaler, run id), m against config.json, every file it reads
 * against its recorded size and CRC-32C, and that the shards' ranges tile the
 * parameters exactly; each failure is DT_EINVAL naming the file. *saved_world
 * (may be NULL): how many optimizer files the state came from. */
/* The base set of g (a freeze plan's frozen tensors, which a checkpoint's model.safetensors
 * holds beside the trained ones so the file is the whole model) equals the checkpoint's,
 * bitwise: the fingerprint a resume checks, as the frozen weights are not re-read from the
 * checkpoint but from output.init or the seed. DT_EINVAL naming the file and where they
 * differ; DT_OK at once when g has no base set. */
int dt_ckpt_check_base(const char *ckpt_dir, dt_lm *g, dt_dtype param_dtype, dt_error *err);
int dt_ckpt_load_zero(const char *ckpt_dir, dt_lm *g, const dt_model *m, const dt_precision *prec, dt_zero *z,
                      dt_train_state *st, int64_t *saved_world, dt_error *err);

#endif
