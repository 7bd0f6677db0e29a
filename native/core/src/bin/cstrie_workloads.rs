//! The seed's multithreaded workloads ("Fast Topic Matching") on the CS-trie, run from Rust threads.
//!
//! ```text
//! cd native && cargo run --release --bin cstrie_workloads            # table on stdout
//! cd native && cargo run --release --bin cstrie_workloads -- --help  # flags
//! ```
//!
//! Only the public API of [`CsTrie`] is used (`new`, `subscribe`, `unsubscribe`, `lookup`), so
//! the figures are what any embedder of the crate would see, independent of the trie's internals.
//!
//! # The workload
//!
//! A trie is pre-populated with 1,000 random 5-word subscriptions, each word the decimal text of a
//! random non-negative 63-bit integer, subscribed by its own text (the seed's `populateMatcher`).
//! Every thread holds the same 1,000 items, item `j` being the topic `j%10 . j%50 . j`, subscribed
//! for subscriber `abc`. One *round* (the seed's `b.N` iteration; its "ns/op" is ns per round)
//! starts every thread at once and ends when the last one finishes. Two layouts:
//!
//! * `seed`: exactly the seed's `benchmark5050` / `benchmark9010`. Each thread has one role for
//!   the whole round and runs it over all 1,000 items: in 50/50 the odd-numbered threads
//!   subscribe and the even ones look up; in 90/10 threads 0, 10, 20, ... subscribe and the rest
//!   look up. Names mirror the seed's (`BenchmarkMultithreaded2Thread9010CSTrie`). Beware what
//!   that means at low thread counts: 1 thread in 50/50 only looks up, 1 thread in 90/10 only
//!   subscribes, and 2 or 4 threads in 90/10 are one writer plus 1 or 3 readers.
//! * `mixed`: every thread mixes itself: for each item it subscribes it, then looks it up once
//!   (50/50) or nine times (90/10), so every thread count has the stated ratio
//!   (`...9010MixedCSTrie`).
//!
//! As in the seed, rounds repeat the same subscriptions: after the first round every subscribe
//! finds its pair present (the `inserts` column counts the subscribes that changed the trie during
//! the timed rounds). `--fresh` instead unsubscribes the 1,000 items between rounds, outside the
//! timed part, so that every timed round inserts them again.
//!
//! # Timing
//!
//! Worker threads live for the whole configuration and meet at a barrier before and after every
//! round (the barrier's cost is inside the round, like the seed's goroutine start). Thread 0 keeps
//! the time: a round runs from just before its start barrier to just after its end barrier, so the
//! process has exactly `threads` busy threads and no timekeeper competing for the cores. The
//! barrier's waiters spin, yielding after [`SPIN_BEFORE_YIELD`], as long as every worker has a
//! core: a round is a fraction of a millisecond, and a sleeping barrier would add a futex wake-up
//! per thread to it (tens of microseconds on a VM), timing the OS scheduler rather than the trie.
//! (The seed's goroutines are woken by Go's own scheduler, whose idle threads also spin before
//! they sleep.) With more workers than cores the barrier sleeps instead: a spinning waiter would
//! hold the core the thread it waits for needs.
//!
//! The host's speed drifts by tens of percent over seconds (other tenants), and the 1-versus-2
//! thread ratio compares configurations measured at different moments. So samples are taken in
//! passes: each pass measures every configuration once (a fresh trie, its own warm-up, one sample),
//! and a configuration's figure is the median of its samples over the passes; a slow spell then
//! hits one sample of every configuration instead of every sample of one. Per pass,
//! rounds run untimed for `--warmup-ms`, then for at least `--sample-ms` (one sample); there are
//! `--samples` passes. `ops/s` counts subscribes and lookups of all threads.

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use spark_topic_router_core::cstrie::CsTrie;
use spark_topic_router_core::rng::Rng;

const SUBSCRIBER: &str = "abc";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mix {
    FiftyFifty,
    NinetyTen,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::FiftyFifty => "5050",
            Mix::NinetyTen => "9010",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "5050" => Ok(Mix::FiftyFifty),
            "9010" => Ok(Mix::NinetyTen),
            _ => Err(format!("unknown mix {text:?} (5050 or 9010)")),
        }
    }

    /// The seed's role rule: does thread `thread` subscribe (rather than look up)?
    /// (Its Go: `if j%2 != 0` in benchmark5050, `if j%10 == 0` in benchmark9010.)
    fn seed_writer(self, thread: usize) -> bool {
        match self {
            Mix::FiftyFifty => !thread.is_multiple_of(2),
            Mix::NinetyTen => thread.is_multiple_of(10),
        }
    }

    /// Lookups per subscribe in the mixed layout.
    fn lookups_per_subscribe(self) -> usize {
        match self {
            Mix::FiftyFifty => 1,
            Mix::NinetyTen => 9,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Layout {
    Seed,
    Mixed,
}

impl Layout {
    fn name(self) -> &'static str {
        match self {
            Layout::Seed => "seed",
            Layout::Mixed => "mixed",
        }
    }

    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "seed" => Ok(Layout::Seed),
            "mixed" => Ok(Layout::Mixed),
            _ => Err(format!("unknown layout {text:?} (seed or mixed)")),
        }
    }
}

