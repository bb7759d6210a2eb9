"""Planned arenas of torch tensors: leases are views of the one slab, every rule raises."""

import os

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import tensor_arena as ta
from conftest import two_phase_planner


def storage_ptr(t):
    return t.untyped_storage().data_ptr()


def test_reserve_makes_one_uint8_slab_of_the_plan(planned):
    plan, _ = planned
    arena = plan.reserve("cpu")
    slab = arena.slab
    assert slab.dtype == torch.uint8 and slab.ndim == 1
    assert slab.numel() == plan.slab_bytes
    assert slab.device == torch.device("cpu")
    assert arena.stats()["slab_allocations"] == 1
    assert plan.slab_bytes >= plan.lower_bound > 0
    assert all(b["offset"] % 512 == 0 for b in plan.buffers)


def test_reserve_allocates_exactly_once(planned):
    plan, _ = planned
    plan.reserve("cpu")  # warm-up: torch's first calls may set things up
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        arena = plan.reserve("cpu", checked=True)
    allocs = [e.cpu_memory_usage for e in prof.events() if e.cpu_memory_usage > 0]
    assert allocs == [plan.slab_bytes]
    assert arena.slab.numel() == plan.slab_bytes


def test_plan_pads_shapes_and_shares_bytes(planned):
    plan, _ = planned
    by = {b["name"]: b for b in plan.buffers}
    # [128, 32] f32 is already a multiple of 16; [100] would pad to [112].
    assert by["h"]["padded_shape"] == [128, 32]
    assert by["m"]["padded_shape"] == [128, 64]
    # a (forward) and g (backward) are never alive together: same bytes.
    assert by["a"]["offset"] == by["g"]["offset"]
    assert "footprint / lower bound" in str(plan)
    assert plan.report()["slab_bytes"] == plan.slab_bytes


def test_rounding_and_strategies():
    p = ta.Planner(rounding="inner32", strategy="search", time_limit=1.0)
    x = p.step("x", (3, 100), torch.float16)
    plan = p.plan()
    assert plan.buffers[0]["padded_shape"] == [3, 128]
    with pytest.raises(ValueError, match="unknown strategy"):
        ta.Planner(strategy="fastest")
    with pytest.raises(ValueError, match="rounding"):
        ta.Planner(rounding="inner7")
    with pytest.raises(ta.SpecError) as e:
        ta.Planner(offset_align=100)
    assert e.value.kind == "InvalidAlignment"
    assert x.dtype == torch.float16


def test_leases_are_typed_zero_copy_views_of_the_slab(planned):
    plan, b = planned
    arena = plan.reserve("cpu")
    slab = arena.slab
    lo, hi = slab.data_ptr(), slab.data_ptr() + slab.numel()
    offsets = {x["name"]: x["offset"] for x in plan.buffers}
    with arena.step() as s:
        h = s.lease(b["h"], (77, 32))
        m = s.lease(b["m"])
        for t, name in [(h, "h"), (m, "m")]:
            assert storage_ptr(t) == storage_ptr(slab)
            assert lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= hi
            assert t.data_ptr() - lo == offsets[name]
            assert t.is_contiguous()
        assert h.shape == (77, 32) and h.dtype == torch.float32
        assert m.shape == (128, 64) and m.dtype == torch.uint8
        # Zero-copy: a write through the lease is in the slab's bytes.
        h.fill_(1.5)
        raw = slab[offsets["h"] : offsets["h"] + 4].view(torch.float32)
        assert raw.item() == 1.5


def test_no_new_storage_per_step(planned):
    plan, b = planned
    arena = plan.reserve("cpu")

    def arena_steps(n):
        ptrs = set()
        for i in range(n):
            with arena.step() as s:
                x = s.lease(b["a"], (64 + i, 64))
                k = s.lease(b["m"], (64 + i, 64))
                x.bernoulli_(0.5)
                k.copy_(x)
                ptrs.add(storage_ptr(x))
                ptrs.add(storage_ptr(k))
                s.release(x)
                s.enter(b["bwd"])
                g = s.lease(b["g"], (64 + i, 64))
                # (A Python scalar operand would allocate torch's own 8-byte
                # wrapped-number tensor, so tensors only here.)
                g.copy_(k)
                torch.add(g, g, out=g)
                ptrs.add(storage_ptr(g))
        return ptrs

    def naive_steps(n):
        for i in range(n):
            x = torch.empty(64 + i, 64)
            x.bernoulli_(0.5)

    arena_steps(2)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ptrs = arena_steps(10)
    # The profiler books an allocation on the op that made it (aten::empty)
    # or on a "[memory]" event: any event with bytes added.
    allocs = [e for e in prof.events() if e.cpu_memory_usage > 0]
    assert ptrs == {storage_ptr(arena.slab)}
    assert allocs == []
    # The same profiler sees the allocations of the loop without the arena.
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        naive_steps(10)
    allocs = [e for e in prof.events() if e.cpu_memory_usage > 0]
    assert len(allocs) >= 10


