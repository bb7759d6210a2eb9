// torch's CUDA allocator slot served by tensor-arena's planned allocator,
// with the whole allocator contract, not only alloc/free.
//
// torch's CUDAPluggableAllocator forwards alloc/free to C functions and
// raises (or does nothing) for the rest: a NULL from alloc becomes a tensor
// with a null data pointer, memory_stats()/memory_allocated()/memory_summary()
// and reset_peak_memory_stats() raise, cacheInfo (cudnn.benchmark) raises,
// snapshot raises. PlannedCudaAllocator subclasses it (the class and
// changeCurrentAllocator are exported from libtorch_cuda.so) and answers
// each of them from the allocator library:
//
//   alloc          tensor_arena_alloc_phase with the phase read at the request
//                  (grad mode off or inference mode: eval); NULL ->
//                  c10::OutOfMemoryError (torch.OutOfMemoryError) with the
//                  library's last error; 0 bytes -> nullptr, no library call
//   getDeviceStats tensor_arena_device_stats_json, parsed into DeviceStats
//   resetPeakStats / resetAccumulatedStats  the library's resets
//   cacheInfo      tensor_arena_cache_info (largest free block)
//   snapshot       tensor_arena_snapshot_json's segments as SegmentInfo
//   recordStream   tensor_arena_record_stream(ptr, stream)
//   emptyCache     tensor_arena_empty_cache
//   memory fraction  tensor_arena_set_memory_fraction; the getter answers the
//                  last accepted value (1.0 before any)
//   recordHistory  accepted with a warning: the library keeps no per-event
//                  history (its `trace` option writes every event to a file)
//   graph capture / memory pools (beginAllocateToPool)  refused with an error
//                  naming the planned allocator: the plan's addresses are
//                  reused every step, a captured graph would replay into them
//
// Built against the imported torch at first use (tensor_arena/extensions.py);
// the library is reached through the function table Python hands over
// (library.h). The tensor_arena_cuda_test_* functions drive a private,
// never-installed instance without a GPU (python/tests/test_extensions.py).

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>

#include "device_stats.h"
#include "library.h"

namespace {

using tensor_arena::LibraryTable;
namespace CCA = c10::cuda::CUDACachingAllocator;
using torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;

// The error messages are built by string concatenation and std::to_string,
// never by c10::str with numbers: that formats through std::ostringstream,
// and on the H200 machine of 2026-12-04 (torch 2.11.0+cu130, the extension
// built there by its `c++`) `ostream << unsigned long` inside this library
// crashed (SIGSEGV in libstdc++'s locale code, cuda-gdb backtrace in
// docs/verified.md) when the out-of-memory error was raised. A message that
// is one std::string goes through c10::str untouched (c10/util/StringUtil.h,
// _str_wrapper<std::string>).
std::string oom_message(std::size_t size, int device, const LibraryTable& lib) {
  return "tensor-arena planned CUDA allocator: could not allocate " + std::to_string(size) +
      " bytes on device " + std::to_string(device) + ": " + tensor_arena::last_error(lib) +
      "; PlannedAllocator.report() says what the plan and the fallback hold";
}

// The table is copied once at install and never changed: torch keeps calling
// the allocator until the process ends.
std::function<void*(std::size_t, int, cudaStream_t)> alloc_fn(const LibraryTable& lib) {
  return [lib](std::size_t size, int device, cudaStream_t stream) -> void* {
    if (size == 0) {
      // torch asks for empty tensors (pytorch#159892); the caching allocator
      // answers nullptr without an error, and the DataPtr's deleter is never
      // called for it.
      return nullptr;
    }
    // The phase read here, on the requesting thread (the grad mode).
    void* ptr = lib.alloc_phase(size, device, stream, tensor_arena::request_code());
    if (ptr == nullptr) {
      const std::string message = oom_message(size, device, lib);
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    }
    return ptr;
  };
}

std::function<void(void*, std::size_t, int, cudaStream_t)> free_fn(const LibraryTable& lib) {
  return [lib](void* ptr, std::size_t size, int device, cudaStream_t stream) {
    if (ptr != nullptr) {
      lib.free(ptr, size, device, stream);
    }
  };
}

class PlannedCudaAllocator final : public CUDAPluggableAllocator {
 public:
  explicit PlannedCudaAllocator(const LibraryTable& lib)
      : CUDAPluggableAllocator(alloc_fn(lib), free_fn(lib)), lib_(lib) {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex /*device*/) override {
    // One library serves one device per process; the stats are its.
    return tensor_arena::device_stats_from_json(tensor_arena::read_json(lib_.device_stats_json));
  }

