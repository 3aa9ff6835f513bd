#!/usr/bin/env python3
"""Goldens for engine/run/objective_loss.c (tests/engine/test_objloss.c).

TRL 1.16's own code paths, run in float64 on fixed random fp32 inputs:
  - RewardTrainer.compute_loss, DPOTrainer._compute_loss and GRPOTrainer._compute_loss are CALLED
    (unbound, on a stand-in `self` that carries the config attributes those methods read and an
    identity accelerator); the model is a stand-in whose outputs are leaf tensors, so torch autograd
    gives d loss / d (scores | sequence log-probs | per-token log-probs); the metrics are read from
    the trainer's own _metrics dict.
  - token log-probs: trl.trainer.utils.selective_log_softmax, autograd for d/dlogits.
  - GRPO advantages: the lines of GRPOTrainer._generate_and_score_completions
    ("sum_then_normalize", one reward function), inlined because they sit inside the rollout, with
    trl.trainer.utils.nanstd itself.
  - DPO sigmoid with label_smoothing > 0: TRL 1.16's sigmoid ignores label_smoothing; the value is
    cDPO's -(1-e) logsigmoid(bx) - e logsigmoid(-bx) as TRL <= 0.2x wrote it (transcribed below).
Output: tests/engine/golden/objloss.txt, lines "NAME COUNT v0 v1 ..." (%.17g).
usage: /tmp/hfvenv/bin/python scripts/gen_objloss_goldens.py OUT"""
import sys
from collections import defaultdict
from types import SimpleNamespace as NS

import torch
from trl_stand_in import Acc
import torch.nn.functional as F
import trl
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.reward_trainer import RewardTrainer
from trl.trainer.utils import nanstd, selective_log_softmax

torch.set_default_dtype(torch.float64)
g = torch.Generator().manual_seed(1234)
lines = []


def emit(name, t):
    v = torch.as_tensor(t).detach().reshape(-1).tolist()
    lines.append(name + " " + str(len(v)) + "".join(" %.17g" % float(x) for x in v))


def f32(*shape, scale=1.0, shift=0.0):
    """fp32-representable random values (the C side reads fp32)"""
    return (torch.randn(*shape, generator=g, dtype=torch.float32) * scale + shift).double()


def stand_in(**kw):
    return NS(model=NS(training=True), accelerator=Acc(), _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
              _total_train_tokens=0, _tp_size=1, aux_loss_enabled=False, **kw)


def metrics(s, names):
    return [s._metrics["train"][n][-1] for n in names]


# ---- token log-probs ----
N, V = 7, 13
logits = f32(N, V, scale=2.0).requires_grad_()
labels = torch.randint(0, V, (N,), generator=g)
labels[2] = -100
labels[5] = -100
w = f32(N)
lp = selective_log_softmax(logits, labels.clamp(min=0)) * (labels != -100)
(lp * w).sum().backward()
emit("tok.logits", logits)
emit("tok.labels", labels)
emit("tok.dlogp", w)
emit("tok.logp", lp)
emit("tok.dlogits", logits.grad)

# ---- reward model ----
def rm_case(name, n, margin, center):
    rc, rr = f32(n), f32(n)
    scores = torch.cat([rc, rr]).unsqueeze(-1).requires_grad_()
    s = stand_in(args=NS(center_rewards_coefficient=center))
    inputs = {"attention_mask": torch.ones(2 * n, 4, dtype=torch.long)}
    mg = None
    if margin:
        mg = f32(n, scale=0.5)
        inputs["margin"] = mg
    loss = RewardTrainer.compute_loss(s, lambda **kw: NS(logits=scores), inputs)
    loss.backward()
    emit(name + ".rc", rc)
    emit(name + ".rr", rr)
    emit(name + ".margin", mg if mg is not None else torch.zeros(0))
    emit(name + ".center", torch.tensor([center or 0.0]))
    emit(name + ".d", scores.grad)
    emit(name + ".metrics", [loss.item()] + metrics(s, ["accuracy", "margin", "min_reward", "mean_reward", "max_reward"]))


