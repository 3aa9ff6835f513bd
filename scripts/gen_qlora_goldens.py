#!/usr/bin/env python3
"""gen_qlora_goldens.py — the golden files of dtrun's QLoRA (tests/kernels/test_qlora.c),
computed by Hugging Face transformers + bitsandbytes (CPU back-end) + PEFT themselves.

Dev-time only: CI has no Python and reads the committed files under
tests/kernels/golden/qlora/. To regenerate (CPU, seconds):

    /tmp/hfvenv/bin/python scripts/gen_qlora_goldens.py [OUT]   (default tests/kernels/golden/qlora)

(torch, transformers 5.x, bitsandbytes, peft, safetensors; the versions are in each file's
metadata.)

Base models: the llama-family goldens' configs (tests/kernels/golden/llama/{llama,qwen3}: GQA,
llama3 RoPE scaling; q/k norm, head_dim != hidden / heads) with intermediate_size 128 instead of
96, randomly initialised (torch.manual_seed(BASE_SEED + index), then gen_llama_goldens.py's
init_params: matrices N(0, 0.125^2), norms 1 + N(0, 0.1^2)) and saved
(save_pretrained, float32) to tests/kernels/golden/qlora/base-{llama,qwen3}; every linear's
in_features is then a multiple of the block size 64. bitsandbytes 0.50.2's CPU dequantisation
kernel (cdequantize_blockwise_cpu_*: the absmax of element (row, col) taken at
row * floor(cols / blocksize) + col / blocksize) reads the wrong absmax when in_features is not a
multiple of the block size, against its own quantize_4bit (flat blocks of 64 over the whole
weight), its PyTorch reference (backends/default/ops.py _dequantize_4bit_compute) and its CUDA
kernels; dtrun dequantises as those (flat blocks), which the CPU kernel equals for these shapes,
as it does for every released Llama / Qwen (hidden and intermediate sizes multiples of 64). The
script asserts that equality for every weight. The bases are loaded with
AutoModelForCausalLM.from_pretrained(dtype=torch.float32, device_map="cpu",
attn_implementation="eager", quantization_config=BitsAndBytesConfig(load_in_4bit=True,
bnb_4bit_quant_type=QT, bnb_4bit_use_double_quant=DQ, bnb_4bit_compute_dtype=torch.float32)):
transformers replaces every nn.Linear but lm_head by bnb.nn.Linear4bit and quantises its
weight (Params4bit -> bitsandbytes.functional.quantize_4bit, blocksize 64; with DQ the absmax
quantised again by quantize_blockwise(absmax - mean, blocksize 256)) from the weight as
loaded (float32; transformers 5's default dtype "auto" would load a bf16 checkpoint as bf16,
and bitsandbytes quantises A.float(), the same values). Embeddings, norms and lm_head stay
float32. Then peft.prepare_model_for_kbit_training(use_gradient_checkpointing=False) (it casts
every fp16 / bf16 parameter that is not Params4bit to float32: nothing here) and
get_peft_model(LoraConfig(r=8, lora_alpha=16, lora_dropout=0, bias="none", target_modules=every
linear of the blocks)). The model is put in train() mode: in eval mode on an AVX512-BF16 CPU
bitsandbytes repacks the weight for its bf16 gemv kernel (nn/modules.py Linear4bit.forward),
which is not what training runs.

Adapters: as scripts/gen_lora_goldens.py (after PEFT's init, torch.manual_seed(SEED + case
index): lora_A ~ U(-1/sqrt(in), 1/sqrt(in)), lora_B ~ N(0, 0.05^2)), stored as init.<name>.

The quantised base (every Linear4bit, before any forward), by the weight's name W
("model.layers.0.self_attn.q_proj.weight"):
  q.W            U8 [(n + 1) / 2]   the packed codes (Params4bit's data, high nibble first)
  absmax.W       F32 [nb] (no DQ) or U8 [nb] (DQ: the 8-bit codes of absmax - offset)
  nested_absmax.W F32 [ceil(nb / 256)], offset.W F32 [1]   (DQ only)
each asserted equal to bitsandbytes.functional.quantize_4bit of the checkpoint's weight; and
dequant.W F32 [out, in] = dequantize_4bit (what each use computes in the compute dtype) and
serialized.W U8 = the QuantState's packed JSON (QuantState.as_dict(packed=True)
["quant_state.bitsandbytes__" + type]: what save_pretrained writes beside the weight) for layer 0's
q_proj and down_proj.

qwen3-bf16-sharded-nf4-dq-bytes.safetensors: the quantised bytes alone (as above) of the bf16,
three-shard checkpoint tests/kernels/golden/llama/qwen3-bf16-sharded loaded with no dtype, as a
QLoRA user loads it: transformers keeps bf16 (dtype "auto") and bitsandbytes quantises those bf16
weights (quant_state.dtype bfloat16, asserted): dtrun reads them converted exactly to fp32 and must
give the same bytes.

Batch, forward / gradient check, training: as scripts/gen_lora_goldens.py (B 2, T 13;
micro-batch (0, 0): logits, loss, grad.<name> of every adapter), with STEPS = 5 optimizer
steps of ACCUM = 2 micro-batches (AdamW, WarmupDecayLR, clipping); after.<name>.

bf16 compute (the "-bf16" cases, BF16_CASES: what LLaMA-Factory runs for quantization_bit 4 with
bf16: true, and dtrun's mixed-bf16): the base loaded with from_pretrained(dtype=torch.bfloat16,
quantization_config=BitsAndBytesConfig(..., bnb_4bit_compute_dtype=torch.bfloat16)), so the
weights are rounded to bf16 before bitsandbytes quantises them (quant_state.dtype bfloat16,
asserted; the bytes asserted equal to quantize_4bit of the bf16-rounded checkpoint weight) and
embeddings, norms and lm_head stay bfloat16: LLaMA-Factory 0.9.5 does not call
prepare_model_for_kbit_training (model/model_utils/checkpointing.py prepare_model_for_training
upcasts the norms only with upcast_layernorm, off by default). get_peft_model's
autocast_adapter_dtype makes the adapters float32; forward and loss under torch.autocast("cpu",
torch.bfloat16) as HF Trainer's bf16=True (gen_lora_goldens.loss_of). Linear4bit casts its input
to bf16 and MatMul4Bit dequantises the weight to bf16 (bitsandbytes' CPU dequantize_4bit kernel:
the fp32 product code x absmax rounded to nearest even, asserted equal to dequantize_4bit in fp32
then .to(bfloat16) for every weight) for the forward GEMM and again for backward's input
gradient. ref.*: the exact answer the bf16 run approximates: the same bf16-loaded, bf16-quantised
model after peft.prepare_model_for_kbit_training (peft 0.21.2 utils/other.py: every fp16 / bf16
parameter that is not Params4bit cast to float32), compute dtype float32, no autocast: float32
arithmetic on the same bf16 values (the quantised weights' dequantised values in fp32 for the
forward, rounded to the quant state's bf16 in backward's dequantize_4bit(B, state)); as
gen_lora_goldens.py's ref.*. STEPS = 5 of ACCUM = 2 as above.
"""
import os
import sys

