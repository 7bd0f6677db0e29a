//! GCAS (generation-compare-and-swap) on I-nodes and RDCSS on the root, after
//! Prokopec et al., "Concurrent Tries with Efficient Non-Blocking Snapshots".
//!
//! GCAS(in, old, new): store `new` (with `new.prev = Pending(old)`) in
//! `in.main` by CAS, then *commit*: re-read the root and, if its generation is
//! still `in.gen`, clear `new.prev` (committed; this CAS is the linearization
//! point); otherwise mark it `Failed(old)` and CAS `in.main` back to `old`.
//! Anyone who reads a main node with a non-null `prev` finishes this protocol
//! before using it (`gcas_read`), so nobody ever acts on an undecided node.
//! Read-only snapshots always decide "failed": a pending proposal on an I-node
//! a snapshot can reach was made under a generation that is no longer the
//! root's (taking the snapshot replaced the root), so it must not commit.
//!
//! RDCSS(root, old, expected_main, new): replace the root I-node `old` by
//! `new` only if `old.main` is still `expected_main`. A descriptor is CAS-ed
//! into the root slot; whoever finds it decides once (an atomic decision byte)
//! and swings the slot to `new` or back to `old`. A writer committing a GCAS on
//! the old root meanwhile aborts the descriptor, so a root write is never lost
//! between reading `expected_main` and swapping the root.
//!
//! # Memory ordering: two SeqCst fences
//!
//! Both protocols are a store-buffering pattern. A GCAS *writes* an I-node's
//! main and then *reads* the root; a snapshot *writes* the root and then
//! (deciding the RDCSS, reading the snapshot, or renewing a node in the new
//! generation) *reads* I-node mains. With acquire/release alone, C11 lets
//! both reads miss the other's write: the GCAS commits under the old
//! generation while the snapshot (or a renewing writer) still reads the main
//! node from before it, so the snapshot misses a write that later shows up
//! in it, or a renewal copies a stale main node and the committed write is
//! lost. (x86's locked CAS is a full fence, so it cannot happen there; the
//! C11 model allows it, and so may weaker hardware, e.g. ARM with RCpc
//! acquire loads.) The loom models (`tests/cstrie_loom.rs`) find exactly this
//! when the fences are removed: all three fail.
//!
//! So whoever decides a pending GCAS issues `fence(SeqCst)` after seeing the
//! proposal and before reading the root, and whoever handles an RDCSS
//! descriptor issues one after seeing it and before reading the old root's
//! main (and before returning a snapshot). Of any such pair of fences one
//! comes first in the SC order, so either the GCAS sees the swap (and fails,
//! or aborts the undecided swap) or every later reader of the new generation
//! sees the committed proposal. Everyone else learns of the new root by
//! acquire loads that happen after one of these fences.

use std::sync::Arc;

use super::atomic_arc::{AtomicArc, Guarded};
use super::node::{GcasPrev, INode, MainKind, MainNode};
use super::sync::epoch::Guard;
use super::sync::{fence, AtomicU8, Ordering};

/// The content of the root slot.
pub(crate) enum RootState {
    Stable(Arc<INode>),
    /// A snapshot is swapping the root.
    Swapping(RdcssDescriptor),
}

pub(crate) struct RdcssDescriptor {
    pub(crate) old: Arc<INode>,
    /// The main node `old` must still hold for the swap to happen.
    pub(crate) expected_main: Arc<MainNode>,
    /// The replacement root; its generation is fresh.
    pub(crate) new: Arc<INode>,
    /// `UNDECIDED`, then exactly one CAS moves it to `COMMITTED` or `ABORTED`
    /// and it never changes again; the root slot follows the decision.
    decision: AtomicU8,
}

const UNDECIDED: u8 = 0;
const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;

/// Whose rules decide a pending GCAS.
#[derive(Clone, Copy)]
pub(crate) enum Ctx<'t> {
    /// The live trie: commit iff the root's generation is the I-node's.
    Live(&'t AtomicArc<RootState>),
    /// A read-only snapshot: always roll back (see module docs).
    ReadOnly,
}

/// The current root I-node, completing any snapshot swap in progress. With
/// `abort`, an undecided swap is aborted rather than checked (used while
/// committing a GCAS, which may be a write to the old root itself).
pub(crate) fn read_root<'g>(root: &'g AtomicArc<RootState>, abort: bool, guard: &'g Guard) -> &'g INode {
    loop {
        let state = root.load(guard).expect("the root slot is never null");
        match state.get() {
            RootState::Stable(inode) => return inode,
            RootState::Swapping(_) => complete_rdcss(root, state, abort, guard),
        }
    }
}