rm_case("rm0", 6, False, None)
rm_case("rm1", 5, True, 0.01)

# ---- DPO ----
def dpo_case(name, n, loss_type, beta, ls, ref_free):
    T = 9
    pc, pr = f32(n, scale=4.0, shift=-20.0), f32(n, scale=4.0, shift=-22.0)
    rc, rr = f32(n, scale=4.0, shift=-21.0), f32(n, scale=4.0, shift=-21.0)
    if ref_free:
        rc, rr = torch.zeros(n), torch.zeros(n)
    cmask = torch.zeros(2 * n, T, dtype=torch.long)
    lens = torch.randint(1, T - 1, (2 * n,), generator=g)
    for i in range(2 * n):
        cmask[i, T - lens[i]:] = 1
    seq = torch.cat([pc, pr]).requires_grad_()
    shifted = cmask[:, 1:].double()
    per_tok = shifted * (seq / shifted.sum(1).clamp(min=1)).unsqueeze(1)  # sums to seq on each row
    out = NS(log_probs=per_tok, entropy=torch.zeros(2 * n, T - 1), mean_logits=torch.zeros(2 * n, T - 1),
             is_top1=torch.zeros(2 * n, T - 1, dtype=torch.bool))
    s = stand_in(precompute_ref_logps=True, ld_alpha=None, f_divergence_type="reverse_kl", loss_types=[loss_type],
                 loss_weights=[1.0], beta=beta, label_smoothing=ls, use_weighting=False, args=NS())
    inputs = {"input_ids": torch.ones(2 * n, T, dtype=torch.long), "attention_mask": torch.ones(2 * n, T, dtype=torch.long),
              "completion_mask": cmask, "ref_chosen_logps": rc, "ref_rejected_logps": rr}
    if loss_type == "sigmoid" and ls > 0:  # cDPO (TRL <= 0.2x dpo_loss), see the docstring
        d = (seq[:n] - rc) - (seq[n:] - rr)
        loss = (-F.logsigmoid(beta * d) * (1 - ls) - F.logsigmoid(-beta * d) * ls).mean()
        DPOTrainer._compute_loss(s, lambda **kw: out, inputs, False)  # metrics only
    else:
        loss = DPOTrainer._compute_loss(s, lambda **kw: out, inputs, False)
    loss.backward()
    emit(name + ".cfg", [["sigmoid", "robust", "hinge", "ipo"].index(loss_type), beta, ls, int(ref_free)])
    emit(name + ".pc", pc)
    emit(name + ".pr", pr)
    emit(name + ".rc", rc)
    emit(name + ".rr", rr)
    emit(name + ".lc", cmask[:n].sum(1))
    emit(name + ".lr", cmask[n:].sum(1))
    emit(name + ".d", seq.grad)
    emit(name + ".metrics", [loss.item()] + metrics(s, ["rewards/chosen", "rewards/rejected", "rewards/margins",
                                                         "rewards/accuracies", "logps/chosen", "logps/rejected"]))


dpo_case("dpo_sigmoid", 8, "sigmoid", 0.1, 0.0, False)
dpo_case("dpo_cdpo", 8, "sigmoid", 0.1, 0.2, False)
dpo_case("dpo_robust", 8, "robust", 0.1, 0.2, False)
dpo_case("dpo_hinge", 8, "hinge", 0.5, 0.0, False)  # beta 0.5: pairs on both sides of the hinge
dpo_case("dpo_ipo", 8, "ipo", 0.1, 0.0, False)
dpo_case("dpo_reffree", 8, "sigmoid", 0.1, 0.0, True)

