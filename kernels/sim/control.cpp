// tasim's control interface: device settings (per simulated device, shared
// by the process), faults and counters (per calling thread). See README.md.
#include <cstring>
#include <string>

#include "tasim.h"

using namespace tasim;
using Lock = std::lock_guard<std::recursive_mutex>;

// This thread's counters, armed faults and error messages back to their
// defaults. The counts of live objects this thread made stay (they are
// what leak checks compare), and so does everything the process shares.
TASIM_EXPORT void tasim_reset(void)
{
    Thread &me = Me();
    const auto keep = [&](const char *name) { return me.counters[name]; };
    const uint64_t tensors = keep("live_tensors"), scalars = keep("live_scalars"), arrays = keep("live_int_arrays"),
                   executors = keep("live_executors");
    me.counters.clear();
    me.counters["live_tensors"] = tensors;
    me.counters["live_scalars"] = scalars;
    me.counters["live_int_arrays"] = arrays;
    me.counters["live_executors"] = executors;
    me.fail_malloc = me.fail_memcpy = me.fail_launch = me.fail_op = me.fail_sync = me.fail_launch_malloc =
        me.refuse_repeatable = me.fail_physical = me.fail_map = Fault();
    me.errors.clear();
}

// Device `id`'s capacity, system reservation and core count back to the
// defaults (a 910B2: 64 GiB, 300 MiB reserved, 48 vector cores). Memory in
// use stays charged.
TASIM_EXPORT void tasim_reset_device(int32_t id)
{
    Lock lock(Proc().mu);
    Device &d = DeviceOf(id);
    const Device fresh;
    d.capacity = fresh.capacity;
    d.system_reserved = fresh.system_reserved;
    d.vector_cores = fresh.vector_cores;
}

// Simulated HBM of device `id`, in bytes.
TASIM_EXPORT void tasim_set_capacity(int32_t id, uint64_t bytes)
{
    Lock lock(Proc().mu);
    DeviceOf(id).capacity = bytes;
}

// Bytes of device `id` the "system" holds (not reported by aclrtGetMemInfo).
TASIM_EXPORT void tasim_set_system_reserved(int32_t id, uint64_t bytes)
{
    Lock lock(Proc().mu);
    DeviceOf(id).system_reserved = bytes;
}

// Vector cores aclGetDeviceCapability reports for device `id`.
TASIM_EXPORT void tasim_set_vector_cores(int32_t id, uint32_t cores)
{
    Lock lock(Proc().mu);
    DeviceOf(id).vector_cores = cores;
}

// Devices aclrtGetDeviceCount reports (default 8).
TASIM_EXPORT void tasim_set_device_count(uint32_t count)
{
    Lock lock(Proc().mu);
    Proc().device_count = count;
}

// Faults of this thread: the nth matching call from now (1 = the next)
// fails with `code`; 0 disarms.
TASIM_EXPORT void tasim_fail_malloc(uint64_t nth, int32_t code) { Me().fail_malloc = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_memcpy(uint64_t nth, int32_t code) { Me().fail_memcpy = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_launch(uint64_t nth, int32_t code) { Me().fail_launch = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_op(uint64_t nth, int32_t code) { Me().fail_op = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_sync(uint64_t nth, int32_t code) { Me().fail_sync = Fault{nth, code}; }
TASIM_EXPORT void tasim_fail_launch_malloc(uint64_t nth, int32_t code) { Me().fail_launch_malloc = Fault{nth, code}; }
// The nth aclSetAclOpExecutorRepeatable from now answers ACLNN_ERR_INNER, as
// opbase does for an executor that cannot repeat.
TASIM_EXPORT void tasim_refuse_repeatable(uint64_t nth) { Me().refuse_repeatable = Fault{nth, kNnInner}; }

// A counter of this thread (0 for a name never counted). Live resources this
// thread made: "live_allocations", "bytes_in_use", "live_streams",
// "live_launch_allocations"; "device_refs" (its sets minus resets);
// "initialized" (of the process).
TASIM_EXPORT uint64_t tasim_counter(const char *name)
{
    if (name == nullptr) {
        return 0;
    }
    Process &p = Proc();
    Lock lock(p.mu);
    Thread &me = Me();
    const std::string n = name;
    if (n == "live_allocations" || n == "bytes_in_use" || n == "live_launch_allocations") {
        uint64_t count = 0, bytes = 0;
        for (const auto &a : p.allocations) {
            if (a.second.owner == me.id && a.second.launch == (n == "live_launch_allocations")) {
                count += 1;
                bytes += a.second.charged;
            }
        }
        return n == "bytes_in_use" ? bytes : count;
    }
    if (n == "live_streams") {
        uint64_t count = 0;
        for (const Stream *s : p.streams) {
            count += s->owner == me.id ? 1 : 0;
        }
        return count;
    }
    if (n == "live_physical_handles" || n == "physical_bytes_in_use") {
        uint64_t count = 0, bytes = 0;
        for (const Physical *h : p.physicals) {
            if (h->owner == me.id) {
                count += 1;
                bytes += h->charged;
            }
        }
        return n == "live_physical_handles" ? count : bytes;
    }
    if (n == "live_ranges") {
        uint64_t count = 0;
        for (const auto &r : p.ranges) {
            count += r.second.owner == me.id ? 1 : 0;
        }
        return count;
    }
    if (n == "initialized") {
        return p.init_refs > 0 ? 1 : 0;
    }
    if (n == "device_refs") {
        uint64_t refs = 0;
        for (const auto &d : me.device_refs) {
            refs += uint64_t(d.second);
        }
        return refs;
    }
    auto it = me.counters.find(n);
    return it == me.counters.end() ? 0 : it->second;
}

// What device `id` holds for the whole process: "refs" (aclrtSetDevice
// minus aclrtResetDevice over all threads), "in_use", "peak", "free",
// "allocations".
TASIM_EXPORT uint64_t tasim_device_counter(int32_t id, const char *name)
{
    if (name == nullptr) {
        return 0;
    }
    Process &p = Proc();
    Lock lock(p.mu);
    const Device &d = DeviceOf(id);
    const std::string n = name;
    if (n == "refs") {
        return d.refs > 0 ? uint64_t(d.refs) : 0;
    }
    if (n == "in_use") {
        return d.in_use;
    }
    if (n == "peak") {
        return d.peak;
    }
    if (n == "free") {
        const uint64_t limit = d.capacity > d.system_reserved ? d.capacity - d.system_reserved : 0;
        return limit > d.in_use ? limit - d.in_use : 0;
    }
    if (n == "allocations") {
        uint64_t count = 0;
        for (const auto &a : p.allocations) {
            count += a.second.device == id ? 1 : 0;
        }
        return count;
    }
    return 0;
}

// Bytes aclrtMalloc charges for `size` with `policy`.
TASIM_EXPORT uint64_t tasim_charged(uint64_t size, int policy) { return Charged(size, policy); }

// Every counter of this thread as "name=value" lines into `buf`
// (NUL-terminated, cut at `cap`); returns the full length.
TASIM_EXPORT size_t tasim_counters(char *buf, size_t cap)
{
    std::string all;
    for (const auto &c : Me().counters) {
        all += c.first + "=" + std::to_string(c.second) + "\n";
    }
    if (buf != nullptr && cap > 0) {
        const size_t n = all.size() < cap - 1 ? all.size() : cap - 1;
        std::memcpy(buf, all.data(), n);
        buf[n] = '\0';
    }
    return all.size();
}
