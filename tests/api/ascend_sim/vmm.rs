//! Virtual memory management as the simulated runtime holds it to CANN's
//! rules (`kernels/sim/vmm.cpp`; hicann/runtime
//! `docs/zh/api_ref/11-04_virtual_memory_management.md`): the calls with
//! `acl_rt.h`'s declarations, each documented refusal, physical memory
//! charged in whole pages and reported by `aclrtGetMemInfo`, copies,
//! memsets and kernels refused on unmapped bytes of a range, and
//! `AscendDevice`'s mapped ranges on top.

use std::ffi::{c_int, c_void};

use super::open;
use crate::support::sim::{self, OOM, devices, sim};
use tensor_arena::device::ascend::abi::Tiling;
use tensor_arena::device::ascend::sys::{
    ACL_HBM_MEM_HUGE, ACL_MEM_ALLOCATION_TYPE_PINNED, ACL_MEM_HANDLE_TYPE_NONE,
    ACL_MEM_LOCATION_TYPE_DEVICE, AclrtMemLocation, AclrtPhysicalMemProp, Loaded, VmmFns,
};
use tensor_arena::{Error, Result};

const MIB: usize = 1 << 20;
const G: usize = 2 * MIB;
/// `ACL_ERROR_INVALID_PARAM`.
const INVALID: i32 = 100_000;
/// `ACL_ERROR_RT_AICORE_EXCEPTION`.
const AICORE: i32 = 507_015;

type Ptr = *mut c_void;

/// The simulation's entry points with `acl_rt.h`'s declarations.
struct Acl {
    granularity: unsafe extern "C" fn(*mut AclrtPhysicalMemProp, c_int, *mut usize) -> i32,
    reserve: unsafe extern "C" fn(*mut Ptr, usize, usize, Ptr, u64) -> i32,
    release: unsafe extern "C" fn(Ptr) -> i32,
    malloc_physical: unsafe extern "C" fn(*mut Ptr, usize, *const AclrtPhysicalMemProp, u64) -> i32,
    free_physical: unsafe extern "C" fn(Ptr) -> i32,
    map: unsafe extern "C" fn(Ptr, usize, usize, Ptr, u64) -> i32,
    unmap: unsafe extern "C" fn(Ptr) -> i32,
    memcpy: unsafe extern "C" fn(Ptr, usize, *const c_void, usize, c_int) -> i32,
    memset: unsafe extern "C" fn(Ptr, usize, i32, usize) -> i32,
    mem_info: unsafe extern "C" fn(c_int, *mut usize, *mut usize) -> i32,
}

fn acl() -> Acl {
    let s = sim();
    // SAFETY: each type is the declaration of `acl/acl_rt.h` (C enums as
    // `int`), as kernels/sim/vmm.cpp and runtime.cpp define them.
    unsafe {
        Acl {
            granularity: s.function("aclrtMemGetAllocationGranularity"),
            reserve: s.function("aclrtReserveMemAddress"),
            release: s.function("aclrtReleaseMemAddress"),
            malloc_physical: s.function("aclrtMallocPhysical"),
            free_physical: s.function("aclrtFreePhysical"),
            map: s.function("aclrtMapMem"),
            unmap: s.function("aclrtUnmapMem"),
            memcpy: s.function("aclrtMemcpy"),
            memset: s.function("aclrtMemset"),
            mem_info: s.function("aclrtGetMemInfo"),
        }
    }
}

fn prop(attr: c_int, device: u32) -> AclrtPhysicalMemProp {
    AclrtPhysicalMemProp {
        handle_type: ACL_MEM_HANDLE_TYPE_NONE,
        allocation_type: ACL_MEM_ALLOCATION_TYPE_PINNED,
        mem_attr: attr,
        location: AclrtMemLocation {
            id: device,
            kind: ACL_MEM_LOCATION_TYPE_DEVICE,
        },
        reserve: 0,
    }
}

impl Acl {
    fn reserve(&self, size: usize) -> (i32, Ptr) {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out pointer.
        let rc = unsafe { (self.reserve)(&mut p, size, 0, std::ptr::null_mut(), 0) };
        (rc, p)
    }

