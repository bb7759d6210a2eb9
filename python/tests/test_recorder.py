"""Record, then plan; spec files shared with the Rust crate in both directions."""

import pytest
import torch

import tensor_arena as ta
from tensor_arena import _native

# One scripted recording: (op, ...) per step, run by the Python recorder here
# and by the Rust Recorder through _native.reference_specs.
STEPS = [
    [("temp", "h", "f32", [128, 64]), ("temp", "keep", "f32", [128, 64]), ("release", "keep"),
     ("enter", "backward"), ("temp", "g", "f32", [128, 64])],
    [("temp", "h", "f32", [77, 80]), ("temp", "mask", "u8", [77, 80]), ("enter", "backward"),
     ("release", "mask"), ("temp", "g", "f32", [100, 64]), ("release", "g"), ("temp", "idx", "i32", [5])],
    [("temp", "h", "f32", [3, 64]), ("temp", "half", "bf16", [9, 9]), ("release", "half")],
]
DTYPES = {"f32": torch.float32, "u8": torch.uint8, "i32": torch.int32, "bf16": torch.bfloat16}


def record(rec, phases, steps=STEPS):
    for ops in steps:
        with rec.step() as s:
            for op in ops:
                if op[0] == "temp":
                    s.temp(op[1], op[3], DTYPES[op[2]])
                elif op[0] == "release":
                    s.release(op[1])
                else:
                    s.enter(phases[op[1]])


def recorder():
    rec = ta.Recorder("cpu")
    phases = {n: rec.phase(n) for n in ["forward", "backward"]}
    w = rec.persistent("w", (64,), torch.float32)
    return rec, phases, w


def test_the_python_recorder_learns_what_the_rust_recorder_learns():
    rec, phases, _ = recorder()
    record(rec, phases)
    rust = _native.reference_specs(["forward", "backward"], [("w", "f32", [64])], STEPS)
    assert rec.specs().to_toml() == rust
    specs = {b["name"]: b for b in rec.specs().buffers}
    # The element-count rule: the request with the most elements ([128, 64]:
    # 8192, not [77, 80]: 6160) sizes the site.
    assert specs["h"]["shape"] == [128, 64]
    # h is never released before backward in the first step.
    assert specs["h"]["lifetime"] == ("forward", "backward")
    assert specs["keep"]["lifetime"] == ("forward", "forward")
    assert specs["g"]["lifetime"] == ("backward", "backward")
    assert specs["mask"]["lifetime"] == ("forward", "backward")
    assert specs["h"]["recorded_steps"] == 3
    assert specs["w"]["lifetime"] == "persistent" and specs["w"]["recorded_steps"] is None


def test_freeze_serves_the_same_calls_from_one_slab():
    rec, phases, w = recorder()
    rec.tensor(w).copy_(torch.arange(64, dtype=torch.float32))
    record(rec, phases)
    assert rec.recorded_steps == 3 and not rec.is_frozen
    plan = rec.freeze()
    assert rec.is_frozen and rec.plans == 1
    slab = rec.arena.slab
    assert torch.equal(rec.tensor(w), torch.arange(64, dtype=torch.float32))
    with rec.step() as s:
        assert not s.is_recording
        h = s.temp("h", (100, 80))
        assert h.untyped_storage().data_ptr() == slab.untyped_storage().data_ptr()
        assert h.shape == (100, 80)
        with pytest.raises(ta.CapacityError) as e:
            s.temp("g", (129, 64))
        assert e.value.kind == "ExceedsRecorded" and "'g'" in str(e.value) and "[128, 64]" in str(e.value)
        with pytest.raises(ta.SpecError) as e:
            s.temp("never", (4,))
        assert e.value.kind == "UnrecordedSite"
        with pytest.raises(ta.ShapeError) as e:
            s.temp("h", (4, 4), torch.float16)
        assert e.value.kind == "DTypeMismatch"
        s.release(h)
        s.enter(phases["backward"])
        s.temp("g", (128, 64))
    assert plan.slab_bytes == slab.numel()


def test_rerecord_plans_the_union_and_keeps_persistent_contents():
    rec, phases, w = recorder()
    record(rec, phases)
    rec.freeze()
    rec.tensor(w).fill_(3.0)
    rec.rerecord()
    assert not rec.is_frozen
    with rec.step() as s:
        s.temp("g", (200, 64))
    plan = rec.freeze()
    assert rec.plans == 2
    g = next(b for b in plan.buffers if b["name"] == "g")
    assert g["shape"] == [200, 64]
    assert torch.all(rec.tensor(w) == 3.0)


