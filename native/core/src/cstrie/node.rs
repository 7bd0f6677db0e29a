//! The node kinds of the CS-trie: I-nodes, main nodes (C-node, T-node, or a
//! level of a shared subscriber set), the immutable branch tables inside
//! C-nodes and the subscriber sets they hold. Types and the operations that
//! need nothing but them; GCAS (`gcas.rs`) and the shared sets' walks
//! (`idset.rs`) sit above this module and work on these types.

use std::sync::Arc;

use super::atomic_arc::AtomicArc;
use super::hamt::{smol, Hamt, Leaf, SmolStr};
use super::thin_arc::ThinArc;
use crate::topic::PatternWord;

/// A generation stamp. Each root I-node gets a fresh one (a per-trie counter),
/// so equality means "created for the same root".
pub(crate) type Generation = u64;

/// An indirection node: it stays in place while the main node it points to
/// is replaced by GCAS, which is what keeps concurrent updates below and above
/// it from being lost.
pub(crate) struct INode {
    /// The main node. Never null while the I-node is reachable. Changed only
    /// by GCAS (see `gcas.rs`); once a *committed* T-node is stored here it is
    /// never replaced (the T-node invariant).
    pub(crate) main: AtomicArc<MainNode>,
    /// Writers modify this I-node only while the root carries the same
    /// generation; otherwise they first copy it into the root's generation.
    pub(crate) gen: Generation,
}

/// What an I-node points to, plus the GCAS bookkeeping for that pointer.
/// `repr(C)` with `prev` first: every read checks `prev` before using
/// `kind`, so it must share the first cache line with the C-node's tables.
#[repr(C)]
pub(crate) struct MainNode {
    /// GCAS state: null once committed (and then forever null), otherwise the
    /// proposal's predecessor, marked `Pending` or `Failed`. Set before the
    /// node is published; never set back to non-null.
    pub(crate) prev: AtomicArc<GcasPrev>,
    pub(crate) kind: MainKind,
}

/// The state of an uncommitted GCAS proposal.
pub(crate) enum GcasPrev {
    /// Not yet decided; the predecessor main node is kept to roll back to.
    Pending(Arc<MainNode>),
    /// Decided against (the root generation moved on): the I-node must be
    /// rolled back to this predecessor.
    Failed(Arc<MainNode>),
}

pub(crate) enum MainKind {
    Branches(CNode),
    /// One level of a shared subscriber set (`idset.rs`). Only the I-nodes of
    /// such sets hold it; the trie's own I-nodes hold C-nodes and T-nodes.
    Ids(IdNode),
    /// T-node: the I-node lost its last subscription and is dead; its parent
    /// must drop the reference ("compression"). Carries nothing because a
    /// subscription trie only tombs empty nodes.
    Tomb,
}

/// One level of a shared set: the main node of its I-node (its operations
/// are in `idset.rs`).
pub(crate) struct IdNode {
    /// Above the last level: one bit per 5-bit chunk value of the ids' hashes
    /// at this level. Invariant: `slots.len() == bitmap.count_ones()`, slots
    /// in ascending bit order. At level [`LEVELS`](super::idset::LEVELS)
    /// (every hash bit used) the node is a collision list: bitmap 0, ids with
    /// one hash, distinct texts.
    pub(super) bitmap: u32,
    pub(super) slots: Box<[IdSlot]>,
}

#[derive(Clone)]
pub(crate) enum IdSlot {
    /// An id, inline (its text is a [`SmolStr`]: no allocation up to 23 bytes).
    Id(Leaf<()>),
    /// The next level. Its generation may be older than the trie root's (shared
    /// with a snapshot) until a writer renews it.
    Level(Arc<INode>),
}

/// A subscriber set. Most patterns have one subscriber, so that case is held
/// inline (no table to chase on every lookup and freeze, nothing allocated);
/// a set of two ids or more is a shared set (`idset.rs`), changed in place by
/// GCAS on its own levels, so adding an id never copies the C-node that holds
/// the set. `Empty` and `One` are immutable values: writers build the next one
/// and GCAS the holder. 24 bytes, so every branch (and every slot of a branch
/// table) stays small.
#[derive(Clone, Default)]
pub(crate) enum SubscriberSet {
    #[default]
    Empty,
    One(SmolStr),
    /// The root level of a shared set (`idset.rs`). Invariant: a C-node write
    /// copies this pointer unchanged, unless the root's generation is older
    /// than the trie root's (renewal) or the root is a T-node (the set is
    /// empty and final); see "Invariants" in `idset.rs`.
    Shared(Arc<INode>),
}