  void resetPeakStats(c10::DeviceIndex /*device*/) override {
    lib_.reset_peak_stats();
  }

  void resetAccumulatedStats(c10::DeviceIndex /*device*/) override {
    lib_.reset_accumulated_stats();
  }

  void cacheInfo(c10::DeviceIndex /*device*/, std::size_t* largestBlock) override {
    if (largestBlock != nullptr) {
      *largestBlock = lib_.cache_info();
    }
  }

  void emptyCache(c10::cuda::MempoolId_t /*mempool_id*/) override {
    lib_.empty_cache();
  }

  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    record_raw_stream(ptr.get(), stream.stream());
  }

  // recordStream once torch's stream is a cudaStream_t (CUDAStream::stream()
  // needs an initialized CUDA runtime; the test binding starts here).
  void record_raw_stream(void* ptr, cudaStream_t stream) {
    if (ptr != nullptr) {
      lib_.record_stream(ptr, stream);
    }
  }

  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    if (lib_.set_memory_fraction(fraction, device) != 0) {
      // Concatenated, not streamed: see oom_message.
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", fraction);
      const std::string message = "tensor-arena planned CUDA allocator: set_per_process_memory_fraction(" +
          std::string(shown) + ", " + std::to_string(static_cast<int>(device)) +
          "): " + tensor_arena::last_error(lib_);
      TORCH_CHECK(false, message);
    }
    std::lock_guard<std::mutex> lock(fraction_mutex_);
    fractions_[device] = fraction;
  }

  double getMemoryFraction(c10::DeviceIndex device) override {
    std::lock_guard<std::mutex> lock(fraction_mutex_);
    auto it = fractions_.find(device);
    return it == fractions_.end() ? 1.0 : it->second;
  }

  CCA::SnapshotInfo snapshot(c10::cuda::MempoolId_t /*mempool*/, bool /*include_traces*/) override {
    return snapshot_from_library();
  }

  void recordHistory(
      bool enabled,
      CCA::CreateContextFn /*context_recorder*/,
      std::size_t /*alloc_trace_max_entries*/,
      CCA::RecordContext /*when*/,
      bool /*clearHistory*/,
      const std::vector<std::string>& /*skip_actions*/) override {
    if (enabled) {
      TORCH_WARN_ONCE(
          "tensor-arena planned CUDA allocator: _record_memory_history keeps no per-event "
          "history; snapshots hold the live segments and blocks without traces (the "
          "allocator's `trace` option writes every event to a CSV file)");
    }
  }

  void beginAllocateToPool(
      c10::DeviceIndex /*device*/,
      c10::cuda::MempoolId_t /*mempool_id*/,
      std::function<bool(cudaStream_t)> /*filter*/) override {
    TORCH_CHECK(
        false,
        "tensor-arena planned CUDA allocator: CUDA graph capture and private memory pools "
        "(torch.cuda.graph, torch.compile(mode=\"reduce-overhead\"), torch.cuda.use_mem_pool) "
        "are not supported: the plan hands the same addresses out again every step, so a "
        "captured graph would replay into memory other tensors own. Capture with torch's own "
        "allocator (do not install the planned allocator in this process)");
  }

  void endAllocateToPool(c10::DeviceIndex /*device*/, c10::cuda::MempoolId_t /*mempool_id*/) override {
    // Never reached: beginAllocateToPool refuses.
  }

  void releasePool(c10::DeviceIndex /*device*/, c10::cuda::MempoolId_t /*mempool_id*/) override {
    // No pool was ever created (beginAllocateToPool refuses): nothing to release.
  }

  std::string name() override {
    return "tensor_arena_planned";
  }

 private:
  LibraryTable lib_;
  std::mutex fraction_mutex_;
  std::unordered_map<c10::DeviceIndex, double> fractions_;

  // The library's _snapshot()-shaped JSON as torch's SnapshotInfo: segments
  // and blocks; traces are not kept (recordHistory).
  CCA::SnapshotInfo snapshot_from_library() {
    CCA::SnapshotInfo info;
    tensor_arena::json::Value root = tensor_arena::read_json(lib_.snapshot_json);
    for (const auto& seg : root["segments"].items) {
      c10::CachingDeviceAllocator::SegmentInfo s;
      s.device = static_cast<c10::DeviceIndex>(seg["device"].as_int());
      s.address = static_cast<std::size_t>(seg["address"].as_int());
      s.total_size = static_cast<std::size_t>(seg["total_size"].as_int());
      s.requested_size = static_cast<std::size_t>(seg["requested_size"].as_int());
      s.allocated_size = static_cast<std::size_t>(seg["allocated_size"].as_int());
      s.active_size = static_cast<std::size_t>(seg["active_size"].as_int());
      s.stream = reinterpret_cast<void*>(static_cast<std::uintptr_t>(seg["stream"].as_int()));
      s.is_large = seg["segment_type"].as_string() != "small";
      for (const auto& blk : seg["blocks"].items) {
        c10::CachingDeviceAllocator::BlockInfo b;
        b.size = static_cast<std::size_t>(blk["size"].as_int());
        b.requested_size = static_cast<std::size_t>(blk["requested_size"].as_int());
        const std::string& state = blk["state"].as_string();
        b.allocated = state == "active_allocated";
        b.active = b.allocated || state == "active_pending_free";
        s.blocks.push_back(std::move(b));
      }
      info.segments.push_back(std::move(s));
    }
    return info;
  }
};

