//! A lock-free concurrent subscription trie with O(1) snapshots ("CS-trie").
//!
//! # Structure
//!
//! The Ctrie of Prokopec et al. (Scala's `TrieMap`), generalised to topic
//! patterns the way Workiva's matchbox does it:
//!
//! * **I-node** (`node::INode`): an indirection cell with an atomic pointer
//!   to its main node and a *generation*. I-nodes never move; every update is a
//!   GCAS of one I-node's main pointer, so concurrent updates elsewhere in the
//!   trie (above or below) are never lost.
//! * **C-node** (`node::CNode`): an immutable branch table. Literal words
//!   live in a persistent HAMT (`hamt.rs`, the Ctrie's own bitmap-indexed
//!   node, path-copied); the wildcards are the named fields `star` and `hash`
//!   (as in nats' `sublist.go`), never magic keys. Each branch holds the
//!   subscribers whose pattern ends with that word (one id inline, or from
//!   two ids on a shared set: see below) and
//!   optionally a child for longer patterns: an I-node, or a tail. The
//!   root C-node also holds the empty pattern's subscribers (zero words end
//!   at the root).
//! * **Tail** (`node::Tail`, the Ctrie's S-node): when exactly one longer
//!   pattern passes through a branch, the branch holds its remaining words
//!   (one text) and its subscribers instead of a chain of I-nodes, C-nodes
//!   and tables, one per word. Tails are immutable values inside C-nodes, so
//!   they change only by a GCAS of the C-node that holds them, carry no
//!   generation and are shared with snapshots as they are. A subscribe whose
//!   pattern leaves a tail's path first *expands* it: one GCAS replaces the
//!   tail by I-nodes for the words the two share, holding the same pairs
//!   (the tail's rest, from where they part, as a shorter tail), and the walk
//!   goes on into them. An expanded path stays expanded when patterns leave
//!   it (tombs prune it only once it is empty). A wide node of
//!   `tenant<i>.orders.#` is then one table slot and one tail per tenant:
//!   119 heap bytes per pair instead of 467 (`tests/cstrie_footprint.rs`
//!   counts them).
//! * **T-node** (`node::MainKind::Tomb`): when an unsubscribe leaves a
//!   non-root C-node with no branches, the I-node is tombed instead. A tomb is
//!   final: nothing is ever inserted below it, so an insert racing with the
//!   removal cannot be lost. Whoever meets a tomb (writers always, live
//!   lookups opportunistically) compresses it out of the parent; a parent left
//!   empty is tombed in turn, up the path, so unsubscribing everything returns
//!   the trie to a lone root ([`CsTrie::node_count`]).
//! * **Shared set** (`idset.rs`): a subscriber set of two ids or more is a
//!   Ctrie of its own, keyed by the ids' hashes, whose every 32-way level is an
//!   I-node written by the same GCAS. A subscribe to `audit.#` with a million
//!   subscribers copies the one level node its id lands in, not a path of
//!   tables and then the C-node, branch and tail that hold the set; the holder
//!   keeps pointing to the same root I-node. The holder replaces that pointer
//!   only to renew an old-generation root or to drop a tombed (emptied) set.
//!
//! # Complexity
//!
//! `k` = words in the pattern or key, `w` = distinct next words at a node
//! (its width), `s` = subscribers of one pattern, `n` = pairs; HAMT fan-out
//! 8 (`hamt.rs` says why not 32 or 16).
//!
//! | operation | cost |
//! |---|---|
//! | `subscribe` / `unsubscribe` | O(k · 8 · log8 w) slots copied for the path, or one level node (≤ 32 slots) of a shared set when the pattern is already held; plus retries under contention |
//! | expanding a tail of t words (a pattern leaves its path) | O(t): one GCAS, the shared words' I-nodes built at once |
//! | first write below a node after a snapshot | + O(8 · log8 w) per renewed level (one child copied, not the table), and one level node per renewed level of a shared set |
//! | `subscribe_many` of m pairs | O(m k) to parse, O(m log m) integer sorts, each touched C-node copied once (`bulk_load.rs`) |
//! | `snapshot` | O(1) |
//! | `lookup` (live or snapshot) | O(states visited · log8 w) probes (states: see Matching), plus O(t · key words) per tail met + sorting the result |
//! | `Snapshot::freeze` | O(n) walk + sorting the distinct words and subscribers (`freeze.rs`) |
//! | `len` (live) | O(1); `Snapshot::len` O(pairs) once, then cached |
//! | `subscriptions` / `topics` | O(pairs) plus sorting |
//!
//! Words and subscriber ids are [`SmolStr`]s: up to 23 bytes inline, so a
//! table slot holds its key without an allocation and copying it bumps no
//! reference count (the cost that dominated writes to wide nodes and hot
//! patterns before).
//!
//! # Memory layout
//!
//! At ten million pairs the trie is mostly branch tables, so their slot is
//! what a pair costs: a HAMT slot is as large as its largest variant (an
//! inline leaf), and an 8-way HAMT holds about half a node slot per key
//! besides its leaves, so every byte of the leaf is paid ~1.5 times. The
//! leaf is 48 bytes: its key (24, a `SmolStr`) and a [`Branch`](node::Branch)
//! of 24 (an enum of its subscriber set or its child; a branch with both is
//! rare and holds them behind a pointer), with no cached hash (`hamt.rs`
//! says why). It was 72 (a hash, and a branch struct of both halves).
//!
//! Below the slot, nearly every one-subscriber pattern of such a table ends
//! in a tail (`node::Tail`): one allocation of a 4-byte count, a 4-byte
//! length, the 24-byte subscriber set and the words' own bytes
//! (`thin_arc.rs`), behind one word, so a child (`node::Child`) stays 16
//! bytes and the branch 24. `k3.#` with one subscriber is 36 bytes (40 in
//! mimalloc's size classes); as an `Arc` (strong and weak counts) of a
//! `SmolStr` and a set it was 64.
//!
//! Issue 59's multi-tenant table (`tests/cstrie_footprint_shapes.rs`, live
//! heap at 2M pairs, bytes per pair; the mix was 179 with 72-byte slots):
//!
//! | shape | 48-byte slots, `Arc` tails | thin tails |
//! |---|---|---|
//! | hot (`hot.<n>.#`, ~1,000 subscribers each) | 71 | 71 |
//! | tenant (`t<x>.svc<y>.k<z>.#`, one each) | 164 | 136 |
//! | user (`u.<i>.*.alerts`, one each) | 143 | 119 |
//! | the mix (1 : 5 : 4) | 146 | 123 |
//!
//! What is left per one-subscriber pattern is mostly the slot (~72 bytes
//! with the HAMT's inner nodes) and the tail; a tenant's pattern also pays
//! a fifth of its tenant's I-node, main node and table.
//!
//! Copies are counted (`hamt::slots_copied`, test builds only, shared-set
//! levels included) and bounded in
//! `tests::writes_copy_a_logarithmic_number_of_slots_for_wide_nodes_and_hot_patterns`
//! and `tests::a_subscribe_into_a_shared_set_copies_one_node_however_big_the_set`.
//!
//! # Updates (GCAS) and snapshots (RDCSS)
//!
//! A writer reads the root I-node and its generation `g`, walks down, copies
//! the C-node it must change and proposes the copy by GCAS (`gcas.rs`), which
//! commits only if the root still has generation `g`. A snapshot replaces the
//! root I-node by a fresh-generation copy pointing to the same C-node, using
//! RDCSS so that the swap happens only if the root's main node did not change
//! meanwhile; the old root becomes the snapshot. That is O(1): nothing is
//! copied up front. Afterwards a writer about to descend into an I-node of
//! an older generation first replaces it, in its parent's C-node, by a copy
//! in the current generation holding the same main node ("copy on access"),
//! so the snapshot's nodes are never written again; pending GCASes on them
//! are rolled back.
//!
//! # Generation renewal, and the lost update it once caused
//!
//! Renewal copies exactly one child: the old-generation one the writer is
//! about to enter. That is safe because an I-node whose generation is not
//! the root's can never take a GCAS again (generations are never reused), so
//! its committed main node is final and may be shared by the copy.
//!
//! C-nodes here carry no generation (the Ctrie's do), so one C-node can hold
//! old-generation children beside current-generation ones added since the
//! last snapshot. Renewal used to copy *every* child of the C-node. A
//! current-generation sibling was then replaced by a copy of its main node
//! as read at that moment, while another writer could be between reading
//! that sibling and committing a GCAS on it: the GCAS still committed (the
//! sibling's generation was current) but on an I-node no longer in the trie,
//! so its subscribe or unsubscribe returned true and was lost. It needed two
//! writers (one to renew, one inside the sibling) and a snapshot (to leave
//! old-generation children behind). Renewing only the child being entered
//! leaves every current-generation I-node in place, so every GCAS that
//! commits lands in the live trie; see
//! `tests::a_write_racing_the_renewal_of_a_sibling_is_not_lost`.
//!
//! # Matching
//!
//! A lookup walks `(C-node, key position)` states with an explicit stack
//! (`traverse.rs`). `*` and literal edges consume one word; a `#` edge may
//! consume any number, and each C-node's `#` edge is taken at most once per
//! key position, so the walk is O(nodes x (key words + 1)) however many `#`
//! a pattern has (15 `#` against a 31-word key is ~500 states, not C(46, 15)).
//! A tail is matched against the key words left by a glob match with one
//! backtrack point (`traverse::tail_matches`): a lockstep pass when it has
//! no `#`. Results are deduplicated and sorted by subscriber id.
//!
//! # Memory reclamation
//!
//! Nodes are reference counted (`Arc`) because snapshots share C-nodes with
//! the live trie; the atomic slots (`atomic_arc.rs`) release their count
//! through `crossbeam_epoch`'s deferred destruction, so a pointer loaded under
//! a pinned guard stays valid. No locks anywhere on the update, lookup or
//! snapshot paths. Writers also help collection (`help_reclaim`), so churn
//! keeps the heap within a constant of the live content
//! (`tests/cstrie_memory.rs` counts it with a counting allocator).
//!
//! # Simplifications (deliberate)
//!
//! * Live lookups do not renew old-generation I-nodes (they only read;
//!   renewal is a write-side duty). Reading an old I-node is correct because
//!   its main node is final (see "Generation renewal").
//! * `len()` of the live trie is a counter updated after each successful
//!   update: exact when quiescent. `Snapshot::len` counts the frozen trie.
//!
//! # Concurrency contract
//!
//! `subscribe`/`unsubscribe` are linearizable (at the committing GCAS, or at
//! the read that found the pair already present/absent). `snapshot` is
//! linearizable (at the RDCSS decision). A live `lookup` is linearizable per
//! subscription but not as a whole: a pair present for the whole call is
//! returned, one absent for the whole call is not; for an atomic view of all
//! pairs, look up in a snapshot.
//!
//! # Modules, bottom up
//!
//! Each uses only those above it (`tests/test_native_workspace.py` fails on
//! a `use` that runs back up):
//!
//! | module | what |
//! |---|---|
//! | `sync`, `scratch` | the atomics and epochs (std or loom); huge-page scratch vectors |
//! | `atomic_arc`, `thin_arc`, `hamt` | the epoch-reclaimed atomic `Arc` slot; a header and a text behind one counted word (tails); the persistent branch tables |
//! | `node` | every node type: I-node, main node, C-node, tail, subscriber set, shared-set level |
//! | `gcas` | GCAS on I-nodes, RDCSS on the root |
//! | `idset` | shared subscriber sets, and the subscriber set's reads that walk one |
//! | `traverse`, `freeze` | lookups and walks; a snapshot laid out as a [`FrozenMatcher`] |
//! | this file | [`CsTrie`] and [`Snapshot`] |
//! | `bulk_load` | `CsTrie::subscribe_many` and friends |