import bitsandbytes
import bitsandbytes.functional as bnbf
import peft
import torch
import transformers
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_llama_goldens import init_params, save_file  # noqa: E402  the llama goldens' init and writer
import gen_lora_goldens as lg  # noqa: E402  the LoRA goldens' batch, schedule and adapter init

STEPS, ACCUM = 5, 2
BLOCK = 64
BASE_SEED = 777
INTERMEDIATE = 128   # a multiple of BLOCK (down_proj's in_features)
# (base, quant type, double quantisation)
CASES = [("llama", "nf4", True), ("qwen3", "nf4", True), ("llama", "fp4", False)]
BF16_CASES = [("llama", "nf4", True), ("qwen3", "nf4", True)]   # (base, quant type, double quantisation)
DEQUANT_CHECKED = ("model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight")


def save_aligned(tensors, path, meta):
    """save_file with the wider elements first (stable: insertion order within a width), as the
    safetensors writer orders by alignment, so every F32 / I32 tensor is 4-byte aligned after the
    odd-length U8 ones"""
    save_file(dict(sorted(tensors.items(), key=lambda kv: -kv[1].element_size())), path, meta)


def make_base(index, case, out):
    """the golden base: the llama-family golden's config with INTERMEDIATE, random, float32"""
    cfg = transformers.AutoConfig.from_pretrained(os.path.join(lg.BASES, case))
    cfg.intermediate_size = INTERMEDIATE
    torch.manual_seed(BASE_SEED + index)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    init_params(model)
    d = os.path.join(out, "base-" + case)
    model.save_pretrained(d)
    for name, p in model.named_parameters():
        if name.endswith("proj.weight"):
            assert p.shape[1] % BLOCK == 0, name
    return d


