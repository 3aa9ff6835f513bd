/* crc32c.c — see dt_crc32c.h. */
#include "dt_crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define DT_CRC32C_HW 1
#endif

#define DT_CRC32C_POLY 0x82F63B78u   /* Castagnoli, reflected */

static uint32_t g_table[8][256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void make_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ DT_CRC32C_POLY : c >> 1;
        g_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) g_table[t][i] = (g_table[t - 1][i] >> 8) ^ g_table[0][g_table[t - 1][i] & 0xff];
}

uint32_t dt_crc32c_sw(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, make_tables);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    while (n >= 8) {   /* slicing-by-8, little-endian loads */
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        c = g_table[7][lo & 0xff] ^ g_table[6][(lo >> 8) & 0xff] ^ g_table[5][(lo >> 16) & 0xff] ^
            g_table[4][lo >> 24] ^ g_table[3][p[4]] ^ g_table[2][p[5]] ^ g_table[1][p[6]] ^ g_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ g_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#ifdef DT_CRC32C_HW
static int g_hw;
static pthread_once_t g_hw_once = PTHREAD_ONCE_INIT;
static void detect_hw(void) { g_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0; }

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, sizeof v);   /* unaligned-safe */
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

uint32_t dt_crc32c(uint32_t crc, const void *data, size_t n) {
#ifdef DT_CRC32C_HW
    pthread_once(&g_hw_once, detect_hw);
    if (g_hw) return crc32c_hw(crc, data, n);
#endif
    return dt_crc32c_sw(crc, data, n);
}
