#!/usr/bin/env bash
# Installs the Debian packages dtplan/dtrun build and run with (idempotent).
# Needs root (or sudo). The CUDA toolkit is optional and not installed here:
# without it the CPU parts build and the CUDA backend is reported as OFF.
set -euo pipefail
pkgs=(build-essential cmake pkg-config
      libglpk-dev glpk-utils            # MILP solver (dtplan solve)
      libplot-dev plotutils             # charts (PNG/SVG)
      libpng-dev                        # PNG images of VLM data (dtrun prepare); chart tests decode their PNGs
      libjpeg62-turbo-dev               # JPEG images of VLM data (dtrun prepare), libjpeg-turbo
      libcjson-dev                      # plan / config JSON
      libjansson-dev                    # tests: the reference parser the strict JSON check is held against
      nettle-dev                        # SHA-256: tokenizer fingerprints (common/hash/)
      libisal-dev                       # CRC-32C: checkpoint sums (Intel ISA-L, common/hash/)
      libyaml-dev                       # training configs: LLaMA-Factory / HF Trainer / runbook YAML (dtplan --config)
      libpcre2-dev                      # tokenizer.json pre-tokenizer regexes (dtrun tokenize)
      libicu-dev                        # tokenizer.json's NFC normalizer (Qwen2)
      libsentencepiece-dev              # SentencePiece tokenizer.model (Llama-2, Mistral)
      libopenmpi-dev openmpi-bin        # MPI communication for CPU ranks
      libopenblas-openmp-dev            # CPU GEMM (OpenMP build, shares the engine's thread pool)
      libdnnl-dev                       # oneDNN: bf16 GEMMs (AVX512-BF16 / AMX), fp32 sgemm (engine/device/gemm_cpu.c)
      ocl-icd-opencl-dev                # libdnnl-dev's CMake config requires OpenCL (a Recommends, skipped by --no-install-recommends)
      fortunes-min fortunes             # real English text for the default training job
      jq                                # bench/ scripts edit plans and read run reports
      procps                            # pgrep: the launch tests check no rank process is left
      time                              # GNU time: bench/bench_startup.sh reads wall time and max RSS
      clang libclang-rt-dev             # libFuzzer targets (scripts/fuzz.sh)
      python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
