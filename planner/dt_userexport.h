/* dt_userexport.h — a plan written back as the training config users run
 * (docs/configs.md "Export"): LLaMA-Factory YAML, Hugging Face TrainingArguments YAML,
 * or the runbook's training: block, referencing the DeepSpeed JSON dt_dsexport_config
 * writes. With the user's own file as the starting point, only the keys whose value
 * changes are rewritten, in place in the original text (libyaml's marks give each
 * value's bytes), and missing keys are appended: comments, order and quoting of
 * everything else stay byte for byte (libyaml's emitter drops comments, so it is not
 * used). Reading the result with dt_usercfg_parse gives back the plan's configuration.
 * Returns malloc'd text (free()); NULL with err set. */
#ifndef DT_USEREXPORT_H
#define DT_USEREXPORT_H

#include <stddef.h>

#include "dt_error.h"
#include "dt_plan.h"
#include "dt_userconfig.h"

/* fmt: llamafactory, hf or runbook. ds_path: the DeepSpeed JSON to name ("" or NULL when
 * the plan runs without DeepSpeed: stage 0, no offload). original/len: the user's file
 * (NULL: a new file), named original_path in messages; it must read as a config of that
 * format (dt_usercfg_parse; methods not modelled yet excepted). notes (may be NULL) receives "note: ..." lines for what the
 * format cannot say (partial checkpointing, selective recompute), n bytes. */
char *dt_userexport(const dt_plan *p, dt_ucfg_format fmt, const char *ds_path, const char *original, size_t len,
                    const char *original_path, char *notes, size_t n, dt_error *err);

/* Whether the plan needs a DeepSpeed JSON beside the config (ZeRO stage > 0 or offload). */
int dt_userexport_needs_deepspeed(const dt_plan *p);

#endif
