//! The race pass split over two threads by address share (`races::drive_split`) finds exactly
//! what one pass finds, whatever the share, on traces with races, candidates, locks held for
//! read and write, atomics, heap blocks freed and allocated again, accesses that span granules
//! (and so both shares), accesses a compact record cannot hold, and a thread whose creation is
//! missing.

use foresight_analyzer::model::{drive_run_split, walk, ModelPass};
use foresight_analyzer::races::{drive_split, Balance, RaceOutput, RacePass, SplitBalance, SHARES};
use foresight_analyzer::stream::{Pass, Runs, Stream};
use foresight_trace::builder::TraceBuilder;
use foresight_trace::event::{AtomicOp, EventKind, LockMode, MemoryOrder};
use foresight_trace::TraceStream;

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random program of `steps` steps: four workers and a thread whose creation is lost, over
/// globals, a heap block freed and allocated again, and an address past what one record
/// holds.
fn program(seed: u64, steps: usize, many_sites: bool) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut b = TraceBuilder::new("split");
    b.chunk_bytes(4096);
    let main = b.main_thread();
    let s = b.site("main", "t.c", 1);
    let mut sites: Vec<u32> = (0..40).map(|l| b.site("f", "t.c", 10 + l)).collect();
    if many_sites {
        // Site ids past what a one-word record holds (2^14 - 3).
        for l in 0..(1 << 14) {
            let site = b.site("g", "u.c", l);
            if l % 1024 == 1023 {
                sites.push(site);
            }
        }
    }
    let hand_off: Vec<_> = (0..20)
        .map(|i| (b.site("h", "h.c", 2 * i), b.site("h", "h.c", 2 * i + 1)))
        .collect();
    let mut hand_offs = 0;
    let hand_lock = b.mutex("hand");
    let locks: Vec<_> = (0..3).map(|i| b.mutex(&format!("m{i}"))).collect();
    let workers: Vec<_> = (0..4).map(|i| b.spawn(main, s, &format!("w{i}"))).collect();
    let lost = b.spawn_unrecorded(main, "lost");
    const GLOBALS: u64 = 0x1000;
    const HEAP: u64 = 0x7f00_0000_1000;
    const FAR: u64 = 0xffff_8000_0000_0040;
    let mut held: Vec<Vec<u32>> = vec![Vec::new(); workers.len()];
    let mut heap_live = false;
    for _ in 0..steps {
        let w = rng.below(workers.len() as u64) as usize;
        let t = workers[w];
        let site = sites[rng.below(sites.len() as u64) as usize];
        let addr = match rng.below(10) {
            0..=5 => GLOBALS + rng.below(96),
            6 | 7 => HEAP + rng.below(64),
            8 => FAR + rng.below(16),
            _ => GLOBALS + 8 * rng.below(12),
        };
        let size = [1, 2, 4, 8, 8, 4, 16, 12, 3, 4096][rng.below(10) as usize];
        match rng.below(40) {
            0..=11 => b.read(t, addr, size, site),
            12..=22 => b.write(t, addr, size, site),
            23..=26 => {
                // A critical section (held for read now and then), or its end.
                let l = rng.below(locks.len() as u64) as usize;
                if let Some(i) = held[w].iter().position(|&h| h == locks[l]) {
                    held[w].remove(i);
                    b.unlock(t, locks[l], site);
                } else {
                    let mode = if rng.below(4) == 0 {
                        LockMode::Shared
                    } else {
                        LockMode::Exclusive
                    };
                    held[w].push(locks[l]);
                    b.lock_mode(t, locks[l], mode, site);
                }
            }
            27..=29 => {
                let op = [
                    AtomicOp::Load,
                    AtomicOp::Store,
                    AtomicOp::Rmw,
                    AtomicOp::CasSuccess,
                    AtomicOp::CasFailure,
                ][rng.below(5) as usize];
                // Mostly relaxed: ordering everything would leave nothing to find.
                let order = [
                    MemoryOrder::Relaxed,
                    MemoryOrder::Relaxed,
                    MemoryOrder::Relaxed,
                    MemoryOrder::Relaxed,
                    MemoryOrder::Acquire,
                    MemoryOrder::Release,
                    MemoryOrder::SeqCst,
                ][rng.below(7) as usize];
                let size = [4, 8, 16][rng.below(3) as usize];
                b.event(
                    t,
                    EventKind::Atomic {
                        op,
                        addr,
                        size,
                        order,
                        site,
                    },
                );
            }
            30 => {
                if rng.below(8) == 0 {
                    b.event(
                        t,
                        EventKind::Fence {
                            order: MemoryOrder::SeqCst,
                            site,
                        },
                    );
                }
            }
            31 | 32 => {
                // The heap block: freed, then allocated again (a new object).
                if heap_live {
                    b.event(t, EventKind::Free { addr: HEAP, site });
                } else {
                    b.event(
                        t,
                        EventKind::Alloc {
                            addr: HEAP,
                            size: 64,
                            site,
                        },
                    );
                }
                heap_live = !heap_live;
            }
            33 => b.write(lost, GLOBALS + rng.below(32), 4, site),
            35 if hand_offs < hand_off.len() => {
                // A hand-off that only a lock orders, the two accesses holding no common
                // lock: a candidate per element, more than are kept, each instance in its own
                // granule (and so in either share).
                let o = (w + 1 + rng.below(3) as usize) % workers.len();
                let other = workers[o];
                let (a, c) = hand_off[hand_offs];
                let x = 0x10_0000 + 0x1000 * hand_offs as u64;
                hand_offs += 1;
                b.lock(t, hand_lock, site);
                for k in 0..24 {
                    b.write(t, x + 8 * k, 8, a);
                }
                b.unlock(t, hand_lock, site);
                b.lock(other, hand_lock, site);
                b.unlock(other, hand_lock, site);
                for k in 0..24 {
                    b.write(other, x + 8 * k + 4 * (k % 2), 4, c);
                }
            }
            _ => {
                // A run of accesses to one line, as a loop makes.
                let base = GLOBALS + 4 * rng.below(16);
                for k in 0..rng.below(40) {
                    if k % 3 == 2 {
                        b.write(t, base + 4 * (k % 4), 4, site);
                    } else {
                        b.read(t, base + 4 * (k % 4), 4, site);
                    }
                }
            }
        }
    }
    for (w, &t) in workers.iter().enumerate() {
        for &l in held[w].clone().iter().rev() {
            b.unlock(t, l, s);
        }
        b.join(main, t, s);
    }
    b.finish()
}

