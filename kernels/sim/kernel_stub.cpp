// The host side of a kernel library as CANN's ascendc_library generates it
// (cannmirror/asc-devkit cmake/asc/legacy_modules/util/gen_host_stub.py and
// extract_host_stub.py), in front of the AscendC kernels compiled against the
// CPU shim, which play the device binary. Built by build.rs as
// libtensor_arena_kernels.so next to the simulated runtime, so the backend
// finds it where it looks for the real one.
//
// What it reproduces:
// - the kernel binary sits in a section named
//   `.ascend.kernel.<soc>.<target>` (update_host_stub.py);
// - a load-time constructor checks the SoC the library was built for
//   against the device's (AscendCheckSoCVersion, asc-devkit
//   tools/build/asc_rt/ascendc_runtime.cpp: same family, aclrtGetSocName)
//   and only then registers the binary; on a mismatch the handle stays null;
// - every aclrtlaunch_* then prints "[ERROR] <message>" and returns 0, so a
//   caller that trusts the status believes the kernel ran;
// - a registered launch allocates an 8-byte overflow-status buffer before
//   the kernel and frees it after (AllocAscendMemDevice /
//   FreeAscendMemDevice around the launch), from the runtime's memory.
//
// `TASIM_UNREGISTERED_KERNELS=1` in the environment when the library loads
// makes the SoC check fail, to reproduce a library built for another chip.
// TASIM_COMPILE_SOC (a build definition) is the SoC the library claims.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <dlfcn.h>

#include "tasim.h"
#include "../ascend/ta_kernel_list.h"

#ifndef TASIM_COMPILE_SOC
#define TASIM_COMPILE_SOC "ascend910b2"
#endif
#ifndef TASIM_SECTION
#define TASIM_SECTION ".ascend.kernel.ascend910b2.tensor_arena_kernels"
#endif
#ifndef TASIM_DEVICE_BINARY
#error "TASIM_DEVICE_BINARY names the shim kernel library (build.rs defines it)"
#endif

TASIM_EXPORT const char *aclrtGetSocName(void);
TASIM_EXPORT uint32_t tasim_launch_malloc(void **devPtr, uint64_t size, int policy);
TASIM_EXPORT uint32_t tasim_launch_free(void *devPtr);
TASIM_EXPORT uint32_t tasim_check_operands(const char *kernel, const void *x, uint64_t bytes, const void *other);

namespace {

// The "kernel binary" the generated stubs embed, in its named section.
struct AscendKernels {
    uint32_t version, type_cnt, aiv_type, aiv_len, aiv_file_len;
    uint8_t aiv_buf[32];
};
__attribute__((section(TASIM_SECTION), used)) AscendKernels g_ascend_kernel = {1, 1, 1, 32, 32, {0}};

void *g_handle = nullptr; // the registered binary, or null
char g_error[1024] = {0};

// The SoC family, as AscendCheckSoCVersion groups SoC names.
std::string Family(const char *soc)
{
    std::string s;
    for (const char *p = soc; *p != '\0'; ++p) {
        s += char(std::tolower(static_cast<unsigned char>(*p)));
    }
    for (const char *prefix : {"ascend910b", "ascend910_93", "ascend310p", "ascend310b", "ascend910"}) {
        if (s.rfind(prefix, 0) == 0) {
            return std::string(prefix) == "ascend910_93" ? "ascend910b" : prefix;
        }
    }
    return s;
}

__attribute__((constructor)) void RegisterKernels()
{
    const char *device = aclrtGetSocName();
    const char *forced = std::getenv("TASIM_UNREGISTERED_KERNELS");
    if (forced != nullptr && std::strcmp(forced, "1") == 0) {
        std::snprintf(g_error, sizeof(g_error),
                      "the socversion %s of bin package does not match the current device socversion %s "
                      "(simulated: TASIM_UNREGISTERED_KERNELS=1)",
                      TASIM_COMPILE_SOC, device);
        return;
    }
    if (Family(TASIM_COMPILE_SOC) != Family(device)) {
        std::snprintf(g_error, sizeof(g_error),
                      "the socversion %s of bin package does not match the current device socversion %s",
                      TASIM_COMPILE_SOC, device);
        return;
    }
    g_handle = dlopen(TASIM_DEVICE_BINARY, RTLD_NOW | RTLD_LOCAL);
    if (g_handle == nullptr) {
        std::snprintf(g_error, sizeof(g_error), "RegisterAscendBinary failed: %s", dlerror());
        std::printf("RegisterAscendBinary aiv ret 1 \n");
    }
}

// ACL_MEM_MALLOC_HUGE_ONLY | ACL_MEM_TYPE_HIGH_BAND_WIDTH, as
// AllocAscendMemDevice asks; not one enum value, so the runtime falls back
// to its default policy.
constexpr int kStubPolicy = 1 | 0x1000;
constexpr uint64_t kOverflowStatusSize = 8;

// `x` (of `n` elements) and `other` are the kernel's global-memory operands,
// checked against the runtime's device memory (mapped pages only) first.
template <typename Fn, typename Call>
uint32_t Launch(Fn fn, const char *kernel, const void *x, uint64_t n, const void *other, Call &&call)
{
    if (g_handle == nullptr) {
        std::printf("[ERROR] %s\n", g_error);
        std::fflush(stdout);
        return 0;
    }
    if (fn == nullptr) {
        // ACL_ERROR_RT_KERNEL_LOOKUP: the binary lacks the kernel.
        std::printf("[ERROR] %s is not in the registered binary\n", kernel);
        return 507027;
    }
    if (const uint32_t bad = tasim_check_operands(kernel, x, n, other)) {
        return bad;
    }
    void *overflow = nullptr;
    // CANN's stub ignores this allocation's status; the simulation fails the
    // launch instead, so an exhausted device shows at the launch.
    const uint32_t got = tasim_launch_malloc(&overflow, kOverflowStatusSize, kStubPolicy);
    if (got != 0) {
        return got;
    }
    const uint32_t ret = call(fn);
    tasim_launch_free(overflow);
    return ret;
}

template <typename Fn>
Fn Resolve(const char *symbol)
{
    return g_handle == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(g_handle, symbol));
}

} // namespace

