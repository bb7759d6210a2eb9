// tasim's control interface: capacity, faults and counters of the calling
// thread's simulated runtime. See README.md.
#include <cstring>
#include <string>

#include "tasim.h"

using namespace tasim;

// Counters, settings and armed faults back to their defaults. Live memory,
// streams and objects stay (and stay counted as live).
TASIM_EXPORT void tasim_reset(void)
{
    State &st = St();
    const auto keep = [&](const char *name) { return st.counters[name]; };
    const uint64_t tensors = keep("live_tensors"), scalars = keep("live_scalars"), arrays = keep("live_int_arrays"),
                   executors = keep("live_executors");
    st.counters.clear();
    st.counters["live_tensors"] = tensors;
    st.counters["live_scalars"] = scalars;
    st.counters["live_int_arrays"] = arrays;
    st.counters["live_executors"] = executors;
    st.capacity = uint64_t(1) << 30;
    st.system_reserved = 0;
    st.device_count = 1;
    st.vector_cores = 8;
    st.fail_malloc = st.fail_memcpy = st.fail_launch = st.fail_op = st.fail_sync = Fault();
    st.last_error.clear();
}

// Simulated HBM bytes (default 1 GiB).
TASIM_EXPORT void tasim_set_capacity(uint64_t bytes) { St().capacity = bytes; }

// Bytes taken by the "system" before the application (reported as not free).
TASIM_EXPORT void tasim_set_system_reserved(uint64_t bytes) { St().system_reserved = bytes; }

// Devices aclrtGetDeviceCount reports (default 1).
TASIM_EXPORT void tasim_set_device_count(uint32_t count) { St().device_count = count; }

// Vector cores aclGetDeviceCapability reports (default 8).
TASIM_EXPORT void tasim_set_vector_cores(uint32_t cores) { St().vector_cores = cores; }

// Faults: the nth call from now (1 = the next) fails with `code`; 0 disarms.
TASIM_EXPORT void tasim_fail_malloc(uint64_t nth, int32_t code) { St().fail_malloc = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_memcpy(uint64_t nth, int32_t code) { St().fail_memcpy = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_launch(uint64_t nth, int32_t code) { St().fail_launch = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_op(uint64_t nth, int32_t code) { St().fail_op = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_sync(uint64_t nth, int32_t code) { St().fail_sync = Fault{nth, code}; }

// A counter's value (0 for a name never counted). Live resources:
// "live_allocations", "bytes_in_use", "live_streams".
TASIM_EXPORT uint64_t tasim_counter(const char *name)
{
    if (name == nullptr) {
        return 0;
    }
    State &st = St();
    const std::string n = name;
    if (n == "live_allocations") {
        return st.allocations.size();
    }
    if (n == "bytes_in_use") {
        return st.in_use;
    }
    if (n == "live_streams") {
        return st.streams.size();
    }
    if (n == "initialized") {
        return st.initialized ? 1 : 0;
    }
    if (n == "device_refs") {
        uint64_t refs = 0;
        for (const auto &d : st.device_refs) {
            refs += uint64_t(d.second);
        }
        return refs;
    }
    auto it = st.counters.find(n);
    return it == st.counters.end() ? 0 : it->second;
}

// Every counter as "name=value" lines into `buf` (NUL-terminated, cut at
// `cap`); returns the full length.
TASIM_EXPORT size_t tasim_counters(char *buf, size_t cap)
{
    std::string all;
    for (const auto &c : St().counters) {
        all += c.first + "=" + std::to_string(c.second) + "\n";
    }
    if (buf != nullptr && cap > 0) {
        const size_t n = all.size() < cap - 1 ? all.size() : cap - 1;
        std::memcpy(buf, all.data(), n);
        buf[n] = '\0';
    }
    return all.size();
}