#[derive(Clone, Copy)]
enum Op {
    Subscribe,
    Lookup,
}

struct Args {
    threads: Vec<usize>,
    mixes: Vec<Mix>,
    layouts: Vec<Layout>,
    items: usize,
    populate: usize,
    warmup: Duration,
    sample: Duration,
    samples: usize,
    seed: u64,
    fresh: bool,
    json: bool,
}

const HELP: &str = "\
cstrie_workloads: the seed's multithreaded 50/50 and 90/10 workloads on the CS-trie, from Rust threads

USAGE: cargo run --release --bin cstrie_workloads -- [FLAGS]

  --threads LIST     thread counts, comma-separated            [default: 1,2,4]
  --mixes LIST       5050 and/or 9010                          [default: 5050,9010]
  --layouts LIST     seed (one role per thread, as the seed's benchmark5050/9010)
                     and/or mixed (each thread subscribes an item, then looks it up
                     1 or 9 times)                              [default: seed,mixed]
  --items N          items per thread, item j = j%10.j%50.j    [default: 1000]
  --populate N       random 5-word int63 subscriptions first   [default: 1000]
  --warmup-ms MS     untimed rounds before measuring           [default: 300]
  --sample-ms MS     minimum length of one sample              [default: 500]
  --samples N        passes over every configuration, one sample
                     each; the median is reported              [default: 5]
  --seed N           seed of the pre-populated subscriptions   [default: 20241121]
  --fresh            unsubscribe the items between rounds (untimed), so every timed
                     subscribe inserts; the seed re-subscribes present pairs
  --json             one JSON object on stdout instead of the table
  -h, --help         this text

Progress goes to stderr.";

fn parse_list<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    let values = text
        .split(',')
        .filter(|part| !part.is_empty())
        .map(parse)
        .collect::<Result<Vec<T>, String>>()?;
    if values.is_empty() {
        return Err(format!("empty list {text:?}"));
    }
    Ok(values)
}

fn parse_number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{flag}: not a non-negative integer: {text:?}"))
}

fn parse_args(raw: impl Iterator<Item = String>) -> Result<Option<Args>, String> {
    let mut args = Args {
        threads: vec![1, 2, 4],
        mixes: vec![Mix::FiftyFifty, Mix::NinetyTen],
        layouts: vec![Layout::Seed, Layout::Mixed],
        items: 1000,
        populate: 1000,
        warmup: Duration::from_millis(300),
        sample: Duration::from_millis(500),
        samples: 5,
        seed: 20241121,
        fresh: false,
        json: false,
    };
    let mut raw = raw.peekable();
    while let Some(flag) = raw.next() {
        let mut value = || raw.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--fresh" => args.fresh = true,
            "--json" => args.json = true,
            "--threads" => {
                args.threads = parse_list(&value()?, |t| parse_number::<usize>("--threads", t))?;
                if args.threads.contains(&0) {
                    return Err("--threads: a thread count must be at least 1".into());
                }
            }
            "--mixes" => args.mixes = parse_list(&value()?, Mix::parse)?,
            "--layouts" => args.layouts = parse_list(&value()?, Layout::parse)?,
            "--items" => args.items = parse_number("--items", &value()?)?,
            "--populate" => args.populate = parse_number("--populate", &value()?)?,
            "--warmup-ms" => args.warmup = Duration::from_millis(parse_number("--warmup-ms", &value()?)?),
            "--sample-ms" => args.sample = Duration::from_millis(parse_number("--sample-ms", &value()?)?),
            "--samples" => args.samples = parse_number::<usize>("--samples", &value()?)?.max(1),
            "--seed" => args.seed = parse_number("--seed", &value()?)?,
            other => return Err(format!("unknown flag {other:?} (see --help)")),
        }
    }
    if args.items == 0 {
        return Err("--items must be at least 1".into());
    }
    Ok(Some(args))
}

