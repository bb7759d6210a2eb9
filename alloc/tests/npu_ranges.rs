//! The NPU backing's mapped ranges on the simulated ACL runtime:
//! `reserve_address` / `map` / `unmap` / `release_address` are real
//! `aclrtReserveMemAddress`, `aclrtMallocPhysical` + `aclrtMapMem`,
//! `aclrtUnmapMem` + `aclrtFreePhysical` and `aclrtReleaseMemAddress` calls
//! of the simulation (`kernels/sim/vmm.cpp`), whose unmapped addresses
//! hold nothing: checked mode's `fill` and `read` reach only mapped
//! granules, a mapping past the headroom or refused by the runtime is a
//! clear error, and a failed mapping leaves nothing behind.
//! `cargo test --release -p tensor-arena-alloc --test npu_ranges` runs these.

use std::collections::BTreeMap;
use std::ffi::{CString, c_char};

use libloading::Library;
use proptest::prelude::*;
use tensor_arena_alloc::backing::{Backing, npu_backing};

/// Device 6: its capacity is changed (headroom); device 7: everything else.
const HEADROOM_DEVICE: i32 = 6;
const DEVICE: i32 = 7;
const MIB: usize = 1 << 20;

fn sim_lib() -> String {
    let dir = tensor_arena::device::ascend::SIMULATED_RUNTIME_DIR.expect(
        "the simulated ACL runtime is built with the crate when g++ exists (apt-get install g++)",
    );
    format!("{dir}/libascendcl.so")
}

/// The simulation's control functions (the instance the backing loaded).
struct Sim {
    lib: Library,
}

impl Sim {
    fn open() -> Sim {
        // SAFETY: the simulated runtime's initialisers have no
        // preconditions; the backing loaded it already, so this is the same
        // instance.
        let lib = unsafe { Library::new(sim_lib()) }.expect("the simulated runtime loads");
        Sim { lib }
    }

    /// A counter of this thread's calls (`physical_bytes_in_use`: what its
    /// live physical handles charge).
    fn counter(&self, name: &str) -> u64 {
        let c = CString::new(name).unwrap();
        // SAFETY: `uint64_t tasim_counter(const char *)`.
        unsafe {
            let f: unsafe extern "C" fn(*const c_char) -> u64 =
                *self.lib.get(b"tasim_counter").unwrap();
            f(c.as_ptr())
        }
    }

    fn set(&self, name: &[u8], id: i32, bytes: u64) {
        // SAFETY: `void tasim_set_capacity / tasim_set_system_reserved(int32_t, uint64_t)`.
        unsafe {
            let f: unsafe extern "C" fn(i32, u64) = *self.lib.get(name).unwrap();
            f(id, bytes)
        }
    }

    fn arm(&self, name: &[u8], nth: u64, code: i32) {
        // SAFETY: `void tasim_fail_malloc_physical / tasim_fail_map(uint64_t, int32_t)`.
        unsafe {
            let f: unsafe extern "C" fn(u64, i32) = *self.lib.get(name).unwrap();
            f(nth, code)
        }
    }
}

