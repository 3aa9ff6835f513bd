/* dt_runadapter.h — a LoRA run's adapter in PEFT's format (engine/store/dt_adapter.h), written
 * beside each checkpoint as Hugging Face Trainer writes a PEFT model's checkpoints: rank 0, after
 * the checkpoint directory is complete, writes CKPT/adapter/ (adapter_config.json +
 * adapter_model.safetensors) from the checkpoint's own model.safetensors, so every ZeRO stage
 * (stage 3 included, whose ranks never hold the whole model) exports the same bytes
 * (docs/finetune.md "Adapter files"). */
#ifndef DT_RUNADAPTER_H
#define DT_RUNADAPTER_H

#include "dt_adapter.h"
#include "dt_ckpt.h"
#include "dt_error.h"
#include "dt_lm.h"
#include "dt_plan.h"

/* The adapter directory inside a checkpoint directory. */
#define DT_RUN_ADAPTER_DIR DT_CKPT_ADAPTER_DIR

/* The base fingerprint of plan p's output.init when it is a Hugging Face directory (hex,
 * dt_adapter_base_fingerprint), else "" (a random base: nothing to fingerprint). */
int dt_run_adapter_fingerprint(const dt_plan *p, char hex[DT_ADAPTER_FP_HEX], dt_error *err);

/* Writes ckpt_dir/adapter/ for a LoRA plan p trained by g: every tensor of g's trained set
 * (the lora_A / lora_B pairs and the modules_to_save tensors) read, fp32, from
 * ckpt_dir/model.safetensors; the config from p->finetune, the base named by p->output.init
 * (or the model's name), fingerprint fp ("" = none). DT_OK without writing for a plan that is
 * not LoRA. Atomic (dt_adapter_write); DT_EINVAL / DT_EIO with one line otherwise. */
int dt_run_adapter_write(const char *ckpt_dir, const dt_lm *g, const dt_plan *p, const char *fp, dt_error *err);

/* Opens dir (a PEFT LoRA adapter: `dtrun --init-adapter DIR`) for a fresh LoRA run of plan p:
 * dt_adapter_read's checks, then its method against the plan's (r, lora_alpha, use_rslora equal:
 * the same adapters, the same scale), its tensors against the model (dt_adapter_check_model)
 * and, when output.init is a Hugging Face directory, against that base (shapes and the
 * fingerprint, dt_adapter_check_base). DT_EINVAL with one line naming dir and the difference. */
int dt_run_adapter_open(const dt_plan *p, const char *dir, dt_adapter **out, dt_error *err);

#endif
