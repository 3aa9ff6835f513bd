/* dt_pixshard.h — pixel shards (docs/vlm-images.md "Pixel shards"): the images of a
 * vision-language prepare (`dtrun prepare --format llava`), one beside each token shard
 * (train/train-000000.bin + train/train-000000.px), and the loader that reads a batch of
 * (tokens, labels, pixel_values) back.
 *
 * A pixel shard holds the documents that start in its token shard (a llava prepare
 * never splits a document across token shards) and their images, preprocessed up to
 * the uint8 crop that CLIPImageProcessor normalizes (dt_image.h): 4x smaller than
 * float32 pixel_values and 2x smaller than bf16, and exact (bf16 would round the
 * normalized values to 8 significant bits); the loader normalizes in float32 as the
 * processor does, so what it returns equals the processor's pixel_values bit for bit.
 * All integers little-endian.
 *
 *   offset  bytes  field
 *        0      4  magic "DTPX"
 *        4      4  version: 1
 *        8      4  header bytes: 1024
 *       12      4  channels: 3
 *       16      4  crop height (pixels)
 *       20      4  crop width
 *       24      4  split: 0 train, 1 validation
 *       28      4  shard index (the token shard's)
 *       32      8  documents
 *       40      8  images
 *       48      8  prepare id (the token shard's)
 *       56      4  image token id (the placeholder in the token stream)
 *       60      4  image tokens per image
 *       64     12  mean, float32 x 3
 *       76     12  std, float32 x 3
 *       88      8  rescale factor, float64
 *       96      4  flags: bit 0 = LLaVA's pad-to-square was applied; bit 1 = images opened
 *                  as transformers' load_image (EXIF orientation applied); other bits 0
 *      100      4  CRC-32C of the payload (images, then the document table)
 *      104      4  CRC-32C of header bytes [0, 104)
 *      108    916  zero
 *     1024         images: images x 3 x height x width bytes (channels first, uint8)
 *                  document table: documents x 16 bytes: token offset in the token
 *                  shard (uint64), token count (uint32), image index (int32, -1: none)
 * Written to NAME.tmp, fsynced, renamed, the directory fsynced (as token shards). */
#ifndef DT_PIXSHARD_H
#define DT_PIXSHARD_H

#include <stddef.h>
#include <stdint.h>

#include "dt_error.h"
#include "dt_image.h"
#include "dt_shard.h"

#define DT_PIX_MAGIC "DTPX"
#define DT_PIX_VERSION 1
#define DT_PIX_HEADER_BYTES 1024
#define DT_PIX_CRC_SPAN 104
#define DT_PIX_DOC_BYTES 16
#define DT_PIX_FLAG_PAD 1u
#define DT_PIX_FLAG_LOAD_IMAGE 2u
#define DT_PIX_NO_IMAGE (-1)
/* Hugging Face's ignore index (torch.nn.CrossEntropyLoss ignore_index, LLaVA's IGNORE_INDEX) */
#define DT_LABEL_IGNORE (-100)

typedef struct dt_pix_header {
    uint32_t height, width;
    uint32_t split, shard_index;
    uint64_t docs, images;       /* the writer counts these */
    uint64_t prepare_id;
    uint32_t image_token_id, image_tokens;
    float mean[3], std[3];
    double rescale;
    uint32_t flags;
    uint32_t payload_crc;        /* the writer computes it */
} dt_pix_header;

typedef struct dt_pix_doc {
    uint64_t token_offset;
    uint32_t token_count;
    int32_t image;               /* DT_PIX_NO_IMAGE or an index below images */
} dt_pix_doc;

typedef struct dt_pix_writer dt_pix_writer;

int dt_pix_writer_open(const char *path, const dt_pix_header *h, dt_pix_writer **out, dt_error *err);
/* One document: its tokens' place in the token shard, and its uint8 crop
 * [3][height][width] (NULL: a text-only document). */
int dt_pix_writer_put(dt_pix_writer *w, uint64_t token_offset, uint32_t token_count, const uint8_t *crop,
                      dt_error *err);
/* Writes the table and the header, then fsync + rename + fsync of the directory; frees w. */
int dt_pix_writer_close(dt_pix_writer *w, dt_error *err);
/* Removes NAME.tmp and frees w (NULL is fine). */
void dt_pix_writer_abort(dt_pix_writer *w);

/* ---- reading: a prepare's split as documents ---- */
typedef struct dt_vlm_data dt_vlm_data;

/* Opens the split of a llava prepare's output directory (its prepare.json names the
 * shards): every token shard and pixel shard checked (headers, CRCs of every byte, the
 * same prepare id, documents that agree), its document table in memory. DT_EINVAL names
 * the file and what is wrong. */
int dt_vlm_open(const char *dir, dt_split split, dt_vlm_data **out, dt_error *err);
void dt_vlm_close(dt_vlm_data *d);
uint64_t dt_vlm_docs(const dt_vlm_data *d);
/* the crop: *height x *width pixels, 3 channels */
void dt_vlm_image_size(const dt_vlm_data *d, int *height, int *width);

/* Documents first, first + 1, ... (modulo the count) as a batch of b rows of t tokens:
 * tokens[b][t] (padded with the end-of-text id), labels[b][t] (the token where the loss
 * mask is 1 — the assistant's answers and their end-of-turn token — else
 * DT_LABEL_IGNORE: prompts, image placeholders, padding; not shifted, Hugging Face's
 * convention), pixels[b][3][height][width] float32 pixel_values (zeros for a text-only
 * document, has_image[b] 0). A document longer than t is truncated as Hugging Face's
 * model_max_length does, unless that would cut its image placeholders (DT_EINVAL). */
int dt_vlm_batch(dt_vlm_data *d, uint64_t first, int b, int t, int32_t *tokens, int32_t *labels, float *pixels,
                 uint8_t *has_image, dt_error *err);

#endif
