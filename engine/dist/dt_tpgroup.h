/* dt_tpgroup.h — the tensor-parallel (TP) and data-parallel (DP) groups of a world of
 * dp x tp ranks, as Megatron-LM orders them (TP innermost: rank = dp_rank * tp + tp_rank,
 * megatron/core/parallel_state.py's default order "tp-cp-ep-dp-pp"), each an MPI
 * sub-communicator (dt_comm_split), and the model's view of the TP group (dt_lm_tp).
 * ZeRO runs over the DP group of each TP shard (docs/parallelism.md "In dtrun"). */
#ifndef DT_TPGROUP_H
#define DT_TPGROUP_H

#include "dt_comm.h"
#include "dt_error.h"
#include "dt_lm.h"

typedef struct dt_tpgroup dt_tpgroup;

/* Collective over world. tp must divide the world size (DT_EINVAL naming both). */
int dt_tpgroup_create(dt_comm *world, int tp, dt_tpgroup **out, dt_error *err);
void dt_tpgroup_free(dt_tpgroup *t);
dt_comm *dt_tpgroup_tp(const dt_tpgroup *t);          /* the rank's TP group */
dt_comm *dt_tpgroup_dp(const dt_tpgroup *t);          /* the ranks holding the same shard */
const dt_lm_tp *dt_tpgroup_model(const dt_tpgroup *t);   /* for dt_lm_options.tp */

#endif
