"""Python-level answers for the parts of torch's allocator contract no C++ hook covers.

Every ``torch.cuda.memory`` / ``torch_npu.npu.memory`` function looks its
``torch._C`` / ``torch_npu._C`` entry point up at call time, so replacing
those entry points answers every Python caller (Megatron's ``report_memory``,
``memory_summary()``, ``max_memory_allocated()``, ``_snapshot()``...) from
the allocator library's JSON. C++ callers are not covered: that is what the
device extensions are for (:mod:`tensor_arena.extensions`). Used:

- on CUDA, only when the CUDA extension could not be built (no compiler):
  the statistics, their resets and the snapshot, and graph capture refused;
- on torch_npu always for what its pluggable allocator has no setter for
  (the snapshot, the accumulated-statistics reset, graph pools), and also
  the statistics when the NPU extension could not be built.

Each replacement keeps torch's signature and is tagged with
``__tensor_arena__`` so that installing twice does not stack them.
"""

import functools

__all__ = ["GRAPH_ERROR", "c_setter_hooks", "cuda_python_answers", "npu_python_answers", "refuse_graph_capture"]

#: The error raised where graph capture or a private memory pool is asked for.
GRAPH_ERROR = (
    "tensor-arena planned allocator: graph capture and private memory pools "
    "({what}) are not supported: the plan hands the same addresses out again every step, so a "
    "captured graph would replay into memory other tensors own. Capture with the runtime's own "
    "allocator (do not install the planned allocator in this process)"
)


def _tag(fn):
    fn.__tensor_arena__ = True
    return fn


def _replace(module, name, fn):
    """Sets ``module.name`` to ``fn`` (once); returns whether it was replaced now."""
    current = getattr(module, name, None)
    if getattr(current, "__tensor_arena__", False):
        return False
    setattr(module, name, _tag(fn))
    return True


def _stats_answers(lib, module, names):
    """Replaces the statistics getter and the two resets named in ``names`` on ``module``."""
    stats_name, peak_name, accumulated_name = names
    dll = lib.dll
    dll.tensor_arena_reset_peak_stats.argtypes, dll.tensor_arena_reset_peak_stats.restype = [], None
    dll.tensor_arena_reset_accumulated_stats.argtypes = []
    dll.tensor_arena_reset_accumulated_stats.restype = None

    # One library serves one device per process: the device argument is not needed.
    def memory_stats(device):
        return lib.json("device_stats_json")

    def reset_peak(device):
        dll.tensor_arena_reset_peak_stats()

    def reset_accumulated(device):
        dll.tensor_arena_reset_accumulated_stats()

    if stats_name:
        _replace(module, stats_name, memory_stats)
    if peak_name:
        _replace(module, peak_name, reset_peak)
    _replace(module, accumulated_name, reset_accumulated)


def _snapshot_answer(lib, module, name):
    def memory_snapshot(*args, **kwargs):
        # The library's snapshot has the shape torch's _snapshot() returns
        # (segments, device_traces, allocator_settings); any mempool argument
        # names the one pool the planned allocator has.
        return lib.json("snapshot_json")

    _replace(module, name, memory_snapshot)


def refuse_graph_capture(graph_class, module, pool_functions, what):
    """Makes ``graph_class.capture_begin`` and the pool entry points of ``module`` raise :data:`GRAPH_ERROR`."""
    message = GRAPH_ERROR.format(what=what)

    def refused(*args, **kwargs):
        raise RuntimeError(message)

    if graph_class is not None and not getattr(graph_class.capture_begin, "__tensor_arena__", False):
        original = graph_class.capture_begin

        @functools.wraps(original)
        def capture_begin(self, *args, **kwargs):
            raise RuntimeError(message)

        graph_class.capture_begin = _tag(capture_begin)
    for name in pool_functions:
        if hasattr(module, name):
            _replace(module, name, refused)


def cuda_python_answers(lib, torch):
    """CUDA without the extension: statistics, resets and snapshot from the library; graphs refused."""
    _stats_answers(
        lib, torch._C, ("_cuda_memoryStats", "_cuda_resetPeakMemoryStats", "_cuda_resetAccumulatedMemoryStats")
    )
    _snapshot_answer(lib, torch._C, "_cuda_memorySnapshot")
    graphs = getattr(torch.cuda, "graphs", None)
    refuse_graph_capture(
        getattr(graphs, "CUDAGraph", None),
        torch._C,
        (
            "_cuda_beginAllocateToPool",
            "_cuda_beginAllocateCurrentThreadToPool",
            "_cuda_beginAllocateCurrentStreamToPool",
        ),
        'torch.cuda.graph, torch.compile(mode="reduce-overhead"), torch.cuda.use_mem_pool',
    )


def npu_python_answers(lib, torch_npu, stats):
    """torch_npu: snapshot, accumulated reset and graph pools always; ``stats`` also the statistics and peak reset."""
    names = ("_npu_memoryStats", "_npu_resetPeakMemoryStats", "_npu_resetAccumulatedMemoryStats")
    _stats_answers(lib, torch_npu._C, names if stats else (None, None, names[2]))
    _snapshot_answer(lib, torch_npu._C, "_npu_memorySnapshot")
    graphs = getattr(torch_npu.npu, "graphs", None)
    refuse_graph_capture(
        getattr(graphs, "NPUGraph", None),
        torch_npu._C,
        (
            "_npu_beginAllocateToPool",
            "_npu_beginAllocateCurrentThreadToPool",
            "_npu_beginAllocateCurrentStreamToPool",
        ),
        "torch_npu.npu.NPUGraph, torch_npu.npu.use_mem_pool",
    )


def c_setter_hooks(lib, allocator, kind):
    """Hands the library's plain C functions to the pluggable allocator's setters that take C signatures.

    CUDA (``torch._C._CUDAPluggableAllocator``): record_stream
    ``void(void*, cudaStream_t)``, reset ``void()``, memory fraction
    ``void(double, int)``. torch_npu (``torch_npu._C._NPUPluggableAllocator``):
    reset ``void(bool)``, memory fraction, reset_peak_status ``void(int)``;
    its record/erase-stream hooks take a C++ NPUStream and need the extension.
    The library's ``tensor_arena_set_memory_fraction`` returns an int that
    these void slots ignore, and its reset functions take no argument where
    torch_npu passes one: on x86-64 and AArch64 a callee ignores unused
    argument and return registers, which is what these calls rely on.
    """
    address = lib.address
    allocator.set_memory_fraction_fn(address("set_memory_fraction"))
    allocator.set_reset_fn(address("empty_cache"))
    if kind == "cuda":
        allocator.set_record_stream_fn(address("record_stream"))
    else:
        allocator.set_reset_peak_status_fn(address("reset_peak_stats"))
