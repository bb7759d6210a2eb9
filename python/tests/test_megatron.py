"""The adapter against real megatron-core from the package index (tested with 0.16.1).

Gloo, world size 1, on the CPU: megatron's own ``GlobalMemoryBuffer`` and its layers ask
``torch.cuda.current_device()`` for the device of what they allocate, so the fixture points
that at the CPU for the reference runs (the adapter finds the CPU by its own rule).
"""

import contextlib
import pathlib
import sys
import tempfile
import warnings

import pytest
import torch

import tensor_arena as ta

pytest.importorskip(
    "megatron.core",
    reason="megatron-core is not installed (pip install megatron-core==0.16.1; .ci/run installs it)",
)

import torch.distributed as dist  # noqa: E402
from megatron.core import parallel_state as ps  # noqa: E402
from megatron.core import tensor_parallel  # noqa: E402
from megatron.core.utils import GlobalMemoryBuffer as MegatronBuffer  # noqa: E402

from tensor_arena import megatron as tm  # noqa: E402

PACKAGE = pathlib.Path(ta.__file__).resolve().parent
SEQS = [16, 8, 12, 16, 24, 32, 8, 32, 20, 32]  # 24 and 32: longer than the recorded 16


@pytest.fixture(scope="module", autouse=True)
def world():
    if not dist.is_initialized():
        store = tempfile.mktemp(prefix="ta-megatron-")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def parallel(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # what megatron asks for under sequence parallelism
    if not torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    ps.initialize_model_parallel(1, 1)
    yield ps
    tm.uninstall()
    ps.destroy_model_parallel()


class EmptyCount:
    """Wraps torch.empty: counts every call, and those made from the tensor_arena package."""

    def __init__(self, monkeypatch):
        self.total = self.ours = 0
        real = torch.empty

        def counting(*args, **kwargs):
            self.total += 1
            caller = sys._getframe(1).f_code.co_filename
            if pathlib.Path(caller).resolve().is_relative_to(PACKAGE):
                self.ours += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(torch, "empty", counting)

    def take(self):
        counts, self.total, self.ours = (self.total, self.ours), 0, 0
        return counts


def linear_model():
    torch.manual_seed(0)
    w1 = torch.nn.Parameter(torch.randn(16, 16) / 4)
    w2 = torch.nn.Parameter(torch.randn(16, 16) / 4)
    return [w1, w2], torch.optim.SGD([w1, w2], lr=0.01)


def linear_iteration(params, opt, seq, seed):
    """Two chained sequence-parallel linears, forward, backward and an optimizer step."""
    group = ps.get_tensor_model_parallel_group()
    torch.manual_seed(seed)
    x = torch.randn(seq, 2, 16, requires_grad=True)
    linear = tensor_parallel.layers.linear_with_grad_accumulation_and_async_allreduce
    h = linear(x, params[0], None, False, False, True, tp_group=group)
    y = linear(h, params[1], None, False, False, True, tp_group=group)
    y.square().sum().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in params]
    opt.step()
    opt.zero_grad()
    return [y.detach().clone()] + grads + [p.detach().clone() for p in params]


def run_linear(seqs, empties=None):
    params, opt = linear_model()
    results, counts = [], []
    for i, seq in enumerate(seqs):
        results.append(linear_iteration(params, opt, seq, seed=100 + i))
        if empties is not None:
            counts.append(empties.take())
    return results, counts


def assert_identical(ours, theirs):
    assert len(ours) == len(theirs)
    for a_it, b_it in zip(ours, theirs):
        for a, b in zip(a_it, b_it):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert torch.equal(a, b)


def test_install_is_megatrons_global_and_survives_reinitialisation(parallel):
    buf = tm.install()
    assert ps.get_global_memory_buffer() is buf
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(1, 1)
    assert ps.get_global_memory_buffer() is buf
    tm.uninstall()
    assert isinstance(ps.get_global_memory_buffer(), MegatronBuffer)


def test_linear_chain_bit_identical_frozen_and_replanned(parallel, monkeypatch):
    empties = EmptyCount(monkeypatch)
    reference, ref_counts = run_linear(SEQS, empties)  # megatron's own buffer
    buf = tm.install()
    ours, counts = run_linear(SEQS, empties)
    assert_identical(ours, reference)

    # Warm-up: the first iteration recorded (served megatron's way), then one slab.
    stats = buf.stats()
    assert stats["plans"] == 3 and stats["replans"] == 2 and stats["frozen"]
    # 24, then 32, were served from the fallback and re-planned at the end of their backward
    # pass; every later iteration is served from the slab: no torch.empty of ours at all,
    # and as many torch.empty calls per iteration as megatron's own buffer once it is warm
    # (the layer's own reduce-scatter output).
    ours_after = [c[1] for c in counts[SEQS.index(32) + 1:]]
    assert ours_after == [0] * len(ours_after) and len(ours_after) == 4
    assert [c[0] for c in counts[-4:]] == [c[0] for c in ref_counts[-4:]]
    # The longer sequence: its fallback buffer and, at the boundary, the new slab.
    assert counts[SEQS.index(24)][1] == 2 and counts[SEQS.index(32)][1] == 2
    assert stats["fallback_requests"] == 3 * 4  # 2 requests forward, 2 backward; 16, 24, 32

    slab = buf.arena.slab
    view = ps.get_global_memory_buffer().get_tensor((32, 2, 16), torch.float32, "mpu")
    assert view.untyped_storage().data_ptr() == slab.untyped_storage().data_ptr()