// Copies `text` into the caller's buffer (cap - 1 bytes and a NUL at most).
void write_text(const std::string& text, char* buf, std::size_t cap) {
  if (buf != nullptr && cap > 0) {
    std::size_t n = std::min(text.size(), cap - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
}

// Runs `f`; 0 when it returned, -2 for c10::OutOfMemoryError, -1 for any
// other exception, whose message goes to `err`.
template <typename F>
int guarded(char* err, std::size_t cap, F&& f) {
  try {
    f();
    return 0;
  } catch (const c10::OutOfMemoryError& e) {
    write_text(e.what_without_backtrace(), err, cap);
    return -2;
  } catch (const c10::Error& e) {
    write_text(e.what_without_backtrace(), err, cap);
    return -1;
  } catch (const std::exception& e) {
    write_text(e.what(), err, cap);
    return -1;
  }
}

std::shared_ptr<PlannedCudaAllocator> g_installed;
std::shared_ptr<PlannedCudaAllocator> g_test;

PlannedCudaAllocator& test_instance() {
  TORCH_CHECK(g_test != nullptr, "tensor_arena_cuda_test_open was not called");
  return *g_test;
}

}  // namespace

extern "C" {

// Makes the planned allocator torch's CUDA allocator. 0, or -1 with the
// reason in `err` (an incomplete table; torch's allocator already
// initialized: the first CUDA allocation happened before install()).
int tensor_arena_cuda_install(const LibraryTable* table, char* err, std::size_t cap) {
  return guarded(err, cap, [&] {
    TORCH_CHECK(
        table != nullptr && tensor_arena::complete(*table),
        "tensor-arena CUDA extension: the allocator library's function table is incomplete "
        "(an older library, or a table of another version)");
    auto allocator = std::make_shared<PlannedCudaAllocator>(*table);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(allocator);
    g_installed = allocator;
  });
}

// 1 when torch's CUDA allocator is the one tensor_arena_cuda_install made.
int tensor_arena_cuda_installed(void) {
  return g_installed != nullptr &&
          torch::cuda::CUDAPluggableAllocator::getCurrentAllocator().get() == g_installed.get()
      ? 1
      : 0;
}

// ---- Test binding: a private instance, never installed; no GPU needed. ----

int tensor_arena_cuda_test_open(const LibraryTable* table, char* err, std::size_t cap) {
  return guarded(err, cap, [&] {
    TORCH_CHECK(table != nullptr && tensor_arena::complete(*table), "incomplete function table");
    g_test = std::make_shared<PlannedCudaAllocator>(*table);
  });
}

// CUDAPluggableAllocator::malloc (what allocate() calls once it has the
// device and stream); -2 when it threw c10::OutOfMemoryError.
int tensor_arena_cuda_test_malloc(
    std::size_t size, int device, void* stream, void** out, char* err, std::size_t cap) {
  return guarded(err, cap, [&] {
    *out = test_instance().malloc(size, static_cast<c10::DeviceIndex>(device), static_cast<cudaStream_t>(stream));
  });
}

int tensor_arena_cuda_test_free(void* ptr, char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().raw_delete(ptr); });
}

