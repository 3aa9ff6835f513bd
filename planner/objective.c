/* objective.c — the models and generated text of rm / dpo / grpo / ppo (dt_objplan.h).
 * Formulas and sources: docs/objectives.md, docs/memory-model.md "Objectives". Notation:
 * N the policy's elements, W ranks, pb bytes per weight, a activation bytes, L blocks,
 * kv key/value heads, d head dim, V vocabulary, T seq_len, P prompt, C completion,
 * S sequences decoded at once. */
#include "dt_objplan.h"
#include "dt_ftplan.h"
#include "dt_model.h"
#include "dt_pgroup.h"
#include "dt_timemodel.h"

#include <stdio.h>
#include <string.h>

/* rm / dpo: chosen and rejected concatenated into one forward (TRL DPOTrainer
 * concatenated_forward, RewardTrainer's chosen / rejected pair; LLaMA-Factory's
 * PairwiseDataCollator): two sequences per example. */
#define SEQS_PER_PAIR 2
/* trl ValueHead: nn.Linear(hidden, 1), bias included (trl/models/modeling_value_head.py). */
#define VALUE_HEAD_BIAS 1
/* Keys and values: two tensors per block (transformers DynamicCache key_cache / value_cache). */
#define KV_TENSORS 2
/* The sampler's logits per decoded sequence: the 16-bit logits of the last position and
 * their fp32 copy (transformers generate: outputs.logits[:, -1, :].to(torch.float32); only
 * the last position since logits_to_keep=1). */
#define FP32_BYTES 4
/* Forward FLOPs are a third of training's (forward 2N per token, backward 4N: Kaplan et al.
 * 2020 "Scaling Laws for Neural Language Models" section 2.1, the 6N rule). */
#define TRAIN_OVER_FWD 3.0
/* A decoded token's forward: 2 FLOPs per weight element per sequence (the same 2N). */
#define FLOPS_PER_PARAM_TOKEN 2.0

static dt_obj_kind kind_of(const dt_plan *p) { return dt_obj_effective(&p->objective, p->data.loss_mask); }

int dt_objplan_active(const dt_plan *p) { return kind_of(p) >= DT_OBJ_RM; }

/* The score head (h -> 1, no bias: transformers LlamaForSequenceClassification.score)
 * replaces an untied LM head; a tied head's weight stays as the embedding. */
int64_t dt_objplan_policy_params(const dt_plan *p) {
    const dt_model *m = &p->model;
    int64_t n = p->model.requested_params > 0 ? p->model.requested_params : dt_model_params(m);
    if (kind_of(p) != DT_OBJ_RM) return n;
    /* a value head keeps the LM head and adds h -> 1 with its bias (trl ValueHead.summary) */
    if (p->objective.rm_head == DT_RM_HEAD_VALUE) return n + m->hidden + VALUE_HEAD_BIAS;
    return n - (m->tied_embeddings ? 0 : m->hidden * m->vocab) + m->hidden;
}

int dt_objplan_shape(const dt_plan *p, int64_t *n_params, dt_plan *out) {
    const dt_obj_kind k = kind_of(p);
    if (!dt_obj_pairs(k)) return 0;
    *out = *p;
    out->batch.micro_batch *= SEQS_PER_PAIR;
    out->batch.global_batch *= SEQS_PER_PAIR;
    if (k == DT_OBJ_RM && p->finetune.method == DT_FT_FULL && p->objective.rm_head == DT_RM_HEAD_SCORE) {
        /* the score head's output is one column: the loss workspace B x T x 1; the state
         * terms keep the real count (the embedding is still V x h) */
        *n_params = dt_objplan_policy_params(p);
        out->model.vocab = 1;
        out->model.tied_embeddings = 0;
    }
    return 1;
}

/* Bytes of one frozen copy of the policy's architecture in the weight dtype, this rank's:
 * DeepSpeed partitions a ZeRO-3 engine's parameters (TRL prepare_deepspeed keeps stage 3 for
 * the reference, sets stage 0 otherwise: trl/models/utils.py), FSDP shards them; else whole. */
