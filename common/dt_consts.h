/* dt_consts.h — constants the planner and the engine must agree on, each defined once
 * with its source. A number that only one room uses stays in that room. */
#ifndef DT_CONSTS_H
#define DT_CONSTS_H

/* ---- DeepSpeed code defaults the plan does not carry (deepspeed/runtime/zero/
 * offload_config.py, zero/config.py; docs/memory-model.md "Host memory and NVMe"):
 * offload_optimizer.buffer_count (NVMe swap buffers; each holds one sub_group_size tile,
 * the plan's parallel.sub_group_elems), offload_param.buffer_count and buffer_size
 * (elements). planner/memory.c counts them, engine/dist/zero.c allocates them. ---- */
#define DT_DS_OPT_SWAP_BUFFERS 4
#define DT_DS_PARAM_SWAP_BUFFERS 5
#define DT_DS_PARAM_BUFFER_ELEMS 100000000LL

/* torchrun's default rendezvous address and static --master-port
 * (torch/distributed/run.py); dtrun's launcher and the exported launch lines use them. */
#define DT_TORCHRUN_DEFAULT_ADDR "127.0.0.1"
#define DT_TORCHRUN_DEFAULT_PORT 29500

/* GPT-2's MLP width when n_inner is null: 4·h (HF GPT2MLP, inner_dim = n_inner or
 * 4 * n_embd); models/ resolves configs with it, the llm.c checkpoint reader checks it. */
#define DT_GPT2_FFN_MULT 4

/* Binary size and time units (what the reports print). */
#define DT_KIB 1024.0
#define DT_MIB (1024.0 * 1024.0)
#define DT_GIB (1024.0 * 1024.0 * 1024.0)
#define DT_MS_PER_S 1e3
#define DT_US_PER_S 1e6

#endif
