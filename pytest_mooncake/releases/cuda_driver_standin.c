/*
 * A no-device CUDA driver (libcuda.so.1) for machines without a GPU driver.
 *
 * Mooncake's CUDA builds link libcuda.so.1 directly, so without a driver their engine.so and
 * transfer_engine_bench do not even load. This library exports the driver-API entry points
 * those builds import and answers every call the way a driver on a GPU-less machine does:
 * CUDA_ERROR_NO_DEVICE (100), with output arguments cleared. The error-string calls succeed,
 * so a caller that logs the error prints a real message. It is used only where the dynamic
 * loader finds no real libcuda.so.1 (pytest_mooncake/releases/standins.py decides that).
 *
 * Every symbol a release imports must be here: standins.py compares this library's exports
 * with `nm -D --undefined-only` of the release and refuses to run it with a gap.
 */
#include <stddef.h>
#include <string.h>

typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100

#define CLEAR(p) do { if (p) memset((p), 0, sizeof(*(p))); } while (0)

/* Lets a test (or a curious user) tell this library from a real driver. */
const char pytest_mooncake_cuda_standin[] = "pytest-mooncake no-device libcuda.so.1";

/* Initialisation and version. */
CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_ERROR_NO_DEVICE; }
CUresult cuDriverGetVersion(int *version) { CLEAR(version); return CUDA_ERROR_NO_DEVICE; }
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, unsigned long long flags)
{ (void)symbol; (void)version; (void)flags; CLEAR(pfn); return CUDA_ERROR_NO_DEVICE; }
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status)
{ (void)symbol; (void)version; (void)flags; CLEAR(pfn); CLEAR(status); return CUDA_ERROR_NO_DEVICE; }
CUresult cuGetExportTable(const void **table, const void *id)
{ (void)id; CLEAR(table); return CUDA_ERROR_NO_DEVICE; }

/* Error strings: succeed, so callers that print them print something true. */
static const char *name_of(CUresult err)
{
    switch (err) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    default: return "CUDA_ERROR_UNKNOWN";
    }
}
CUresult cuGetErrorName(CUresult err, const char **out)
{ if (!out) return CUDA_ERROR_INVALID_VALUE; *out = name_of(err); return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult err, const char **out)
{
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = err == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is detected (pytest-mooncake stand-in driver)"
                                       : name_of(err);
    return CUDA_SUCCESS;
}

/* Devices and contexts. */
CUresult cuDeviceGet(int *device, int ordinal) { (void)ordinal; CLEAR(device); return CUDA_ERROR_NO_DEVICE; }
CUresult cuDeviceGetCount(int *count) { CLEAR(count); return CUDA_ERROR_NO_DEVICE; }
CUresult cuDeviceGetAttribute(int *value, int attribute, int device)
{ (void)attribute; (void)device; CLEAR(value); return CUDA_ERROR_NO_DEVICE; }
CUresult cuDeviceGetPCIBusId(char *bus_id, int len, int device)
{ (void)device; if (bus_id && len > 0) bus_id[0] = '\0'; return CUDA_ERROR_NO_DEVICE; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) { (void)device; CLEAR(ctx); return CUDA_ERROR_NO_DEVICE; }
CUresult cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return CUDA_ERROR_NO_DEVICE; }
CUresult cuCtxGetCurrent(void **ctx) { CLEAR(ctx); return CUDA_ERROR_NO_DEVICE; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return CUDA_ERROR_NO_DEVICE; }
CUresult cuCtxGetDevice(int *device) { CLEAR(device); return CUDA_ERROR_NO_DEVICE; }

/* Virtual memory management. */
CUresult cuMemAddressReserve(unsigned long long *ptr, size_t size, size_t alignment,
                             unsigned long long addr, unsigned long long flags)
{ (void)size; (void)alignment; (void)addr; (void)flags; CLEAR(ptr); return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemAddressFree(unsigned long long ptr, size_t size) { (void)ptr; (void)size; return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop, unsigned long long flags)
{ (void)size; (void)prop; (void)flags; CLEAR(handle); return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemRelease(unsigned long long handle) { (void)handle; return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemMap(unsigned long long ptr, size_t size, size_t offset, unsigned long long handle,
                  unsigned long long flags)
{ (void)ptr; (void)size; (void)offset; (void)handle; (void)flags; return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemUnmap(unsigned long long ptr, size_t size) { (void)ptr; (void)size; return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemSetAccess(unsigned long long ptr, size_t size, const void *desc, size_t count)
{ (void)ptr; (void)size; (void)desc; (void)count; return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemGetAllocationGranularity(size_t *granularity, const void *prop, int option)
{ (void)prop; (void)option; CLEAR(granularity); return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long ptr)
{ (void)ptr; CLEAR(base); CLEAR(size); return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemRetainAllocationHandle(unsigned long long *handle, void *addr)
{ (void)addr; CLEAR(handle); return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemExportToShareableHandle(void *shareable, unsigned long long handle, int type,
                                      unsigned long long flags)
{ (void)shareable; (void)handle; (void)type; (void)flags; return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemImportFromShareableHandle(unsigned long long *handle, void *shareable, int type)
{ (void)shareable; (void)type; CLEAR(handle); return CUDA_ERROR_NO_DEVICE; }
CUresult cuMemGetHandleForAddressRange(void *handle, unsigned long long ptr, size_t size, int type,
                                       unsigned long long flags)
{ (void)handle; (void)ptr; (void)size; (void)type; (void)flags; return CUDA_ERROR_NO_DEVICE; }

/* Pointer attributes: no pointer is device memory. */
CUresult cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr)
{ (void)data; (void)attribute; (void)ptr; return CUDA_ERROR_NO_DEVICE; }
CUresult cuPointerSetAttribute(const void *value, int attribute, unsigned long long ptr)
{ (void)value; (void)attribute; (void)ptr; return CUDA_ERROR_NO_DEVICE; }

/* Modules and kernel launches (the expert-parallel device library of 0.3.14). */
CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned int n, void *options, void **values)
{ (void)image; (void)n; (void)options; (void)values; CLEAR(module); return CUDA_ERROR_NO_DEVICE; }
CUresult cuModuleUnload(void *module) { (void)module; return CUDA_ERROR_NO_DEVICE; }
CUresult cuModuleGetFunction(void **function, void *module, const char *name)
{ (void)module; (void)name; CLEAR(function); return CUDA_ERROR_NO_DEVICE; }
CUresult cuFuncSetAttribute(void *function, int attribute, int value)
{ (void)function; (void)attribute; (void)value; return CUDA_ERROR_NO_DEVICE; }
CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int shared, void *stream,
                        void **params, void **extra)
{
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared;
    (void)stream; (void)params; (void)extra;
    return CUDA_ERROR_NO_DEVICE;
}
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra)
{ (void)config; (void)f; (void)params; (void)extra; return CUDA_ERROR_NO_DEVICE; }