def test_in_place_ops_work_on_leases(planned):
    plan, b = planned
    arena = plan.reserve("cpu")
    torch.manual_seed(0)
    with arena.step() as s:
        x = s.lease(b["a"], (16, 64))
        k = s.lease(b["m"], (16, 64))
        x.bernoulli_(0.25)
        assert set(x.unique().tolist()) <= {0.0, 1.0}
        k.copy_(x)
        assert torch.equal(k.float(), x)
        x.mul_(3.0)
        x.masked_fill_(k.bool(), -2.0)
        assert torch.all((x == 0) | (x == -2))
        h = s.lease(b["h"], (16, 32))
        h.copy_(torch.arange(16 * 32, dtype=torch.float32).view(16, 32))
        torch.add(h, 1.0, out=h)
        assert h[0, 0].item() == 1.0
        s.release(x)
        s.enter(b["bwd"])
        g = s.lease(b["g"], (16, 64))
        w = arena.persistent(b["w"])
        w.fill_(0.5)
        torch.matmul(h, w.t(), out=g)
        expect = torch.full((16, 64), 0.0)
        torch.matmul(h.clone(), torch.full((32, 64), 0.5), out=expect)
        assert torch.allclose(g, expect)
        assert storage_ptr(g) == storage_ptr(arena.slab)


def test_autograd_through_leases_with_writes_to_other_buffers(planned):
    # Each buffer's base has its own version counter: an in-place write into
    # one lease must not invalidate tensors of another that autograd saved.
    plan, b = planned
    arena = plan.reserve("cpu")
    weight = torch.randn(64, 64, requires_grad=True)
    with arena.step() as s:
        mask = s.lease(b["a"], (8, 64))
        mask.bernoulli_(0.5)
        y = (torch.ones(8, 64) @ weight) * mask
        other = s.lease(b["h"], (8, 32))
        other.bernoulli_(0.5)  # an in-place write into another buffer
        y.sum().backward()
    assert torch.equal(weight.grad, torch.ones(64, 8) @ mask.clone())


def test_persistent_buffers_keep_their_contents(planned):
    plan, b = planned
    arena = plan.reserve("cpu")
    arena.persistent(b["w"]).copy_(torch.arange(64 * 32, dtype=torch.float32).view(64, 32))
    for _ in range(3):
        with arena.step() as s:
            s.lease(b["a"]).fill_(7.0)
            s.release(b["a"])
            s.enter(b["bwd"])
            s.lease(b["g"]).fill_(9.0)
    assert arena.persistent(b["w"])[63, 31].item() == 64 * 32 - 1
    with pytest.raises(ValueError, match="not persistent"):
        arena.persistent(b["h"])


def test_every_rule_raises_with_buffer_shape_and_limit(planned):
    plan, b = planned
    arena = plan.reserve("cpu")
    with arena.step() as s:
        s.lease(b["h"])
        with pytest.raises(ta.AlreadyLeasedError) as e:
            s.lease(b["h"])
        assert "'h'" in str(e.value) and e.value.kind == "AlreadyLeased"
        assert isinstance(e.value, ta.LeaseError) and isinstance(e.value, ta.ArenaError)

        with pytest.raises(ta.PhaseError) as e:
            s.lease(b["g"])
        assert e.value.kind == "OutsidePhase"
        assert "'g'" in str(e.value) and "'forward'" in str(e.value)

        with pytest.raises(ta.CapacityError) as e:
            s.lease(b["a"], (129, 64))
        msg = str(e.value)
        assert e.value.kind == "ViewTooLarge"
        assert "'a'" in msg and "[129, 64]" in msg and "8256" in msg and "capacity of 8192" in msg
        assert e.value.rule == "elements"

        with pytest.raises(ta.ShapeError) as e:
            s.lease(b["a"], ())
        assert e.value.kind == "InvalidView"

        # A refused lease changed nothing: a is still free.
        s.lease(b["a"], (2, 64))
        with pytest.raises(ta.PhaseError) as e:
            s.enter(b["bwd"])
        assert e.value.kind == "LeaseOutlivesSpan" and "'a'" in str(e.value)
        s.release(b["a"])
        s.enter(b["bwd"])
        with pytest.raises(ta.PhaseError) as e:
            s.enter(b["fwd"])
        assert e.value.kind == "PhaseOrder"

        # Handles and phases of another planner.
        other, ob = two_phase_planner()
        with pytest.raises(ta.ForeignHandleError) as e:
            s.lease(ob["h"])
        assert e.value.kind == "ForeignHandle"
        with pytest.raises(ta.ForeignHandleError):
            s.enter(ob["bwd"])
        with pytest.raises(ta.ForeignHandleError):
            s.release(torch.zeros(4))

        # Released twice.
        g = s.lease(b["g"])
        s.release(g)
        with pytest.raises(ta.StaleLeaseError):
            s.release(g)
        with pytest.raises(ta.StaleLeaseError):
            s.release(b["g"])

        # One step at a time.
        with pytest.raises(ta.StepError) as e:
            arena.step()
        assert e.value.kind == "StepStillOpen"
    with pytest.raises(ta.StepError) as e:
        s.lease(b["h"])
    assert e.value.kind == "StepNotOpen"
    with pytest.raises(TypeError, match="not supported"):
        ta.Planner().step("x", (4,), torch.float64)


