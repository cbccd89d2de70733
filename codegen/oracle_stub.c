/* A recording stand-in for the CUDA runtime entry points the CuTe DSL's exported host object calls.
 *
 * Why: the DSL's own host code (the `.o` from `compiled.export_to_c`) knows exactly how to launch its
 * kernel: grid, block, dynamic shared memory, launch attributes and the bytes of every kernel argument,
 * TMA descriptors included. Linking that object against this file and calling its entry on a CPU yields
 * that launch without a GPU (docs/ARCHITECTURE.md, "The oracle"). codegen/oracle.py drives it through ctypes.
 *
 * The `_cuda*` / `_cu*` names are the DSL runtime's forwarding shims (libcute_dsl_runtime.so defines them
 * as `jmp`s into the statically linked cudart, or, for `_cuKernelGetAttribute`, a wrapper that turns a
 * device ordinal into a CUdevice first). Their signatures are the CUDA 12.x ones below, checked against the
 * CUDA runtime/driver API documentation and against the `llvm.func` declarations in the DSL's host IR:
 *   cudaLibraryLoadData(cudaLibrary_t*, const void *code, cudaJitOption*, void**, unsigned,
 *                       cudaLibraryOption*, void**, unsigned)
 *   cudaLibraryGetKernel(cudaKernel_t*, cudaLibrary_t, const char*)
 *   cudaFuncSetAttribute(const void *func, cudaFuncAttribute, int)
 *   cudaKernelSetAttributeForDevice(cudaKernel_t, cudaFuncAttribute, int value, int device)
 *   cuKernelGetAttribute(int*, CUfunction_attribute, CUkernel, CUdevice)   (the shim takes an ordinal)
 *   cudaGetDevice(int*)
 *   cudaDeviceGetAttribute(int*, cudaDeviceAttr, int device)
 *   cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void *func, void **args)  (= `_cudaLaunchKernelEx`)
 * Enums are C ints; handles are pointers. Everything returns cudaError_t (int, 0 = success).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define STUB_MAX_ARGS 64
#define STUB_MAX_ARG_BYTES 8192
#define STUB_MAX_ATTRS 32
#define STUB_MAX_LAUNCHES 4
#define STUB_MAX_CALLS 64
#define STUB_NAME_BYTES 1024

enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidResourceHandle = 400 };

typedef struct { unsigned x, y, z; } stub_dim3;

/* cudaLaunchAttribute: {cudaLaunchAttributeID id; char pad[8 - sizeof(id)]; cudaLaunchAttributeValue val;}
 * with a 64-byte value union: 72 bytes (the DSL's IR allocates `struct<(i32, array<4 x i8>, array<64 x i8>)>`). */
typedef struct { int id; char pad[4]; unsigned char val[64]; } stub_launch_attribute;

/* cudaLaunchConfig_t: gridDim, blockDim, dynamicSmemBytes, stream, attrs, numAttrs. */
typedef struct {
    stub_dim3 grid, block;
    size_t dynamic_smem_bytes;
    void *stream;
    stub_launch_attribute *attrs;
    unsigned num_attrs;
} stub_launch_config;

typedef struct {
    unsigned grid[3], block[3];
    uint64_t dynamic_smem_bytes;
    uint64_t stream;
    uint64_t func;
    unsigned num_attrs;
    int attr_id[STUB_MAX_ATTRS];
    unsigned char attr_val[STUB_MAX_ATTRS][64];
    unsigned num_args;
    unsigned arg_offset[STUB_MAX_ARGS]; /* into arg_bytes */
    unsigned arg_size[STUB_MAX_ARGS];
    unsigned char arg_bytes[STUB_MAX_ARG_BYTES];
} stub_launch;

/* One attribute call: cudaFuncSetAttribute (device = -1), cudaKernelSetAttributeForDevice, or a query. */
typedef struct { int kind; int attr; int value; int device; uint64_t handle; } stub_call;
enum { STUB_FUNC_SET = 1, STUB_KERNEL_SET_FOR_DEVICE = 2, STUB_KERNEL_GET = 3, STUB_DEVICE_GET = 4 };

typedef struct {
    /* ---- inputs, written by Python ---- */
    int current_device;
    int num_arg_sizes; /* -1: unknown, launches fail */
    unsigned arg_sizes[STUB_MAX_ARGS];
    int num_device_attrs;
    int device_attr_id[STUB_MAX_CALLS];
    int device_attr_value[STUB_MAX_CALLS];
    int num_kernel_attrs;
    int kernel_attr_id[STUB_MAX_CALLS];
    int kernel_attr_value[STUB_MAX_CALLS];
    /* ---- outputs ---- */
    uint64_t code_image;
    unsigned num_jit_options, num_library_options;
    int library_loads;
    char kernel_name[STUB_NAME_BYTES];
    int kernel_lookups;
    int num_calls;
    stub_call calls[STUB_MAX_CALLS];
    int num_launches;
    stub_launch launches[STUB_MAX_LAUNCHES];
    int overflow; /* a table was full: the record is incomplete */
    char error[256];
} stub_state_t;

static stub_state_t state;
static int library_sentinel, kernel_sentinel; /* their addresses are the handles we hand out */

stub_state_t *stub_state(void) { return &state; }
size_t stub_state_size(void) { return sizeof(state); }
size_t stub_launch_attribute_size(void) { return sizeof(stub_launch_attribute); }
size_t stub_launch_config_size(void) { return sizeof(stub_launch_config); }
uint64_t stub_kernel_handle(void) { return (uint64_t)(uintptr_t)&kernel_sentinel; }

