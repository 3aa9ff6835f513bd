/* dt_dtrun_cli.h — dtrun's subcommands besides training (cli/dtrun/dtrun.c).
 * Each takes the arguments after the subcommand name (argv[0] is the
 * subcommand) and returns the process exit status: 0 success, 2 bad input,
 * 1 other failure. */
#ifndef DT_DTRUN_CLI_H
#define DT_DTRUN_CLI_H

#include <stdint.h>

#include "dt_cli_common.h"
#include "dt_error.h"

/* Shared by the subcommands (cli_util.c): dt_cli_parse_i64 reads a decimal integer >= min
 * for the flag `what`, or prints one line naming the flag and returns 2. Failures print
 * through dt_cli_common.h. */
int dt_cli_parse_i64(const char *s, const char *what, int64_t min, int64_t *out);

/* `calibrate`: measure this machine, write a hardware profile (calibrate.c).
 * prog is the program name its messages start with ("dtrun", or "dtplan" when
 * `dtplan calibrate` forwarded the call). */
int dt_cmd_calibrate(const char *prog, int argc, char **argv);
/* The words a hardware profile's "source" starts with when calibrate wrote it: such a file
 * may be replaced by a new calibration; any other file at -o is the user's. */
#define DT_CALIBRATE_SOURCE_PREFIX "dtplan calibrate"
/* A run whose measured step is further than this fraction from the plan's prediction, on a
 * profile that measured nothing of the machine, is told how to calibrate: the simulator's
 * target on a calibrated profile (bench/validate_sim.sh, docs/benchmarks.md). */
#define DT_PREDICTION_HINT_FRACTION 0.15
/* calibrate's -o before any measuring: a new path in a folder that takes files, or a
 * profile an earlier calibrate wrote (cli_util.c). 0, or 2 after one line on stderr
 * ("PROG: calibrate: ...") naming the path and what to do. */
int dt_calibrate_check_out(const char *prog, const char *out);
/* `calibrate --device cuda`: measure a GPU, write its profile (calibrate_gpu.c). */
int dt_cmd_calibrate_gpu(const char *prog, int argc, char **argv);

/* `tokenize`: text on stdin -> token ids per line, or ids -> text with --decode, through
 * a Hugging Face byte-level BPE tokenizer.json or a SentencePiece tokenizer.model
 * (tokenize.c, docs/tokenizers.md). */
int dt_cmd_tokenize(int argc, char **argv);

/* `sample`: text generated from a checkpoint, in bytes or through the model's
 * tokenizer (sample.c). */
int dt_cmd_sample(int argc, char **argv);

/* `prepare`: text files, folders and JSONL (pretraining text, SFT chats) -> token
 * shards with a train/val split (prepare.c, docs/data.md). */
int dt_cmd_prepare(int argc, char **argv);

/* `merge`: a LoRA adapter in PEFT's format merged into its base model, written as a Hugging
 * Face model directory (merge.c, docs/finetune.md "Merging an adapter"). */
int dt_cmd_merge(int argc, char **argv);

#endif
