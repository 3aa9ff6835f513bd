/* replay.c — runs a fuzz target's committed corpus (files or folders of files)
 * through its LLVMFuzzerTestOneInput in the ordinary builds (Release and
 * ASan + UBSan), so every seed and every past finding is a regression test
 * without libFuzzer. usage: fuzz_replay_NAME PATH... */
#include "dt_fuzz.h"   /* first: it defines _GNU_SOURCE (memfd_create) */

#include <dirent.h>
#include <sys/stat.h>

/* Bound on one corpus file: libFuzzer's default -max_len is 4096; seeds stay far below this. */
#define REPLAY_MAX_BYTES (16u << 20)

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_BYTES);
    if (!buf) abort();
    size_t n = fread(buf, 1, REPLAY_MAX_BYTES, f);
    int bad = ferror(f) || !feof(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: read error or larger than %u bytes\n", path, REPLAY_MAX_BYTES);
        free(buf);
        return 1;
    }
    /* an exact-size copy, so ASan sees any read past the input */
    uint8_t *data = malloc(n ? n : 1);
    if (!data) abort();
    memcpy(data, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int files = 0, fails = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: no such file or folder\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            fails += run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        char *names[4096];
        int n = 0;
        for (struct dirent *e; (e = readdir(d)) && n < 4096;)
            if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
        closedir(d);
        qsort(names, (size_t)n, sizeof names[0], cmp_names);
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            fails += run_file(path);
            files++;
            free(names[k]);
        }
    }
    if (files == 0) {
        fprintf(stderr, "replay: no corpus files given\n");
        return 1;
    }
    printf("%d passed, %d failed\n", files - fails, fails);
    return fails ? 1 : 0;
}