#define TASIM_RANDOM_STUB(kernel)                                                                                  \
    TASIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, float p, uint64_t seed,  \
                                               uint64_t offset, uint64_t totalLength, uint64_t blockLength,       \
                                               uint32_t tileLength)                                               \
    {                                                                                                              \
        using Fn = uint32_t (*)(uint32_t, void *, void *, float, uint64_t, uint64_t, uint64_t, uint64_t, uint32_t); \
        static const Fn fn = Resolve<Fn>("aclrtlaunch_" #kernel);                                                 \
        return Launch(fn, #kernel, x, totalLength, nullptr,                                                        \
                      [&](Fn f) { return f(numBlocks, stream, x, p, seed, offset, totalLength, blockLength, tileLength); }); \
    }

#define TASIM_RANDOM_BITS_STUB(kernel)                                                                             \
    TASIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, void *bits, float p,    \
                                               uint64_t seed, uint64_t offset, uint64_t totalLength,              \
                                               uint64_t blockLength, uint32_t tileLength)                         \
    {                                                                                                              \
        using Fn = uint32_t (*)(uint32_t, void *, void *, void *, float, uint64_t, uint64_t, uint64_t, uint64_t,  \
                                uint32_t);                                                                         \
        static const Fn fn = Resolve<Fn>("aclrtlaunch_" #kernel);                                                 \
        return Launch(fn, #kernel, x, totalLength, bits, [&](Fn f) {                                              \
            return f(numBlocks, stream, x, bits, p, seed, offset, totalLength, blockLength, tileLength);          \
        });                                                                                                        \
    }

#define TASIM_MASK_STUB(kernel)                                                                                    \
    TASIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, void *mask, float scale, \
                                               uint64_t totalLength, uint64_t blockLength, uint32_t tileLength)   \
    {                                                                                                              \
        using Fn = uint32_t (*)(uint32_t, void *, void *, void *, float, uint64_t, uint64_t, uint32_t);           \
        static const Fn fn = Resolve<Fn>("aclrtlaunch_" #kernel);                                                 \
        return Launch(fn, #kernel, x, totalLength, mask,                                                           \
                      [&](Fn f) { return f(numBlocks, stream, x, mask, scale, totalLength, blockLength, tileLength); }); \
    }

#define TASIM_BINARY_STUB(kernel)                                                                                  \
    TASIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, void *y,                \
                                               uint64_t totalLength, uint64_t blockLength, uint32_t tileLength)   \
    {                                                                                                              \
        using Fn = uint32_t (*)(uint32_t, void *, void *, void *, uint64_t, uint64_t, uint32_t);                  \
        static const Fn fn = Resolve<Fn>("aclrtlaunch_" #kernel);                                                 \
        return Launch(fn, #kernel, x, totalLength, y,                                                              \
                      [&](Fn f) { return f(numBlocks, stream, x, y, totalLength, blockLength, tileLength); });    \
    }

#define TASIM_SCALAR_STUB(kernel)                                                                                  \
    TASIM_EXPORT uint32_t aclrtlaunch_##kernel(uint32_t numBlocks, void *stream, void *x, float s,                \
                                               uint64_t totalLength, uint64_t blockLength, uint32_t tileLength)   \
    {                                                                                                              \
        using Fn = uint32_t (*)(uint32_t, void *, void *, float, uint64_t, uint64_t, uint32_t);                   \
        static const Fn fn = Resolve<Fn>("aclrtlaunch_" #kernel);                                                 \
        return Launch(fn, #kernel, x, totalLength, nullptr,                                                        \
                      [&](Fn f) { return f(numBlocks, stream, x, s, totalLength, blockLength, tileLength); });    \
    }

TA_FOR_EACH_KERNEL(TASIM_RANDOM_STUB, TASIM_RANDOM_BITS_STUB, TASIM_MASK_STUB, TASIM_BINARY_STUB, TASIM_SCALAR_STUB)