def flat_dequant(packed, qs):
    """bitsandbytes' reference dequantisation (flat blocks: backends/default/ops.py
    _dequantize_4bit_compute), the absmax undoubled as functional.dequantize_4bit does"""
    absmax = qs.absmax
    if qs.nested:
        absmax = bnbf.dequantize_blockwise(qs.absmax, qs.state2) + qs.offset
    codes = torch.stack([packed >> 4, packed & 15], 1).reshape(-1).long()
    n = qs.shape[0] * qs.shape[1]
    return (qs.code[codes[:n]] * absmax.repeat_interleave(qs.blocksize)[:n]).reshape(qs.shape)


def quant_tensors(model, base_dir, dq, tensors, load_dtype=torch.float32):
    """the bytes of every Linear4bit, checked against quantize_4bit of the checkpoint's weight
    as loaded (load_dtype: bf16 rounds it first)"""
    ref = load_file(os.path.join(base_dir, "model.safetensors"))
    n = 0
    for name, mod in model.named_modules():
        if not isinstance(mod, bitsandbytes.nn.Linear4bit):
            continue
        w = name.replace("base_model.model.", "").replace(".base_layer", "") + ".weight"
        qs = mod.weight.quant_state
        assert qs.blocksize == BLOCK and bool(qs.nested) == dq
        packed = mod.weight.data.reshape(-1).clone()
        assert qs.dtype == load_dtype, (w, qs.dtype)
        want, wqs = bnbf.quantize_4bit(ref[w].to(load_dtype), blocksize=BLOCK, compress_statistics=dq,
                                       quant_type=qs.quant_type)
        assert torch.equal(packed, want.reshape(-1)) and torch.equal(qs.absmax, wqs.absmax), w
        tensors["q." + w] = packed
        tensors["absmax." + w] = qs.absmax.clone()
        if dq:
            assert torch.equal(qs.state2.absmax, wqs.state2.absmax) and torch.equal(qs.offset, wqs.offset), w
            tensors["nested_absmax." + w] = qs.state2.absmax.clone()
            tensors["offset." + w] = qs.offset.reshape(1).clone()
        kernel = bnbf.dequantize_4bit(mod.weight.data, qs)   # in qs.dtype: what each use computes
        assert torch.equal(kernel, flat_dequant(packed, qs).to(load_dtype)), w   # == : FP4's zero is +0.0 in both
        if w in DEQUANT_CHECKED:
            tensors["dequant." + w] = kernel.float().clone()
            key = "quant_state.bitsandbytes__" + qs.quant_type
            tensors["serialized." + w] = qs.as_dict(packed=True)[key].clone()
        n += 1
    return n


def case_meta(case, qt, dq, compute):
    """a case file's metadata: versions, quantisation, LoRA and the training loop's settings"""
    return {"case": case, "base": "tests/kernels/golden/qlora/base-" + case, "versions":
            "torch %s, transformers %s, bitsandbytes %s, peft %s" % (torch.__version__, transformers.__version__,
                                                                     bitsandbytes.__version__, peft.__version__),
            "quant": qt, "double_quant": str(int(dq)), "block": str(BLOCK), "compute_dtype": compute,
            "r": str(lg.R), "alpha": str(lg.ALPHA), "B": str(lg.B), "T": str(lg.T), "steps": str(STEPS),
            "accum": str(ACCUM), "lr": repr(lg.LR), "warmup": str(lg.WARMUP), "max_norm": repr(lg.MAX_NORM),
            "beta1": repr(lg.BETAS[0]), "beta2": repr(lg.BETAS[1]), "eps": repr(lg.EPS), "weight_decay": repr(lg.WD)}


