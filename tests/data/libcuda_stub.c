/* A stand-in libcuda.so.1 for the selftest's tests: the driver API functions the calibrated load calls, with
 * the signatures of cuda.h (CUDA 13), so the ctypes prototypes, out-parameters, arrays and kernel arguments
 * cross a real C ABI. It runs no kernel: cuCtxSynchronize sleeps for the launched duration. Each launch is
 * appended to $STUB_LIBCUDA_LOG ("grid block smem duration_ns"); $STUB_LIBCUDA_FAIL=name:code makes that
 * function return that CUresult. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct { char bytes[16]; } CUuuid;

static int max_dynamic_smem = 0;
static unsigned long long pending_ns = 0;

static int failing(const char *fn) {
    const char *spec = getenv("STUB_LIBCUDA_FAIL");
    size_t n = strlen(fn);
    if (spec && strncmp(spec, fn, n) == 0 && spec[n] == ':') return atoi(spec + n + 1);
    return 0;
}
#define FAIL(fn) do { int rc_ = failing(fn); if (rc_) return rc_; } while (0)

CUresult cuInit(unsigned int flags) { FAIL("cuInit"); return flags == 0 ? 0 : 1; }
CUresult cuDeviceGet(CUdevice *dev, int ordinal) { FAIL("cuDeviceGet"); if (ordinal != 0) return 101; *dev = 0; return 0; }
CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    snprintf(name, (size_t)len, "%s", "Stub H100"); return 0;
}
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    for (int i = 0; i < 16; i++) uuid->bytes[i] = (char)(0xa0 + i);
    return 0;
}
CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev) {
    FAIL("cuDeviceGetAttribute");
    switch (attr) {
    case 16: *value = 132; return 0;      /* MULTIPROCESSOR_COUNT */
    case 39: *value = 2048; return 0;     /* MAX_THREADS_PER_MULTIPROCESSOR */
    case 75: *value = 9; return 0;        /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = 0; return 0;
    case 8: *value = 49152; return 0;     /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 81: *value = 233472; return 0;   /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    case 97: *value = 232448; return 0;   /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    case 111: *value = 1024; return 0;    /* RESERVED_SHARED_MEMORY_PER_BLOCK */
    default: return 1;
    }
}
CUresult cuCtxCreate_v2(void **ctx, unsigned int flags, CUdevice dev) { FAIL("cuCtxCreate_v2"); *ctx = (void *)0x1000; return 0; }
CUresult cuCtxDestroy_v2(void *ctx) { return ctx == (void *)0x1000 ? 0 : 201; }
static int primary_refs = 0;
CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice dev) { primary_refs++; *ctx = (void *)0x1100; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { return ctx == (void *)0x1100 || ctx == (void *)0x1000 ? 0 : 201; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_refs-- > 0 ? 0 : 201; }
CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned int n, int *options, void **values) {
    const char *ptx = (const char *)image;
    if (failing("cuModuleLoadDataEx") || !strstr(ptx, ".entry gpuaudit_spin") || !strstr(ptx, "%globaltimer")) {
        char *log = NULL; size_t size = 0;
        for (unsigned int i = 0; i < n; i++) {
            if (options[i] == 5) log = (char *)values[i];           /* CU_JIT_ERROR_LOG_BUFFER */
            if (options[i] == 6) size = (size_t)values[i];          /* ..._SIZE_BYTES, the value in the pointer */
        }
        if (log && size) snprintf(log, size, "%s", "ptxas stub: line 1; error: no spin kernel");
        return 218;
    }
    *module = (void *)0x2000;
    return 0;
}
CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
    if (module != (void *)0x2000 || strcmp(name, "gpuaudit_spin") != 0) return 500;
    *fn = (void *)0x3000; return 0;
}
CUresult cuModuleUnload(void *module) { return module == (void *)0x2000 ? 0 : 400; }
CUresult cuFuncSetAttribute(void *fn, int attr, int value) {
    if (fn != (void *)0x3000) return 400;
    if (attr == 8) max_dynamic_smem = value;  /* MAX_DYNAMIC_SHARED_SIZE_BYTES */
    return 0;
}
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *fn, int block_size, size_t smem) {
    if (smem > (size_t)max_dynamic_smem) return 1;
    *blocks = (int)(233472 / (smem + 1024));
    return 0;
}
CUresult cuLaunchKernel(void *fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int smem, void *stream, void **params,
                        void **extra) {
    if (fn != (void *)0x3000 || gx == 0 || gx > 132 || gy != 1 || gz != 1 || smem > (unsigned)max_dynamic_smem
        || params == NULL || extra != NULL)
        return 1;
    unsigned long long ns = *(unsigned long long *)params[0];
    const char *path = getenv("STUB_LIBCUDA_LOG");
    if (path) {
        FILE *f = fopen(path, "a");
        if (f) { fprintf(f, "%u %u %u %llu\n", gx, bx, smem, ns); fclose(f); }
    }
    pending_ns += ns;
    return 0;
}
CUresult cuCtxSynchronize(void) {
    struct timespec ts = { (time_t)(pending_ns / 1000000000ULL), (long)(pending_ns % 1000000000ULL) };
    pending_ns = 0;
    nanosleep(&ts, NULL);
    return 0;
}
CUresult cuGetErrorName(CUresult error, const char **str) {
    switch (error) {
    case 100: *str = "CUDA_ERROR_NO_DEVICE"; return 0;
    case 218: *str = "CUDA_ERROR_INVALID_PTX"; return 0;
    default: return 1;
    }
}
CUresult cuGetErrorString(CUresult error, const char **str) {
    if (error == 218) { *str = "a PTX JIT compilation failed"; return 0; }
    return 1;
}