#[test]
fn a_range_maps_granules_holds_bytes_and_refuses_unmapped_ones() {
    let mut b = npu_backing(DEVICE, Some(&sim_lib())).expect("the simulated NPU opens");
    let s = Sim::open();
    let g = b
        .map_granularity()
        .expect("the simulation has mapped ranges");
    assert_eq!(g, 2 * MIB, "ACL_HBM_MEM_HUGE pages");
    let before = s.counter("physical_bytes_in_use");
    let base = b.reserve_address(4 * g).unwrap();
    assert_eq!(base % g, 0);
    assert_eq!(
        s.counter("physical_bytes_in_use"),
        before,
        "address space costs no memory"
    );
    let mut one = [0u8; 1];
    let e = b.read(base, &mut one).unwrap_err().to_string();
    assert!(e.contains("not mapped"), "{e}");

    b.map(base + g, 2 * g).unwrap();
    assert_eq!(b.reserved_bytes(), 2 * g as u64);
    assert_eq!(
        s.counter("physical_bytes_in_use") - before,
        2 * g as u64,
        "the runtime charges the mapped granules"
    );
    // Bytes across the two granules (two handles) round trip.
    b.fill(base + 2 * g - 50, 100, 7).unwrap();
    let mut out = [0u8; 100];
    b.read(base + 2 * g - 50, &mut out).unwrap();
    assert_eq!(out, [7u8; 100]);
    // A read running into the unmapped granule after them is refused.
    let mut tail = vec![0u8; 20];
    let e = b
        .read(base + 3 * g - 10, &mut tail)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not mapped") && e.contains("read_mapped"), "{e}");

    // Misuse is refused with the addresses and sizes.
    let e = b.map(base + 2 * g, g).unwrap_err().to_string();
    assert!(e.contains("mapped already"), "{e}");
    let e = b.map(base + 3 * g, 2 * g).unwrap_err().to_string();
    assert!(e.contains("past the end"), "{e}");
    let e = b.map(base + 1, g).unwrap_err().to_string();
    assert!(e.contains("granule"), "{e}");
    let e = b.unmap(base, g).unwrap_err().to_string();
    assert!(e.contains("not mapped"), "{e}");

    b.unmap(base + g, g).unwrap();
    assert_eq!(b.reserved_bytes(), g as u64);
    let e = b.read(base + g, &mut one).unwrap_err().to_string();
    assert!(e.contains("not mapped"), "{e}");
    b.read(base + 2 * g, &mut one).unwrap();
    assert_eq!(one, [7]);

    b.release_address(base);
    assert_eq!(b.reserved_bytes(), 0);
    assert_eq!(s.counter("physical_bytes_in_use"), before);
    assert!(b.read(base + 2 * g, &mut one).is_err(), "released");
    assert_eq!(
        s.counter("bad_device_pointers"),
        0,
        "the backing never sent an unmapped address to the runtime"
    );
    assert_eq!(s.counter("free_physical_while_mapped"), 0);
}

#[test]
fn a_mapping_past_the_headroom_names_the_rule() {
    let mut b = npu_backing(HEADROOM_DEVICE, Some(&sim_lib())).expect("the simulated NPU opens");
    let s = Sim::open();
    // 100 MiB free, 64 MiB of default headroom: 36 MiB usable.
    s.set(b"tasim_set_system_reserved", HEADROOM_DEVICE, 0);
    s.set(b"tasim_set_capacity", HEADROOM_DEVICE, 100 << 20);
    let g = b.map_granularity().unwrap();
    let base = b.reserve_address(32 * g).unwrap();
    b.map(base, 16 * g).unwrap();
    let e = b.map(base + 16 * g, 4 * g).unwrap_err().to_string();
    assert!(
        e.contains("TENSOR_ARENA_ASCEND_HEADROOM") && e.contains(&format!("{}", 4 * g)),
        "{e}"
    );
    assert_eq!(b.reserved_bytes(), 16 * g as u64, "nothing more was mapped");
    b.release_address(base);
    s.set(b"tasim_set_capacity", HEADROOM_DEVICE, 64 << 30);
    s.set(b"tasim_set_system_reserved", HEADROOM_DEVICE, 300 << 20);
}

#[test]
fn a_mapping_the_runtime_refuses_is_a_clear_error_and_leaves_nothing() {
    let mut b = npu_backing(DEVICE, Some(&sim_lib())).expect("the simulated NPU opens");
    let s = Sim::open();
    let g = b.map_granularity().unwrap();
    let base = b.reserve_address(8 * g).unwrap();
    let before = s.counter("physical_bytes_in_use");

    // The third physical allocation runs out of memory: the two before it
    // are unmapped and freed again.
    s.arm(b"tasim_fail_malloc_physical", 3, 207_001);
    let e = b.map(base, 4 * g).unwrap_err().to_string();
    assert!(
        e.contains("aclrtMallocPhysical")
            && e.contains("207001")
            && e.contains("ACL_ERROR_RT_MEMORY_ALLOCATION"),
        "{e}"
    );
    assert_eq!(s.counter("physical_bytes_in_use"), before);
    assert_eq!(b.reserved_bytes(), 0);
    let mut one = [0u8; 1];
    assert!(b.read(base, &mut one).is_err(), "rolled back");

    // aclrtMapMem itself fails: the error names the call and its code.
    s.arm(b"tasim_fail_map", 2, 507_899);
    let e = b.map(base, 2 * g).unwrap_err().to_string();
    assert!(e.contains("aclrtMapMem") && e.contains("507899"), "{e}");
    assert_eq!(s.counter("physical_bytes_in_use"), before);

    // Afterwards the same granules map.
    b.map(base, 4 * g).unwrap();
    b.fill(base, 4 * g, 1).unwrap();
    b.release_address(base);
    assert_eq!(s.counter("physical_bytes_in_use"), before);
}

