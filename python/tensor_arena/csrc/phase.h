// The phase of a request, read on the requesting thread when torch asks for
// memory: 1 (eval) or 0 (train), as the library's tensor_arena_alloc_phase
// takes it (docs/allocator.md, "Request phases").
//
// Eval is torch.no_grad() / torch.inference_mode() outside autograd's
// backward: an eval pass, and also the optimizer's step (torch runs it under
// no_grad). The backward runs with grad mode off too, but inside a graph task:
// it is training, with the forward. An eval pass makes the training
// forward's sizes in the same order; its own phase is what tells them apart.
//
// torch::autograd::get_current_graph_task_id() (libtorch_cpu, -1 outside a
// backward) is looked up once at run time, so that no extension links
// libtorch_cpu (the torch_npu one is built ahead of time against libc10
// alone); where it is not found, grad mode alone decides (the backward is
// then eval as well, which only costs the plan its separation).

#pragma once

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <dlfcn.h>

namespace tensor_arena {

using GraphTaskIdFn = int (*)();

inline GraphTaskIdFn graph_task_id_fn() {
  // Resolved once (a thread-safe static). torch loads libtorch_cpu before any
  // allocation reaches an extension, but not into the global scope: the
  // loaded copy is found by its soname.
  static const GraphTaskIdFn fn = [] {
    const char* name = "_ZN5torch8autograd25get_current_graph_task_idEv";
    void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
    void* sym = lib != nullptr ? dlsym(lib, name) : dlsym(RTLD_DEFAULT, name);
    return reinterpret_cast<GraphTaskIdFn>(sym);
  }();
  return fn;
}

// 1 (eval) when grad mode is off or inference mode is on, outside autograd's
// backward; else 0 (train). One thread-local read when grad mode is on.
inline int request_phase() {
  if (c10::InferenceMode::is_enabled()) {
    return 1;
  }
  if (c10::GradMode::is_enabled()) {
    return 0;
  }
  GraphTaskIdFn graph_task_id = graph_task_id_fn();
  return graph_task_id != nullptr && graph_task_id() >= 0 ? 0 : 1;
}

// tensor_arena_alloc_phase's ROUTE_BY_THREAD flag: the request was made
// outside autograd's backward, so the library may serve it outside the step
// when its thread is not the one that steps (docs/allocator.md, "Threads").
// Inside a backward (autograd's device threads compute for the thread that
// called backward) the request belongs to the step wherever it is made.
constexpr int kRouteByThread = 2;

// The phase of the request and, outside autograd's backward, the
// ROUTE_BY_THREAD flag: what the extensions pass to tensor_arena_alloc_phase.
inline int request_code() {
  if (c10::InferenceMode::is_enabled()) {
    return 1 | kRouteByThread;
  }
  GraphTaskIdFn graph_task_id = graph_task_id_fn();
  const bool in_backward = graph_task_id != nullptr && graph_task_id() >= 0;
  if (in_backward) {
    return 0;
  }
  return (c10::GradMode::is_enabled() ? 0 : 1) | kRouteByThread;
}

}  // namespace tensor_arena
