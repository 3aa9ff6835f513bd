/* Fuzz target: reading a PEFT LoRA adapter directory (engine/store/adapter.c dt_adapter_read)
 * and checking it against a model (dt_adapter_check_model). The input is both files: a 4-byte
 * little-endian length n, n bytes of adapter_config.json, the rest adapter_model.safetensors
 * (the seeds are tests/engine/golden/adapter's PEFT adapters in that layout). */
#include "dt_fuzz.h"

#include <errno.h>
#include <sys/stat.h>

#include "dt_adapter.h"
#include "dt_file.h"
#include "dt_model.h"

static char g_dir[64];
static dt_model g_llama, g_gpt2;

static void put(const char *name, const uint8_t *p, size_t n) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    dt_error err;
    if (dt_write_file_atomic(path, p, n, &err)) abort();
}

/* the two files and the directory go when the process ends */
static void cleanup(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, DT_ADAPTER_CONFIG_FILE);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s", g_dir, DT_ADAPTER_WEIGHTS_FILE);
    unlink(path);
    rmdir(g_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_error err;
    dt_error_clear(&err);
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/dt_fuzz_adapter_%d", (int)getpid());
        if (mkdir(g_dir, 0700) && errno != EEXIST) abort();
        atexit(cleanup);
        if (dt_model_resolve("llama-tiny", &g_llama, &err) || dt_model_resolve("gpt2-tiny", &g_gpt2, &err)) {
            fprintf(stderr, "fuzz_adapter: %s\n", err.msg);
            abort();
        }
    }
    if (size < 4) return 0;
    uint32_t n = (uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 24;
    if (n > size - 4) n = (uint32_t)(size - 4);
    put(DT_ADAPTER_CONFIG_FILE, data + 4, n);
    put(DT_ADAPTER_WEIGHTS_FILE, data + 4 + n, size - 4 - n);
    dt_adapter *a = NULL;
    if (dt_adapter_read(g_dir, &a, &err) == DT_OK) {
        (void)dt_adapter_check_model(a, &g_llama, &err);
        (void)dt_adapter_check_model(a, &g_gpt2, &err);
        for (int i = 0; i < dt_adapter_count(a); i++) {
            const dt_adapter_entry *e = dt_adapter_get(a, i);
            float *buf = malloc((size_t)(e->shape[0] * e->shape[1]) * sizeof *buf);
            if (!buf) abort();
            dt_adapter_entry_f32(e, buf);
            free(buf);
        }
        dt_adapter_free(a);
    }
    return 0;
}
