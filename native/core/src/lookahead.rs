//! Lookahead: a batch warms the caches for the keys it will match next.
//!
//! # Why
//!
//! A lookup in a large matcher (10M subscriptions: a 1 GB file) is a chain
//! of about 15 dependent loads at random places, nearly each a cache miss:
//! a word's home slot in the word index, then its end offsets, then its
//! text; a node, then its `wide` slot, then the edge, then the child node;
//! at the end the subscriber ids and their texts. One key's walk cannot
//! overlap them, since each address comes from the load before it, so at
//! 10M a key cost six times what it costs at 10,000 subscriptions, where
//! the whole matcher is in cache. The keys of a batch are independent,
//! though, so their chains can overlap.
//!
//! # How
//!
//! Software-pipelined prefetching, as in AMAC (Kocberber et al., VLDB 2015)
//! and group prefetching (Chen et al., ICDE 2004). A ring of [`DEPTH`] probes
//! follows the keys that far ahead of the one being matched. Every time the
//! batch matches a key, each probe takes one step along its own key's
//! chain: it reads what its previous step prefetched (by now in cache) and
//! prefetches the next address. So about [`DEPTH`] misses are in flight at
//! once instead of one. A probe's chain:
//!
//! 1. hash each key word and prefetch its home slot in the word index;
//! 2. read the slots and prefetch each candidate's end offsets;
//! 3. read those and prefetch each candidate's text;
//! 4. resolve each word exactly ([`crate::frozen::Interned::find_from`], now in cache) and
//!    record its id in the batch's [`Memo`];
//! 5. walk from the root, one load per step: a node (prefetching its `*`
//!    and `#` children), its `wide` slot or edge range, the edge; each
//!    literal child resolved exactly ([`FrozenMatcher::literal_child_uncached`])
//!    is recorded in the memo, where the lookup finds it; at the last word,
//!    and at every `#` child met, the subscriber ids and then their texts.
//!
//! When the batch then matches that key, the lookup finds its words and
//! literal children in the memo and its nodes in cache, so it runs about as
//! fast as in a small matcher. A probe's own steps are the finds and edge
//! searches the lookup no longer does.
//!
//! # Exactness and bounds
//!
//! Prefetches are hints: they read nothing architecturally and never fault.
//! What a probe records, it got from the exact functions the lookup itself
//! would call ([`crate::frozen::Interned::find_from`], [`FrozenMatcher::literal_child_uncached`]),
//! so the memo stays exact and results cannot depend on the lookahead
//! (`tests` compare batches with and without it). Every read goes through
//! bounds-checked `get`s: a probe gives up on anything unexpected. A probe
//! follows at most [`MAX_WORDS`] words and [`MAX_TASKS`] walk states at a
//! time, so its work per step is bounded whatever the keys and patterns.
//!
//! # When
//!
//! Only in matchers of more than [`LARGE_BYTES`]: a smaller one stays in
//! cache, where the probes would be pure overhead.

use crate::frozen::{FrozenMatcher, Memo, Scratch};
use crate::layout::{home_slot, wide_key, Node, EMPTY, NONE, WIDE_FANOUT};
use crate::prefetch::prefetch;
use crate::word_hash::hash_word;

/// Keys in flight ahead of the one being matched: about the steps of the
/// longest common chain (4 to resolve the words, 2-3 per trie level, 2 for
/// the subscribers), so that a key's chain is done when its lookup runs.
pub const DEPTH: usize = 16;

/// Matchers up to this many bytes are matched without lookahead. Measured
/// (`bench/large_tables.py`'s keys, this repository's 2-core machine, whose
/// L3 is unusually large): a 12 MB matcher matched 20% slower with it, a
/// 120 MB one (a million subscriptions) about as fast, a 1 GB one 35%
/// faster. Above the million-subscription size, so that the router's
/// stream figure at 1M (`bench/stream.py`, not re-measured with it) keeps
/// the path it was measured on.
pub const LARGE_BYTES: usize = 256 << 20;

/// Key words a probe resolves; a longer key is matched without lookahead.
pub const MAX_WORDS: usize = 8;