static int64_t frozen_copy(const dt_plan *p, int64_t elems) {
    int64_t b = elems * (int64_t)dt_dtype_size(p->precision.param);
    const int sharded = p->parallel.zero_stage == 3;
    return sharded ? (b + p->parallel.world_size - 1) / p->parallel.world_size : b;
}

static int64_t kv_per_token(const dt_plan *p) {
    const dt_model *m = &p->model;
    return KV_TENSORS * m->n_layer * m->n_kv_head * m->head_dim * (int64_t)dt_dtype_size(p->precision.activation);
}

/* dtrun's generator (engine/model/lm_generate.c dt_gen_create), in fp32 floats: an fp32 copy
 * of every weight; keys and values [S, L, M, kv d] each; per row (R = max(M, S)) the hidden
 * state, its norm and a temporary [C] each, q k v [q d + 2 kv d], the attention output [q d],
 * the MLP's input [2F for llama's gate and up, F for GPT-2] and activation [F], the norm's mean
 * and rstd, q/k-norm's rstd [H + kv]; S rows of the last hidden state [C] and of logits [V];
 * llama's RoPE tables [M, D/2] x 2; the sampler's probabilities (double) and order (int32) [V];
 * one attention-score row [M] per OpenMP thread, counted for one (the plan does not know the
 * threads: each more adds M x 4 bytes). Sized once for the step's rollout: S = the rank's
 * completions (micro-batch x accumulation; dtrun generates them in one batch), M = seq_len. */
static int64_t dtrun_generator(const dt_plan *p, int64_t n, int64_t S) {
    const dt_model *m = &p->model;
    const int llama = m->family != DT_FAMILY_GPT2;
    const int64_t M = p->batch.seq_len, R = M > S ? M : S, C = m->hidden, V = m->vocab, F = m->ffn;
    const int64_t D = llama ? m->head_dim : C / m->n_head, H = m->n_head, kv = m->n_kv_head;
    const int64_t QD = H * D, KVD = kv * D;
    const int64_t per_row = 3 * C + (QD + 2 * KVD) + QD + (llama ? 2 : 1) * F + F + 2 + (H + kv);
    int64_t floats = n + KV_TENSORS * S * m->n_layer * M * KVD + R * per_row + S * C + S * V + M;
    if (llama) floats += M * D;   /* cos and sin, [M, D/2] each */
    return floats * FP32_BYTES + V * (int64_t)(sizeof(double) + sizeof(int32_t));
}

/* The largest parameter group dtrun's ZeRO-3 engine gathers, elements: its units (the
 * embeddings, a block, the final norm with an untied head) over the trained set, unpadded
 * (models/dt_pgroup.h dt_model_zero_units with one rank). */
static int64_t largest_group(const dt_plan *p) {
    int64_t emb = 0, other = 0, state = 0;
    dt_model_zero_units(&p->model, &p->finetune, 1, &emb, &other, &state);
    return emb > other ? emb : other;
}

static void dtrun_generation(const dt_plan *p, int64_t n, dt_obj_terms *t) {
    const int64_t S = t->rollout_seqs, T = p->batch.seq_len;
    t->gen_seqs = S;   /* dtrun decodes the whole rollout at once (no generation micro-batch) */
    t->kv_cache = kv_per_token(p) * T * S;
    t->sampler_logits = S * p->model.vocab * FP32_BYTES;
    t->generator = dtrun_generator(p, n, S);
    if (p->parallel.zero_stage == 3) t->gen_unit = largest_group(p) * FP32_BYTES;
    /* dt_grpo_rollout (engine/run/dt_grpo.h): ids, labels (int32) and mask (fp32) per token,
     * prompt and completion lengths (int64), reward and advantage (fp32) per row */
    t->rollout_batch = S * T * (2 * (int64_t)sizeof(int32_t) + FP32_BYTES) +
                       S * (2 * (int64_t)sizeof(int64_t) + 2 * FP32_BYTES);
}