# ---- GRPO advantages ----
def adv_case(name, groups, G, scale, with_nan):
    r = f32(groups * G)
    r[G] = r[G + 1]  # a tie
    r[2 * G: 3 * G] = 0.5  # a group with zero std
    if with_nan:
        r[1] = float("nan")
    rewards = r.clone()
    mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    if scale in ["group", "none"]:
        std = nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
    else:
        std = nanstd(rewards).expand_as(rewards)
    adv = rewards - mean
    if scale != "none":
        adv = adv / (std + 1e-4)
    adv[torch.isnan(rewards)] = 0.0  # unscorable completions (GRPOTrainer: advantages[unscorable_mask] = 0)
    emit(name + ".cfg", [G, ["group", "batch", "none"].index(scale)])
    emit(name + ".r", r)
    emit(name + ".adv", adv)


adv_case("adv_group", 4, 4, "group", True)
adv_case("adv_batch", 4, 4, "batch", False)
adv_case("adv_none", 4, 4, "none", True)

# ---- GRPO loss ----
def grpo_case(name, loss_type, beta, old, ga, B=6, T=7):
    logp = f32(B, T, scale=0.5, shift=-2.0).requires_grad_()
    oldp = (logp.detach() + f32(B, T, scale=0.3)).float().double() if old else None  # fp32-representable
    refp = (logp.detach() + f32(B, T, scale=0.3)).float().double()
    adv = f32(B)
    mask = torch.ones(B, T, dtype=torch.long)
    for b in range(B):
        mask[b, torch.randint(2, T + 1, (1,), generator=g).item():] = 0
    mask[1, 3] = 0  # a tool-masked hole
    num_items = float(mask.sum()) * 2  # tokens of a generation batch twice this one
    spg, maxlen = 2, T
    s = stand_in(top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
                 beta=beta, args=NS(use_bias_correction_kl=False, delta=None), loss_type=loss_type, epsilon_low=0.2,
                 epsilon_high=0.28, use_vllm=False, _entropy_bonus_enabled=False, current_gradient_accumulation_steps=ga,
                 max_completion_length=maxlen)
    s._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros(B, T), None)
    s.args.steps_per_generation = spg
    inputs = {"prompt_ids": torch.ones(B, 3, dtype=torch.long), "prompt_mask": torch.ones(B, 3, dtype=torch.long),
              "completion_ids": torch.ones(B, T, dtype=torch.long), "completion_mask": mask, "advantages": adv,
              "ref_per_token_logps": refp, "num_items_in_batch": torch.tensor(num_items)}
    if old:
        inputs["old_per_token_logps"] = oldp
    loss = GRPOTrainer._compute_loss(s, None, inputs)
    loss.backward()
    emit(name + ".cfg", [["grpo", "bnpo", "dr_grpo", "dapo"].index(loss_type), 0.2, 0.28, beta, maxlen, ga, num_items, 1,
                         spg, B, T, int(old)])
    emit(name + ".logp", logp)
    emit(name + ".old", oldp if old else torch.zeros(0))
    emit(name + ".ref", refp)
    emit(name + ".adv", adv)
    emit(name + ".mask", mask)
    emit(name + ".d", logp.grad)
    kl = metrics(s, ["kl"])[0] if beta != 0 else 0.0
    emit(name + ".metrics", [loss.item(), kl] + metrics(s, ["clip_ratio/low_mean", "clip_ratio/high_mean",
                                                            "clip_ratio/region_mean"]))


grpo_case("grpo_grpo", "grpo", 0.04, True, 2)
grpo_case("grpo_bnpo", "bnpo", 0.04, True, 1)
grpo_case("grpo_drgrpo", "dr_grpo", 0.0, True, 3)
grpo_case("grpo_dapo", "dapo", 0.1, True, 2)
grpo_case("grpo_onpolicy", "grpo", 0.04, False, 1)

with open(sys.argv[1], "w") as f:
    f.write("# objective losses: TRL %s, torch %s, float64; scripts/gen_objloss_goldens.py\n" % (trl.__version__, torch.__version__))
    f.write("\n".join(lines) + "\n")
