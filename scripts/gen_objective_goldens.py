#!/usr/bin/env python3
"""gen_objective_goldens.py — the goldens of dtrun's rm and dpo objectives
(tests/engine/test_objective_golden.c, docs/objectives.md "In dtrun"): one step of each on a
tiny Llama and a tiny Qwen3, computed by TRL 1.16's own code in torch on the same weights and
batch.

Dev-time only: CI has no Python and reads the committed files under
tests/engine/golden/objective/. To regenerate (CPU, seconds):

    /tmp/hfvenv/bin/python scripts/gen_objective_goldens.py [OUT]   (default tests/engine/golden/objective)

Models: the committed random float32 checkpoints tests/kernels/golden/llama/{llama,qwen3}
(scripts/gen_llama_goldens.py), loaded with transformers (float32, attn_implementation "eager").
dpo: AutoModelForCausalLM twice (the policy, trained, and the reference, frozen; in the
"-moved" cases the policy's weights are the checkpoint's + N(0, 0.05^2) under
torch.manual_seed(SEED + 1), saved as OUT/<case>/policy, so that log-ratios, rewards and
accuracies are not the trivial ones of a policy equal to its reference), the policy
patched with TRL's own add_fused_lm_head as DPOTrainer.__init__ patches it (outputs log_probs,
entropy, mean_logits, is_top1), the reference with add_fused_lm_head; then
DPOTrainer._compute_loss is CALLED (unbound, on a stand-in `self` with the DPOConfig attributes
it reads: loss_type sigmoid, beta 0.1, label_smoothing 0, f_divergence_type reverse_kl, no
precomputed reference) and loss.backward() gives every parameter's gradient. rm:
AutoModelForSequenceClassification(num_labels=1, pad_token_id=0) from the same checkpoint, its
score head drawn by transformers' init under torch.manual_seed(SEED) and saved with the model
(save_pretrained into OUT/<case>/model: config.json names *ForSequenceClassification), then
RewardTrainer.compute_loss is CALLED the same way.

Batch: N = 3 pairs of random token ids in [1, vocab) (0 is the pad id), prompt lengths 3..6,
completions 1..6 tokens per side, T = 14: rows 0..N-1 the chosen sequences, N..2N-1 the
rejected, right-padded with 0, attention_mask 1 on the real tokens, completion_mask 1 from the
prompt's length on (what TRL's DataCollatorForPreference builds).

Output OUT/<case>/golden.safetensors: pair.prompt_n I32 [N], pair.len I32 [2N], ids I32 [2N, T],
loss F32 [1], metrics F32 [k] (dpo: rewards/chosen, rewards/rejected, rewards/margins,
rewards/accuracies, logps/chosen, logps/rejected; rm: accuracy, margin, min_reward, mean_reward,
max_reward, from the trainer's own _metrics), grad.<name> F32 for every parameter (transformers'
names); metadata: versions, beta, seed.

rmlora-<fam>: rm under LoRA as PEFT 0.21.2 builds it for TRL's RewardTrainer: the rm case's
sequence classifier (saved as OUT/<case>/model) wrapped by get_peft_model(LoraConfig(task_type
SEQ_CLS, r 4, lora_alpha 8, lora_dropout 0, the seven block linears)): PEFT adds "score" to
modules_to_save and trains its copy; every lora_A / lora_B is then moved by N(0, 0.05^2) under
torch.manual_seed(SEED + 2) (B starts at 0, which would leave A's gradient 0), and the adapter is
saved with PeftModel.save_pretrained as OUT/<case>/adapter (adapter_config.json,
adapter_model.safetensors with base_model.model.score.weight), which the C test reads with
dt_adapter_read. Gradients under the engine's names (grad.model.layers.0.self_attn.q_proj.
lora_A.weight, grad.score.weight). OUT/<case>/merged: merge_and_unload() of it saved by
save_pretrained (*ForSequenceClassification, no lm_head), which tests/engine/test_merge.sh holds
`dtrun merge --base <fam> --adapter adapter` to.
"""
import json
import os
import sys
from collections import defaultdict
from types import SimpleNamespace as NS

import safetensors.torch
import torch
from trl_stand_in import Acc
import transformers
import trl
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.reward_trainer import RewardTrainer
from trl.trainer.utils import add_fused_lm_head

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 33
N, T, BETA = 3, 14, 0.1
MOVE = 0.05   # the moved policy's weight perturbation (std)


def stand_in(model, **kw):
    return NS(model=model, accelerator=Acc(), _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
              _total_train_tokens=0, _tp_size=1, aux_loss_enabled=False, **kw)


def batch(vocab, g):
    prompt_n = torch.randint(3, 7, (N,), generator=g)
    lens = torch.zeros(2 * N, dtype=torch.int32)
    ids = torch.zeros(2 * N, T, dtype=torch.long)
    cmask = torch.zeros(2 * N, T, dtype=torch.long)
    for i in range(N):
        prompt = torch.randint(1, vocab, (int(prompt_n[i]),), generator=g)
        for s in range(2):
            comp = torch.randint(1, vocab, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g)
            seq = torch.cat([prompt, comp])
            r = s * N + i
            ids[r, :len(seq)] = seq
            cmask[r, len(prompt):len(seq)] = 1
            lens[r] = len(seq)
    att = (torch.arange(T).unsqueeze(0) < lens.unsqueeze(1)).long()
    return prompt_n.int(), lens, ids, att, cmask


def grads(model):
    return {"grad." + k: p.grad.detach().clone().float() for k, p in model.named_parameters() if p.grad is not None}


def write(out, tensors, meta):
    os.makedirs(out, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, out + "/golden.safetensors",
                                metadata={k: str(v) for k, v in meta.items()})


