// torch's DeviceStats (c10/core/CachingDeviceAllocator.h) from the library's
// statistics JSON (tensor_arena_device_stats_json), and back to JSON.
//
// The library writes the nested dict that torch._C._cuda_memoryStats returns:
// the StatArray counters as {"all"|"small_pool"|"large_pool": {"current",
// "peak", "allocated", "freed"}}, the oversize Stats as one such object, the
// plain counters as integers. A key the library does not write stays 0. The
// same struct serves CUDA and torch_npu (NPUCachingAllocator uses
// c10::CachingDeviceAllocator::DeviceStats; torch 2.14 and 2.15 have the same
// fields).

#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "json_reader.h"

namespace tensor_arena {

// The pool names of torch's StatType, in its order (AGGREGATE, SMALL_POOL, LARGE_POOL).
inline constexpr std::array<std::string_view, 3> kPools = {"all", "small_pool", "large_pool"};

inline void read_stat(const json::Value& v, c10::CachingAllocator::Stat& s) {
  s.current = v["current"].as_int();
  s.peak = v["peak"].as_int();
  s.allocated = v["allocated"].as_int();
  s.freed = v["freed"].as_int();
}

inline void read_stat_array(const json::Value& v, c10::CachingAllocator::StatArray& a) {
  for (std::size_t i = 0; i < kPools.size(); ++i) {
    read_stat(v[kPools[i]], a[i]);
  }
}

// Calls `f(name, StatArray&)` for each counted array, in torch's dict order.
template <typename Stats, typename F>
void for_each_array(Stats& s, F&& f) {
  f("allocation", s.allocation);
  f("segment", s.segment);
  f("active", s.active);
  f("inactive_split", s.inactive_split);
  f("allocated_bytes", s.allocated_bytes);
  f("reserved_bytes", s.reserved_bytes);
  f("active_bytes", s.active_bytes);
  f("inactive_split_bytes", s.inactive_split_bytes);
  f("requested_bytes", s.requested_bytes);
}

template <typename Stats, typename F>
void for_each_counter(Stats& s, F&& f) {
  f("num_alloc_retries", s.num_alloc_retries);
  f("num_ooms", s.num_ooms);
  f("num_sync_all_streams", s.num_sync_all_streams);
  f("num_device_alloc", s.num_device_alloc);
  f("num_device_free", s.num_device_free);
  f("max_split_size", s.max_split_size);
}

inline c10::CachingDeviceAllocator::DeviceStats device_stats_from_json(const json::Value& v) {
  c10::CachingDeviceAllocator::DeviceStats s;
  for_each_array(s, [&](std::string_view name, c10::CachingAllocator::StatArray& a) {
    read_stat_array(v[name], a);
  });
  for_each_counter(s, [&](std::string_view name, std::int64_t& n) { n = v[name].as_int(); });
  read_stat(v["oversize_allocations"], s.oversize_allocations);
  read_stat(v["oversize_segments"], s.oversize_segments);
  return s;
}

// The struct as the same JSON (the CUDA test binding compares it with the
// library's own text, so a field lost on the way shows).
inline std::string device_stats_to_json(const c10::CachingDeviceAllocator::DeviceStats& s) {
  std::ostringstream out;
  auto stat = [&](const c10::CachingAllocator::Stat& x) {
    out << "{\"current\":" << x.current << ",\"peak\":" << x.peak << ",\"allocated\":" << x.allocated
        << ",\"freed\":" << x.freed << "}";
  };
  out << "{";
  bool first = true;
  auto key = [&](std::string_view name) {
    out << (first ? "" : ",") << "\"" << name << "\":";
    first = false;
  };
  for_each_array(s, [&](std::string_view name, const c10::CachingAllocator::StatArray& a) {
    key(name);
    out << "{";
    for (std::size_t i = 0; i < kPools.size(); ++i) {
      out << (i ? "," : "") << "\"" << kPools[i] << "\":";
      stat(a[i]);
    }
    out << "}";
  });
  for_each_counter(s, [&](std::string_view name, const std::int64_t& n) {
    key(name);
    out << n;
  });
  key("oversize_allocations");
  stat(s.oversize_allocations);
  key("oversize_segments");
  stat(s.oversize_segments);
  out << "}";
  return out.str();
}

}  // namespace tensor_arena