def test_leases_end_with_their_step(planned):
    plan, b = planned
    arena = plan.reserve("cpu")
    s = arena.step()
    s.lease(b["h"])
    assert s.live == ["h"] and s.is_open
    s.end()
    assert not s.is_open
    s.end()  # ending twice is harmless
    with arena.step() as s2:
        s2.lease(b["h"])  # free again
    st = arena.stats()
    assert st["steps"] == 2 and st["total_leases"] == 2 and st["live_leases"] == 0
    assert "device malloc calls: 1" in arena.memory_summary()


def test_an_exception_in_a_step_ends_it(planned):
    plan, b = planned
    arena = plan.reserve("cpu")
    with pytest.raises(RuntimeError, match="boom"):
        with arena.step() as s:
            s.lease(b["h"])
            raise RuntimeError("boom")
    with arena.step() as s:
        s.lease(b["h"])


def test_checked_mode_poisons_ended_buffers(planned):
    plan, b = planned
    arena = plan.reserve("cpu", checked=True)
    assert arena.checked
    with arena.step() as s:
        a = s.lease(b["a"], (4, 64))
        # Poisoned at creation: a fresh lease reads NaN, not stale zeros.
        assert torch.isnan(a).all()
        a.fill_(1.0)
        s.release(a)
        s.enter(b["bwd"])
        # a's span ended when forward was left: a stale view reads NaN.
        assert torch.isnan(a).all()
        g = s.lease(b["g"], (4, 64))
        g.fill_(2.0)
    assert torch.isnan(g).all()
    assert arena.take_violations() == []


def test_checked_mode_reports_writes_past_the_capacity(planned):
    plan, b = planned
    arena = plan.reserve("cpu", checked=True)
    h = next(x for x in plan.buffers if x["name"] == "h")
    with arena.step() as s:
        s.lease(b["h"])
        # A kernel with a tail bug: 3 bytes past the capacity.
        end = h["offset"] + h["bytes"]
        arena.slab[end : end + 3].fill_(0)
        with pytest.raises(ta.GuardViolationError) as e:
            s.release(b["h"])
    msg = str(e.value)
    assert "'h'" in msg and "3 byte(s) past its 16384-byte capacity" in msg
    assert len(arena.take_violations()) == 1


def test_checked_mode_from_the_environment(planned, monkeypatch):
    plan, _ = planned
    monkeypatch.setenv("TENSOR_ARENA_CHECKED", "1")
    assert plan.reserve("cpu").checked
    monkeypatch.setenv("TENSOR_ARENA_CHECKED", "0")
    assert not plan.reserve("cpu").checked
    assert plan.reserve("cpu", checked=True).checked


def test_a_given_slab_is_used_and_checked(planned):
    plan, b = planned
    slab = torch.empty(plan.slab_bytes + 100, dtype=torch.uint8)
    arena = plan.reserve(slab=slab)
    with arena.step() as s:
        assert storage_ptr(s.lease(b["h"])) == storage_ptr(slab)
    with pytest.raises(ValueError, match="at least"):
        plan.reserve(slab=torch.empty(10, dtype=torch.uint8))
    with pytest.raises(ValueError):
        plan.reserve(slab=torch.empty(plan.slab_bytes, dtype=torch.float32))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_steady_steps_allocate_nothing(planned):
    plan, b = planned
    arena = plan.reserve("cuda")
    with arena.step() as s:
        s.lease(b["a"]).bernoulli_(0.5)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for i in range(20):
        with arena.step() as s:
            x = s.lease(b["a"], (64 + i, 64))
            x.bernoulli_(0.5)
            k = s.lease(b["m"], (64 + i, 64))
            k.copy_(x)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
