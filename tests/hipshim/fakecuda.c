/* A fake CUDA driver for the hip shim's CPU tests: cuMemcpyAsync is a host memcpy (the tests pass host
 * pointers) and fails with 700 on the stream handle 0xBAD; cuGetErrorName knows 1 and 700 only.
 *
 * Build: cc -shared -fPIC -o libfakecuda.so fakecuda.c
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

int cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t n, void* stream) {
    if ((uintptr_t)stream == 0xBAD)
        return 700;
    memcpy((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
    return 0;
}

int cuGetErrorName(int error, const char** name) {
    switch (error) {
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 700: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return 0;
    default: *name = NULL; return 1;
    }
}
