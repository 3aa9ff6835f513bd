# bash completion for dtplan (installed as share/bash-completion/completions/dtplan).
# The flags are those of `dtplan COMMAND --help`; tests/docs/test_install.sh checks each one.
_dtplan_models="gpt2 gpt2-medium gpt2-large gpt2-xl gpt2-tiny gpt2-small-test llama-tiny qwen3-tiny
qwen2.5-0.5b qwen2.5-1.5b qwen2.5-3b qwen2.5-7b qwen2.5-14b qwen2.5-32b qwen2.5-72b
qwen3-0.6b qwen3-1.7b qwen3-4b qwen3-8b qwen3-14b qwen3-32b
llama-2-7b llama-2-13b llama-2-70b llama-3.1-8b llama-3.1-70b llama-3.1-405b
llama-3.2-1b llama-3.2-3b llama-3.3-70b-instruct mistral-7b-v0.3 llava-1.5-7b llava-1.5-13b llava-tiny"
# the fine-tuning options of estimate, solve and simulate (cli/dtplan/ftopts.c)
_dtplan_ft="--finetune --trainable-layers --trainable-modules --lora-rank --lora-alpha --lora-dropout --lora-target
--modules-to-save --use-rslora --adapter-dtype --quant --double-quant --compute-dtype --quant-block --quant-skip
--prepare-kbit --vlm-stage --images-per-sample"
# the objective options of estimate, solve and simulate (cli/dtplan/objopts.c)
_dtplan_obj="--objective --precompute-ref --num-generations --max-completion-length --kl-coef --gen-batch --temperature
--top-p --placement --gen-mem-fraction --pref-loss --pref-beta --label-smoothing --rm-head --num-iterations"
_dtplan() {
    local cur prev cmd i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    cmd=
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in -*) ;; *) cmd=${COMP_WORDS[i]}; break ;; esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "estimate solve show export simulate compare report calibrate validate --help" -- "$cur"))
        return
    fi
    local flags
    case $cmd in
    estimate) flags="--params --model --plan --gpus --nodes --micro-batch --grad-accum --seq --ckpt --precision
                     --param-dtype --grad-dtype --master-dtype --moment-dtype --attention --zero-stage
                     --offload-optimizer --offload-param --deepspeed --hardware --mem --units --compare --json
                     --plot --runtime --recompute --largest-layer --sub-group-size --config --config-format --help $_dtplan_ft $_dtplan_obj" ;;
    solve) flags="--mem --model --params --gpus --nodes --global-batch --seq --hardware --interconnect --host-mem
                  --nvme --precision --stages --no-offload --no-overlap --units -o --plot --data --steps --warmup
                  --lr --schedule --out --eval-interval --save-interval --runtime --attention --sub-group-size --nvme-path
                  --layouts --no-layouts --config --config-format --lr-scaling --help $_dtplan_ft $_dtplan_obj" ;;
    show) flags="--units --help" ;;
    export) flags="--deepspeed --megatron --torchtitan --llamafactory --hf-trainer --runbook --config -o --slurm --script --master-addr
                   --master-port --job-name --help" ;;
    simulate) flags="--detail --trace --plot --json --runtime --config --config-format --help $_dtplan_ft $_dtplan_obj" ;;
    compare) flags="--json --help" ;;
    report) flags="-o --plan --help" ;;
    calibrate) flags="-o --plan --no-mpi --device --base --gpu --name --help" ;;
    validate) flags="--json --max-memory-error --max-throughput-error --keep-ranks --help" ;;
    esac
    case $prev in
    --hardware)
        COMPREPLY=($(compgen -W "H100-SXM-80GB H200 A100-80GB A100-40GB V100-32GB cpu" -- "$cur"))
        COMPREPLY+=($(compgen -f -X '!*.json' -- "$cur"))
        return ;;
    --model)
        COMPREPLY=($(compgen -W "$_dtplan_models" -- "$cur"))
        COMPREPLY+=($(compgen -f -X '!*.json' -- "$cur"))
        return ;;
    --precision) COMPREPLY=($(compgen -W "mixed-bf16 mixed-fp16 pure-bf16 fp32" -- "$cur")); return ;;
    --units) COMPREPLY=($(compgen -W "GiB GB" -- "$cur")); return ;;
    --compare) COMPREPLY=($(compgen -W "deepspeed" -- "$cur")); return ;;
    --runtime) COMPREPLY=($(compgen -W "dtrun deepspeed fsdp megatron" -- "$cur")); return ;;
    --finetune) COMPREPLY=($(compgen -W "full freeze lora qlora" -- "$cur")); return ;;
    --vlm-stage) COMPREPLY=($(compgen -W "pretrain sft full" -- "$cur")); return ;;
    --objective) COMPREPLY=($(compgen -W "pt sft rm dpo grpo ppo" -- "$cur")); return ;;
    --placement) COMPREPLY=($(compgen -W "colocated split" -- "$cur")); return ;;
    --pref-loss) COMPREPLY=($(compgen -W "sigmoid hinge ipo kto_pair orpo simpo" -- "$cur")); return ;;
    --rm-head) COMPREPLY=($(compgen -W "score value" -- "$cur")); return ;;
    --quant) COMPREPLY=($(compgen -W "nf4 fp4 int8" -- "$cur")); return ;;
    --double-quant) COMPREPLY=($(compgen -W "on off" -- "$cur")); return ;;
    --compute-dtype|--adapter-dtype) COMPREPLY=($(compgen -W "bf16 fp16 fp32" -- "$cur")); return ;;
    --lora-target) COMPREPLY=($(compgen -W "all q_proj k_proj v_proj o_proj gate_proj up_proj down_proj c_attn c_proj c_fc" -- "$cur")); return ;;
    --attention) COMPREPLY=($(compgen -W "flash materialized sdpa eager" -- "$cur")); return ;;
    --recompute) COMPREPLY=($(compgen -W "selective none" -- "$cur")); return ;;
    --largest-layer) COMPREPLY=($(compgen -W "module block_matrix" -- "$cur")); return ;;
    --schedule) COMPREPLY=($(compgen -W "constant WarmupLR WarmupDecayLR WarmupCosineLR" -- "$cur")); return ;;
    --out|--data) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --plan|--deepspeed|-o|--plot|--trace|--slurm) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _dtplan dtplan
