//! The Ascend backend's operations on leases: aclnn operand views of
//! leases and `Step::aclnn`. They live in the arena so that the device
//! layer never depends on the arena (the arena depends on the devices).

use std::ffi::c_void;

use super::{Arena, Lease, Step};
use crate::device::Slab;
use crate::device::ascend::AscendDevice;
use crate::device::ascend::aclnn::{Op, TensorView};
use crate::dtype::Element;
use crate::error::{Error, Result};

impl<T: Element> Lease<'_, T, AscendDevice> {
    /// This lease's current view as an aclnn operand: its shape, row-major.
    pub fn tensor(&self) -> TensorView<'_> {
        TensorView::on_slab(
            std::ptr::from_ref(self.arena) as usize,
            self.slot.offset,
            self.slot.capacity,
            T::DTYPE,
            self.shape(),
        )
    }
}

impl Step<'_, AscendDevice> {
    /// Runs aclnn operator `op` on the device's stream, its operands views
    /// of this step's leases, with `workspace` (a leased `u8` buffer the
    /// plan sized with [`AscendDevice::workspace_size`]) when the operator
    /// asks for one. Asynchronous like a kernel launch: copies to the host
    /// wait for it. The crate allocates nothing on the device for it: an
    /// operator that needs more workspace than the lease holds fails with
    /// [`Error::WorkspaceTooSmall`] (what the runtime allocates for itself,
    /// such as tiling data, comes out of the device's headroom). A call seen
    /// before runs its cached, repeatable executor (second phase only).
    pub fn aclnn(
        &self,
        op: &Op<'_>,
        workspace: Option<&mut Lease<'_, u8, AscendDevice>>,
    ) -> Result<()> {
        let arena: &Arena<AscendDevice> = self.arena;
        let id = std::ptr::from_ref(arena) as usize;
        let base = arena.slab.base();
        let ws = match workspace {
            Some(l) if std::ptr::eq(l.arena, arena) => Some((
                base.wrapping_add(l.slot.offset).cast::<c_void>(),
                l.capacity() as u64,
            )),
            Some(l) => {
                return Err(Error::ArenaMismatch {
                    op: op.name(),
                    buffer: l.name().to_owned(),
                    other: "this step's arena".to_owned(),
                });
            }
            None => None,
        };
        arena.device.run_op(op, base, id, ws)
    }
}