    fn physical(&self, size: usize, prop: &AclrtPhysicalMemProp, flags: u64) -> (i32, Ptr) {
        let mut h: Ptr = std::ptr::null_mut();
        // SAFETY: a valid out pointer and properties that outlive the call.
        let rc = unsafe { (self.malloc_physical)(&mut h, size, prop, flags) };
        (rc, h)
    }

    fn map(&self, at: Ptr, size: usize, h: Ptr) -> i32 {
        // SAFETY: the simulation checks every argument; nothing in this
        // process uses the addresses but these tests.
        unsafe { (self.map)(at, size, 0, h, 0) }
    }

    fn free_bytes(&self) -> usize {
        let (mut free, mut total) = (0, 0);
        // SAFETY: valid out pointers; ACL_HBM_MEM.
        assert_eq!(unsafe { (self.mem_info)(1, &mut free, &mut total) }, 0);
        free
    }
}

fn at(p: Ptr, off: usize) -> Ptr {
    p.cast::<u8>().wrapping_add(off).cast()
}

#[test]
fn the_granularity_follows_the_memory_attribute() {
    let _dev = open(sim::config().device(devices::VMM));
    let a = acl();
    for (attr, want) in [(4, G), (5, G), (13, G), (10, 1 << 30), (14, 1 << 30)] {
        let mut p = prop(attr, devices::VMM as u32);
        let mut g = 0usize;
        // SAFETY: valid pointers; MINIMUM.
        assert_eq!(unsafe { (a.granularity)(&mut p, 0, &mut g) }, 0);
        assert_eq!(g, want, "memAttr {attr}");
    }
    let mut p = prop(4, 0);
    let mut g = 0usize;
    // SAFETY: as above; an option outside the enum.
    assert_eq!(unsafe { (a.granularity)(&mut p, 7, &mut g) }, INVALID);
    // SAFETY: a null output.
    let rc = unsafe { (a.granularity)(&mut p, 0, std::ptr::null_mut()) };
    assert_eq!(rc, INVALID);
    sim().reset();
}

#[test]
fn reservations_refuse_what_the_pages_reserve() {
    let dev = open(sim::config().device(devices::VMM));
    let a = acl();
    let mut p: Ptr = std::ptr::null_mut();
    // SAFETY: valid out pointers throughout; the simulation checks the rest.
    unsafe {
        assert_eq!(
            (a.reserve)(&mut p, 0, 0, std::ptr::null_mut(), 0),
            INVALID,
            "size 0"
        );
        assert_eq!(
            (a.reserve)(&mut p, G, G, std::ptr::null_mut(), 0),
            INVALID,
            "alignment must be 0"
        );
        let fixed = 0x1000_0000_0000usize as Ptr;
        assert_eq!(
            (a.reserve)(&mut p, G, 0, fixed, 0),
            INVALID,
            "expectPtr must be null"
        );
        assert_eq!(
            (a.reserve)(&mut p, G + 4096, 0, std::ptr::null_mut(), 0),
            INVALID,
            "whole pages"
        );
        assert_eq!((a.release)(0x1234 as Ptr), INVALID, "not a range");
    }
    let (rc, base) = a.reserve(4 * G);
    assert_eq!(rc, 0);
    assert_eq!(base as usize % G, 0, "2 MiB aligned");
    // SAFETY: the base of the range just reserved.
    assert_eq!(unsafe { (a.release)(base) }, 0);
    // SAFETY: released already.
    assert_eq!(unsafe { (a.release)(base) }, INVALID);
    drop(dev);
    sim().assert_clean();
}