void stub_reset(void) {
    memset(&state, 0, sizeof(state));
    state.num_arg_sizes = -1;
}

static void fail(const char *msg) {
    if (!state.error[0]) strncpy(state.error, msg, sizeof(state.error) - 1);
}

static stub_call *record_call(int kind, int attr, int value, int device, const void *handle) {
    static stub_call scratch; /* absorbs calls past the table's end (then `overflow` is set) */
    stub_call *c = &scratch;
    if (state.num_calls < STUB_MAX_CALLS) c = &state.calls[state.num_calls++];
    else state.overflow = 1;
    c->kind = kind; c->attr = attr; c->value = value; c->device = device; c->handle = (uint64_t)(uintptr_t)handle;
    return c;
}

static int lookup(int n, const int *ids, const int *values, int id, int *out) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) { *out = values[i]; return 1; }
    return 0;
}

int _cudaLibraryLoadData(void **library, const void *code, void *jit_options, void **jit_values,
                         unsigned num_jit_options, void *library_options, void **library_values,
                         unsigned num_library_options) {
    (void)jit_options; (void)jit_values; (void)library_options; (void)library_values;
    if (!library || !code) { fail("cudaLibraryLoadData: null library or code"); return cudaErrorInvalidValue; }
    state.code_image = (uint64_t)(uintptr_t)code;
    state.num_jit_options = num_jit_options;
    state.num_library_options = num_library_options;
    state.library_loads++;
    *library = &library_sentinel;
    return cudaSuccess;
}

int _cudaLibraryGetKernel(void **kernel, void *library, const char *name) {
    if (library != &library_sentinel) { fail("cudaLibraryGetKernel: unknown library"); return cudaErrorInvalidResourceHandle; }
    if (!kernel || !name) { fail("cudaLibraryGetKernel: null argument"); return cudaErrorInvalidValue; }
    strncpy(state.kernel_name, name, STUB_NAME_BYTES - 1);
    state.kernel_lookups++;
    *kernel = &kernel_sentinel;
    return cudaSuccess;
}

int _cudaFuncSetAttribute(const void *func, int attr, int value) {
    record_call(STUB_FUNC_SET, attr, value, -1, func);
    return func == &kernel_sentinel ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

int _cudaKernelSetAttributeForDevice(void *kernel, int attr, int value, int device) {
    record_call(STUB_KERNEL_SET_FOR_DEVICE, attr, value, device, kernel);
    return kernel == &kernel_sentinel ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

int _cuKernelGetAttribute(int *value, int attr, void *kernel, int device) {
    stub_call *c = record_call(STUB_KERNEL_GET, attr, 0, device, kernel);
    if (kernel != &kernel_sentinel) return cudaErrorInvalidResourceHandle;
    if (!lookup(state.num_kernel_attrs, state.kernel_attr_id, state.kernel_attr_value, attr, value)) {
        fail("cuKernelGetAttribute: attribute not set by the harness");
        return cudaErrorInvalidValue;
    }
    c->value = *value;
    return cudaSuccess;
}

int _cudaGetDevice(int *device) {
    *device = state.current_device;
    return cudaSuccess;
}

int _cudaDeviceGetAttribute(int *value, int attr, int device) {
    stub_call *c = record_call(STUB_DEVICE_GET, attr, 0, device, NULL);
    if (!lookup(state.num_device_attrs, state.device_attr_id, state.device_attr_value, attr, value)) {
        fail("cudaDeviceGetAttribute: attribute not set by the harness");
        return cudaErrorInvalidValue;
    }
    c->value = *value;
    return cudaSuccess;
}

int _cudaLaunchKernelEx(const stub_launch_config *config, const void *func, void **args) {
    if (state.num_launches >= STUB_MAX_LAUNCHES) { state.overflow = 1; return cudaErrorInvalidValue; }
    if (state.num_arg_sizes < 0) { fail("cudaLaunchKernelEx: argument sizes were not set"); return cudaErrorInvalidValue; }
    stub_launch *l = &state.launches[state.num_launches++];
    l->grid[0] = config->grid.x; l->grid[1] = config->grid.y; l->grid[2] = config->grid.z;
    l->block[0] = config->block.x; l->block[1] = config->block.y; l->block[2] = config->block.z;
    l->dynamic_smem_bytes = config->dynamic_smem_bytes;
    l->stream = (uint64_t)(uintptr_t)config->stream;
    l->func = (uint64_t)(uintptr_t)func;
    l->num_attrs = config->num_attrs;
    if (config->num_attrs > STUB_MAX_ATTRS) { state.overflow = 1; l->num_attrs = STUB_MAX_ATTRS; }
    for (unsigned i = 0; i < l->num_attrs; i++) {
        l->attr_id[i] = config->attrs[i].id;
        memcpy(l->attr_val[i], config->attrs[i].val, 64);
    }
    unsigned off = 0;
    l->num_args = (unsigned)state.num_arg_sizes;
    for (unsigned i = 0; i < l->num_args; i++) {
        unsigned size = state.arg_sizes[i];
        if (off + size > STUB_MAX_ARG_BYTES) { state.overflow = 1; return cudaErrorInvalidValue; }
        if (!args[i]) { fail("cudaLaunchKernelEx: null argument pointer"); return cudaErrorInvalidValue; }
        l->arg_offset[i] = off;
        l->arg_size[i] = size;
        memcpy(l->arg_bytes + off, args[i], size);
        off += size;
    }
    return func == &kernel_sentinel ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
