/* hipshim: the HIP entry points of pytest_gpucomm's HIP copy engine, forwarded to the CUDA driver.
 *
 * It lets the HIP engine (pytest_gpucomm/ops/engines.py, table HIP) run on an NVIDIA GPU: point
 * GPUCOMM_HIP_LIBRARY at the built library and set GPUCOMM_COPY_ENGINE=hip.  It exports exactly the
 * calls that table names, with HIP's signatures (ROCm/HIP include/hip/hip_runtime_api.h):
 *
 *   hipError_t  hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes, hipMemcpyKind kind,
 *                              hipStream_t stream);
 *   const char* hipGetErrorName(hipError_t hip_error);
 *
 * and forwards them to the driver's cuMemcpyAsync and cuGetErrorName (dlopen'd at the first call, from
 * libcuda.so.1, or from $HIPSHIM_CUDA_LIBRARY where set: the tests point it at a fake driver).  torch's
 * CUDA streams are CUstreams, so the stream passes through as it is; with unified addressing
 * cuMemcpyAsync needs no kind, so the kind is only checked to be one of HIP's (0..4, else
 * hipErrorInvalidValue).  Status codes: 0 is success on both; any other CUresult is passed through as
 * the hipError_t, and hipGetErrorName gives the driver's name of it (CUDA_ERROR_...).  Where the driver
 * cannot be loaded the calls return hipErrorNotInitialized (3, also CUDA_ERROR_NOT_INITIALIZED).
 *
 * Build: cc -shared -fPIC -o libhipshim.so hipshim.c -ldl
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef int hipError_t;
typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorNotInitialized = 3 };
enum { hipMemcpyHostToHost = 0, hipMemcpyDefault = 4 };

typedef CUresult (*cu_memcpy_async_t)(CUdeviceptr, CUdeviceptr, size_t, void*);
typedef CUresult (*cu_get_error_name_t)(CUresult, const char**);

static cu_memcpy_async_t cu_memcpy_async;
static cu_get_error_name_t cu_get_error_name;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

static void load_driver(void) {
    const char* path = getenv("HIPSHIM_CUDA_LIBRARY");
    void* lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    cu_memcpy_async = (cu_memcpy_async_t)dlsym(lib, "cuMemcpyAsync");
    cu_get_error_name = (cu_get_error_name_t)dlsym(lib, "cuGetErrorName");
}

hipError_t hipMemcpyAsync(void* dst, const void* src, size_t sizeBytes, int kind, void* stream) {
    pthread_once(&loaded, load_driver);
    if (!cu_memcpy_async)
        return hipErrorNotInitialized;
    if (kind < hipMemcpyHostToHost || kind > hipMemcpyDefault)
        return hipErrorInvalidValue;
    return cu_memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, sizeBytes, stream);
}

const char* hipGetErrorName(hipError_t hip_error) {
    const char* name = NULL;
    pthread_once(&loaded, load_driver);
    if (cu_get_error_name && cu_get_error_name(hip_error, &name) == 0 && name)
        return name;
    switch (hip_error) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorNotInitialized: return "hipErrorNotInitialized";
    default: return "hipErrorUnknown";
    }
}