static void memory_terms(const dt_plan *p, dt_obj_kind k, dt_obj_terms *t) {
    const dt_objective *o = &p->objective;
    const int64_t n = dt_objplan_policy_params(p);
    /* the reference: dpo unless precomputed; grpo when beta != 0; ppo always. A LoRA policy
     * is its own reference with the adapters disabled (TRL DPOTrainer: ref_model None for a
     * PEFT model, null_ref_context; GRPOTrainer: disable_adapter; LLaMA-Factory create_ref_model
     * returns None for lora) */
    int ref = (k == DT_OBJ_DPO && !o->precompute_ref && !dt_pref_loss_ref_free(o->pref_loss)) || (k == DT_OBJ_GRPO && o->kl_coef > 0.0) || k == DT_OBJ_PPO;
    t->ref_fwd = ref;   /* a LoRA policy still runs the reference forward, adapters off */
    if (dt_ft_is_lora(&p->finetune)) ref = 0;
    t->ref_held = ref;
    t->split = k == DT_OBJ_PPO && o->placement == DT_PLACE_SPLIT;
    /* dtrun's reference is a flat, replicated copy at every stage (engine/run/objective_pairs.c
     * objrun_reference_open): ZeRO-3 does not partition it */
    const int dtrun = p->runtime.kind == DT_RUNTIME_DTRUN;
    if (ref) t->ref_weights = dtrun ? n * (int64_t)dt_dtype_size(p->precision.param) : frozen_copy(p, n);
    if (k == DT_OBJ_PPO) {
        /* critic and reward: the policy's architecture with a score head (DeepSpeed-Chat
         * create_critic_model / create_reward_model, OpenRLHF get_llm_for_sequence_regression) */
        dt_plan rm = *p;
        rm.objective.kind = DT_OBJ_RM;
        const int64_t nr = dt_objplan_policy_params(&rm);
        t->critic_ratio = n > 0 ? (double)nr / (double)n : 1.0;
        t->reward_weights = frozen_copy(p, nr);
    }
    if (t->split) {
        /* the frozen models on their own GPUs (as many as the plan's): not on the trained ranks */
        t->split_frozen = t->ref_weights + t->reward_weights + p->cluster.hw.reserve_bytes;
        t->ref_weights = t->reward_weights = 0;
    }
    if (o->gen_mem_fraction > 0.0)
        t->gen_engine = (int64_t)(o->gen_mem_fraction * (double)p->cluster.hw.device_mem_bytes);
    if (!dt_obj_generates(k)) return;
    /* TRL: each rank generates per_device_train_batch_size x steps_per_generation completions
     * (generation_batch_size / num_processes; steps_per_generation defaults to the accumulation) */
    t->rollout_seqs = p->batch.micro_batch * p->batch.grad_accum;
    t->gen_seqs = o->gen_batch > 0 && o->gen_batch < t->rollout_seqs ? o->gen_batch : t->rollout_seqs;
    if (t->gen_engine) return;   /* the engine's KV cache lives in its reservation */
    if (dtrun) {
        dtrun_generation(p, n, t);
        return;
    }
    t->kv_cache = kv_per_token(p) * p->batch.seq_len * t->gen_seqs;
    t->sampler_logits = t->gen_seqs * p->model.vocab * ((int64_t)dt_dtype_size(p->precision.activation) + FP32_BYTES);
    if (p->parallel.zero_stage == 3) {
        /* TRL unwrap_model_for_generation gathers every parameter under ZeRO-3
         * (ds3_gather_for_generation, default True; DeepSpeed-Chat's hybrid engine likewise) */
        const int64_t full = n * (int64_t)dt_dtype_size(p->precision.param);
        /* the rank's own partition is on the device unless offload_param keeps it on the host */
        t->gathered = p->parallel.offload_param != DT_OFFLOAD_NONE ? full : full - frozen_copy(p, n);
    }
}

