/* dt_hardware.h — hardware profiles (configs/hardware/NAME.json) and their numbers.
 * Units: FLOP/s, bytes/s, bytes, seconds. Every number cites its source in
 * docs/hardware.md. */
#ifndef DT_HARDWARE_H
#define DT_HARDWARE_H

#include <stdint.h>

#include "dt_error.h"
#include "dt_precision.h"

typedef enum { DT_DEVICE_CPU = 0, DT_DEVICE_CUDA = 1 } dt_device;

#define DT_HW_STAGES 4   /* ZeRO stages 0..3 */

typedef struct dt_hardware {
    char name[64];               /* profile name, e.g. "H100-SXM-80GB", "cpu", "local" */
    dt_device device;
    int64_t device_mem_bytes;    /* memory per device (rank) */
    int64_t reserve_bytes;       /* runtime context + allocator slack per device, stated */
    double peak_flops[3];        /* dense peak FLOP/s indexed by dt_dtype (fp32, bf16, fp16) */
    double achievable_flops[3];  /* what GEMM-heavy training reaches, same index */
    double mem_bw;               /* device memory bandwidth, bytes/s */
    double intra_busbw;          /* intra-node collective bus bandwidth, bytes/s (all-reduce) */
    double intra_busbw_rs;       /* optional: the reduce-scatter's and the all-gather's own */
    double intra_busbw_ag;       /* intra-node busbw where they differ (measured by dtplan
                                  * calibrate through the engine's collectives); 0: intra_busbw */
    double intra_alpha_s;        /* intra-node collective latency per step, s */
    char interconnect[32];       /* inter-node link the numbers below are for, e.g. "200Gb" */
    double inter_busbw;          /* inter-node collective bus bandwidth, bytes/s */
    double inter_alpha_s;        /* inter-node latency per step, s */
    double h2d_bw;               /* host<->device copy bandwidth, bytes/s (pinned) */
    int64_t host_mem_bytes;      /* host memory per node */
    double cpu_adam_params_per_s;/* CPU AdamW throughput per node, parameters/s */
    double nvme_bw;              /* NVMe read/write bandwidth per node, bytes/s */
    int64_t nvme_bytes;          /* NVMe capacity per node */
    /* Optional kernel-level terms (absent in a profile = 0 = not modelled apart;
     * docs/time-model.md "Kernel-level terms", measured by dtplan calibrate): */
    double attention_flops;      /* FLOP/s of the attention kernels (QK^T and PV, counted as
                                  * dt_model_block_fwd_flops_per_seq does); 0: achievable_flops */
    double op_overhead_s;        /* fixed time per device op (kernel launch, OpenMP fork/join), s */
    double elementwise_bw;       /* bytes/s the element-wise kernels (LayerNorm, GELU, residual,
                                  * bias sums, cross-entropy) stream; 0: folded into achievable_flops */
    double thread_efficiency;    /* CPU: the fraction of its threads' summed single-thread rate
                                  * a rank keeps when its OpenMP threads share every op (fork /
                                  * join, serial parts, split GEMMs), measured with thread_cores
                                  * threads; 0: not measured (= 1) */
    double thread_cores;         /* the threads thread_efficiency was measured with (>= 2) */
    /* Optional measured runtime footprint (docs/memory-model.md "The CPU runtime term",
     * measured by dtplan calibrate; absent = 0 = the planner uses reserve_bytes): */
    int64_t runtime_bytes;       /* resident bytes of one rank's process beyond what the engine
                                  * allocates (code, libraries, OpenMP, OpenBLAS), no MPI */
    int64_t runtime_mpi_bytes;   /* the same for a rank of a multi-rank (MPI) run */
    /* Optional measured footprint of a rank of a Hugging Face run on this CPU (runtime
     * deepspeed / fsdp on a cpu device; docs/memory-model.md "Hugging Face runs on CPU
     * ranks"; measured by bench/validate_runtimes.sh): VmRSS after Python has imported torch
     * and transformers, joined the gloo process group and run a 64 MiB all-reduce, every
     * tensor freed, then a tiny model (bench/runtimes/matrix.py "calib", 0.18 M parameters)
     * trained two steps under the runtime at that stage: its peak. Per ZeRO stage, since
     * each stage loads its own machinery (JSON: one number for every stage, or 4). 0: not
     * measured (such a plan is refused). */
    int64_t torch_runtime_bytes[DT_HW_STAGES];     /* runtime fsdp: [0] DDP, [2] SHARD_GRAD_OP,
                                                     * [3] FULL_SHARD (FSDP2); [1] unused */
    int64_t deepspeed_runtime_bytes[DT_HW_STAGES]; /* runtime deepspeed, ZeRO stage 0..3 */
    /* Optional GPU shape model (docs/time-model.md "Shape-aware GPU compute"): */
    double sm_count;             /* streaming multiprocessors (the wave quantisation's width);
                                  * > 0 on a cuda device turns the shape-aware GEMM model on */
    /* Optional measured GPU efficiencies (dtplan calibrate --device cuda; docs/hardware.md
     * "Calibrating a GPU"); 0 = the cited defaults of planner/dt_gemmtime.h. On a cuda device
     * the shape-aware model also takes op_overhead_s as its per-kernel launch cost. */
    double gemm_peak_fraction[3];/* the best square GEMM's FLOP/s / peak_flops, per dtype, in [0, 1] */
    double mem_bw_fraction;      /* a device-to-device copy's bytes read + written per s / mem_bw, [0, 1] */
} dt_hardware;

