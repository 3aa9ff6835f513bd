/* dt_activations.h — what full fine-tuning keeps for backward, bytes per rank: one block
 * (checkpointed: its input only) and the head, under dtrun's engine or Hugging Face's model
 * code (runtimes deepspeed / fsdp). The memory model (dt_memory.h) sums them over the
 * blocks; a fine-tuning method (dt_ftplan.h) subtracts what its frozen groups need not keep.
 * Formulas and sources: docs/activations.md, docs/memory-model.md "Runtime profiles". */
#ifndef DT_ACTIVATIONS_H
#define DT_ACTIVATIONS_H

#include <stdint.h>

#include "dt_plan.h"

int64_t dt_memory_activations_per_block(const dt_plan *p, int checkpointed); /* saved by one block */
int64_t dt_memory_head_activations(const dt_plan *p);   /* the head's (final norm, lm_head input), full fine-tuning */

#endif