std::size_t tensor_arena_cuda_test_device_stats_json(int device, char* buf, std::size_t cap) {
  std::string text;
  if (guarded(nullptr, 0, [&] {
        text = tensor_arena::device_stats_to_json(test_instance().getDeviceStats(static_cast<c10::DeviceIndex>(device)));
      }) != 0) {
    return 0;
  }
  write_text(text, buf, cap);
  return text.size();
}

int tensor_arena_cuda_test_reset_peak_stats(int device, char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().resetPeakStats(static_cast<c10::DeviceIndex>(device)); });
}

int tensor_arena_cuda_test_reset_accumulated_stats(int device, char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().resetAccumulatedStats(static_cast<c10::DeviceIndex>(device)); });
}

int tensor_arena_cuda_test_cache_info(int device, std::size_t* largest, char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().cacheInfo(static_cast<c10::DeviceIndex>(device), largest); });
}

// recordStream from the point where torch's CUDAStream has become a
// cudaStream_t: CUDAStream::stream() itself initializes CUDA's stream pools
// (torch 2.15), which needs a GPU, so that one call is not exercised here.
int tensor_arena_cuda_test_record_stream(void* ptr, void* stream, char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().record_raw_stream(ptr, static_cast<cudaStream_t>(stream)); });
}

int tensor_arena_cuda_test_empty_cache(char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().emptyCache({0, 0}); });
}

int tensor_arena_cuda_test_set_memory_fraction(double fraction, int device, char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device)); });
}

double tensor_arena_cuda_test_get_memory_fraction(int device) {
  return g_test == nullptr ? -1.0 : g_test->getMemoryFraction(static_cast<c10::DeviceIndex>(device));
}

int tensor_arena_cuda_test_begin_allocate_to_pool(char* err, std::size_t cap) {
  return guarded(err, cap, [&] { test_instance().beginAllocateToPool(0, {1, 0}, [](cudaStream_t) { return true; }); });
}

// snapshot()'s segments as JSON: [{"address", "total_size", "allocated_size",
// "blocks": [[size, requested_size, allocated], ...]}, ...].
std::size_t tensor_arena_cuda_test_snapshot_json(char* buf, std::size_t cap) {
  std::ostringstream out;
  if (guarded(nullptr, 0, [&] {
        CCA::SnapshotInfo info = test_instance().snapshot({0, 0}, false);
        out << "[";
        for (std::size_t i = 0; i < info.segments.size(); ++i) {
          const auto& s = info.segments[i];
          out << (i ? "," : "") << "{\"address\":" << s.address << ",\"total_size\":" << s.total_size
              << ",\"allocated_size\":" << s.allocated_size << ",\"blocks\":[";
          for (std::size_t j = 0; j < s.blocks.size(); ++j) {
            const auto& b = s.blocks[j];
            out << (j ? "," : "") << "[" << b.size << "," << b.requested_size << ","
                << (b.allocated ? "true" : "false") << "]";
          }
          out << "]}";
        }
        out << "]";
      }) != 0) {
    return 0;
  }
  std::string text = out.str();
  write_text(text, buf, cap);
  return text.size();
}

}  // extern "C"