def test_recording_refuses_what_the_rust_recorder_refuses():
    rec, phases, _ = recorder()
    with rec.step() as s:
        s.temp("x", (4, 4))
        with pytest.raises(ta.AlreadyLeasedError):
            s.temp("x", (4, 4))
        s.release("x")
        s.temp("x", (4, 4, 4))  # by element count, any number of dimensions
        s.release("x")
        rec.per_dimension("y")
        s.temp("y", (4, 4))
        s.release("y")
        with pytest.raises(ta.ShapeError) as e:
            s.temp("y", (4, 4, 4))
        assert "number of dimensions" in str(e.value)
        with pytest.raises(ta.ShapeError):
            s.temp("w", (64,))  # a persistent buffer's name
        with pytest.raises(ta.SpecError):
            s.temp("", (4,))
        s.enter(phases["backward"])
        with pytest.raises(ta.PhaseError):
            s.enter(phases["forward"])


def test_spec_files_written_by_python_load_in_rust(tmp_path):
    rec, phases, _ = recorder()
    record(rec, phases)
    path = tmp_path / "specs.toml"
    rec.save(path)
    # Rust: SpecSet::load on a Planner, and a Rust Recorder preloaded and frozen.
    rust_planned, rust_recorded = _native.reference_plans(str(path))
    assert rust_planned == rust_recorded
    assert str(rec.freeze()) == rust_planned


def test_spec_files_written_by_rust_load_in_python(tmp_path):
    path = tmp_path / "rust.toml"
    path.write_text(_native.reference_specs(["forward", "backward"], [("w", "f32", [64])], STEPS))
    loaded = ta.SpecSet.load(path)
    assert ta.SpecSet.from_toml(loaded.to_toml()) == loaded
    # Declared on a planner.
    p = ta.Planner()
    ph, bufs = loaded.declare_on(p)
    assert list(ph) == ["forward", "backward"] and "mask" in bufs
    plan = p.plan()
    # Preloaded into a recorder: no recording step, the same plan as Rust's.
    rec = ta.Recorder("cpu")
    rec.phase("forward")
    rec.phase("backward")
    rec.preload(path)
    assert str(rec.freeze()) == _native.reference_plans(str(path))[0] == str(plan)
    with rec.step() as s:
        s.temp("h", (100, 80))  # 8000 elements: fits the planned 8192


def test_spec_sets_from_python_values():
    specs = ta.SpecSet(["fwd"], [
        {"name": "w", "dtype": torch.float32, "shape": [8], "lifetime": "persistent"},
        {"name": "x", "dtype": "f16", "shape": [4, 100], "lifetime": "fwd", "recorded_steps": 2},
        {"name": "y", "dtype": torch.uint8, "shape": [3], "lifetime": "step", "rounding": "none"},
    ])
    text = specs.to_toml()
    assert 'dtype = "f16"' in text and "recorded_steps = 2" in text
    assert "planner.persistent::<f32>" in specs.to_rust() or "persistent" in specs.to_rust()
    with pytest.raises(ta.SpecError):
        ta.SpecSet.from_toml("version = 99\n")
    with pytest.raises(ValueError, match="phase 'bwd'"):
        ta.SpecSet(["fwd"], [{"name": "x", "dtype": "f32", "shape": [4], "lifetime": "bwd"}])


def test_megatron_get_tensor_records_then_serves_views():
    buf = ta.GlobalMemoryBuffer("cpu", record_steps=2, strict=True)
    shapes = [(128, 4, 64), (96, 4, 64), (120, 4, 64)]
    seen = []
    for shape in shapes:
        with buf.step():
            a = buf.get_tensor(shape, torch.bfloat16, "mpu")
            a.fill_(1)
            b = buf.get_tensor((shape[0] * 4, 64), torch.float32, "mpu")
            b.zero_()
            # Same name and dtype again: the previous view ends (Megatron's contract).
            c = buf.get_tensor(shape, torch.bfloat16, "mpu")
            seen.append((a.shape, c.shape))
    assert buf.arena is not None
    slab = buf.arena.slab
    with buf.step():
        t = buf.get_tensor((100, 4, 64), torch.bfloat16, "mpu")
        assert t.untyped_storage().data_ptr() == slab.untyped_storage().data_ptr()
        with pytest.raises(ta.CapacityError):
            buf.get_tensor((129, 4, 64), torch.bfloat16, "mpu")
    assert seen[0] == (torch.Size(shapes[0]), torch.Size(shapes[0]))