impl SubscriberSet {
    pub(crate) fn single(id: SmolStr) -> Self {
        SubscriberSet::One(id)
    }

    /// Whether the set is the empty value. A shared set is never this, even
    /// when it holds no id: its holder drops it once its root is tombed
    /// (use [`Self::is_empty_in`] to read that).
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, SubscriberSet::Empty)
    }

    /// The root of a shared set, when this is one.
    pub(crate) fn shared(&self) -> Option<&Arc<INode>> {
        match self {
            SubscriberSet::Shared(root) => Some(root),
            _ => None,
        }
    }

    /// The set minus `id`, or `None` when `id` is absent. Not for a shared set
    /// (it changes in place: [`idset::remove`](super::idset::remove)).
    pub(crate) fn without(&self, id: &str) -> Option<Self> {
        match self {
            SubscriberSet::Empty => None,
            SubscriberSet::One(held) => (**held == *id).then_some(SubscriberSet::Empty),
            SubscriberSet::Shared(_) => unreachable!("a shared set changes in place"),
        }
    }
}

/// One edge of a C-node: the subscribers whose pattern ends with this word,
/// and what holds the longer patterns.
///
/// 24 bytes, as large as a [`SubscriberSet`], so that a branch table's slot
/// (`hamt::Slot`, as large as its inline leaf) stays small: a slot of every
/// table pays for it, node slots included. Nearly every branch has one half
/// only (patterns end here, or pass through), so the rare branch with both
/// holds them behind one pointer. As a struct of both halves it was 40
/// bytes, and the tables of issue 59's 10M-pair table were most of its heap.
#[derive(Clone)]
pub(crate) enum Branch {
    /// Patterns end here and none passes through. `Ends(Empty)` is only the
    /// default value (what `Hamt::dismantle` leaves behind), never written
    /// into a C-node.
    Ends(SubscriberSet),
    /// Patterns pass through and none ends here.
    Below(Child),
    /// Both; invariant: `subscribers` is not the empty value.
    Both(Arc<BothHalves>),
}

/// A [`Branch::Both`]'s halves.
pub(crate) struct BothHalves {
    subscribers: SubscriberSet,
    child: Child,
}

// The layout the docs above promise (a niche of `SmolStr` holds the tag),
// and the branch-table slot it makes: key 24 + branch 24, no hash.
const _: () = assert!(std::mem::size_of::<Branch>() == 24);
const _: () = assert!(super::hamt::slot_size::<Branch>() == 48);

impl Default for Branch {
    fn default() -> Self {
        Branch::Ends(SubscriberSet::Empty)
    }
}

impl Branch {
    /// The branch holding `subscribers` and `child`.
    ///
    /// Invariant (of a freshly written C-node): a branch with no subscribers
    /// has a child. A [`Child::Node`] may later become a T-node; whoever sees
    /// that prunes the branch.
    pub(crate) fn new(subscribers: SubscriberSet, child: Option<Child>) -> Branch {
        match (subscribers, child) {
            (subscribers, None) => Branch::Ends(subscribers),
            (SubscriberSet::Empty, Some(child)) => Branch::Below(child),
            (subscribers, Some(child)) => Branch::Both(Arc::new(BothHalves { subscribers, child })),
        }
    }

    /// The subscribers whose pattern ends with this branch's word.
    pub(crate) fn subscribers(&self) -> &SubscriberSet {
        match self {
            Branch::Ends(subscribers) => subscribers,
            Branch::Below(_) => &NO_SUBSCRIBERS,
            Branch::Both(both) => &both.subscribers,
        }
    }

    /// What holds the longer patterns through this branch's word.
    pub(crate) fn child(&self) -> Option<&Child> {
        match self {
            Branch::Ends(_) => None,
            Branch::Below(child) => Some(child),
            Branch::Both(both) => Some(&both.child),
        }
    }

    /// The child, owned, when this branch holds the last reference to it
    /// (what a dismantling drop takes apart).
    fn into_child(self) -> Option<Child> {
        match self {
            Branch::Ends(_) => None,
            Branch::Below(child) => Some(child),
            Branch::Both(both) => Arc::into_inner(both).map(|both| both.child),
        }
    }
}