def run_case(index, case, qt, dq, out):
    base_dir = os.path.join(out, "base-" + case)
    qcfg = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=qt, bnb_4bit_use_double_quant=dq,
                                           bnb_4bit_compute_dtype=torch.float32)
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, device_map="cpu",
                                                             attn_implementation="eager", quantization_config=qcfg)
    base = peft.prepare_model_for_kbit_training(base, use_gradient_checkpointing=False)
    for p in base.parameters():
        assert p.__class__.__name__ == "Params4bit" or p.dtype == torch.float32
    cfg = peft.LoraConfig(r=lg.R, lora_alpha=lg.ALPHA, lora_dropout=0.0, bias="none", target_modules=lg.TARGETS)
    model = peft.get_peft_model(base, cfg)
    model.train()
    tensors = {}
    nq = quant_tensors(model, base_dir, dq, tensors)
    assert nq == len(lg.TARGETS) * model.config.num_hidden_layers, (nq, model.config.num_hidden_layers)
    adapters = lg.init_adapters(model, index)
    V = model.config.vocab_size
    seq = torch.randint(0, V, (STEPS, ACCUM, lg.B, lg.T + 1), dtype=torch.int64)
    tensors["seq"] = seq.to(torch.int32)
    for n, p in adapters:
        tensors["init." + lg.our_name(n)] = p.detach().clone()

    logits, loss = lg.loss_of(model, seq[0, 0])
    loss.backward()
    tensors["logits"] = logits.detach().clone()
    tensors["loss"] = loss.detach().reshape(1).clone()
    for n, p in adapters:
        tensors["grad." + lg.our_name(n)] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)

    lg.STEPS = STEPS   # lr_at's schedule length
    params = [p for _, p in adapters]
    opt = torch.optim.AdamW(params, lr=lg.LR, betas=lg.BETAS, eps=lg.EPS, weight_decay=lg.WD)
    step_losses, norms = [], []
    for s in range(STEPS):
        total = 0.0
        for a in range(ACCUM):
            _, l = lg.loss_of(model, seq[s, a])
            (l / ACCUM).backward()
            total += l.item()
        step_losses.append(total / ACCUM)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, lg.MAX_NORM)))
        for group in opt.param_groups:
            group["lr"] = lg.lr_at(s)
        opt.step()
        opt.zero_grad(set_to_none=True)
    tensors["step_losses"] = torch.tensor(step_losses, dtype=torch.float32)
    tensors["step_norms"] = torch.tensor(norms, dtype=torch.float32)
    for n, p in adapters:
        tensors["after." + lg.our_name(n)] = p.detach().clone()
    meta = case_meta(case, qt, dq, "fp32")
    name = "%s-%s%s" % (case, qt, "-dq" if dq else "")
    save_aligned(tensors, os.path.join(out, name + ".safetensors"), meta)
    print("%s: %d quantised linears, %d adapter tensors, loss %.6f, steps %.4f -> %.4f, norms %.3f .. %.3f" %
          (name, nq, len(adapters), loss.item(), step_losses[0], step_losses[-1], min(norms), max(norms)))


def load_bf16(base_dir, qt, dq, compute):
    """the base as LLaMA-Factory loads it for bf16 QLoRA: bfloat16, quantised from the bf16 weights"""
    qcfg = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=qt, bnb_4bit_use_double_quant=dq,
                                           bnb_4bit_compute_dtype=compute)
    return transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.bfloat16, device_map="cpu",
                                                             attn_implementation="eager", quantization_config=qcfg)


