/* dt_backend.h — the loadable CUDA back-end.
 *
 * The CUDA device and the NCCL communicator (engine/cuda/) are built as one
 * module, libdtcuda.so, that dtrun loads only when a plan asks for a CUDA
 * device — the way ggml and PyTorch load their GPU back-ends — so one build
 * runs CPU plans on a machine without the CUDA libraries, and programs that
 * never use a GPU do not pay for loading cudart, cuBLAS and NCCL at start-up.
 *
 * Where it is looked for, in order: the running program itself (a test or
 * benchmark that links the back-end's objects), then $DT_CUDA_BACKEND (a path
 * to the module), then libdtcuda.so in the directory of the running program.
 * The module resolves the engine functions it calls (errors, memory
 * accounting) against the program that loads it, so that program is linked
 * with its symbols exported (CMake ENABLE_EXPORTS). */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include "dt_error.h"

/* The module's file name, and the version of the interface between the module
 * and the engine; the module exports `const int dt_cuda_backend_abi` equal to it. */
#define DT_CUDA_BACKEND_FILE "libdtcuda.so"
/* 2: dt_device_ops gained meminfo (the driver's view of device memory)
 * 3: the llama-family ops (linear_t, rmsnorm, rope, swiglu, attention_gqa)
 * 4: convert_2d and broadcast_rows (the 16-bit GEMM path of engine/model/lm.c)
 * 5: store_round (a 16-bit activation stored and its fp32 view rounded in one pass)
 * 6: dt_cuda_calibrate (dt_gpucal.h: the GPU's GEMM, copy and launch figures) */
#define DT_CUDA_BACKEND_ABI 6

/* The address of the back-end's function `symbol` (loading the module on the
 * first call; thread-safe). NULL with err set to one line that says why the
 * back-end cannot be used and what to do. */
void *dt_backend_cuda_sym(const char *symbol, dt_error *err);

#endif