/// What lies below a branch: an I-node, or a [`Tail`] when exactly one
/// longer pattern passes through it.
#[derive(Clone)]
pub(crate) enum Child {
    Node(Arc<INode>),
    Tail(Tail),
}

/// The Ctrie's S-node, for patterns: the only pattern below a branch, kept
/// as its remaining words and subscribers instead of a chain of I-nodes.
///
/// Immutable and generation-free, like a C-node's slots: a writer that
/// changes it builds a new one (or expands it into an I-node) and commits
/// the parent's C-node by GCAS, so a tail is never written in place and a
/// snapshot can share it. A fresh path (`tenant<i>.orders.#` under a wide
/// node) then costs one allocation instead of an I-node, a main node and a
/// table per word.
///
/// One allocation behind one word ([`ThinArc`]): the subscribers as its
/// header, the words' bytes after them. `k3.#` with one subscriber is 36
/// heap bytes; as an `Arc` of a `SmolStr` and a set it was 64, and nearly
/// every one-subscriber pattern of a large table ends in a tail.
#[derive(Clone)]
pub(crate) struct Tail(
    /// Header: the subscribers; invariant: not empty (a tail that loses its
    /// last subscriber is removed). Text: the words after the branch's word,
    /// joined by `.`; at least one word (split with `str::split`, so `""` is
    /// one empty word).
    ThinArc<SubscriberSet>,
);

// What the docs above promise: a tail is one pointer, so a child is two
// words and a branch (above) stays 24 bytes.
const _: () = assert!(std::mem::size_of::<Tail>() == 8);
const _: () = assert!(std::mem::size_of::<Child>() == 16);

impl Child {
    /// The I-node, when the child is one.
    pub(crate) fn inode(&self) -> Option<&Arc<INode>> {
        match self {
            Child::Node(inode) => Some(inode),
            Child::Tail(_) => None,
        }
    }

    /// The same child (pointer equality).
    pub(crate) fn same(&self, other: &Child) -> bool {
        match (self, other) {
            (Child::Node(left), Child::Node(right)) => Arc::ptr_eq(left, right),
            (Child::Tail(left), Child::Tail(right)) => ThinArc::ptr_eq(&left.0, &right.0),
            _ => false,
        }
    }

    /// A tail of `words` (see [`Tail`]'s invariants) holding `subscribers`.
    pub(crate) fn tail(words: &str, subscribers: SubscriberSet) -> Child {
        debug_assert!(!subscribers.is_empty(), "a tail holds at least one subscriber");
        Child::Tail(Tail(ThinArc::new(subscribers, words)))
    }
}

impl Tail {
    /// The words after the branch's word, joined by `.` (at least one).
    pub(crate) fn words(&self) -> &str {
        self.0.text()
    }

    /// The subscribers of the tail's pattern (never the empty value).
    pub(crate) fn subscribers(&self) -> &SubscriberSet {
        self.0.header()
    }