def run_case_bf16(index, case, qt, dq, out):
    """QLoRA with bnb_4bit_compute_dtype=bfloat16 under autocast, and its fp32 reference (ref.*)"""
    base_dir = os.path.join(out, "base-" + case)
    cfg = peft.LoraConfig(r=lg.R, lora_alpha=lg.ALPHA, lora_dropout=0.0, bias="none", target_modules=lg.TARGETS)
    model = peft.get_peft_model(load_bf16(base_dir, qt, dq, torch.bfloat16), cfg)
    model.train()
    for n, p in model.named_parameters():
        assert p.__class__.__name__ == "Params4bit" or p.dtype == (torch.float32 if ".lora_" in n else torch.bfloat16), n
    tensors = {}
    nq = quant_tensors(model, base_dir, dq, tensors, torch.bfloat16)
    lg.STEPS, lg.ACCUM = STEPS, ACCUM   # the loop's length and lr_at's schedule
    loss, step_losses, norms, _ = lg.train_case(model, index, True, "", tensors)
    ref = peft.prepare_model_for_kbit_training(load_bf16(base_dir, qt, dq, torch.float32),
                                               use_gradient_checkpointing=False)
    for p in ref.parameters():
        assert p.__class__.__name__ == "Params4bit" or p.dtype == torch.float32
    ref = peft.get_peft_model(ref, cfg)
    ref.train()
    lg.train_case(ref, index, False, "ref.", tensors)
    meta = case_meta(case, qt, dq, "bf16")
    meta["precision"] = ("bf16 base (embeddings, norms, lm_head), 4-bit linears dequantised to bf16, fp32 adapters, "
                         "torch.autocast bf16 (LLaMA-Factory quantization_bit 4, bf16: true)")
    name = "%s-%s%s-bf16" % (case, qt, "-dq" if dq else "")
    save_aligned(tensors, os.path.join(out, name + ".safetensors"), meta)
    print("%s: %d quantised linears, loss %.6f, steps %.4f -> %.4f, norms %.3f .. %.3f" %
          (name, nq, loss, step_losses[0], step_losses[-1], min(norms), max(norms)))


def bf16_bytes(out):
    """The bytes of a bf16, sharded checkpoint (tests/kernels/golden/llama/qwen3-bf16-sharded)
    loaded as a QLoRA user loads it, with no dtype: transformers 5's default dtype "auto" keeps the
    checkpoint's bf16, so bitsandbytes quantises the bf16 weights (quant_state.dtype bfloat16,
    asserted); q. / absmax. / nested_absmax. / offset.<W> of every Linear4bit."""
    base_dir = os.path.join(lg.BASES, "qwen3-bf16-sharded")
    qcfg = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                           bnb_4bit_compute_dtype=torch.float32)
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, device_map="cpu", quantization_config=qcfg)
    tensors = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, bitsandbytes.nn.Linear4bit):
            continue
        qs = mod.weight.quant_state
        assert qs.dtype == torch.bfloat16, (name, qs.dtype)
        w = name + ".weight"
        tensors["q." + w] = mod.weight.data.reshape(-1).clone()
        tensors["absmax." + w] = qs.absmax.clone()
        tensors["nested_absmax." + w] = qs.state2.absmax.clone()
        tensors["offset." + w] = qs.offset.reshape(1).clone()
    meta = {"base": "tests/kernels/golden/llama/qwen3-bf16-sharded", "quant": "nf4", "double_quant": "1",
            "block": str(BLOCK), "load_dtype": "bfloat16 (transformers' default dtype auto)", "versions":
            "torch %s, transformers %s, bitsandbytes %s" % (torch.__version__, transformers.__version__,
                                                            bitsandbytes.__version__)}
    save_aligned(tensors, os.path.join(out, "qwen3-bf16-sharded-nf4-dq-bytes.safetensors"), meta)
    print("qwen3-bf16-sharded: %d quantised linears from bf16" % (len(tensors) // 4))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(lg.HERE, "..", "tests", "kernels", "golden", "qlora")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    for i, case in enumerate(sorted({c for c, _, _ in CASES})):
        make_base(i, case, out)
    for i, (case, qt, dq) in enumerate(CASES):
        run_case(i, case, qt, dq, out)
    bf16_bytes(out)
    for case, qt, dq in BF16_CASES:
        run_case_bf16(0 if case == "llama" else 1, case, qt, dq, out)


if __name__ == "__main__":
    main()