#[test]
fn physical_memory_is_charged_in_whole_pages_and_refuses_unsupported_properties() {
    let s = sim();
    let id = devices::VMM_CAPACITY;
    let device = open(sim::config().device(id));
    let a = acl();
    let did = id as u32;
    // The documented refusals: flags, handle and allocation types, the DDR
    // attributes (host only), P2P 1 GiB pages (not on A2), host location.
    assert_eq!(a.physical(G, &prop(ACL_HBM_MEM_HUGE, did), 1).0, INVALID);
    let mut p = prop(ACL_HBM_MEM_HUGE, did);
    p.handle_type = 1;
    assert_eq!(a.physical(G, &p, 0).0, INVALID);
    let mut p = prop(ACL_HBM_MEM_HUGE, did);
    p.allocation_type = 1;
    assert_eq!(a.physical(G, &p, 0).0, INVALID);
    for attr in [0, 1, 2, 3, 6, 7, 11, 17, 18] {
        assert_eq!(
            a.physical(G, &prop(attr, did), 0).0,
            INVALID,
            "memAttr {attr}"
        );
    }
    let mut p = prop(ACL_HBM_MEM_HUGE, did);
    p.location.kind = 0;
    assert_eq!(
        a.physical(G, &p, 0).0,
        INVALID,
        "host memory is not simulated"
    );
    assert_eq!(a.physical(0, &prop(ACL_HBM_MEM_HUGE, did), 0).0, INVALID);

    // One byte takes a whole 2 MiB page, which aclrtGetMemInfo reports.
    let free = a.free_bytes();
    let in_use = s.device_counter(id, "in_use");
    let (rc, h) = a.physical(1, &prop(ACL_HBM_MEM_HUGE, did), 0);
    assert_eq!(rc, 0);
    assert_eq!(s.device_counter(id, "in_use") - in_use, G as u64);
    assert_eq!(free - a.free_bytes(), G);
    assert_eq!(s.counter("live_physical_handles"), 1);
    // SAFETY: the handle just made, freed once.
    assert_eq!(unsafe { (a.free_physical)(h) }, 0);
    assert_eq!(a.free_bytes(), free);
    // SAFETY: freed already.
    assert_eq!(unsafe { (a.free_physical)(h) }, INVALID);

    // Out of memory: the device's free bytes, not the host's.
    s.set_system_reserved(id, 0);
    s.set_capacity(id, in_use + 3 * G as u64);
    let (rc, h1) = a.physical(2 * G, &prop(ACL_HBM_MEM_HUGE, did), 0);
    assert_eq!(rc, 0);
    assert_eq!(a.physical(2 * G, &prop(ACL_HBM_MEM_HUGE, did), 0).0, OOM);
    s.fail_malloc_physical(1, 507_899);
    assert_eq!(
        a.physical(G, &prop(ACL_HBM_MEM_HUGE, did), 0).0,
        507_899,
        "injected"
    );
    // SAFETY: live and unmapped.
    assert_eq!(unsafe { (a.free_physical)(h1) }, 0);
    s.reset_device(id);
    s.reset();
    drop(device);
    s.assert_clean();
}