def test_dot_product_attention_bit_identical(parallel, monkeypatch):
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    config = TransformerConfig(
        num_layers=1, hidden_size=32, num_attention_heads=4, attention_dropout=0.0,
        use_cpu_initialization=True,
    )
    # Dropout p=0 outside megatron's CUDA RNG tracker (its fork needs CUDA): the path megatron
    # takes under sequence parallelism, which the config refuses to enable at tp=1.
    config.sequence_parallel = True
    attention = DotProductAttention(config, layer_number=1, attn_mask_type=AttnMaskType.causal,
                                    attention_type="self")

    def run(seqs, first=0):
        out = []
        for i, sq in enumerate(seqs, start=first):
            torch.manual_seed(7 + i)
            q, k, v = (torch.randn(sq, 2, 4, 8, requires_grad=True) for _ in range(3))
            mask = torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1).view(1, 1, sq, sq)
            y = attention(q, k, v, mask)
            (y * y).sum().backward()
            out.append([y.detach().clone(), q.grad, k.grad, v.grad])
            buf = ps.get_global_memory_buffer()
            if isinstance(buf, ta.GlobalMemoryBuffer):
                buf.next_step()  # no optimizer here: the explicit boundary
        return out

    seqs = [16, 8, 16, 12, 24, 16]
    empties = EmptyCount(monkeypatch)
    reference = run(seqs)
    buf = tm.install()
    empties.take()
    ours = run(seqs[:4])
    # The first iteration's fallback buffer and the slab, nothing after.
    assert empties.take()[1] == 2 and buf.stats()["fallback_allocations"] == 1
    ours += run(seqs[4:], first=4)  # 24: beyond the plan, served, re-planned at the boundary
    assert_identical(ours, reference)
    assert buf.stats()["replans"] == 1
    empties.take()
    ours = run([24, 8])
    assert empties.take()[1] == 0


def test_strict_mode_refuses_then_recovers_by_rerecord(parallel):
    buf = tm.install(strict=True)
    params, opt = linear_model()
    linear_iteration(params, opt, 16, seed=1)
    assert buf.is_frozen
    with pytest.raises(ta.CapacityError) as e:
        linear_iteration(params, opt, 32, seed=2)
    assert e.value.kind == "ExceedsRecorded" and "mpu" in str(e.value)
    with pytest.raises(ta.SpecError, match="never requested"):
        buf.get_tensor((4,), torch.float32, "other")
    opt.zero_grad()
    first_slab = buf.arena.slab.untyped_storage().data_ptr()

    # Way 1: buffer.rerecord(); the next iteration is recorded, then the union is planned.
    buf.rerecord()
    assert not buf.is_frozen
    linear_iteration(params, opt, 32, seed=2)
    assert buf.is_frozen and buf.recorder.plans == 2
    linear_iteration(params, opt, 32, seed=3)  # served from the new plan
    assert buf.arena.slab.untyped_storage().data_ptr() != first_slab

    # Way 2: recorder.rerecord() directly (the Recorder's own recovery): from the next
    # boundary on the buffer records again instead of re-freezing the old plan at once.
    with pytest.raises(ta.CapacityError):
        buf.get_tensor((2000,), torch.float32, "mpu")
    buf.recorder.rerecord()
    with buf.step():
        buf.get_tensor((2000,), torch.float32, "mpu")
    assert buf.is_frozen and buf.recorder.plans == 3
    with buf.step():
        t = buf.get_tensor((40, 50), torch.float32, "mpu")
    assert t.untyped_storage().data_ptr() == buf.arena.slab.untyped_storage().data_ptr()


def test_default_mode_recovers_by_itself_with_explicit_steps():
    buf = ta.GlobalMemoryBuffer()
    with buf.step():
        buf.get_tensor((8, 4), torch.float32, "a")
    assert buf.is_frozen
    with buf.step():
        big = buf.get_tensor((64, 4), torch.float32, "a")  # beyond the plan: served
        new = buf.get_tensor((3,), torch.bfloat16, "b")  # never recorded: served
        assert big.shape == (64, 4) and new.shape == (3,)
    assert buf.stats()["replans"] == 1
    with buf.step():
        for t in (buf.get_tensor((64, 4), torch.float32, "a"), buf.get_tensor((3,), torch.bfloat16, "b")):
            assert t.untyped_storage().data_ptr() == buf.arena.slab.untyped_storage().data_ptr()


