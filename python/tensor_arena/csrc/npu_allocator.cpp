// torch_npu's pluggable allocator served by tensor-arena's planned allocator,
// with the hooks torch_npu lets a pluggable allocator set.
//
// torch_npu's NPUPluggableAllocator is not exported from libtorch_npu.so, so
// it cannot be subclassed; it takes the hooks through setters instead, which
// its Python binding (torch_npu._C._NPUPluggableAllocator, reached through
// torch_npu.npu.memory.NPUPluggableAllocator(...).allocator()) fills from
// function addresses cast to these exact types
// (torch_npu/csrc/npu/Module.cpp):
//
//   set_get_device_stats_fn   c10_npu::NPUCachingAllocator::DeviceStats(int)
//   set_reset_peak_status_fn  void(int)
//   set_record_stream_fn      void(void*, c10_npu::NPUStream)
//   set_erase_stream_fn       void(void*, c10_npu::NPUStream)
//   set_reset_fn              void(bool)          (empty_cache)
//   set_memory_fraction_fn    void(double, int)
//
// DeviceStats is returned by value and NPUStream is a C++ class passed by
// value (by hidden reference in the ABI), so these are C++ functions; Python
// gets their addresses from tensor_arena_npu_hook(name). The alloc/free pair
// is looked up by name by NPUPluggableAllocator(path, alloc, free): alloc
// throws c10::OutOfMemoryError (torch.OutOfMemoryError) with the library's
// message where the library answers NULL, because torch_npu does not check
// the pointer it gets. What has no setter (snapshot, accumulated-stats reset,
// graph pools) is answered at Python level (tensor_arena/torch_hooks.py).
//
// Built against the imported torch and torch_npu at first use, or ahead of
// time against the torch-npu wheel's headers
// (python -m tensor_arena.extensions build npu --torch DIR --torch-npu DIR).

#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>
#include <torch_npu/csrc/npu/NPUPluggableAllocator.h>

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "device_stats.h"
#include "library.h"

namespace {

using tensor_arena::LibraryTable;

// Set once by tensor_arena_npu_bind before torch_npu can call any hook.
LibraryTable g_lib{};
bool g_bound = false;

const LibraryTable& lib() {
  TORCH_CHECK(
      g_bound,
      "tensor-arena NPU extension: tensor_arena_npu_bind was not called "
      "(install through tensor_arena.PlannedAllocator('npu').install())");
  return g_lib;
}

c10_npu::NPUCachingAllocator::DeviceStats get_device_stats(int /*device*/) {
  // One library serves one device per process; the stats are its.
  return tensor_arena::device_stats_from_json(tensor_arena::read_json(lib().device_stats_json));
}

void reset_peak_status(int /*device*/) {
  lib().reset_peak_stats();
}

void record_stream(void* ptr, c10_npu::NPUStream stream) {
  if (ptr != nullptr) {
    lib().record_stream(ptr, stream.stream());
  }
}

void erase_stream(void* ptr, c10_npu::NPUStream stream) {
  if (ptr != nullptr) {
    lib().erase_stream(ptr, stream.stream());
  }
}

void empty_cache(bool /*check_error*/) {
  lib().empty_cache();
}

void memory_fraction(double fraction, int device) {
  TORCH_CHECK(
      lib().set_memory_fraction(fraction, device) == 0,
      "tensor-arena planned NPU allocator: set_per_process_memory_fraction(",
      fraction,
      ", ",
      device,
      "): ",
      tensor_arena::last_error(lib()));
}

void write_text(const std::string& text, char* buf, std::size_t cap) {
  if (buf != nullptr && cap > 0) {
    std::size_t n = std::min(text.size(), cap - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
}

}  // namespace

extern "C" {

// Keeps the library's function table for every hook. 0, or -1 with the
// reason in `err` when the table is incomplete (an older library).
int tensor_arena_npu_bind(const LibraryTable* table, char* err, std::size_t cap) {
  if (table == nullptr || !tensor_arena::complete(*table)) {
    write_text(
        "tensor-arena NPU extension: the allocator library's function table is incomplete "
        "(an older library, or a table of another version)",
        err,
        cap);
    return -1;
  }
  g_lib = *table;
  g_bound = true;
  return 0;
}

// torch_npu's alloc signature: void*(size_t, int, aclrtStream). 0 bytes get
// nullptr without a library call (torch asks for empty tensors; the DataPtr's
// deleter is never called for nullptr). The request goes to
// tensor_arena_alloc_phase with the phase read here (grad mode off or
// inference mode: eval).
void* tensor_arena_npu_alloc(std::size_t size, int device, aclrtStream stream) {
  if (size == 0) {
    return nullptr;
  }
  // The phase read here, on the requesting thread (the grad mode).
  void* ptr = lib().alloc_phase(size, device, stream, tensor_arena::request_code());
  TORCH_CHECK_WITH(
      OutOfMemoryError,
      ptr != nullptr,
      "tensor-arena planned NPU allocator: could not allocate ",
      size,
      " bytes on device ",
      device,
      ": ",
      tensor_arena::last_error(lib()),
      "; PlannedAllocator.report() says what the plan and the fallback hold");
  return ptr;
}

void tensor_arena_npu_free(void* ptr, std::size_t size, int device, aclrtStream stream) {
  if (ptr != nullptr && g_bound) {
    g_lib.free(ptr, size, device, stream);
  }
}

// The address of a hook for torch_npu's setter of the same purpose, as the
// integer its Python binding takes; 0 for an unknown name.
std::uint64_t tensor_arena_npu_hook(const char* name) {
  if (name == nullptr) {
    return 0;
  }
  const std::string n(name);
  if (n == "get_device_stats") {
    return reinterpret_cast<std::uint64_t>(&get_device_stats);
  }
  if (n == "reset_peak_status") {
    return reinterpret_cast<std::uint64_t>(&reset_peak_status);
  }
  if (n == "record_stream") {
    return reinterpret_cast<std::uint64_t>(&record_stream);
  }
  if (n == "erase_stream") {
    return reinterpret_cast<std::uint64_t>(&erase_stream);
  }
  if (n == "reset") {
    return reinterpret_cast<std::uint64_t>(&empty_cache);
  }
  if (n == "memory_fraction") {
    return reinterpret_cast<std::uint64_t>(&memory_fraction);
  }
  return 0;
}

}  // extern "C"

// Each hook fits the std::function its setter in the torch_npu headers takes
// (NPUPluggableAllocator.h): a setter that changes its type fails the build
// here, not a training run. The function types themselves are the ones
// torch_npu's Python binding casts the addresses to (Module.cpp), which no
// header states.
namespace {
template <typename Setter>
struct SetterArg;
template <typename C, typename A>
struct SetterArg<void (C::*)(A)> {
  using type = A;
};
using Pluggable = torch::npu::NPUPluggableAllocator::NPUPluggableAllocator;
template <auto Setter, typename Fn>
constexpr bool fits = std::is_constructible_v<typename SetterArg<decltype(Setter)>::type, Fn>;
static_assert(fits<&Pluggable::set_get_device_stats_fn, decltype(&get_device_stats)>);
static_assert(fits<&Pluggable::set_reset_peak_status_fn, decltype(&reset_peak_status)>);
static_assert(fits<&Pluggable::set_record_stream_fn, decltype(&record_stream)>);
static_assert(fits<&Pluggable::set_erase_stream_fn, decltype(&erase_stream)>);
static_assert(fits<&Pluggable::set_reset_fn, decltype(&empty_cache)>);
static_assert(fits<&Pluggable::set_memory_fraction_fn, decltype(&memory_fraction)>);
}  // namespace