#[test]
fn mappings_stay_inside_ranges_once_each_with_the_handles_size() {
    let s = sim();
    let dev = open(sim::config().device(devices::VMM));
    let a = acl();
    let did = devices::VMM as u32;
    let (_, base) = a.reserve(4 * G);
    let (_, h) = a.physical(G, &prop(ACL_HBM_MEM_HUGE, did), 0);
    let (_, h2) = a.physical(2 * G, &prop(ACL_HBM_MEM_HUGE, did), 0);
    assert_eq!(
        a.map(base, 2 * G, h),
        INVALID,
        "size must equal the handle's"
    );
    assert_eq!(
        a.map(at(base, 4096), G, h),
        INVALID,
        "aligned to the granularity"
    );
    assert_eq!(a.map(at(base, 4 * G), G, h), INVALID, "past the range");
    assert_eq!(
        a.map(at(base, 3 * G), 2 * G, h2),
        INVALID,
        "runs past the range"
    );
    let host = vec![0u8; 4 * G];
    assert_eq!(
        a.map(host.as_ptr() as Ptr, G, h),
        INVALID,
        "not a reserved range"
    );
    // SAFETY: offset and flags must be 0.
    assert_eq!(unsafe { (a.map)(base, G, G, h, 0) }, INVALID);
    // SAFETY: as above.
    assert_eq!(unsafe { (a.map)(base, G, 0, h, 1) }, INVALID);
    assert_eq!(s.counter("aclrtMapMem"), 0);

    assert_eq!(a.map(at(base, G), G, h), 0);
    assert_eq!(a.map(at(base, 3 * G), G, h), INVALID, "a handle maps once");
    assert_eq!(
        a.map(base, 2 * G, h2),
        INVALID,
        "overlaps the mapping at +G"
    );
    assert_eq!(s.counter("double_maps"), 1);
    assert_eq!(a.map(at(base, 2 * G), 2 * G, h2), 0, "adjacent");
    // SAFETY: the range still has mappings: refused.
    assert_eq!(unsafe { (a.release)(base) }, INVALID);
    assert_eq!(s.counter("release_with_mappings"), 1);
    // SAFETY: nothing was mapped at the base, nor inside a mapping's start.
    unsafe {
        assert_eq!((a.unmap)(base), INVALID);
        assert_eq!((a.unmap)(at(base, G + 4096)), INVALID);
        assert_eq!((a.unmap)(at(base, G)), 0);
        assert_eq!((a.unmap)(at(base, G)), INVALID, "unmapped twice");
        assert_eq!((a.unmap)(at(base, 2 * G)), 0);
        assert_eq!((a.free_physical)(h), 0);
        assert_eq!((a.free_physical)(h2), 0);
        assert_eq!((a.release)(base), 0);
    }
    s.reset();
    drop(dev);
    s.assert_clean();
}

#[test]
fn copies_reach_mapped_bytes_only_and_a_handle_keeps_its_bytes() {
    let s = sim();
    let dev = open(sim::config().device(devices::VMM));
    let a = acl();
    let did = devices::VMM as u32;
    let (_, base) = a.reserve(4 * G);
    let (_, h0) = a.physical(G, &prop(ACL_HBM_MEM_HUGE, did), 0);
    let (_, h1) = a.physical(G, &prop(ACL_HBM_MEM_HUGE, did), 0);
    assert_eq!(a.map(base, G, h0), 0);
    assert_eq!(a.map(at(base, G), G, h1), 0);
    // Across the two mappings: contiguous addresses, two handles.
    let data: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    let edge = at(base, G - 100);
    // SAFETY: the destination lies in mapped memory; `data` holds 200 bytes.
    let rc = unsafe { (a.memcpy)(edge, 200, data.as_ptr().cast(), 200, 1) };
    assert_eq!(rc, 0);
    let mut back = vec![0u8; 200];
    // SAFETY: as above, device to host.
    let rc = unsafe { (a.memcpy)(back.as_mut_ptr().cast(), 200, edge, 200, 2) };
    assert_eq!(rc, 0);
    assert_eq!(back, data);

    // The third granule is reserved, not mapped: every access is refused.
    let hole = at(base, 2 * G + 8);
    let mut one = [0u8; 1];
    // SAFETY: the simulation refuses before touching anything.
    unsafe {
        assert_eq!((a.memcpy)(one.as_mut_ptr().cast(), 1, hole, 1, 2), INVALID);
        assert_eq!((a.memcpy)(hole, 1, data.as_ptr().cast(), 1, 1), INVALID);
        assert_eq!((a.memset)(hole, 1, 0, 1), INVALID);
        // A copy that starts mapped and runs into the hole.
        assert_eq!(
            (a.memcpy)(at(base, 2 * G - 4), 8, data.as_ptr().cast(), 8, 1),
            INVALID
        );
        assert_eq!((a.memcpy)(hole, 1, edge, 1, 3), INVALID, "device to device");
    }
    let messages = s.recent_messages();
    assert!(
        messages.contains("not mapped") && messages.contains("aclrtMemcpy"),
        "{messages}"
    );
    assert_eq!(s.counter("unmapped_accesses"), 5);
    assert_eq!(
        s.counter("bad_device_pointers"),
        4,
        "the copies (aclrtMemset refuses uncounted)"
    );

    // Unmapped, the bytes are gone from the address; mapped again
    // elsewhere, the handle still holds them.
    // SAFETY: mapped at `base` with h0; no work is queued.
    assert_eq!(unsafe { (a.unmap)(base) }, 0);
    // SAFETY: refused: unmapped now.
    let rc = unsafe { (a.memcpy)(back.as_mut_ptr().cast(), 100, edge, 100, 2) };
    assert_eq!(rc, INVALID);
    assert_eq!(a.map(at(base, 3 * G), G, h0), 0);
    let moved = at(base, 4 * G - 100);
    // SAFETY: mapped again at +3G.
    let rc = unsafe { (a.memcpy)(back.as_mut_ptr().cast(), 100, moved, 100, 2) };
    assert_eq!(rc, 0);
    assert_eq!(back[..100], data[..100]);

    // Freeing a mapped handle succeeds, but the memory stays (and stays
    // charged) until it is unmapped (11-04, aclrtFreePhysical).
    let in_use = s.counter("physical_bytes_in_use");
    assert_eq!(in_use, 2 * G as u64);
    // SAFETY: live handles; unmapped and freed once each below.
    unsafe {
        assert_eq!((a.free_physical)(h0), 0);
        assert_eq!(s.counter("free_physical_while_mapped"), 1);
        assert_eq!(s.counter("physical_bytes_in_use"), in_use);
        assert_eq!(
            (a.memcpy)(back.as_mut_ptr().cast(), 100, moved, 100, 2),
            0,
            "still mapped"
        );
        assert_eq!(a.map(base, G, h0), INVALID, "but no longer mappable");
        assert_eq!((a.unmap)(at(base, 3 * G)), 0);
        assert_eq!(s.counter("physical_bytes_in_use"), in_use - G as u64);
        assert_eq!((a.unmap)(at(base, G)), 0);
        assert_eq!((a.free_physical)(h1), 0);
        assert_eq!((a.release)(base), 0);
    }
    // The check a real runtime would not report: counted, then cleared.
    assert_eq!(s.counter("free_physical_while_mapped"), 1);
    s.reset();
    drop(dev);
    s.assert_clean();
}