/// The seed's `populateMatcher(m, n, 5)`: n random 5-word topics, each subscribed by its own text.
fn populate(trie: &CsTrie, count: usize, seed: u64) {
    let mut rng = Rng(seed);
    for _ in 0..count {
        let topic = (0..5).map(|_| rng.int63().to_string()).collect::<Vec<_>>().join(".");
        trie.subscribe(&topic, &topic);
    }
}

fn items(count: usize) -> Vec<String> {
    (0..count).map(|j| format!("{}.{}.{}", j % 10, j % 50, j)).collect()
}

/// Thread `thread`'s operations for one round.
fn plan(layout: Layout, mix: Mix, thread: usize, items: &[String]) -> Vec<(Op, usize)> {
    match layout {
        Layout::Seed => {
            let op = if mix.seed_writer(thread) {
                Op::Subscribe
            } else {
                Op::Lookup
            };
            (0..items.len()).map(|j| (op, j)).collect()
        }
        Layout::Mixed => (0..items.len())
            .flat_map(|j| {
                std::iter::once((Op::Subscribe, j))
                    .chain(std::iter::repeat_n((Op::Lookup, j), mix.lookups_per_subscribe()))
            })
            .collect(),
    }
}

/// How long a barrier waiter spins before it starts yielding its core: long enough to cover a
/// round's imbalance between threads, short enough not to starve a thread that shares a core
/// (more threads than cores).
const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(200);

/// The round barrier: spinning when every worker has a core of its own, sleeping (std's) when
/// there are more workers than cores, where a spinning waiter would take the core that the
/// thread it waits for needs.
enum RoundBarrier {
    Spin(SpinBarrier),
    Sleep(std::sync::Barrier),
}

impl RoundBarrier {
    fn new(parties: usize) -> Self {
        let cores = thread::available_parallelism().map_or(1, |n| n.get());
        if parties <= cores {
            RoundBarrier::Spin(SpinBarrier::new(parties))
        } else {
            RoundBarrier::Sleep(std::sync::Barrier::new(parties))
        }
    }

    fn wait(&self) {
        match self {
            RoundBarrier::Spin(barrier) => barrier.wait(),
            RoundBarrier::Sleep(barrier) => {
                barrier.wait();
            }
        }
    }
}