static double forward_s(const dt_plan *shaped, dt_error *err, double *bwd_s) {
    dt_time_compute c;
    if (dt_time_compute_micro(shaped, &c, err)) return -1.0;
    *bwd_s = c.bwd_s;
    return c.fwd_s;
}

static void generation_time(const dt_plan *p, dt_obj_terms *t) {
    const dt_hardware *hw = &p->cluster.hw;
    const dt_model *m = &p->model;
    const double N = (double)dt_objplan_policy_params(p);
    const double C = (double)p->objective.completion_len, P = (double)(p->batch.seq_len - p->objective.completion_len);
    const double R = hw->achievable_flops[p->precision.param];
    const double bw = hw->mem_bw * DT_HBM_EFFICIENCY;
    if (t->rollout_seqs < 1 || R <= 0 || bw <= 0) return;
    const double rounds = (double)((t->rollout_seqs + t->gen_seqs - 1) / t->gen_seqs), S = (double)t->gen_seqs;
    /* prefill: the prompts' forward, compute-bound */
    t->prefill_s = (double)t->rollout_seqs * dt_model_train_flops_per_seq(m, (int64_t)P) / TRAIN_OVER_FWD / R;
    /* decode: per token, every weight and the KV cache so far read once (memory-bound), or
     * 2 N S FLOPs when the batch makes it compute-bound; the cache holds P + C/2 on average */
    const double w = N * (double)dt_dtype_size(p->precision.param);
    const double kv = (double)kv_per_token(p) * (P + C / 2.0) * S;
    const double mem = (w + kv) / bw, cmp = FLOPS_PER_PARAM_TOKEN * N * S / R;
    t->decode_s = rounds * C * (mem > cmp ? mem : cmp);
    /* grpo num_iterations: one rollout serves that many optimizer steps (TRL 1.16 GRPOTrainer
     * _prepare_inputs regenerates every steps_per_generation x num_iterations micro-batches),
     * so a step carries 1 / num_iterations of its generation */
    if (p->objective.kind == DT_OBJ_GRPO && p->objective.num_iterations > 1) {
        t->prefill_s /= (double)p->objective.num_iterations;
        t->decode_s /= (double)p->objective.num_iterations;
    }
}

void dt_objplan_terms(const dt_plan *p, dt_obj_terms *out) {
    memset(out, 0, sizeof *out);
    const dt_obj_kind k = kind_of(p);
    if (k >= DT_OBJ_RM) memory_terms(p, k, out);
}

int dt_objplan_time(const dt_plan *p, dt_obj_terms *out, dt_error *err) {
    const dt_obj_kind k = kind_of(p);
    if (k < DT_OBJ_RM) return DT_OK;
    dt_plan shaped;
    int64_t np = 0;
    const dt_plan *q = dt_objplan_shape(p, &np, &shaped) ? &shaped : p;
    double bwd = 0.0, fwd = forward_s(q, err, &bwd);
    if (fwd < 0) return err->code;
    const double A = (double)p->batch.grad_accum;
    /* the reference's log-probs: one forward per micro-batch under no_grad (also for a LoRA
     * policy, whose reference is itself with the adapters disabled); ppo: reference,
     * reward and the critic's values over the rollout (DeepSpeed-Chat generate_experience) */
    const int fwds = (out->ref_fwd ? 1 : 0) + (k == DT_OBJ_PPO ? 2 : 0);
    out->ref_fwd_s = (double)fwds * fwd * A;
    if (k == DT_OBJ_PPO) out->critic_s = out->critic_ratio * (fwd + bwd) * A;
    if (dt_obj_generates(k)) generation_time(p, out);
    return DT_OK;
}

static int64_t scaled(int64_t x, double r) { return (int64_t)((double)x * r); }