#[test]
fn kernels_run_on_mapped_bytes_and_an_unmapped_operand_is_an_aicore_exception() {
    let s = sim();
    let dev = open(sim::config().device(devices::VMM));
    let a = acl();
    let (_, base) = a.reserve(2 * G);
    let (_, h) = a.physical(G, &prop(ACL_HBM_MEM_HUGE, devices::VMM as u32), 0);
    assert_eq!(a.map(base, G, h), 0);
    let values: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let tiling = Tiling::new(64, 1).expect("a valid tiling");
    type MulScalar = unsafe extern "C" fn(u32, Ptr, Ptr, f32, u64, u64, u32) -> u32;
    let sync: unsafe extern "C" fn(Ptr) -> i32 =
        // SAFETY: `aclError aclrtSynchronizeStream(aclrtStream)`.
        unsafe { s.function("aclrtSynchronizeStream") };
    // SAFETY: the kernel library next to the simulated runtime (the
    // instance the device loaded), whose stubs have CANN's generated
    // signature: (numBlocks, stream, x, s, totalLength, blockLength,
    // tileLength); `base` holds 64 mapped f32, `values` 256 bytes; the
    // default stream of this thread's device.
    let (on_mapped, on_hole) = unsafe {
        let lib = libloading::Library::new(sim::kernel_lib()).expect("the kernel library loads");
        let f: MulScalar = *lib
            .get(b"aclrtlaunch_ta_mul_scalar_f32")
            .expect("a launch stub");
        assert_eq!((a.memcpy)(base, 256, values.as_ptr().cast(), 256, 1), 0);
        let run = |x: Ptr| {
            f(
                tiling.num_blocks,
                std::ptr::null_mut(),
                x,
                2.0,
                tiling.total_length,
                tiling.block_length,
                tiling.tile_length,
            )
        };
        let on_mapped = run(base);
        assert_eq!(sync(std::ptr::null_mut()), 0);
        (on_mapped, run(at(base, G)))
    };
    assert_eq!(on_mapped, 0, "a kernel on mapped memory runs");
    let mut back = vec![0f32; 64];
    // SAFETY: 256 mapped bytes to a 256-byte host buffer; the stream is
    // drained.
    let rc = unsafe { (a.memcpy)(back.as_mut_ptr().cast(), 256, base, 256, 2) };
    assert_eq!(rc, 0);
    assert!(
        back.iter().zip(&values).all(|(b, v)| *b == 2.0 * v),
        "{back:?}"
    );
    assert_eq!(on_hole as i32, AICORE, "the second granule is not mapped");
    assert_eq!(s.counter("bad_kernel_operands"), 1);
    assert_eq!(s.counter("kernel_launches"), 1, "only the first ran");
    assert!(s.recent_messages().contains("not mapped"));
    // SAFETY: mapped at `base`; nothing queued; then the handle and range.
    unsafe {
        assert_eq!((a.unmap)(base), 0);
        assert_eq!((a.free_physical)(h), 0);
        assert_eq!((a.release)(base), 0);
    }
    s.reset();
    drop(dev);
    s.assert_clean();
}

