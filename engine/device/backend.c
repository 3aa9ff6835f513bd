/* backend.c — finding and loading the CUDA back-end module (dt_backend.h). */
#include "dt_backend.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void *g_handle;            /* the program's own handle when built in, the module's, or NULL */
static char g_why[DT_ERROR_MSG_MAX];   /* why it could not be loaded */

/* The module's path: $DT_CUDA_BACKEND, else beside the running program. */
static int module_path(char *path, size_t n) {
    const char *env = getenv("DT_CUDA_BACKEND");
    if (env && *env) return snprintf(path, n, "%s", env) < (int)n ? 0 : -1;
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return -1;
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash) return -1;
    *slash = '\0';
    return snprintf(path, n, "%s/%s", self, DT_CUDA_BACKEND_FILE) < (int)n ? 0 : -1;
}

static void load_once(void) {
    if (dlsym(RTLD_DEFAULT, "dt_cuda_backend_abi")) {   /* linked into this program */
        /* not RTLD_DEFAULT itself: glibc defines it as (void *)0, which reads as
         * "not loaded"; dlopen(NULL) is the program's own handle */
        g_handle = dlopen(NULL, RTLD_NOW);
        if (!g_handle) snprintf(g_why, sizeof g_why, "dlopen(NULL) failed: %.900s", dlerror());
        return;
    }
    char path[PATH_MAX + 64];
    if (module_path(path, sizeof path)) {
        snprintf(g_why, sizeof g_why, "cannot locate %s beside this program", DT_CUDA_BACKEND_FILE);
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "%.900s", e ? e : path);
        return;
    }
    const int *abi = dlsym(h, "dt_cuda_backend_abi");
    if (!abi || *abi != DT_CUDA_BACKEND_ABI) {
        snprintf(g_why, sizeof g_why, "%.900s is from another build (interface %d, this program needs %d)", path,
                 abi ? *abi : -1, DT_CUDA_BACKEND_ABI);
        dlclose(h);
        return;
    }
    g_handle = h;
}

void *dt_backend_cuda_sym(const char *symbol, dt_error *err) {
    pthread_once(&g_once, load_once);
    if (!g_handle) {
        dt_errorf(err, DT_ERUNTIME,
                  "cuda: the CUDA back-end cannot be loaded (%s); this program still runs CPU plans: "
                  "install the CUDA runtime, cuBLAS and NCCL, keep %s beside dtrun (or set "
                  "DT_CUDA_BACKEND=/path/to/%s), or plan for the CPU with --hardware cpu",
                  g_why, DT_CUDA_BACKEND_FILE, DT_CUDA_BACKEND_FILE);
        return NULL;
    }
    void *fn = dlsym(g_handle, symbol);
    if (!fn) dt_errorf(err, DT_EINTERNAL, "cuda: the CUDA back-end has no '%s' (a mismatched build)", symbol);
    return fn;
}