/// Start an RDCSS. Returns whether the root was swapped to `new`.
pub(crate) fn rdcss_root<'g>(
    root: &'g AtomicArc<RootState>,
    old_state: Guarded<'_, RootState>,
    old: Arc<INode>,
    expected_main: Arc<MainNode>,
    new: Arc<INode>,
    guard: &'g Guard,
) -> bool {
    let descriptor = Arc::new(RootState::Swapping(RdcssDescriptor {
        old,
        expected_main,
        new,
        decision: AtomicU8::new(UNDECIDED),
    }));
    match root.compare_exchange(Some(old_state), Some(descriptor), guard) {
        Ok(installed) => {
            let installed = installed.expect("just installed");
            complete_rdcss(root, installed, false, guard);
            match installed.get() {
                RootState::Swapping(descriptor) => descriptor.decision.load(Ordering::Acquire) == COMMITTED,
                RootState::Stable(_) => unreachable!("installed a descriptor"),
            }
        }
        Err(_) => false,
    }
}

fn complete_rdcss<'g>(root: &'g AtomicArc<RootState>, state: Guarded<'_, RootState>, abort: bool, guard: &'g Guard) {
    let RootState::Swapping(descriptor) = state.get() else {
        return;
    };
    // Between seeing the descriptor (the root write) and reading `old`'s
    // main: pairs with the fence in `gcas_commit` (see the module docs).
    fence(Ordering::SeqCst);
    let mut decision = descriptor.decision.load(Ordering::Acquire);
    if decision == UNDECIDED {
        let proposal = if abort {
            ABORTED
        } else {
            let main = gcas_read(&descriptor.old, Ctx::Live(root), guard);
            if std::ptr::eq(main.as_ptr(), Arc::as_ptr(&descriptor.expected_main)) {
                COMMITTED
            } else {
                ABORTED
            }
        };
        decision = match descriptor
            .decision
            .compare_exchange(UNDECIDED, proposal, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => proposal,
            Err(actual) => actual,
        };
    }
    let next = if decision == COMMITTED {
        descriptor.new.clone()
    } else {
        descriptor.old.clone()
    };
    // Failure means a helper already swung the slot, to the same decision.
    let _ = root.compare_exchange(Some(state), Some(Arc::new(RootState::Stable(next))), guard);
}

/// The committed main node of `inode`, finishing any GCAS in progress on it.
pub(crate) fn gcas_read<'g>(inode: &'g INode, ctx: Ctx<'_>, guard: &'g Guard) -> Guarded<'g, MainNode> {
    let main = inode.main.load(guard).expect("a reachable I-node has a main node");
    if main.prev.load(guard).is_none() {
        main
    } else {
        gcas_commit(inode, main, ctx, guard)
    }
}

/// Whether `inode` (of the trie, or a level of a shared set) holds a T-node.
pub(crate) fn is_tombed(inode: &INode, ctx: Ctx<'_>, guard: &Guard) -> bool {
    matches!(gcas_read(inode, ctx, guard).get().kind, MainKind::Tomb)
}

/// Propose `kind` as the main node of `inode` in place of `old`. Returns
/// whether the proposal committed (false: retry from a fresh read).
pub(crate) fn gcas<'g>(
    inode: &'g INode,
    old: Guarded<'_, MainNode>,
    kind: MainKind,
    ctx: Ctx<'_>,
    guard: &'g Guard,
) -> bool {
    let proposal = Arc::new(MainNode {
        kind,
        prev: AtomicArc::new(Some(Arc::new(GcasPrev::Pending(old.to_arc())))),
    });
    match inode.main.compare_exchange(Some(old), Some(proposal), guard) {
        Ok(installed) => {
            let installed = installed.expect("just installed");
            gcas_commit(inode, installed, ctx, guard);
            installed.prev.load(guard).is_none()
        }
        Err(_) => false,
    }
}

fn gcas_commit<'g>(
    inode: &'g INode,
    mut main: Guarded<'g, MainNode>,
    ctx: Ctx<'_>,
    guard: &'g Guard,
) -> Guarded<'g, MainNode> {
    loop {
        let Some(prev) = main.prev.load(guard) else { return main };
        match prev.get() {
            GcasPrev::Failed(old) => match inode.main.compare_exchange(Some(main), Some(old.clone()), guard) {
                Ok(restored) => return restored.expect("restored a main node"),
                Err(_) => main = inode.main.load(guard).expect("a reachable I-node has a main node"),
            },
            GcasPrev::Pending(old) => {
                let generation_holds = match ctx {
                    Ctx::Live(root) => {
                        // Between seeing the proposal (the I-node write) and
                        // reading the root: pairs with the fence in
                        // `complete_rdcss` (see the module docs).
                        fence(Ordering::SeqCst);
                        read_root(root, true, guard).gen == inode.gen
                    }
                    Ctx::ReadOnly => false,
                };
                if generation_holds {
                    if main.prev.compare_exchange(Some(prev), None, guard).is_ok() {
                        return main;
                    }
                } else {
                    let failed = Arc::new(GcasPrev::Failed(old.clone()));
                    let _ = main.prev.compare_exchange(Some(prev), Some(failed), guard);
                    main = inode.main.load(guard).expect("a reachable I-node has a main node");
                }
            }
        }
    }
}