def dpo_case(src, out, moved=False):
    g = torch.Generator().manual_seed(SEED)
    kw = dict(torch_dtype=torch.float32, attn_implementation="eager")
    policy, ref = AutoModelForCausalLM.from_pretrained(src, **kw), AutoModelForCausalLM.from_pretrained(src, **kw)
    if moved:  # a policy that has left its reference: every weight + N(0, MOVE^2), saved beside the golden
        torch.manual_seed(SEED + 1)
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn_like(p) * MOVE)
        policy.save_pretrained(out + "/policy", safe_serialization=True)
    policy.train()
    ref.eval()
    add_fused_lm_head(policy, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    add_fused_lm_head(ref)
    prompt_n, lens, ids, att, cmask = batch(policy.config.vocab_size, g)
    s = stand_in(policy, ref_model=ref, precompute_ref_logps=False, ld_alpha=None, f_divergence_type="reverse_kl",
                 loss_types=["sigmoid"], loss_weights=[1.0], beta=BETA, label_smoothing=0.0, use_weighting=False,
                 args=NS(gradient_checkpointing_kwargs=None))
    inputs = {"input_ids": ids, "attention_mask": att, "completion_mask": cmask}
    loss = DPOTrainer._compute_loss(s, policy, inputs, False)
    loss.backward()
    names = ["rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
             "logps/rejected"]
    metrics = torch.tensor([s._metrics["train"][n][-1] for n in names], dtype=torch.float32)
    t = {"pair.prompt_n": prompt_n, "pair.len": lens, "ids": ids.int(), "loss": loss.detach().float().reshape(1),
         "metrics": metrics, **grads(policy)}
    write(out, t, {"objective": "dpo", "model": os.path.relpath(src, ROOT), "moved": MOVE if moved else 0, "beta": BETA, "seed": SEED, "trl": trl.__version__,
                   "transformers": transformers.__version__, "torch": torch.__version__, "metrics": names})


RM_METRICS = ["accuracy", "margin", "min_reward", "mean_reward", "max_reward"]


def rm_step(model, vocab, g):
    """RewardTrainer.compute_loss on the batch, backward; the metrics' names and the golden's tensors."""
    model.train()
    prompt_n, lens, ids, att, _ = batch(vocab, g)
    s = stand_in(model, args=NS(center_rewards_coefficient=None))
    loss = RewardTrainer.compute_loss(s, model, {"input_ids": ids, "attention_mask": att})
    loss.backward()
    metrics = torch.tensor([s._metrics["train"][n][-1] for n in RM_METRICS], dtype=torch.float32)
    return RM_METRICS, {"pair.prompt_n": prompt_n, "pair.len": lens, "ids": ids.int(),
                        "loss": loss.detach().float().reshape(1), "metrics": metrics}


def rm_case(src, out):
    g = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)   # the score head's init
    model = AutoModelForSequenceClassification.from_pretrained(src, num_labels=1, pad_token_id=0,
                                                               torch_dtype=torch.float32, attn_implementation="eager")
    model.save_pretrained(out + "/model", safe_serialization=True)
    names, t = rm_step(model, model.config.vocab_size, g)
    t.update(grads(model))
    write(out, t, {"objective": "rm", "model": os.path.relpath(out + "/model", ROOT), "seed": SEED, "trl": trl.__version__,
                   "transformers": transformers.__version__, "torch": torch.__version__, "metrics": names})


LORA_R, LORA_ALPHA = 4, 8
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def rmlora_case(src, out):
    from peft import LoraConfig, get_peft_model
    import peft
    g = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)   # the score head's init, as rm_case
    base = AutoModelForSequenceClassification.from_pretrained(src, num_labels=1, pad_token_id=0,
                                                              torch_dtype=torch.float32, attn_implementation="eager")
    base.save_pretrained(out + "/model", safe_serialization=True)
    cfg = LoraConfig(task_type="SEQ_CLS", r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
                     target_modules=LORA_TARGETS)
    model = get_peft_model(base, cfg)
    torch.manual_seed(SEED + 2)
    with torch.no_grad():
        for k, p in model.named_parameters():
            if ".lora_A." in k or ".lora_B." in k:
                p.add_(torch.randn_like(p) * MOVE)
    model.save_pretrained(out + "/adapter")
    names, t = rm_step(model, base.config.vocab_size, g)
    for k, p in model.named_parameters():
        if p.grad is None:
            continue
        k = k.replace("base_model.model.", "", 1).replace(".modules_to_save.default", "").replace(".default", "")
        t["grad." + k] = p.grad.detach().clone().float()
    # PEFT's merge of the saved adapter into the causal-LM base, as transformers saves the
    # sequence classifier (what `dtrun merge --base src --adapter adapter` must write)
    with torch.no_grad():
        model.merge_and_unload().save_pretrained(out + "/merged", safe_serialization=True)
    write(out, t, {"objective": "rm", "model": os.path.relpath(out + "/model", ROOT), "seed": SEED,
                   "lora_r": LORA_R, "lora_alpha": LORA_ALPHA, "trl": trl.__version__, "peft": peft.__version__,
                   "transformers": transformers.__version__, "torch": torch.__version__, "metrics": names})


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/engine/golden/objective")
    torch.set_num_threads(1)
    for fam in ("llama", "qwen3"):
        src = os.path.join(ROOT, "tests/kernels/golden/llama", fam)
        dpo_case(src, os.path.join(out, "dpo-" + fam))
        dpo_case(src, os.path.join(out, "dpo-" + fam + "-moved"), moved=True)
        rm_case(src, os.path.join(out, "rm-" + fam))
        rmlora_case(src, os.path.join(out, "rmlora-" + fam))
    print("wrote", out)


if __name__ == "__main__":
    main()