/// Walk states a probe holds at a time; more are dropped (never a wrong
/// result: the lookup itself walks every state).
pub const MAX_TASKS: usize = 6;

/// Subscribers of one node whose texts a probe prefetches.
const MAX_SUBSCRIBERS: usize = 4;

/// One key word's progress through steps 1-4.
#[derive(Clone, Copy)]
enum Word {
    /// Its home slot in the word index was prefetched.
    Slot(usize),
    /// Its home slot, and the candidate id there, whose end offsets were prefetched.
    Ends(usize, u32),
    /// Its home slot; the candidate's text was prefetched.
    Text(usize),
    /// Resolved: its id, or [`NONE`] when no pattern has it.
    Id(u32),
}

/// One walk state of a probe, whose data its previous step prefetched.
#[derive(Clone, Copy)]
enum Task {
    /// `(node, key position)`: the node was prefetched.
    Node(u32, u32),
    /// The literal child of `(node, position)`'s word: its edges (or `wide`
    /// slot and edge) were prefetched; `wide_slot` is [`NONE`] for a narrow node.
    Child { node: u32, position: u32, wide_slot: u32 },
    /// A `#` child (it matches any rest of the key): the node was prefetched.
    Hash(u32),
    /// Subscriber ids `start .. start + len` were prefetched.
    Subscribers(u32, u32),
    /// Those subscribers' end offsets were prefetched.
    SubscriberTexts(u32, u32),
}

/// The lookahead of one key.
#[derive(Clone, Copy)]
struct Probe<'k> {
    key: &'k str,
    /// Words: byte spans in `key`, and their progress.
    spans: [(u32, u32); MAX_WORDS],
    words: [Word; MAX_WORDS],
    count: usize,
    tasks: [Task; MAX_TASKS],
    pending: usize,
    /// Whether steps 1-4 are done (the walk has begun).
    resolved: bool,
}

