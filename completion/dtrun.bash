# bash completion for dtrun (installed as share/bash-completion/completions/dtrun).
# The flags are those of `dtrun --help`, `dtrun sample --help`, `dtrun calibrate --help`,
# `dtrun tokenize --help`, `dtrun prepare --help`, `dtrun merge --help`;
# tests/docs/test_install.sh checks each one.
_dtrun() {
    local cur prev sub
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    sub=
    [[ $COMP_CWORD -gt 1 ]] && sub=${COMP_WORDS[1]}
    local flags="--out --max-steps --data --init --init-adapter --resume --overwrite --timeout --trace --quiet --no-progress
                 --reward-command --reward-timeout
                 --nnodes --node-rank --nproc-per-node --master-addr --master-port --help"
    case $sub in
    sample) flags="--prompt --tokens --seed --temperature --tokenizer --dump-logits --help" ;;
    calibrate) flags="-o --plan --no-mpi --device --base --gpu --name --help" ;;
    tokenize) flags="--tokenizer --decode --no-special --help" ;;
    prepare) flags="--tokenizer --out --format --chat-template --val-fraction --seed --shard-tokens --quiet
                    --no-progress --help" ;;
    merge) flags="--base --adapter -o --max-shard-size --dtype --help" ;;
    esac
    case $prev in
    --out|--data|--init|--init-adapter|--adapter) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --base) [[ $sub == merge ]] && { COMPREPLY=($(compgen -d -- "$cur")); return; } ;;
    --dtype) COMPREPLY=($(compgen -W "bf16 fp16 fp32" -- "$cur")); return ;;
    --format) COMPREPLY=($(compgen -W "text jsonl chat llava pairs prompts" -- "$cur")); return ;;
    --chat-template) COMPREPLY=($(compgen -W "chatml llama3" -- "$cur")); return ;;
    --trace|-o|--plan|--dump-logits|--tokenizer) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "sample calibrate tokenize prepare merge" -- "$cur"))
        COMPREPLY+=($(compgen -f -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -F _dtrun dtrun