void dt_objplan_add_phase(const dt_obj_terms *t, dt_mem_breakdown *m) {
    /* the critic is trained as the policy is: its states in the same phase, scaled */
    const int64_t cp = scaled(m->params, t->critic_ratio), cg = scaled(m->grads, t->critic_ratio),
                  co = scaled(m->optimizer, t->critic_ratio);
    m->params += t->ref_weights + t->reward_weights + cp;
    m->grads += cg;
    m->optimizer += co;
    m->activations += t->ref_activations;
    m->buffers += t->gen_engine + t->ref_buffers + t->generator + t->gen_unit + t->rollout_batch;
}

void dt_objplan_generation(const dt_plan *p, dt_obj_terms *t, dt_mem_phases *ph, int apply) {
    if (!dt_obj_generates(kind_of(p))) return;
    /* generation runs before the step's forward: the weights (every model's) and optimizer
     * state stay, the gradients are freed (zero_grad set_to_none), no activations */
    if (p->runtime.kind == DT_RUNTIME_DTRUN) {
        /* dtrun allocates the generator, its cache and the rollout up front (in buffers): the
         * generation phase holds what every phase holds */
        t->gen_total = ph->at[DT_MEM_PHASE_SUM].total;
        t->gen_excess = 0;
        return;
    }
    const dt_mem_breakdown *s = &ph->at[DT_MEM_PHASE_STEP];
    t->gen_total = s->params + s->optimizer + s->reserve + t->gen_engine + t->kv_cache + t->sampler_logits +
                   t->gathered;
    dt_mem_breakdown *pk = &ph->at[ph->peak];
    t->gen_excess = t->gen_total > pk->total ? t->gen_total - pk->total : 0;
    if (!apply) return;
    pk->buffers += t->gen_excess;
    pk->total += t->gen_excess;
}

double dt_objplan_step_s(const dt_obj_terms *t) { return t->ref_fwd_s + t->critic_s + t->prefill_s + t->decode_s; }

void dt_objplan_describe(const dt_plan *p, char *buf, size_t n) {
    const dt_obj_kind k = kind_of(p);
    const dt_objective *o = &p->objective;
    dt_obj_terms t;
    dt_objplan_terms(p, &t);
    const char *where = p->runtime.kind == DT_RUNTIME_DTRUN ? "replicated (dtrun: at every stage)"
                        : p->parallel.zero_stage == 3 ? "partitioned (ZeRO-3)" : "replicated (partitioned under ZeRO-3)";
    switch (k) {
    case DT_OBJ_RM:
        snprintf(buf, n, "rm: the model + %s, 2 sequences per example",
                 o->rm_head == DT_RM_HEAD_VALUE ? "a value head (h -> 1; the LM head and its logits stay)"
                                                : "a score head (h -> 1)");
        break;
    case DT_OBJ_DPO:
        snprintf(buf, n, "dpo (%s loss): policy + %s%s, 2 sequences per example", dt_pref_loss_name(o->pref_loss),
                 t.ref_held ? "frozen reference " : "no reference ",
                 t.ref_held ? where : dt_pref_loss_ref_free(o->pref_loss) ? "(the loss needs none)"
                                     : (o->precompute_ref ? "(log-probs precomputed)" : "(LoRA: adapters off)"));
        break;
    case DT_OBJ_GRPO:
        snprintf(buf, n, "grpo: policy%s%s, %lld completions per prompt, %lld generated tokens each",
                 t.ref_held ? " + frozen reference " : (o->kl_coef > 0 ? " (reference = adapters off)" : " (beta 0: no reference)"),
                 t.ref_held ? where : "", (long long)o->num_generations, (long long)o->completion_len);
        break;
    case DT_OBJ_PPO:
        snprintf(buf, n, "ppo: actor + critic trained, %sreward frozen%s, %s%s", t.ref_held ? "reference + " : "",
                 t.split ? " on their own GPUs" : "", o->placement == DT_PLACE_SPLIT ? "split placement" : "colocated",
                 o->gen_mem_fraction > 0 ? " + a separate generation engine" : "");
        break;
    default: snprintf(buf, n, "%s", dt_obj_name(k)); break;
    }
}
