// The allocator library's C ABI as the device extensions see it.
//
// The extensions never name the library: Python (tensor_arena/extensions.py)
// hands them a table of function addresses taken with ctypes from the loaded
// library (the package's _native module or $TENSOR_ARENA_ALLOC_LIB), so the
// extension and torch's allocator slot reach the very same allocator as the
// Python layer. The field order is the ctypes Structure's
// (extensions.LibraryTable); `abi_size` is the table's size in bytes, checked
// so that a Python side and an extension of different versions refuse each
// other instead of calling through a wrong slot.

#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "json_reader.h"
#include "phase.h"

namespace tensor_arena {

struct LibraryTable {
  std::size_t abi_size;
  void* (*alloc)(std::size_t size, int device, void* stream);
  void (*free)(void* ptr, std::size_t size, int device, void* stream);
  std::size_t (*last_error)(char* buf, std::size_t cap);
  std::size_t (*device_stats_json)(char* buf, std::size_t cap);
  void (*reset_peak_stats)();
  void (*reset_accumulated_stats)();
  void (*record_stream)(void* ptr, void* stream);
  void (*erase_stream)(void* ptr, void* stream);
  void (*empty_cache)();
  int (*set_memory_fraction)(double fraction, int device);
  std::size_t (*cache_info)();
  std::size_t (*snapshot_json)(char* buf, std::size_t cap);
  // alloc with the phase read at the request (0 train, 1 eval).
  void* (*alloc_phase)(std::size_t size, int device, void* stream, int phase);
};

// Every slot set: the library exports the whole ABI the extensions need.
inline bool complete(const LibraryTable& t) {
  return t.abi_size == sizeof(LibraryTable) && t.alloc && t.free && t.last_error &&
      t.device_stats_json && t.reset_peak_stats && t.reset_accumulated_stats && t.record_stream &&
      t.erase_stream && t.empty_cache && t.set_memory_fraction && t.cache_info && t.snapshot_json &&
      t.alloc_phase;
}

// The whole text of one of the library's JSON getters (they return the full
// length and write at most cap - 1 bytes and a NUL).
inline std::string read_text(std::size_t (*getter)(char*, std::size_t)) {
  if (getter == nullptr) {
    return {};
  }
  std::string out;
  std::size_t need = getter(nullptr, 0);
  // The text may grow between the two calls (another thread allocating).
  for (int attempt = 0; attempt < 4; ++attempt) {
    out.assign(need + 1, '\0');
    std::size_t got = getter(out.data(), out.size());
    if (got <= need) {
      out.resize(got);
      return out;
    }
    need = got;
  }
  out.resize(out.size() - 1);
  return out;
}

inline json::Value read_json(std::size_t (*getter)(char*, std::size_t)) {
  return json::parse(read_text(getter));
}

// The library's reason for its last NULL answer, or where the refusal is counted.
inline std::string last_error(const LibraryTable& t) {
  std::string why = read_text(t.last_error);
  return why.empty() ? std::string("the allocator library answered NULL (counted in stats()[\"errors\"])")
                     : why;
}

}  // namespace tensor_arena