/// A reusable barrier whose waiters spin, then yield; never sleep (see the module docs).
struct SpinBarrier {
    parties: usize,
    /// Threads that reached the current generation; the last one resets it to 0 *before* it
    /// publishes the next generation, so a thread that sees the new generation sees 0 here.
    arrived: AtomicUsize,
    /// Bumped once per completed barrier; waiters leave when it changes.
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(parties: usize) -> Self {
        SpinBarrier {
            parties,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parties {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation.wrapping_add(1), Ordering::Release);
            return;
        }
        let spinning_since = Instant::now();
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            spins = spins.wrapping_add(1);
            // Reading the clock every 64 spins keeps it off the hot loop.
            if spins.is_multiple_of(64) && spinning_since.elapsed() > SPIN_BEFORE_YIELD {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Counters the workers add to after each timed round.
#[derive(Default)]
struct Counters {
    subscribes: AtomicU64,
    inserts: AtomicU64,
    lookups: AtomicU64,
    hits: AtomicU64,
}

struct Measured {
    layout: Layout,
    mix: Mix,
    threads: usize,
    ops_per_round: usize,
    subscribes_per_round: usize,
    /// Median over the samples of ns per round (the seed's ns/op).
    ns_per_round: f64,
    /// All samples, ns per round.
    samples_ns_per_round: Vec<f64>,
    rounds_timed: u64,
    inserts: u64,
    lookups: u64,
    hits: u64,
}

impl Measured {
    fn name(&self) -> String {
        let suffix = if self.layout == Layout::Mixed { "Mixed" } else { "" };
        format!(
            "BenchmarkMultithreaded{}Thread{}{}CSTrie",
            self.threads,
            self.mix.name(),
            suffix
        )
    }

    /// Adds another pass's sample of the same configuration; the figure is the median again.
    fn absorb(&mut self, other: Measured) {
        self.samples_ns_per_round.extend(other.samples_ns_per_round);
        self.rounds_timed += other.rounds_timed;
        self.inserts += other.inserts;
        self.lookups += other.lookups;
        self.hits += other.hits;
        self.ns_per_round = median(&self.samples_ns_per_round);
    }

    fn ns_per_operation(&self) -> f64 {
        self.ns_per_round / self.ops_per_round as f64
    }

    fn ops_per_second(&self) -> f64 {
        1e9 * self.ops_per_round as f64 / self.ns_per_round
    }
}

/// The median (the upper one of an even count).
fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// What thread 0 needs to time the rounds.
#[derive(Clone, Copy)]
struct Timing {
    warmup: Duration,
    sample: Duration,
    fresh: bool,
}

/// Thread 0's loop: it runs its own share of every round, times each round from just before the
/// start barrier to just after the end barrier, and stops the other workers at the end. Returns
/// this pass's one sample (ns per round) and the number of timed rounds. With `fresh`,
/// `remove_items` runs between rounds, outside the timed part, while the other workers wait at the
/// start barrier.
fn keep_time(
    timing: &Timing,
    barrier: &RoundBarrier,
    stop: &AtomicBool,
    counting: &AtomicBool,
    run_round: impl Fn(),
    remove_items: impl Fn(),
) -> (f64, u64) {
    let round = || {
        let began = Instant::now();
        barrier.wait();
        run_round();
        barrier.wait();
        let took = began.elapsed();
        if timing.fresh {
            remove_items();
        }
        took
    };
    let warmup_until = Instant::now() + timing.warmup;
    let mut warmup_rounds = 0u64;
    while warmup_rounds == 0 || Instant::now() < warmup_until {
        round();
        warmup_rounds += 1;
    }
    counting.store(true, Ordering::Release);
    let (mut elapsed, mut rounds) = (Duration::ZERO, 0u64);
    while rounds == 0 || elapsed < timing.sample {
        elapsed += round();
        rounds += 1;
    }
    stop.store(true, Ordering::Release);
    barrier.wait();
    (elapsed.as_nanos() as f64 / rounds as f64, rounds)
}

fn measure(args: &Args, layout: Layout, mix: Mix, threads: usize) -> Measured {
    let trie = Arc::new(CsTrie::new());
    populate(&trie, args.populate, args.seed);
    let items = Arc::new(items(args.items));
    let plans: Vec<Vec<(Op, usize)>> = (0..threads).map(|t| plan(layout, mix, t, &items)).collect();
    let ops_per_round: usize = plans.iter().map(Vec::len).sum();
    let subscribes_per_round = plans
        .iter()
        .flatten()
        .filter(|(op, _)| matches!(op, Op::Subscribe))
        .count();

    let barrier = Arc::new(RoundBarrier::new(threads));
    let stop = Arc::new(AtomicBool::new(false));
    let counting = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let timing = Timing {
        warmup: args.warmup,
        sample: args.sample,
        fresh: args.fresh,
    };
    let workers: Vec<_> = plans
        .into_iter()
        .enumerate()
        .map(|(index, plan)| {
            let (trie, items, barrier, stop, counting, counters) = (
                trie.clone(),
                items.clone(),
                barrier.clone(),
                stop.clone(),
                counting.clone(),
                counters.clone(),
            );
            thread::spawn(move || {
                let run_round = || {
                    let (mut subscribes, mut inserts, mut lookups, mut hits) = (0u64, 0u64, 0u64, 0u64);
                    for &(op, j) in &plan {
                        let item = items[j].as_str();
                        match op {
                            Op::Subscribe => {
                                subscribes += 1;
                                inserts += u64::from(black_box(trie.subscribe(item, SUBSCRIBER)));
                            }
                            Op::Lookup => {
                                lookups += 1;
                                hits += u64::from(!black_box(trie.lookup(item)).is_empty());
                            }
                        }
                    }
                    if counting.load(Ordering::Acquire) {
                        counters.subscribes.fetch_add(subscribes, Ordering::Relaxed);
                        counters.inserts.fetch_add(inserts, Ordering::Relaxed);
                        counters.lookups.fetch_add(lookups, Ordering::Relaxed);
                        counters.hits.fetch_add(hits, Ordering::Relaxed);
                    }
                };
                if index == 0 {
                    let remove_items = || {
                        for item in items.iter() {
                            trie.unsubscribe(item, SUBSCRIBER);
                        }
                    };
                    return Some(keep_time(&timing, &barrier, &stop, &counting, run_round, remove_items));
                }
                loop {
                    barrier.wait();
                    if stop.load(Ordering::Acquire) {
                        return None;
                    }
                    run_round();
                    barrier.wait();
                }
            })
        })
        .collect();
    let mut timed = None;
    for worker in workers {
        if let Some(result) = worker.join().expect("a worker thread panicked") {
            timed = Some(result);
        }
    }
    let (sample, rounds_timed) = timed.expect("thread 0 keeps the time");
    let subscribes = counters.subscribes.load(Ordering::Relaxed);
    assert_eq!(
        subscribes,
        rounds_timed * subscribes_per_round as u64,
        "every planned subscribe ran"
    );
    Measured {
        layout,
        mix,
        threads,
        ops_per_round,
        subscribes_per_round,
        ns_per_round: sample,
        samples_ns_per_round: vec![sample],
        rounds_timed,
        inserts: counters.inserts.load(Ordering::Relaxed),
        lookups: counters.lookups.load(Ordering::Relaxed),
        hits: counters.hits.load(Ordering::Relaxed),
    }
}

fn json_string(text: &str) -> String {
    // Only ever called on the ASCII names built here.
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

fn json(args: &Args, rows: &[Measured]) -> String {
    let rows: Vec<String> = rows
        .iter()
        .map(|m| {
            let samples: Vec<String> = m.samples_ns_per_round.iter().map(|s| format!("{s:.1}")).collect();
            format!(
                "{{\"name\":{},\"layout\":{},\"mix\":{},\"threads\":{},\"ops_per_round\":{},\
                 \"subscribes_per_round\":{},\"ns_per_round\":{:.1},\"ns_per_operation\":{:.3},\
                 \"ops_per_second\":{:.1},\"samples_ns_per_round\":[{}],\"rounds_timed\":{},\
                 \"inserts\":{},\"lookups\":{},\"hits\":{}}}",
                json_string(&m.name()),
                json_string(m.layout.name()),
                json_string(m.mix.name()),
                m.threads,
                m.ops_per_round,
                m.subscribes_per_round,
                m.ns_per_round,
                m.ns_per_operation(),
                m.ops_per_second(),
                samples.join(","),
                m.rounds_timed,
                m.inserts,
                m.lookups,
                m.hits,
            )
        })
        .collect();
    format!(
        "{{\"items\":{},\"populate\":{},\"warmup_ms\":{},\"sample_ms\":{},\"samples\":{},\"seed\":{},\
         \"fresh\":{},\"available_parallelism\":{},\"rows\":[{}]}}",
        args.items,
        args.populate,
        args.warmup.as_millis(),
        args.sample.as_millis(),
        args.samples,
        args.seed,
        args.fresh,
        thread::available_parallelism().map_or(0, |n| n.get()),
        rows.join(",")
    )
}

fn table(rows: &[Measured]) -> String {
    let mut out = format!(
        "{:<44} {:>7} {:>14} {:>10} {:>14} {:>12} {:>9}\n",
        "benchmark", "threads", "ns/op (round)", "ns/oper.", "ops/s", "inserts", "hit %"
    );
    for m in rows {
        let hit = if m.lookups == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", 100.0 * m.hits as f64 / m.lookups as f64)
        };
        out += &format!(
            "{:<44} {:>7} {:>14.0} {:>10.1} {:>14.0} {:>12} {:>9}\n",
            m.name(),
            m.threads,
            m.ns_per_round,
            m.ns_per_operation(),
            m.ops_per_second(),
            m.inserts,
            hit
        );
    }
    for layout in [Layout::Seed, Layout::Mixed] {
        let rate = |threads: usize| {
            rows.iter()
                .find(|m| m.layout == layout && m.mix == Mix::NinetyTen && m.threads == threads)
                .map(Measured::ops_per_second)
        };
        if let (Some(one), Some(two)) = (rate(1), rate(2)) {
            out += &format!(
                "90/10 {} layout: 2 threads do {:.2}x the ops/s of 1 thread (target >= 1.5x)\n",
                layout.name(),
                two / one
            );
        }
    }
    out
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("cstrie_workloads: {message}");
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    let mut configurations = Vec::new();
    for &layout in &args.layouts {
        for &mix in &args.mixes {
            for &threads in &args.threads {
                configurations.push((layout, mix, threads));
            }
        }
    }
    let mut rows: Vec<Measured> = Vec::with_capacity(configurations.len());
    for pass in 0..args.samples {
        for (index, &(layout, mix, threads)) in configurations.iter().enumerate() {
            let sample = measure(&args, layout, mix, threads);
            eprintln!(
                "[{:7.1}s] pass {}/{}: {}: {:.0} ns/op ({:.1} ns per operation)",
                began.elapsed().as_secs_f64(),
                pass + 1,
                args.samples,
                sample.name(),
                sample.ns_per_round,
                sample.ns_per_operation()
            );
            match rows.get_mut(index) {
                Some(row) => row.absorb(sample),
                None => rows.push(sample),
            }
        }
    }
    if args.json {
        println!("{}", json(&args, &rows));
    } else {
        print!("{}", table(&rows));
    }
    ExitCode::SUCCESS
}
