// torch's CPU allocator slot served by tensor-arena's planned allocator.
//
// Built against the installed torch at first use (tensor_arena/_cpu_extension.py),
// so that the wheel itself needs no torch. The library's C ABI is reached
// through function addresses handed over by ctypes: this file never names the
// library, it only forwards torch's requests to it.
//
// Every request goes to tensor_arena_alloc_phase with the phase read at it
// from torch's grad mode (docs/allocator.md, "Request phases").
//
// Behaviour kept from torch's DefaultCPUAllocator (c10/core/CPUAllocator.cpp):
// a request of 0 bytes gives a null DataPtr without calling the library; the
// context of every DataPtr is its data pointer, so raw_deleter() frees what
// raw_allocate() gave; allocations are reported to the profiler's CPU memory
// reporter. A NULL from the library raises c10::OutOfMemoryError (Python:
// torch.OutOfMemoryError) carrying the library's own message.

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "phase.h"

namespace {

// tensor_arena_alloc_phase: the request and the phase read at it.
using AllocFn = void* (*)(std::size_t, int, void*, int);
using FreeFn = void (*)(void*, std::size_t, int, void*);
using LastErrorFn = std::size_t (*)(char*, std::size_t);

// The CPU has one device; the library's ABI takes torch's device index.
constexpr int kCpuDevice = 0;

// Set by tensor_arena_cpu_install before the allocator is registered and never
// cleared: blocks handed out stay valid after an uninstall and are still freed
// through the library.
std::atomic<AllocFn> g_alloc{nullptr};
std::atomic<FreeFn> g_free{nullptr};
std::atomic<LastErrorFn> g_last_error{nullptr};

void planned_delete(void* ptr) {
  if (ptr == nullptr) {
    return;
  }
  c10::profiledCPUMemoryReporter().Delete(ptr);
  // CPU deleters do not know the size: the ABI accepts 0.
  g_free.load(std::memory_order_acquire)(ptr, 0, kCpuDevice, nullptr);
}

// The library's last message, or a pointer to where the refusal is counted
// (the library logs its first refusal of each kind to stderr itself).
std::string library_error() {
  LastErrorFn last_error = g_last_error.load(std::memory_order_acquire);
  char buf[1024];
  if (last_error != nullptr && last_error(buf, sizeof buf) > 0) {
    return std::string(buf);
  }
  return "the allocator library answered NULL (counted in stats()[\"errors\"])";
}

class PlannedCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t nbytes) override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (nbytes == 0) {
      return {nullptr, nullptr, &planned_delete, cpu};
    }
    // The phase of the request, read on the requesting thread (phase.h).
    void* data = g_alloc.load(std::memory_order_acquire)(
        nbytes, kCpuDevice, nullptr, tensor_arena::request_code());
    TORCH_CHECK_WITH(
        OutOfMemoryError,
        data != nullptr,
        "tensor-arena planned CPU allocator: could not allocate ",
        nbytes,
        " bytes: ",
        library_error(),
        "; PlannedAllocator.report() says what the plan and the fallback hold");
    c10::profiledCPUMemoryReporter().New(data, nbytes);
    return {data, data, &planned_delete, cpu};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &planned_delete;
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

PlannedCpuAllocator g_planned;

}  // namespace

extern "C" {

// Registers the planned allocator as torch's CPU allocator at `priority`
// (torch's own is registered at 0); `alloc_fn` is tensor_arena_alloc_phase.
// Returns 0, or -1 when the function addresses are missing or an allocator of
// higher priority keeps the slot.
int tensor_arena_cpu_install(void* alloc_fn, void* free_fn, void* last_error_fn, int priority) {
  if (alloc_fn == nullptr || free_fn == nullptr || priority < 0 || priority > 255) {
    return -1;
  }
  g_alloc.store(reinterpret_cast<AllocFn>(alloc_fn), std::memory_order_release);
  g_free.store(reinterpret_cast<FreeFn>(free_fn), std::memory_order_release);
  g_last_error.store(reinterpret_cast<LastErrorFn>(last_error_fn), std::memory_order_release);
  c10::SetCPUAllocator(&g_planned, static_cast<std::uint8_t>(priority));
  return c10::GetCPUAllocator() == &g_planned ? 0 : -1;
}

// Puts torch's default CPU allocator back at `priority`. Returns 0, or -1 when
// the planned allocator was not the one in the slot.
int tensor_arena_cpu_uninstall(int priority) {
  if (priority < 0 || priority > 255 || c10::GetCPUAllocator() != &g_planned) {
    return -1;
  }
  c10::SetCPUAllocator(c10::GetDefaultCPUAllocator(), static_cast<std::uint8_t>(priority));
  return 0;
}

// 1 when torch's CPU allocator slot holds the planned allocator, else 0.
int tensor_arena_cpu_installed(void) {
  return c10::GetCPUAllocator() == &g_planned ? 1 : 0;
}

}  // extern "C"