/// What a pass found, with lockset ids replaced by the locks they stand for (ids are
/// interned in a different order when the pass is split).
fn normalised(out: &RaceOutput) -> String {
    let access = |a: &foresight_analyzer::races::RaceAccess| {
        format!(
            "{}@{} site {} {:?} {:#x}+{} locks {:?} block {:?} var {:?}",
            a.access.thread,
            a.access.pos,
            a.access.site,
            a.access.kind,
            a.access.addr,
            a.access.size,
            out.locksets.get(a.access.lockset),
            a.block,
            a.variable
        )
    };
    let pair = |p: &[foresight_analyzer::races::RaceAccess; 2]| {
        format!("[{} / {}]", access(&p[0]), access(&p[1]))
    };
    let mut s = format!(
        "accesses {} evicted {} orphans {} complete {}\n",
        out.accesses, out.evicted, out.orphan_accesses, out.complete
    );
    for r in &out.races {
        s += &format!("race x{} {}\n", r.count, pair(&r.first));
    }
    for c in &out.candidates {
        s += &format!("candidate x{}\n", c.count);
        for p in &c.instances {
            s += &format!("  first {}\n", pair(p));
        }
        for p in c.kept() {
            s += &format!("  kept {}\n", pair(p));
        }
    }
    s
}

fn one_pass(file: &TraceStream) -> RaceOutput {
    let mut pass = RacePass::new(file.threads().count(), Some(file.tables()));
    let mut merged = file.merged();
    Stream::of_stream(file).walk(Runs(&mut merged), &mut pass, &mut |_| {});
    pass.finish()
}

fn split(file: &TraceStream, share: u32) -> (u64, RaceOutput) {
    let (read, out, end) = split_balanced(file, Balance::Fixed(share));
    assert_eq!(end.moves, 0, "a fixed share does not move");
    (read, out)
}

fn split_balanced(file: &TraceStream, balance: Balance) -> (u64, RaceOutput, SplitBalance) {
    let mut merged = file.merged();
    let threads = file.threads().count();
    let walk = Stream::of_stream(file);
    drive_split(
        &walk,
        &mut merged,
        threads,
        Some(file.tables()),
        balance,
        &mut |_| {},
    )
}