def test_fsdp_style_keyword_call_and_megatron_keys():
    entered = []

    @contextlib.contextmanager
    def pool():
        entered.append(True)
        yield

    buf = ta.GlobalMemoryBuffer()
    with buf.step():
        # As megatron_fsdp's param_and_grad_buffer.py asks: keywords, a 1-D shape.
        t = buf.get_tensor([1024], dtype=torch.bfloat16, name="fsdp_gbuf_0", mem_alloc_context=pool)
        assert t.shape == (1024,) and len(entered) == 1  # the fallback allocation ran inside it
        buf.get_tensor((4, 8, 16), torch.float32, "mpu", pool)  # positional, megatron's order
    assert buf.is_frozen and len(entered) == 3  # and the slab's allocation
    with buf.step():
        # Keyed by (name, dtype): 1-D after 3-D of one name, any shape within the capacity.
        a = buf.get_tensor((4, 8, 16), torch.float32, "mpu")
        b = buf.get_tensor([512], torch.float32, "mpu", mem_alloc_context=pool)
        assert a.data_ptr() == b.data_ptr() and b.shape == (512,)
        assert len(entered) == 3  # nothing allocated, nothing entered
    with pytest.raises(TypeError):
        buf.get_tensor((4,), torch.float32, "mpu", None, "train")  # modes are keyword-only


def test_modes_by_keyword_and_explicit_steps():
    buf = ta.GlobalMemoryBuffer(modes=("train", "eval"), strict=True)
    with buf.step("train"):
        buf.get_tensor((128, 64), torch.float32, "act")
    assert not buf.is_frozen  # eval not recorded yet
    with buf.step("eval"):
        buf.get_tensor((512, 64), torch.float32, "act")
        with pytest.raises(ta.ModeError):
            buf.get_tensor((4, 64), torch.float32, "act", arena_mode="train")
    assert buf.is_frozen
    buf.next_step()
    assert buf.get_tensor((512, 64), torch.float32, "act", arena_mode="eval").shape == (512, 64)
    with buf.step("train"):
        with pytest.raises(ta.CapacityError):
            buf.get_tensor((512, 64), torch.float32, "act")


def test_warns_when_no_boundary_ever_comes():
    buf = ta.GlobalMemoryBuffer(warn_after=5)
    with pytest.warns(RuntimeWarning, match="no iteration boundary"):
        for _ in range(6):
            buf.get_tensor((8, 4), torch.float32, "mpu")
    assert not buf.is_frozen
    buf.next_step()
    assert buf.is_frozen
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(10):
            buf.get_tensor((8, 4), torch.float32, "mpu")


def test_unplanned_dtype_served_megatrons_way_or_refused_in_strict():
    buf = ta.GlobalMemoryBuffer()
    with pytest.warns(RuntimeWarning, match="float64"):
        t = buf.get_tensor((4, 4), torch.float64, "f64")
    assert t.dtype == torch.float64 and t.shape == (4, 4)
    with pytest.raises(ta.ShapeError, match="float64"):
        ta.GlobalMemoryBuffer(strict=True).get_tensor((4,), torch.float64, "f64")


def test_device_follows_megatrons_rule(monkeypatch):
    assert tm.current_device() == torch.device("cpu") or torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert tm.current_device() == torch.device("cuda", 3)
    assert ta.GlobalMemoryBuffer().device == torch.device("cuda", 3)  # at each allocation
    assert ta.GlobalMemoryBuffer("cpu").device == torch.device("cpu")  # unless given

    class FakeNpu:
        is_available = staticmethod(lambda: True)
        current_device = staticmethod(lambda: 1)

    monkeypatch.setattr(torch, "npu", FakeNpu, raising=False)
    # Without torch_npu, torch does not know the "npu" device type: record what is asked for.
    monkeypatch.setattr(torch, "device", lambda *args: args)
    assert tm.current_device() == ("npu", 1)


def test_checked_mode_goes_through_the_lease_book():
    buf = ta.GlobalMemoryBuffer(checked=True)
    with buf.step():
        buf.get_tensor((8, 4), torch.float32, "mpu")
    with buf.step():
        t = buf.get_tensor((8, 4), torch.float32, "mpu")
        assert torch.isnan(t).all()  # poisoned: a lease of the checked arena
        t.fill_(1.0)
        u = buf.get_tensor((32,), torch.float32, "mpu")  # ends the previous view, megatron's contract
        assert u.shape == (32,)

