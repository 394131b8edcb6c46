//! The dense lock graph of messy code: `threads` workers, started together and running one
//! after another (by timing only: nothing but their creation orders them), each taking
//! `pairs` nested pairs of two distinct mutexes out of `locks`, chosen at random (a fixed
//! xorshift seed, so the trace is the same on every run). With 32 locks every ordered pair is
//! an edge (992), and the class graph is one strongly connected component with about 2·10^5
//! elementary cycles of up to 4 locks.

use foresight_trace::builder::TraceBuilder;

pub struct Dense {
    pub threads: usize,
    pub pairs: usize,
    pub locks: usize,
    /// Each worker is created after the previous one was joined: everything is ordered, so
    /// nothing is predicted and every cycle is potential (the prediction's worst case: every
    /// candidate is checked and rejected).
    pub joined: bool,
}

/// Four threads, 2,000 pairs each, 32 locks.
pub const DEFAULT: Dense = Dense {
    threads: 4,
    pairs: 2_000,
    locks: 32,
    joined: false,
};

pub fn dense_trace(d: &Dense) -> Vec<u8> {
    let mut b = TraceBuilder::new("dense");
    let main = b.main_thread();
    let locks: Vec<_> = (0..d.locks).map(|i| b.mutex(&format!("m{i}"))).collect();
    let spawn = b.site("main", "dense.c", 30);
    let join = b.site("main", "dense.c", 32);
    let outer = b.site("worker", "dense.c", 12);
    let inner = b.site("worker", "dense.c", 13);
    let unlock_inner = b.site("worker", "dense.c", 14);
    let unlock_outer = b.site("worker", "dense.c", 15);
    let mut workers = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    if !d.joined {
        workers = (0..d.threads)
            .map(|i| b.spawn(main, spawn, &format!("worker-{i}")))
            .collect();
    }
    for i in 0..d.threads {
        let w = if d.joined {
            let w = b.spawn(main, spawn, &format!("worker-{i}"));
            workers.push(w);
            w
        } else {
            workers[i]
        };
        for _ in 0..d.pairs {
            let i = (next() % d.locks as u64) as usize;
            let mut j = (next() % (d.locks as u64 - 1)) as usize;
            if j >= i {
                j += 1;
            }
            b.lock(w, locks[i], outer);
            b.lock(w, locks[j], inner);
            b.unlock(w, locks[j], unlock_inner);
            b.unlock(w, locks[i], unlock_outer);
        }
        if d.joined {
            b.join(main, w, join);
        } else {
            b.exit(w);
        }
    }
    if !d.joined {
        for &w in &workers {
            b.join(main, w, join);
        }
    }
    b.finish()
}