mod atomic_arc;
mod bulk_load;
mod freeze;
mod gcas;
mod hamt;
mod idset;
mod node;
mod scratch;
mod sync;
mod thin_arc;
mod traverse;

use std::sync::{Arc, OnceLock};

use self::atomic_arc::AtomicArc;
pub use smol_str::SmolStr;

use self::gcas::{gcas, gcas_read, is_tombed, rdcss_root, read_root, Ctx, RootState};
use self::idset::SetWrite;
use self::node::{joined, Branch, CNode, Child, Generation, INode, MainKind, MainNode, SubscriberSet};
use self::sync::epoch::{self, Guard};
use self::sync::{AtomicIsize, AtomicU64, Ordering};
use crate::errors::BuildError;
use crate::frozen::FrozenMatcher;
use crate::topic::PatternWord;
use crate::word_hash::hash_word;

use self::traverse::{pattern_words_of, words_of};

/// Under `--cfg loom`: frees what a model retired (see `sync.rs`).
#[cfg(loom)]
pub use self::sync::epoch::reclaim_after_model;

/// Run the destructors of retired nodes whose readers have all unpinned, as
/// far as this thread can (a few epoch advances). Writers already do this as
/// they go; call it to bring the heap back to the live content at once, for
/// example before measuring it.
pub fn reclaim() {
    for _ in 0..8 {
        epoch::pin().flush();
    }
}