#[test]
fn a_split_pass_finds_what_one_pass_finds_whatever_the_share() {
    for (seed, many_sites) in [
        (0x9e37_79b9, false),
        (0x2545_f491, false),
        (0x1234_5678, true),
    ] {
        let bytes = program(seed, 6000, many_sites);
        let file = TraceStream::from_bytes("split.trace", bytes).expect("trace streams");
        let want = one_pass(&file);
        assert!(!want.races.is_empty(), "the program races");
        assert!(!want.candidates.is_empty(), "the program has candidates");
        assert!(
            want.orphan_accesses > 0,
            "the lost thread's accesses are left out"
        );
        assert!(
            want.candidates
                .iter()
                .any(|c| c.count as usize > c.instances.len()),
            "some candidate has more instances than it keeps"
        );
        let want_text = normalised(&want);
        for share in [0, 1, 6, 32, SHARES - 1, SHARES] {
            let (read, got) = split(&file, share);
            assert_eq!(read, file.merged().count() as u64);
            assert_eq!(
                normalised(&got),
                want_text,
                "seed {seed:#x}, front share {share}"
            );
        }
        // Granules moving between the threads while the pass runs, both ways, from the
        // first batches on.
        for balance in [
            Balance::Alternate { start: 1, every: 1 },
            Balance::Alternate {
                start: 32,
                every: 1,
            },
            Balance::Alternate {
                start: 40,
                every: 3,
            },
            Balance::Adaptive(15),
        ] {
            let (read, got, end) = split_balanced(&file, balance);
            assert_eq!(read, file.merged().count() as u64);
            assert_eq!(normalised(&got), want_text, "seed {seed:#x}, {balance:?}");
            if let Balance::Alternate { .. } = balance {
                assert!(
                    end.moves > 0,
                    "seed {seed:#x}, {balance:?}: no bucket moved"
                );
            }
        }
    }
}

#[test]
fn a_split_pass_crosses_many_batches_of_plain_accesses() {
    // Long runs of accesses (most of them compact records), a race far apart.
    let mut b = TraceBuilder::new("long");
    let main = b.main_thread();
    let s = b.site("main", "t.c", 1);
    let r = b.site("f", "t.c", 2);
    let w = b.site("f", "t.c", 3);
    let t1 = b.spawn(main, s, "t1");
    let t2 = b.spawn(main, s, "t2");
    for round in 0..200u64 {
        for &t in &[t1, t2] {
            for k in 0..300u64 {
                b.read(t, 0x10_0000 + 8 * ((k * 7 + round) % 512), 8, r);
            }
            b.write(t, 0x20_0000 + 8 * (round % 4), 8, w);
        }
    }
    b.join(main, t1, s);
    b.join(main, t2, s);
    let file = TraceStream::from_bytes("long.trace", b.finish()).expect("trace streams");
    let want = normalised(&one_pass(&file));
    for share in [0, 5, 40] {
        assert_eq!(
            normalised(&split(&file, share).1),
            want,
            "front share {share}"
        );
    }
    for balance in [
        Balance::Alternate { start: 5, every: 1 },
        Balance::Alternate {
            start: 40,
            every: 2,
        },
    ] {
        let (_, got, end) = split_balanced(&file, balance);
        assert_eq!(normalised(&got), want, "{balance:?}");
        assert!(end.moves > 4, "{balance:?}: {} moves", end.moves);
    }
}

#[test]
fn the_model_beside_a_split_race_pass_reads_the_same_run() {
    let bytes = program(0x5151_5151, 3000, false);
    let file = TraceStream::from_bytes("split.trace", bytes).expect("trace streams");
    let model = || ModelPass::of_stream(&file, "split.trace");
    let stream_walk = Stream::of_stream(&file);
    let mut merged = file.merged();
    let one = walk(
        &stream_walk,
        model(),
        Runs(&mut merged),
        &mut |_| {},
        0,
        &mut |_| {},
        None,
    );
    let mut merged = file.merged();
    let two = drive_run_split(&stream_walk, model(), &mut merged, &mut |_| {});
    assert_eq!(one.events, two.events);
    assert_eq!(normalised(&one.races), normalised(&two.races));
    assert_eq!(one.acquisitions.len(), two.acquisitions.len());
}
