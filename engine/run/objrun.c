/* objrun.c — see dt_objrun.h: the objectives' tables by kind. */
#include "dt_objrun.h"

extern const dt_objrun_ops dt_objrun_rm, dt_objrun_dpo, dt_objrun_grpo;

const dt_objrun_ops *dt_objrun_for(dt_obj_kind kind) {
    switch (kind) {
    case DT_OBJ_RM: return &dt_objrun_rm;
    case DT_OBJ_DPO: return &dt_objrun_dpo;
    case DT_OBJ_GRPO: return &dt_objrun_grpo;
    default: return NULL;   /* pt / sft: the trainer's cross-entropy; ppo: not built */
    }
}