    /// The tail's words, parsed.
    pub(crate) fn pattern_words(&self) -> impl Iterator<Item = PatternWord<'_>> {
        self.words().split(crate::topic::SEPARATOR).map(PatternWord::parse)
    }

    /// Whether the tail holds exactly the pattern words `rest`.
    pub(crate) fn is(&self, rest: &[PatternWord<'_>]) -> bool {
        let mut words = self.pattern_words();
        rest.iter().all(|&word| words.next() == Some(word)) && words.next().is_none()
    }

    /// The same pairs as I-nodes (generation `gen`) for the words the tail
    /// shares with `along` (another pattern's words after the branch), down
    /// to where they part: there the tail's word holds the tail's rest as a
    /// shorter tail (or its subscribers, at its last word). What a writer
    /// commits before it adds `along`: built bottom-up in one pass, so a long
    /// shared path costs O(words), not one expansion (and one copy of the
    /// rest) per word. With `along` empty, one level.
    pub(crate) fn expand(&self, along: &[PatternWord<'_>], gen: Generation) -> Arc<INode> {
        let words: Vec<&str> = self.words().split(crate::topic::SEPARATOR).collect();
        let shared = words
            .iter()
            .zip(along)
            .take_while(|&(&word, &other)| PatternWord::parse(word) == other)
            .count();
        let deepest = shared.min(words.len() - 1);
        let branch = if deepest + 1 == words.len() {
            Branch::new(self.subscribers().clone(), None)
        } else {
            // The words up to `deepest`, each with its separator.
            let offset: usize = words[..=deepest].iter().map(|word| word.len() + 1).sum();
            Branch::new(
                SubscriberSet::Empty,
                Some(Child::tail(&self.words()[offset..], self.subscribers().clone())),
            )
        };
        let single = |word: &str, branch: Branch| {
            let cnode = CNode::single(PatternWord::parse(word), branch);
            INode::new(gen, MainNode::committed(MainKind::Branches(cnode)))
        };
        let mut node = single(words[deepest], branch);
        for &word in words[..deepest].iter().rev() {
            let branch = Branch::new(SubscriberSet::Empty, Some(Child::Node(node)));
            node = single(word, branch);
        }
        node
    }
}

/// `words` joined by `.`: the text of a tail.
pub(crate) fn joined(words: &[PatternWord<'_>]) -> String {
    let mut text = String::new();
    for (at, word) in words.iter().enumerate() {
        if at > 0 {
            text.push(crate::topic::SEPARATOR);
        }
        text.push_str(word.text());
    }
    text
}

/// An immutable branch table. Writers copy it (O(1): the tables inside are
/// persistent and shared), change the copy, and GCAS it into the owning I-node.
///
/// 32 bytes: the literal table inline, and the parts most C-nodes lack (the
/// wildcard branches, the root's empty pattern) behind one shared pointer.
/// Held inline they made every main node 2.6x larger, and a bulk load of a
/// million patterns spent much of its time faulting in that memory.
#[derive(Clone, Default)]
pub(crate) struct CNode {
    /// Literal-word branches, by word. A persistent map: replacing one branch
    /// copies O(log width) slots, not the table.
    pub(crate) literals: Hamt<Branch>,
    /// Invariant: `None` exactly when all of [`Wildcards`]' fields are empty
    /// (so an empty C-node is `literals` empty and `wild` absent).
    wild: Option<Arc<Wildcards>>,
}

/// The wildcard branches of a C-node, and the root's empty pattern.
#[derive(Clone, Default)]
struct Wildcards {
    /// Subscribers of the empty pattern (zero words). Only ever non-empty in
    /// the root's C-node: that is where a zero-word pattern ends.
    empty_pattern: SubscriberSet,
    /// The branch for a whole-word `*`.
    star: Option<Branch>,
    /// The branch for a whole-word `#`.
    hash: Option<Branch>,
}

impl Wildcards {
    fn is_empty(&self) -> bool {
        self.empty_pattern.is_empty() && self.star.is_none() && self.hash.is_none()
    }
}

static NO_SUBSCRIBERS: SubscriberSet = SubscriberSet::Empty;

impl CNode {
    pub(crate) fn is_empty(&self) -> bool {
        self.literals.is_empty() && self.wild.is_none()
    }

    /// Subscribers of the empty pattern (only the root's can be non-empty).
    pub(crate) fn empty_pattern(&self) -> &SubscriberSet {
        self.wild.as_ref().map_or(&NO_SUBSCRIBERS, |wild| &wild.empty_pattern)
    }

    /// The branch for a whole-word `*`.
    pub(crate) fn star(&self) -> Option<&Branch> {
        self.wild.as_ref().and_then(|wild| wild.star.as_ref())
    }

    /// The branch for a whole-word `#`.
    pub(crate) fn hash(&self) -> Option<&Branch> {
        self.wild.as_ref().and_then(|wild| wild.hash.as_ref())
    }

    /// Change the wildcard part, keeping its invariant.
    fn change_wild(&mut self, change: impl FnOnce(&mut Wildcards)) {
        let mut wild = self.wild.as_deref().cloned().unwrap_or_default();
        change(&mut wild);
        self.wild = (!wild.is_empty()).then(|| Arc::new(wild));
    }

    /// Set the empty pattern's subscribers.
    pub(crate) fn set_empty_pattern(&mut self, set: SubscriberSet) {
        self.change_wild(|wild| wild.empty_pattern = set);
    }

    /// A copy with the empty pattern's subscribers replaced.
    pub(crate) fn with_empty_pattern(&self, set: SubscriberSet) -> CNode {
        let mut copy = self.clone();
        copy.set_empty_pattern(set);
        copy
    }

    /// The literal branch for key word `word` (what a lookup follows).
    pub(crate) fn literal(&self, word: &str) -> Option<&Branch> {
        self.literals.get(word)
    }

    /// `literal` with the word's [`hash_word`](crate::word_hash::hash_word) computed once by the caller.
    pub(crate) fn literal_hashed(&self, hash: u64, word: &str) -> Option<&Branch> {
        self.literals.get_hashed(hash, word)
    }

    /// The branch stored for pattern word `word` (no matching).
    pub(crate) fn branch(&self, word: PatternWord<'_>) -> Option<&Branch> {
        match word {
            PatternWord::Literal(literal) => self.literal(literal),
            PatternWord::Star => self.star(),
            PatternWord::Hash => self.hash(),
        }
    }

    /// Replace the branch of a wildcard word (`None` removes it); literals go
    /// through the table's own (batch) inserts.
    pub(crate) fn set_wildcard(&mut self, word: PatternWord<'_>, branch: Option<Branch>) {
        match word {
            PatternWord::Star => self.change_wild(|wild| wild.star = branch),
            PatternWord::Hash => self.change_wild(|wild| wild.hash = branch),
            PatternWord::Literal(_) => unreachable!("set_wildcard takes `*` or `#`"),
        }
    }

    /// A copy with the branch for `word` replaced (`None` removes it).
    pub(crate) fn with_branch(&self, word: PatternWord<'_>, branch: Option<Branch>) -> CNode {
        let mut copy = self.clone();
        match word {
            PatternWord::Literal(literal) => match branch {
                Some(branch) => copy.literals = copy.literals.insert(smol(literal), branch),
                None => {
                    if let Some(literals) = copy.literals.remove(literal) {
                        copy.literals = literals;
                    }
                }
            },
            wildcard => copy.set_wildcard(wildcard, branch),
        }
        copy
    }

    /// A C-node holding only `branch` under `word`.
    pub(crate) fn single(word: PatternWord<'_>, branch: Branch) -> CNode {
        CNode::default().with_branch(word, Some(branch))
    }

    /// Every branch with its pattern word: literals (in no particular order),
    /// then `*`, then `#`.
    pub(crate) fn branches(&self) -> impl Iterator<Item = (PatternWord<'_>, &Branch)> {
        self.literals
            .iter()
            .map(|leaf| (PatternWord::Literal(&leaf.key), &leaf.value))
            .chain(self.star().map(|branch| (PatternWord::Star, branch)))
            .chain(self.hash().map(|branch| (PatternWord::Hash, branch)))
    }

    /// Take the C-node apart, handing each branch it owns alone to `take`.
    fn dismantle(self, mut take: impl FnMut(Branch)) {
        self.literals.dismantle(&mut take);
        if let Some(wild) = self.wild.and_then(Arc::into_inner) {
            wild.star.into_iter().chain(wild.hash).for_each(take);
        }
    }
}

impl MainNode {
    /// A committed main node (no GCAS pending), for nodes not yet published.
    pub(crate) fn committed(kind: MainKind) -> Arc<MainNode> {
        Arc::new(MainNode {
            kind,
            prev: AtomicArc::new(None),
        })
    }

    pub(crate) fn cnode(&self) -> Option<&CNode> {
        match &self.kind {
            MainKind::Branches(cnode) => Some(cnode),
            MainKind::Ids(_) | MainKind::Tomb => None,
        }
    }
}

impl INode {
    pub(crate) fn new(gen: Generation, main: Arc<MainNode>) -> Arc<INode> {
        Arc::new(INode {
            main: AtomicArc::new(Some(main)),
            gen,
        })
    }
}

impl Drop for INode {
    /// Dismantle the subtree iteratively: a pattern with very many words makes
    /// a chain that deep, and a recursive drop could overflow the stack.
    fn drop(&mut self) {
        let mut pending: Vec<Arc<MainNode>> = self.main.take().into_iter().collect();
        while let Some(main) = pending.pop() {
            // Only the last owner dismantles; shared nodes just lose a count.
            let Some(mut main) = Arc::into_inner(main) else {
                continue;
            };
            if let Some(prev) = main.prev.take().and_then(Arc::into_inner) {
                match prev {
                    GcasPrev::Pending(node) | GcasPrev::Failed(node) => pending.push(node),
                }
            }
            if let MainKind::Branches(cnode) = std::mem::replace(&mut main.kind, MainKind::Tomb) {
                cnode.dismantle(|branch| {
                    if let Some(Child::Node(child)) = branch.into_child() {
                        if let Some(mut child) = Arc::into_inner(child) {
                            pending.extend(child.main.take());
                        }
                    }
                });
            }
        }
    }
}