impl<'k> Probe<'k> {
    const IDLE: Probe<'static> = Probe {
        key: "",
        spans: [(0, 0); MAX_WORDS],
        words: [Word::Id(NONE); MAX_WORDS],
        count: 0,
        tasks: [Task::Hash(NONE); MAX_TASKS],
        pending: 0,
        resolved: true,
    };

    /// The probe of `key` (idle for an empty key or one of more than [`MAX_WORDS`] words), its
    /// step 1 taken.
    fn start(matcher: &FrozenMatcher, key: &'k str) -> Probe<'k> {
        let mut probe = Probe::IDLE;
        let slots = matcher.words.index.len();
        if key.is_empty() || slots == 0 {
            return probe;
        }
        let mut start = 0;
        for (at, byte) in key.bytes().chain(std::iter::once(b'.')).enumerate() {
            if byte != b'.' {
                continue;
            }
            if probe.count == MAX_WORDS {
                return Probe::IDLE;
            }
            probe.spans[probe.count] = (start as u32, at as u32);
            let home = matcher.words.home(&key[start..at]);
            prefetch(matcher.words.index.as_ptr().wrapping_add(home));
            probe.words[probe.count] = Word::Slot(home);
            probe.count += 1;
            start = at + 1;
        }
        probe.key = key;
        probe.resolved = false;
        probe
    }

    fn text(&self, word: usize) -> &'k str {
        let (start, stop) = self.spans[word];
        &self.key[start as usize..stop as usize]
    }

    fn push(&mut self, task: Task) {
        if self.pending < MAX_TASKS {
            self.tasks[self.pending] = task;
            self.pending += 1;
        }
    }

    /// Prefetch node `index` and queue `task` for it.
    fn push_node(&mut self, matcher: &FrozenMatcher, index: u32, task: Task) {
        if self.pending < MAX_TASKS {
            prefetch(matcher.nodes.as_ptr().wrapping_add(index as usize));
            self.push(task);
        }
    }

    /// One step (see the module docs).
    fn step(&mut self, matcher: &FrozenMatcher, memo: &mut Memo) {
        if !self.resolved {
            self.resolve_step(matcher, memo);
            return;
        }
        let count = std::mem::replace(&mut self.pending, 0);
        let tasks = self.tasks;
        for &task in &tasks[..count] {
            self.walk_step(matcher, memo, task);
        }
    }

    fn resolve_step(&mut self, matcher: &FrozenMatcher, memo: &mut Memo) {
        let words = &matcher.words;
        let mut done = true;
        for i in 0..self.count {
            self.words[i] = match self.words[i] {
                Word::Slot(home) => match words.index.get(home) {
                    Some(&id) if id != EMPTY => {
                        prefetch(words.ends.as_ptr().wrapping_add(id as usize));
                        Word::Ends(home, id)
                    }
                    _ => Word::Text(home),
                },
                Word::Ends(home, id) => {
                    let start = match id.checked_sub(1) {
                        Some(before) => words.ends.get(before as usize).copied(),
                        None => Some(0),
                    };
                    if let Some(start) = start {
                        prefetch(words.text.as_ptr().wrapping_add(start as usize));
                    }
                    Word::Text(home)
                }
                Word::Text(home) => {
                    let text = self.text(i);
                    let id = words.find_from(home, text).unwrap_or(NONE);
                    if id != NONE {
                        memo.remember_word(hash_word(text), id);
                    }
                    Word::Id(id)
                }
                resolved @ Word::Id(_) => resolved,
            };
            done &= matches!(self.words[i], Word::Id(_));
        }
        if done {
            self.resolved = true;
            self.push_node(matcher, 0, Task::Node(0, 0));
        }
    }

    fn walk_step(&mut self, matcher: &FrozenMatcher, memo: &mut Memo, task: Task) {
        match task {
            Task::Node(index, position) => {
                let Some(node) = matcher.nodes.get(index as usize) else {
                    return;
                };
                self.visit(matcher, memo, index, node, position);
            }
            Task::Child {
                node: index,
                position,
                wide_slot,
            } => {
                if wide_slot != NONE {
                    // The slot is in cache: prefetch its edge, then resolve next step.
                    if let Some(&edge) = matcher.wide.get(wide_slot as usize) {
                        if edge != EMPTY {
                            prefetch(matcher.edges.as_ptr().wrapping_add(edge as usize));
                        }
                    }
                    self.push(Task::Child {
                        node: index,
                        position,
                        wide_slot: NONE,
                    });
                    return;
                }
                let (Some(node), Some(Word::Id(word))) =
                    (matcher.nodes.get(index as usize), self.words.get(position as usize))
                else {
                    return;
                };
                let child = matcher.literal_child_uncached(index, node, *word).unwrap_or(NONE);
                memo.remember_child(index, *word, child);
                if child != NONE {
                    self.push_node(matcher, child, Task::Node(child, position + 1));
                }
            }
            Task::Hash(index) => {
                if let Some(node) = matcher.nodes.get(index as usize) {
                    self.subscribers(matcher, node);
                }
            }
            Task::Subscribers(start, len) => {
                let Some(ids) = matcher.subscriber_ids.get(start as usize..(start + len) as usize) else {
                    return;
                };
                for &id in ids.iter().take(MAX_SUBSCRIBERS) {
                    prefetch(matcher.subscribers.ends.as_ptr().wrapping_add(id as usize));
                }
                self.push(Task::SubscriberTexts(start, len));
            }
            Task::SubscriberTexts(start, len) => {
                let Some(ids) = matcher.subscriber_ids.get(start as usize..(start + len) as usize) else {
                    return;
                };
                let ends = &matcher.subscribers.ends;
                for &id in ids.iter().take(MAX_SUBSCRIBERS) {
                    let begin = match id.checked_sub(1) {
                        Some(before) => ends.get(before as usize).copied(),
                        None => Some(0),
                    };
                    if let Some(begin) = begin {
                        prefetch(matcher.subscribers.text.as_ptr().wrapping_add(begin as usize));
                    }
                }
            }
        }
    }

    /// Node `index` at key `position`, its record in cache: queue what the lookup will read next.
    fn visit(&mut self, matcher: &FrozenMatcher, memo: &mut Memo, index: u32, node: &Node, position: u32) {
        if node.hash != NONE {
            self.push_node(matcher, node.hash, Task::Hash(node.hash));
        }
        if position as usize == self.count {
            self.subscribers(matcher, node);
            return;
        }
        if node.star != NONE {
            self.push_node(matcher, node.star, Task::Node(node.star, position + 1));
        }
        let Word::Id(word) = self.words[position as usize] else {
            return;
        };
        if word == NONE || node.edge_count == 0 {
            return;
        }
        if let Some(child) = memo.child(index, word) {
            if child != NONE {
                self.push_node(matcher, child, Task::Node(child, position + 1));
            }
            return;
        }
        let wide_slot = if node.edge_count > WIDE_FANOUT && !matcher.wide.is_empty() {
            let slots = matcher.wide.len();
            let slot = home_slot(matcher.index_key, &wide_key(index, word), slots as u32) as usize;
            prefetch(matcher.wide.as_ptr().wrapping_add(slot));
            slot as u32
        } else {
            // At most WIDE_FANOUT edges of 8 bytes: eight cache lines.
            let first = matcher.edges.as_ptr().wrapping_add(node.first_edge as usize);
            for line in (0..node.edge_count as usize).step_by(8) {
                prefetch(first.wrapping_add(line));
            }
            NONE
        };
        self.push(Task::Child {
            node: index,
            position,
            wide_slot,
        });
    }

    /// Queue the subscribers of `node`, if any.
    fn subscribers(&mut self, matcher: &FrozenMatcher, node: &Node) {
        if node.subs_len > 0 {
            prefetch(matcher.subscriber_ids.as_ptr().wrapping_add(node.subs_start as usize));
            self.push(Task::Subscribers(
                node.subs_start,
                node.subs_len.min(MAX_SUBSCRIBERS as u32),
            ));
        }
    }
}