#[derive(Debug, Clone)]
enum Op {
    Map(usize, usize),
    Unmap(usize, usize),
    Fill(usize, usize, u8),
    Read(usize, usize),
}

fn op(granules: usize, g: usize) -> impl Strategy<Value = Op> {
    let span = (0..granules).prop_flat_map(move |a| (Just(a), 1..=granules - a));
    let bytes =
        (0..granules * g).prop_flat_map(move |a| (Just(a), 1..=(granules * g - a).min(3 * g)));
    prop_oneof![
        span.clone().prop_map(|(a, n)| Op::Map(a, n)),
        span.prop_map(|(a, n)| Op::Unmap(a, n)),
        (bytes.clone(), any::<u8>()).prop_map(|((a, n), v)| Op::Fill(a, n, v)),
        bytes.prop_map(|(a, n)| Op::Read(a, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Against a model of which granules are mapped and what was written:
    /// a read or fill succeeds exactly when every byte it touches is in a
    /// mapped granule, and then reads what was last written there since
    /// the granule was mapped; a byte of an unmapped granule is never
    /// readable.
    #[test]
    fn a_byte_of_an_unmapped_granule_is_never_readable(ops in prop::collection::vec(op(6, 2 << 20), 1..24)) {
        let g = 2 * MIB;
        let mut b = npu_backing(DEVICE, Some(&sim_lib())).expect("the simulated NPU opens");
        let base = b.reserve_address(6 * g).unwrap();
        // Mapped granules -> their written bytes (sparse: offset -> value).
        let mut model: BTreeMap<usize, BTreeMap<usize, u8>> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Map(a, n) => {
                    let free = (a..a + n).all(|p| !model.contains_key(&p));
                    prop_assert_eq!(b.map(base + a * g, n * g).is_ok(), free);
                    if free {
                        model.extend((a..a + n).map(|p| (p, BTreeMap::new())));
                    }
                }
                Op::Unmap(a, n) => {
                    let mapped = (a..a + n).all(|p| model.contains_key(&p));
                    prop_assert_eq!(b.unmap(base + a * g, n * g).is_ok(), mapped);
                    if mapped {
                        for p in a..a + n {
                            model.remove(&p);
                        }
                    }
                }
                Op::Fill(a, n, v) => {
                    let mapped = (a / g..=(a + n - 1) / g).all(|p| model.contains_key(&p));
                    // Sample a few bytes only: fills are up to 6 MiB.
                    let fill = b.fill(base + a, n, v);
                    prop_assert_eq!(fill.is_ok(), mapped, "{:?}", fill);
                    if mapped {
                        for p in a / g..=(a + n - 1) / g {
                            let page = model.get_mut(&p).unwrap();
                            page.retain(|&k, _| p * g + k < a || p * g + k >= a + n);
                        }
                        for off in [a, a + n / 2, a + n - 1] {
                            model.get_mut(&(off / g)).unwrap().insert(off % g, v);
                        }
                    }
                }
                Op::Read(a, n) => {
                    let mapped = (a / g..=(a + n - 1) / g).all(|p| model.contains_key(&p));
                    let mut out = vec![0u8; n];
                    let read = b.read(base + a, &mut out);
                    prop_assert_eq!(read.is_ok(), mapped, "{:?}", read);
                    if mapped {
                        for (i, &got) in out.iter().enumerate() {
                            let at = a + i;
                            if let Some(&want) = model[&(at / g)].get(&(at % g)) {
                                prop_assert_eq!(got, want, "byte {}", at);
                            }
                        }
                    } else {
                        prop_assert_eq!(out, vec![0u8; n], "nothing of a refused read is handed out");
                    }
                }
            }
        }
        b.release_address(base);
        prop_assert_eq!(b.reserved_bytes(), 0);
    }
}