#[test]
fn the_device_maps_granules_and_releases_what_it_holds_when_dropped() -> Result<()> {
    let s = sim();
    let id = devices::VMM;
    let dev = open(sim::config().device(id));
    let g = dev.map_granularity()?;
    assert_eq!(g, G);
    let base = dev.reserve_address(4 * g)?;
    dev.map(base + g, 2 * g)?;
    assert_eq!(
        s.counter("aclrtMallocPhysical"),
        2,
        "one handle per granule"
    );
    assert_eq!(dev.mapped_bytes(), 2 * g);
    assert_eq!(s.counter("physical_bytes_in_use"), 2 * g as u64);
    let data: Vec<u8> = (0..64u8).collect();
    dev.write_mapped(base + 2 * g - 32, &data)?;
    let mut back = vec![0u8; 64];
    dev.read_mapped(base + 2 * g - 32, &mut back)?;
    assert_eq!(back, data);
    dev.fill_mapped(base + g, 16, 9)?;
    dev.read_mapped(base + g, &mut back[..16])?;
    assert_eq!(back[..16], [9u8; 16]);
    for e in [
        dev.read_mapped(base, &mut back).unwrap_err(),
        dev.map(base + 2 * g, g).unwrap_err(),
        dev.unmap(base, g).unwrap_err(),
        dev.reserve_address(g + 1).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Device { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("bytes") && text.contains("ascend:6"),
            "{text}"
        );
    }
    dev.unmap(base + g, g)?;
    assert!(dev.read_mapped(base + g, &mut back[..1]).is_err());
    assert_eq!(dev.release_address(0x1000)?, None, "not a range");
    // Dropped with a granule still mapped: unmapped, freed and released.
    assert_eq!(s.counter("live_physical_handles"), 1);
    drop(dev);
    assert_eq!(s.counter("aclrtUnmapMem"), 2);
    assert_eq!(s.counter("aclrtReleaseMemAddress"), 1);
    s.assert_clean();
    Ok(())
}

#[test]
fn a_runtime_without_the_virtual_memory_calls_names_the_first_missing() {
    // The kernel library exports none of them: resolving the table from
    // it is what a runtime that lacks them gives. The device loads the
    // runtime into the global scope first, where the kernel library's
    // constructor finds `aclrtGetSocName` (as with CANN's).
    let dev = open(sim::config().device(devices::VMM));
    let path = sim::kernel_lib();
    // SAFETY: the simulated kernel library, loaded already by the device
    // (its constructor only checks the SoC).
    let lib = unsafe { tensor_arena::device::ascend::sys::open(&path, false) }.expect("loads");
    let loaded = Loaded { lib, path };
    // SAFETY: the table is dropped right away and never called.
    let missing = unsafe { VmmFns::resolve(&loaded) }.err();
    assert_eq!(missing, Some("aclrtMemGetAllocationGranularity"));
    drop(dev);
}