#[cfg(any(test, fuzzing))]
thread_local! {
    /// Lookahead in matchers of any size on this thread (tests and fuzzing: their matchers are small).
    static ALWAYS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `body` with lookahead in matchers of every size on this thread (tests and fuzzing only).
#[cfg(any(test, fuzzing))]
pub(crate) fn always<R>(body: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ALWAYS.with(|always| always.set(self.0));
        }
    }
    let _restore = Restore(ALWAYS.with(|always| always.replace(true)));
    body()
}

fn wanted(matcher: &FrozenMatcher) -> bool {
    #[cfg(any(test, fuzzing))]
    if ALWAYS.with(std::cell::Cell::get) {
        return true;
    }
    matcher.bytes().len() > LARGE_BYTES
}

/// The probes of one batch over one matcher (see the module docs).
pub(crate) struct Lookahead<'m, 'k> {
    matcher: &'m FrozenMatcher,
    ring: [Probe<'k>; DEPTH],
    /// The ring slot of the next key fed.
    next: usize,
}

impl<'m, 'k> Lookahead<'m, 'k> {
    /// The lookahead of a batch over `matcher`, or `None` when it is small enough to stay in cache.
    pub(crate) fn over(matcher: &'m FrozenMatcher) -> Option<Self> {
        wanted(matcher).then_some(Lookahead {
            matcher,
            ring: [Probe::IDLE; DEPTH],
            next: 0,
        })
    }

    /// Take one step of every probe, then start one for `key` (the key [`DEPTH`] rows ahead of the
    /// one about to be matched; `None` past the end or for a key the batch has matched already).
    /// `scratch` is the one the matcher's lookups use; without a batch memo nothing is warmed.
    pub(crate) fn feed(&mut self, key: Option<&'k str>, scratch: &mut Scratch) {
        let Some(memo) = scratch.memo_mut() else { return };
        memo.serve(self.matcher);
        for probe in &mut self.ring {
            probe.step(self.matcher, memo);
        }
        self.ring[self.next] = match key {
            Some(key) => Probe::start(self.matcher, key),
            None => Probe::IDLE,
        };
        self.next = (self.next + 1) % DEPTH;
    }
}