/// How many writes a thread makes between two extra collections.
const WRITES_PER_COLLECTION: u32 = 32;

/// Make each writer collect garbage in proportion to the garbage it retires.
/// crossbeam-epoch on its own collects at most 8 bags (512 retired nodes)
/// per 128 pins, and a churning writer retires more than 4 nodes per pin
/// (proposal, GCAS bookkeeping, tombs, compressed parents), so without this
/// the backlog grew by ~32 bytes per subscribe/unsubscribe cycle without
/// bound. One flush every 32 writes collects up to 8 more bags: more than
/// the writes in between can retire.
fn help_reclaim(guard: &Guard) {
    thread_local! {
        static WRITES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    let writes = WRITES.with(|writes| {
        let count = writes.get().wrapping_add(1);
        writes.set(count);
        count
    });
    if writes.is_multiple_of(WRITES_PER_COLLECTION) {
        guard.flush();
    }
}

/// The live, concurrently updatable subscription trie.
pub struct CsTrie {
    /// Always a `RootState`: a stable root I-node or a snapshot swap in
    /// progress. The root I-node is never tombed.
    root: AtomicArc<RootState>,
    /// Source of fresh generations; each root I-node takes a new one.
    next_generation: AtomicU64,
    /// Successful subscribes minus successful unsubscribes. Each change lands
    /// after its update's linearization point, so it can lag (and, in a race,
    /// transiently dip below zero); exact when quiescent.
    pairs: AtomicIsize,
}

/// What one walk of an update reports.
enum Attempt {
    /// Finished: whether the trie changed.
    Done(bool),
    /// A GCAS lost a race or the generation moved: start again from the root.
    Restart,
    /// The pair was removed from its shared set, but dead structure may be
    /// left on its path (a tombed level, or a tombed root still in its holder):
    /// a walk that only prunes must follow (see [`CsTrie::unsubscribe`]).
    RemovedSetLeft,
}

impl Default for CsTrie {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for CsTrie {
    /// Free the trie now, not whenever some later writer happens to collect:
    /// after a snapshot, the previous root (which shares everything not
    /// written since) sits in the epoch's deferred garbage, so without this a
    /// dropped million-pair trie was freed inside an unrelated later workload.
    fn drop(&mut self) {
        drop(self.root.take());
        reclaim();
    }
}

impl CsTrie {
    pub fn new() -> Self {
        let root = INode::new(0, MainNode::committed(MainKind::Branches(CNode::default())));
        CsTrie {
            root: AtomicArc::new(Some(Arc::new(RootState::Stable(root)))),
            next_generation: AtomicU64::new(1),
            pairs: AtomicIsize::new(0),
        }
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx::Live(&self.root)
    }

    /// The current root I-node, owned (completing any snapshot swap first).
    fn root_arc(&self, guard: &Guard) -> Arc<INode> {
        loop {
            let state = self.root.load(guard).expect("the root slot is never null");
            match state.get() {
                RootState::Stable(root) => return root.clone(),
                RootState::Swapping(_) => {
                    read_root(&self.root, false, guard);
                }
            }
        }
    }

    /// Add `subscriber` to `pattern`. Returns true if the pair was new
    /// (idempotent). Linearizes at the committing GCAS, or at the read that
    /// found the pair present.
    pub fn subscribe(&self, pattern: &str, subscriber: &str) -> bool {
        let words = pattern_words_of(pattern);
        let subscriber = hamt::smol(subscriber);
        loop {
            let guard = epoch::pin();
            if let Attempt::Done(added) = self.try_subscribe(&words, &subscriber, &guard) {
                if added {
                    self.pairs.fetch_add(1, Ordering::Relaxed);
                    // Only a committed write retires nodes: a present pair needs no collection.
                    help_reclaim(&guard);
                }
                return added;
            }
        }
    }

    /// Remove `subscriber` from `pattern`. Returns true if the pair was
    /// present (absent is a no-op). Linearizes like `subscribe`.
    pub fn unsubscribe(&self, pattern: &str, subscriber: &str) -> bool {
        let words = pattern_words_of(pattern);
        // Once the pair is gone but its shared set may still hold dead structure on the id's path
        // (`RemovedSetLeft`), the walks only prune. Left to the next writer of the same set, an
        // emptied set kept its branch, and so every node above it, alive for good when no such
        // writer came (a stress test ended with nodes left after removing every pair, 1 run in 7).
        let mut prune_only = false;
        loop {
            let guard = epoch::pin();
            match self.try_unsubscribe(&words, subscriber, prune_only, &guard) {
                Attempt::Done(removed) => {
                    let removed = removed || prune_only;
                    if removed {
                        self.pairs.fetch_sub(1, Ordering::Relaxed);
                        help_reclaim(&guard);
                    }
                    return removed;
                }
                Attempt::RemovedSetLeft => prune_only = true,
                Attempt::Restart => {}
            }
        }
    }

    /// Deduplicated subscribers whose patterns match `key` (sorted by text).
    /// Per-subscription linearizable (see the module docs); use
    /// `snapshot().lookup` for an atomic view.
    pub fn lookup(&self, key: &str) -> Vec<SmolStr> {
        let guard = epoch::pin();
        let root = read_root(&self.root, false, &guard);
        let help = |parent: &INode, word: PatternWord<'_>, tombed: &INode| {
            if parent.gen == root.gen {
                self.compress(root, parent, word, tombed, root.gen, &guard);
            }
        };
        traverse::matching(root, &words_of(key), self.ctx(), &guard, Some(&help))
    }

    /// Number of (pattern, subscriber) pairs; exact when no update is running.
    pub fn len(&self) -> usize {
        usize::try_from(self.pairs.load(Ordering::Relaxed)).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An O(1), read-only, linearizable view: later writes never change it.
    /// Linearizes at the RDCSS decision that swaps the root.
    pub fn snapshot(&self) -> Snapshot {
        loop {
            let guard = epoch::pin();
            let state = self.root.load(&guard).expect("the root slot is never null");
            let RootState::Stable(old_root) = state.get() else {
                read_root(&self.root, false, &guard);
                continue;
            };
            let expected_main = gcas_read(old_root, self.ctx(), &guard);
            let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
            let new_root = Arc::new(INode {
                main: AtomicArc::new(Some(expected_main.to_arc())),
                gen: generation,
            });
            if rdcss_root(
                &self.root,
                state,
                old_root.clone(),
                expected_main.to_arc(),
                new_root,
                &guard,
            ) {
                return Snapshot {
                    root: old_root.clone(),
                    pairs: Arc::new(OnceLock::new()),
                    size_hint: self.len(),
                };
            }
        }
    }

    /// Number of I-nodes reachable in the live trie (1 for an empty trie).
    /// For tests of pruning; not part of the stable API.
    #[doc(hidden)]
    pub fn node_count(&self) -> usize {
        let guard = epoch::pin();
        traverse::count_inodes(read_root(&self.root, false, &guard), self.ctx(), &guard)
    }

    fn try_subscribe(&self, words: &[PatternWord<'_>], subscriber: &SmolStr, guard: &Guard) -> Attempt {
        let ctx = self.ctx();
        let root = read_root(&self.root, false, guard);
        let start_gen = root.gen;
        let mut parent: Option<&INode> = None;
        let mut inode = root;
        let mut depth = 0;
        loop {
            let main = gcas_read(inode, ctx, guard);
            let Some(cnode) = main.get().cnode() else {
                // Tombed: it is no longer part of the trie; help remove it.
                if let Some(parent) = parent {
                    self.compress(root, parent, words[depth - 1], inode, start_gen, guard);
                }
                return Attempt::Restart;
            };
            let commit = |new: CNode| match gcas(inode, main, MainKind::Branches(new), ctx, guard) {
                true => Attempt::Done(true),
                false => Attempt::Restart,
            };
            let Some(&word) = words.get(depth) else {
                // Only the empty pattern ends at the root itself.
                let replace = |set| commit(cnode.with_empty_pattern(set));
                return self.add_to(cnode.empty_pattern(), subscriber, start_gen, guard, replace);
            };
            let rest = &words[depth + 1..];
            let Some(branch) = cnode.branch(word) else {
                let branch = new_branch(rest, subscriber);
                return commit(cnode.with_branch(word, Some(branch)));
            };
            if rest.is_empty() {
                let replace = |subscribers| {
                    let child = branch.child().cloned();
                    commit(cnode.with_branch(word, Some(Branch::new(subscribers, child))))
                };
                return self.add_to(branch.subscribers(), subscriber, start_gen, guard, replace);
            }
            let with_child = |child: Child| Some(Branch::new(branch.subscribers().clone(), Some(child)));
            match branch.child() {
                None => return commit(cnode.with_branch(word, with_child(new_tail(rest, subscriber)))),
                Some(Child::Tail(tail)) if tail.is(rest) => {
                    let replace = |set| commit(cnode.with_branch(word, with_child(Child::tail(tail.words(), set))));
                    return self.add_to(tail.subscribers(), subscriber, start_gen, guard, replace);
                }
                Some(Child::Tail(tail)) => {
                    // Another pattern below this branch: expand the path it shares
                    // with the tail into I-nodes first (the same pairs), then go on.
                    let expanded = Child::Node(tail.expand(rest, start_gen));
                    if !gcas(
                        inode,
                        main,
                        MainKind::Branches(cnode.with_branch(word, with_child(expanded))),
                        ctx,
                        guard,
                    ) {
                        return Attempt::Restart;
                    }
                }
                Some(Child::Node(child)) if child.gen == start_gen => {
                    parent = Some(inode);
                    inode = child;
                    depth += 1;
                }
                Some(Child::Node(_)) => {
                    if !self.renew_child(inode, main, cnode, word, branch, start_gen, guard) {
                        return Attempt::Restart;
                    }
                }
            }
        }
    }

    /// One walk of `unsubscribe(words, subscriber)`; with `prune_only`, it
    /// removes no id and only prunes dead structure from the shared set that
    /// `words` holds, on `subscriber`'s path, dropping the set if it is dead.
    fn try_unsubscribe(&self, words: &[PatternWord<'_>], subscriber: &str, prune_only: bool, guard: &Guard) -> Attempt {
        let ctx = self.ctx();
        let root = read_root(&self.root, false, guard);
        let start_gen = root.gen;
        // The I-nodes above `inode`; path[i] reached the next through words[i].
        let mut path: Vec<&INode> = Vec::new();
        let mut inode = root;
        loop {
            let depth = path.len();
            let main = gcas_read(inode, ctx, guard);
            let Some(cnode) = main.get().cnode() else {
                if let Some(parent) = path.last() {
                    self.compress(root, parent, words[depth - 1], inode, start_gen, guard);
                }
                return Attempt::Restart;
            };
            let Some(&word) = words.get(depth) else {
                let replace = |set| match gcas(
                    inode,
                    main,
                    MainKind::Branches(cnode.with_empty_pattern(set)),
                    ctx,
                    guard,
                ) {
                    true => Attempt::Done(true),
                    false => Attempt::Restart,
                };
                return self.remove_from(cnode.empty_pattern(), subscriber, prune_only, start_gen, guard, replace);
            };
            let Some(branch) = cnode.branch(word) else {
                return Attempt::Done(false);
            };
            // The pair is gone once `word`'s branch is (subscribers, child): commit
            // that (no branch when both are empty); a non-root C-node left empty is
            // tombed and pruned out of the path.
            let commit_removal = |subscribers: SubscriberSet, child: Option<Child>| {
                let remaining = (!subscribers.is_empty() || child.is_some()).then(|| Branch::new(subscribers, child));
                let new = cnode.with_branch(word, remaining);
                let tomb = depth > 0 && new.is_empty();
                let kind = if tomb { MainKind::Tomb } else { MainKind::Branches(new) };
                if !gcas(inode, main, kind, ctx, guard) {
                    return Attempt::Restart;
                }
                if tomb {
                    self.prune_path(root, &path, words, inode, start_gen, guard);
                }
                Attempt::Done(true)
            };
            if depth + 1 == words.len() {
                let child = branch.child().cloned().filter(|child| match child {
                    Child::Node(child) => !is_tombed(child, ctx, guard),
                    Child::Tail(_) => true,
                });
                let replace = |set| commit_removal(set, child.clone());
                return self.remove_from(branch.subscribers(), subscriber, prune_only, start_gen, guard, replace);
            }
            match branch.child() {
                None => return Attempt::Done(false),
                Some(Child::Tail(tail)) => {
                    if !tail.is(&words[depth + 1..]) {
                        return Attempt::Done(false);
                    }
                    let replace = |set: SubscriberSet| {
                        let child = (!set.is_empty()).then(|| Child::tail(tail.words(), set));
                        commit_removal(branch.subscribers().clone(), child)
                    };
                    return self.remove_from(tail.subscribers(), subscriber, prune_only, start_gen, guard, replace);
                }
                Some(Child::Node(child)) if child.gen == start_gen => {
                    path.push(inode);
                    inode = child;
                }
                Some(Child::Node(_)) => {
                    if !self.renew_child(inode, main, cnode, word, branch, start_gen, guard) {
                        return Attempt::Restart;
                    }
                }
            }
        }
    }

    /// Add `subscriber` to `set`, held in a C-node read under generation
    /// `gen`; `replace` commits that C-node with another set in its place.
    /// An immutable set is replaced by its successor. A shared set changes in
    /// place (`idset.rs`), and is replaced only when its root must be renewed
    /// into `gen`, or is tombed (then by a set of just `subscriber`).
    fn add_to(
        &self,
        set: &SubscriberSet,
        subscriber: &SmolStr,
        gen: Generation,
        guard: &Guard,
        replace: impl FnOnce(SubscriberSet) -> Attempt,
    ) -> Attempt {
        let Some(set_root) = set.shared() else {
            return match set.with(subscriber, gen) {
                None => Attempt::Done(false),
                Some(set) => replace(set),
            };
        };
        if let Some(renewed) = self.renewed_set(set_root, gen, guard) {
            let _ = replace(renewed);
            return Attempt::Restart;
        }
        match idset::insert(set_root, subscriber, hash_word(subscriber), gen, self.ctx(), guard) {
            SetWrite::Done(added) => Attempt::Done(added),
            // An insert never removes: only its restarts come back.
            SetWrite::Restart | SetWrite::Emptied | SetWrite::RemovedLeftover => Attempt::Restart,
            // Empty and final: the holder takes a new set of just this id.
            SetWrite::Tombed => replace(SubscriberSet::single(subscriber.clone())),
        }
    }

    /// Remove `subscriber` from `set`, like [`Self::add_to`]. A shared set
    /// left empty is dropped from its holder by `replace(Empty)`. When that
    /// loses a race, or the set's own compression stopped short, the pair is
    /// gone but dead structure may be left: [`Attempt::RemovedSetLeft`] has
    /// the caller walk again with `prune_only`, which removes no id and only
    /// prunes the set on `subscriber`'s path ([`idset::prune`]), dropping the
    /// set from its holder once it is dead.
    fn remove_from(
        &self,
        set: &SubscriberSet,
        subscriber: &str,
        prune_only: bool,
        gen: Generation,
        guard: &Guard,
        replace: impl FnOnce(SubscriberSet) -> Attempt,
    ) -> Attempt {
        let Some(set_root) = set.shared() else {
            return match set.without(subscriber).filter(|_| !prune_only) {
                None => Attempt::Done(false),
                Some(set) => replace(set),
            };
        };
        if let Some(renewed) = self.renewed_set(set_root, gen, guard) {
            let _ = replace(renewed);
            return Attempt::Restart;
        }
        let hash = hash_word(subscriber);
        if prune_only {
            // Dead structure is empty and final: pruning it changes no pair.
            return match idset::prune(set_root, hash, gen, self.ctx(), guard) {
                SetWrite::Tombed | SetWrite::Emptied => match replace(SubscriberSet::Empty) {
                    Attempt::Done(_) => Attempt::Done(false),
                    _ => Attempt::Restart,
                },
                SetWrite::Done(_) => Attempt::Done(false),
                SetWrite::Restart | SetWrite::RemovedLeftover => Attempt::Restart,
            };
        }
        match idset::remove(set_root, subscriber, hash, gen, self.ctx(), guard) {
            SetWrite::Done(removed) => Attempt::Done(removed),
            SetWrite::Restart => Attempt::Restart,
            SetWrite::RemovedLeftover => Attempt::RemovedSetLeft,
            SetWrite::Emptied => match replace(SubscriberSet::Empty) {
                Attempt::Done(_) => Attempt::Done(true),
                _ => Attempt::RemovedSetLeft,
            },
            SetWrite::Tombed => {
                let _ = replace(SubscriberSet::Empty);
                Attempt::Restart
            }
        }
    }

    /// A shared set's root in generation `gen`, when `set_root` is older: a
    /// copy holding the same main node, which is final (no GCAS can commit on
    /// an I-node of a dead generation).
    fn renewed_set(&self, set_root: &INode, gen: Generation, guard: &Guard) -> Option<SubscriberSet> {
        (set_root.gen != gen).then(|| {
            let main = gcas_read(set_root, self.ctx(), guard).to_arc();
            SubscriberSet::Shared(INode::new(gen, main))
        })
    }

    /// Replace the old-generation child under `word` of `inode`'s C-node by
    /// a copy in generation `gen` holding the same main node (the one
    /// old-generation child a writer is about to descend into, and nothing
    /// else: see "Generation renewal" in the module docs for why renewing a
    /// current-generation sibling would lose its concurrent writes).
    #[allow(clippy::too_many_arguments)]
    fn renew_child(
        &self,
        inode: &INode,
        main: atomic_arc::Guarded<'_, MainNode>,
        cnode: &CNode,
        word: PatternWord<'_>,
        branch: &Branch,
        gen: Generation,
        guard: &Guard,
    ) -> bool {
        let Some(Child::Node(child)) = branch.child() else {
            return false;
        };
        debug_assert_ne!(child.gen, gen, "only an old-generation child is renewed");
        // The child's generation is dead, so no GCAS on it can ever commit
        // again: its committed main node is final and safe to share.
        let child_main = gcas_read(child, self.ctx(), guard).to_arc();
        let renewed = Branch::new(
            branch.subscribers().clone(),
            Some(Child::Node(INode::new(gen, child_main))),
        );
        gcas(
            inode,
            main,
            MainKind::Branches(cnode.with_branch(word, Some(renewed))),
            self.ctx(),
            guard,
        )
    }

    /// After `tombed` (reached from `path.last()` through the word before it)
    /// became a T-node, compress it out of its parent; if that empties the
    /// parent, the parent is tombed and compressed out of its own parent.
    fn prune_path(
        &self,
        root: &INode,
        path: &[&INode],
        words: &[PatternWord<'_>],
        tombed: &INode,
        start_gen: Generation,
        guard: &Guard,
    ) {
        let mut tombed = tombed;
        for (level, parent) in path.iter().enumerate().rev() {
            if !self.compress(root, parent, words[level], tombed, start_gen, guard) {
                return;
            }
            tombed = parent;
        }
    }

    /// Remove the tombed child under `word` from `parent` (keeping the branch
    /// if it still has subscribers). Returns whether `parent` itself was
    /// tombed by this, because it became empty (never the root).
    fn compress(
        &self,
        root: &INode,
        parent: &INode,
        word: PatternWord<'_>,
        tombed: &INode,
        start_gen: Generation,
        guard: &Guard,
    ) -> bool {
        let ctx = self.ctx();
        loop {
            let main = gcas_read(parent, ctx, guard);
            let Some(cnode) = main.get().cnode() else { return false };
            let Some(branch) = cnode.branch(word) else { return false };
            match branch.child() {
                Some(Child::Node(child)) if std::ptr::eq(&**child, tombed) => {}
                _ => return false,
            }
            if !is_tombed(tombed, ctx, guard) {
                return false;
            }
            let remaining = match branch.subscribers().is_empty() {
                true => None,
                false => Some(Branch::new(branch.subscribers().clone(), None)),
            };
            let new = cnode.with_branch(word, remaining);
            let tomb = !std::ptr::eq(parent, root) && new.is_empty();
            let kind = if tomb { MainKind::Tomb } else { MainKind::Branches(new) };
            if gcas(parent, main, kind, ctx, guard) {
                return tomb;
            }
            if read_root(&self.root, false, guard).gen != start_gen {
                // A snapshot intervened; writers of the new generation will
                // meet the tomb and compress it there.
                return false;
            }
        }
    }
}

/// The branch for the first of the remaining words: `rest` empty means the
/// pattern ends here; otherwise a [`Tail`](node::Tail) of `rest` carries the
/// subscriber (no I-nodes until a second pattern shares the path).
fn new_branch(rest: &[PatternWord<'_>], subscriber: &SmolStr) -> Branch {
    match rest {
        [] => Branch::new(SubscriberSet::single(subscriber.clone()), None),
        rest => Branch::new(SubscriberSet::default(), Some(new_tail(rest, subscriber))),
    }
}

/// A tail of the (at least one) words `rest` holding `subscriber`.
fn new_tail(rest: &[PatternWord<'_>], subscriber: &SmolStr) -> Child {
    Child::tail(&joined(rest), SubscriberSet::single(subscriber.clone()))
}

/// A frozen, read-only view of a [`CsTrie`]. Cheap to clone; `Send + Sync`.
///
/// Every method reads the same state: the trie as it was at the snapshot's
/// linearization point. Reads never write, except to roll back a writer's
/// proposal that raced the snapshot and can no longer commit (see `gcas.rs`).
#[derive(Clone)]
pub struct Snapshot {
    /// The root I-node the trie had before the snapshot swapped it out. Its
    /// generation is no longer the live root's, so no write ever commits to
    /// any I-node reachable from here.
    root: Arc<INode>,
    /// `len()`, computed on first use.
    pairs: Arc<OnceLock<usize>>,
    /// The trie's pair count when the snapshot was taken: exact unless writes
    /// were running, and only ever used to size buffers.
    size_hint: usize,
}

impl Snapshot {
    /// Deduplicated subscribers whose patterns match `key` (sorted by text).
    pub fn lookup(&self, key: &str) -> Vec<SmolStr> {
        let guard = epoch::pin();
        traverse::matching(&self.root, &words_of(key), Ctx::ReadOnly, &guard, None)
    }

    /// Subscribers of exactly this pattern text (no wildcard matching), sorted.
    pub fn subscribers(&self, pattern: &str) -> Vec<SmolStr> {
        let guard = epoch::pin();
        traverse::exact(&self.root, &pattern_words_of(pattern), Ctx::ReadOnly, &guard)
    }

    /// Patterns held by `subscriber` (sorted).
    pub fn topics(&self, subscriber: &str) -> Vec<String> {
        let guard = epoch::pin();
        let mut topics = Vec::new();
        traverse::for_each_pattern(&self.root, Ctx::ReadOnly, &guard, |pattern, ids| {
            if ids.contains(subscriber, Ctx::ReadOnly, &guard) {
                topics.push(pattern.to_owned());
            }
        });
        topics.sort_unstable();
        topics
    }

    /// Every (pattern, subscriber) pair (sorted).
    pub fn subscriptions(&self) -> Vec<(String, SmolStr)> {
        let guard = epoch::pin();
        let mut pairs = Vec::new();
        traverse::for_each_pattern(&self.root, Ctx::ReadOnly, &guard, |pattern, ids| {
            ids.for_each(Ctx::ReadOnly, &guard, |id, _| {
                pairs.push((pattern.to_owned(), id.clone()))
            });
        });
        pairs.sort_unstable();
        pairs
    }

    /// The compact read-only matcher holding exactly this snapshot's pairs
    /// (see `freeze.rs`): one walk borrowing the trie's texts and hashes, then
    /// only the distinct words and subscribers are sorted, never the pairs,
    /// and no pattern text is built.
    pub fn freeze(&self) -> Result<FrozenMatcher, BuildError> {
        let guard = epoch::pin();
        let pairs = self.pairs.get().copied().unwrap_or(self.size_hint);
        freeze::freeze(&self.root, Ctx::ReadOnly, &guard, pairs)
    }

    /// Number of (pattern, subscriber) pairs in this snapshot (exact).
    pub fn len(&self) -> usize {
        *self.pairs.get_or_init(|| {
            let guard = epoch::pin();
            let mut count = 0;
            traverse::for_each_pattern(&self.root, Ctx::ReadOnly, &guard, |_, ids| {
                count += ids.count(Ctx::ReadOnly, &guard)
            });
            count
        })
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
