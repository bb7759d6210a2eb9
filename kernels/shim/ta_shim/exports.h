// The shim's C interface for test harnesses and the simulated ACL runtime.
// Include in exactly one translation unit of each shared library.
//
// Everything acts on the calling thread's state: the violations its
// launches recorded and the UB capacity its launches get.
#ifndef TA_SHIM_EXPORTS_H
#define TA_SHIM_EXPORTS_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "launch.h"
#include "state.h"

extern "C" {

// Rule violations recorded since the last ta_shim_reset.
TA_SHIM_EXPORT uint64_t ta_shim_violation_count(void) { return ta_shim::Core().violations; }

// Copies the violation messages (the first 64), one per line, into `buf`
// (NUL-terminated, truncated to `cap` bytes); returns the full length.
TA_SHIM_EXPORT size_t ta_shim_report(char *buf, size_t cap)
{
    std::string all;
    for (const std::string &m : ta_shim::Core().messages) {
        all += m;
        all += '\n';
    }
    if (buf != nullptr && cap > 0) {
        const size_t n = all.size() < cap - 1 ? all.size() : cap - 1;
        std::memcpy(buf, all.data(), n);
        buf[n] = '\0';
    }
    return all.size();
}

// Forgets recorded violations.
TA_SHIM_EXPORT void ta_shim_reset(void)
{
    ta_shim::Core().violations = 0;
    ta_shim::Core().messages.clear();
}

// Unified Buffer bytes per simulated core (default 196608, the 910B's).
TA_SHIM_EXPORT void ta_shim_set_ub_capacity(uint32_t bytes) { ta_shim::Core().ub_capacity = bytes; }

TA_SHIM_EXPORT uint32_t ta_shim_ub_capacity(void) { return ta_shim::Core().ub_capacity; }

} // extern "C"

#endif // TA_SHIM_EXPORTS_H