/* The runtime footprint of one rank (bytes) in a world of `world` ranks: runtime_mpi_bytes
 * (world > 1) or runtime_bytes as measured, else the profile's reserve_bytes (profiles
 * without a measurement; docs/memory-model.md "The CPU runtime term"). */
int64_t dt_hardware_runtime_bytes(const dt_hardware *hw, int64_t world);

/* The measured footprint of a rank of a Hugging Face run on a CPU profile at ZeRO stage
 * `stage` (bytes): deepspeed_runtime_bytes when deepspeed is nonzero, else
 * torch_runtime_bytes; 0 when the profile has no such measurement. Stage -1: the
 * largest over the stages (0: nothing measured). */
int64_t dt_hardware_hf_runtime_bytes(const dt_hardware *hw, int deepspeed, int stage);

/* 1 when the profile holds figures `dtplan calibrate` measured on a machine (CPU: the
 * threads' efficiency or the runtime footprint; cuda: a GEMM peak or bandwidth fraction),
 * 0 for a datasheet or built-in profile that measured nothing of the machine it plans. */
int dt_hardware_is_measured(const dt_hardware *hw);

/* Loads a profile by name (case-insensitive, built into the binary from
 * configs/hardware/) or from a JSON file path, then selects the inter-node
 * numbers for interconnect (NULL = the profile's default). */
int dt_hardware_load(const char *name_or_path, const char *interconnect, dt_hardware *out,
                     dt_error *err);
/* Parses profile JSON text (format "dtplan.hardware/1") with its default interconnect; what
 * names it in messages. */
int dt_hardware_parse(const char *text, const char *what, dt_hardware *out, dt_error *err);
/* The JSON text of a profile, built-in (by name) or read from a path, as dt_hardware_load
 * finds it (it must also load): malloc'd, free with free(); NULL with err set. */
char *dt_hardware_text(const char *name_or_path, dt_error *err);
/* A per-device memory limit (--mem, given as text) must not exceed the profile's
 * device memory: the error names the profile's capacity, a --mem value that fits and,
 * when the caller can take another profile (suggest_hardware), the smallest built-in
 * profile of the same kind that holds the limit. */
int dt_hardware_check_mem_limit(const dt_hardware *hw, int64_t limit, const char *flag, const char *text,
                                int suggest_hardware, dt_error *err);
/* The profile's device memory as --mem text that parses to at most it: "80G" for
 * 80 GiB, "141GB" for 141e9 bytes. */
void dt_hardware_mem_text(const dt_hardware *hw, char *buf, size_t n);
/* The SM count the time model uses: hw->sm_count when set, else (a cuda profile read back
 * from a plan, which does not carry the field) the built-in profile of the same name's;
 * 0 when neither has one (the flat achievable_flops model then applies). */
double dt_hardware_sm_count(const dt_hardware *hw);
int dt_hardware_catalog_count(void);
const char *dt_hardware_catalog_name(int i);

#endif
