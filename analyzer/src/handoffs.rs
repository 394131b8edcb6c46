//! Which writes a hand-off read took (pipes, socketpairs, eventfds: FORMAT.md §6.6.1), for the
//! happens-before edges write → read (`hb.rs`, `EdgeKinds::HANDOFF`).
//!
//! A channel is a queue: a read takes the oldest bytes written and not yet taken (an eventfd's
//! counter units likewise; a datagram channel's read takes one whole message). So each channel
//! keeps its writes not yet taken, oldest first, with the writer's clock at the write and the
//! amount left; a read joins the clocks of the writes whose bytes it took. A read that takes
//! more than the trace wrote (a writer the trace does not show: another process, a segment
//! before) takes what there is. Writes of concurrent writers are queued in the merged order,
//! which is the order the recorder took their keys in, before their real calls: exact for
//! writes ordered by synchronisation, a guess for racing ones.

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt};

use crate::vector_clock::VectorClock;

/// Writes kept per channel before the oldest two are merged (a channel that is written and
/// never read must not grow without bound): the merged write stands for both, and a read of
/// either joins both clocks — more order, so fewer predictions, never a wrong one.
const KEPT_PER_CHANNEL: usize = 4096;

#[derive(Debug, Default)]
pub struct HandoffQueues {
    queues: HashMap<u32, VecDeque<(u64, VectorClock)>>,
}

impl HandoffQueues {
    pub fn new() -> Self {
        HandoffQueues {
            queues: HashMap::new(),
        }
    }

    /// A write of `amount` into `channel` by a thread whose clock is `clock`; returns the clock
    /// entries it stored.
    pub fn write(&mut self, channel: u32, amount: u64, clock: &VectorClock) -> usize {
        if amount == 0 {
            return 0;
        }
        let q = self.queues.entry(channel).or_default();
        if q.len() >= KEPT_PER_CHANNEL {
            if let (Some((a1, c1)), Some((a2, c2))) = (q.pop_front(), q.pop_front()) {
                let mut c = c1;
                c.join(&c2);
                q.push_front((a1.saturating_add(a2), c));
            }
        }
        q.push_back((amount, clock.clone()));
        clock.entries().len()
    }

    /// A read that took `amount` out of `channel` (`by_message`: one whole write): the joined
    /// clocks of the writes it took from, `None` when it took from none the trace shows.
    pub fn read(&mut self, channel: u32, amount: u64, by_message: bool) -> Option<VectorClock> {
        let q = self.queues.get_mut(&channel)?;
        if by_message {
            return q.pop_front().map(|(_, c)| c);
        }
        let mut left = amount;
        let mut joined: Option<VectorClock> = None;
        while left > 0 {
            let Some((have, clock)) = q.front_mut() else {
                break;
            };
            match &mut joined {
                Some(j) => {
                    j.join(clock);
                }
                None => joined = Some(clock.clone()),
            }
            if *have > left {
                *have -= left;
                left = 0;
            } else {
                left -= *have;
                q.pop_front();
            }
        }
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(entries: &[u32]) -> VectorClock {
        let mut c = VectorClock::default();
        for (i, &v) in entries.iter().enumerate() {
            c.set(i, v);
        }
        c
    }

    #[test]
    fn a_read_joins_the_writes_whose_bytes_it_took_oldest_first() {
        let mut q = HandoffQueues::new();
        q.write(1, 4, &clock(&[1, 0, 0]));
        q.write(1, 4, &clock(&[0, 1, 0]));
        q.write(1, 4, &clock(&[0, 0, 1]));
        // Two bytes of the first write.
        assert_eq!(q.read(1, 2, false), Some(clock(&[1, 0, 0])));
        // The rest of the first and all of the second.
        assert_eq!(q.read(1, 6, false), Some(clock(&[1, 1, 0])));
        // Another channel took nothing.
        assert_eq!(q.read(2, 6, false), None);
        // More than is left: the third, and nothing else to take.
        assert_eq!(q.read(1, 100, false), Some(clock(&[0, 0, 1])));
        assert_eq!(q.read(1, 1, false), None);
    }

    #[test]
    fn a_datagram_read_takes_one_message() {
        let mut q = HandoffQueues::new();
        q.write(3, 10, &clock(&[1]));
        q.write(3, 10, &clock(&[2]));
        assert_eq!(q.read(3, 4, true), Some(clock(&[1])));
        assert_eq!(q.read(3, 10, true), Some(clock(&[2])));
    }

    #[test]
    fn a_long_queue_merges_its_oldest_writes() {
        let mut q = HandoffQueues::new();
        for i in 0..KEPT_PER_CHANNEL as u32 + 1 {
            q.write(1, 1, &clock(&[i + 1]));
        }
        // The first two writes are one now: taking one byte orders after both.
        assert_eq!(q.read(1, 1, false), Some(clock(&[2])));
        assert_eq!(q.read(1, 1, false), Some(clock(&[2])));
        assert_eq!(q.read(1, 1, false), Some(clock(&[3])));
    }
}
