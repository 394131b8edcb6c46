//! `foresight analyze --explain RULE`: the long "why" of each rule, said once here instead of
//! under every finding. A kind's description is the one SARIF's `tool.driver.rules` carries; a
//! rule adds how foresight finds it, what to do, and a small example.

use strum::VariantArray;

use super::{Kind, Rule};

/// A kind's description: (short, full), SARIF's rule descriptions and the start of
/// `--explain`.
pub(crate) fn kind_description(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Deadlock => (
            "Predicted deadlock: a reordering of a recorded run deadlocks",
            "Threads take locks in a cycle, and a sync-preserving reordering of one recorded run \
             reaches the point where every thread of the cycle is blocked.",
        ),
        Kind::PotentialDeadlock => (
            "Inconsistent lock order between lock classes",
            "Some code takes lock class A then B, other code B then A (or a longer cycle). No \
             reordering of a recorded run was found to deadlock, but the order is a design \
             defect independent of timing.",
        ),
        Kind::JoinDeadlock => (
            "Joining a thread while holding a lock it needs",
            "A thread holds a lock while it joins a thread that requests that lock before \
             exiting.",
        ),
        Kind::BarrierDeadlock => (
            "Waiting at a barrier while holding a lock another participant needs",
            "A thread holds a lock at a barrier that another participant reaches only after \
             taking that lock.",
        ),
        Kind::WaitDeadlock => (
            "Waiting on a condition, a semaphore or a pipe while holding a lock the waker needs",
            "A thread holds a lock (other than the condition's own mutex) while it waits for a \
             signal, a post or bytes in a pipe, socketpair or eventfd that the other thread \
             sends only after taking that lock.",
        ),
        Kind::RwlockDeadlock => (
            "Recursive read lock against a writer",
            "A thread read-locks an rwlock it already holds for read while another thread \
             write-locks it: deadlocks with writer-preferring rwlocks.",
        ),
        Kind::RankViolation => (
            "Lock acquired against the declared lock ranks",
            "Locks annotated with ranks must be acquired in increasing rank: a lock was \
             acquired while a lock of the same or a higher rank was held.",
        ),
        Kind::ObservedDeadlock => (
            "Observed deadlock: the recorded run was stuck in it",
            "When the trace ended, threads were blocked waiting for each other in a cycle (a \
             lock held by the next thread, or by the thread itself, a join, a once routine): \
             none could return. It happened in the recorded run; it is not a prediction.",
        ),
        Kind::ObservedStall => (
            "Observed stall: threads blocked when the run was stopped",
            "When the run was stopped (a signal, the hang timeout), threads were blocked in \
             joins, barriers, condition or semaphore waits, or in lock requests behind them, \
             with no cycle among them: what each held and waited for.",
        ),
        Kind::BlockingUnderLock => (
            "Blocking call made while holding a lock",
            "A thread held a lock across a call that can block for as long as another thread \
             or process decides (I/O on a pipe or socket, a poll, a sleep, a wait for a child, \
             fsync): every thread that needs the lock waits as long, and if the call waits for \
             one of them, they deadlock.",
        ),
        Kind::SignalUnsafeLock => (
            "Lock taken in a signal handler",
            "A signal handler took a lock. No lock function is async-signal-safe, and where \
             the same lock is also held outside the handler with the signal unblocked, the \
             handler can interrupt a thread holding it: the handler then waits for a lock its \
             own thread will never release (a self-deadlock for a default mutex).",
        ),
        Kind::Race => (
            "Data race: two threads access the same memory with nothing ordering them",
            "Two threads access the same memory, at least one writes, not both atomically, and \
             either nothing orders the two accesses in a recorded run (happens-before), or a \
             sync-preserving reordering of the run makes them run back to back, or a \
             reordering that runs a later critical section before an earlier one on the same \
             lock, every read keeping its writer, does (sync-reversal).",
        ),
    }
}

/// The kind a rule's findings have (the first, for rules of two verdicts of one kind).
pub(crate) fn kind_of(rule: Rule) -> Kind {
    match rule {
        Rule::LockCycle => Kind::Deadlock,
        Rule::LockOrder | Rule::SameClassNesting => Kind::PotentialDeadlock,
        Rule::JoinWhileHolding => Kind::JoinDeadlock,
        Rule::BarrierWhileHolding => Kind::BarrierDeadlock,
        Rule::CondWaitWhileHolding | Rule::SemWaitWhileHolding | Rule::HandoffReadWhileHolding => {
            Kind::WaitDeadlock
        }
        Rule::RwlockReadRecursion => Kind::RwlockDeadlock,
        Rule::LockRank => Kind::RankViolation,
        Rule::HappensBefore | Rule::SyncPreserving | Rule::SyncReversal => Kind::Race,
        Rule::BlockedSelfLock | Rule::BlockedLockCycle | Rule::BlockedWaitCycle => {
            Kind::ObservedDeadlock
        }
        Rule::BlockedWait => Kind::ObservedStall,
        Rule::BlockingWhileHolding => Kind::BlockingUnderLock,
        Rule::HandlerInterruptsHolder | Rule::LockInHandler => Kind::SignalUnsafeLock,
    }
}

/// (how foresight finds it, what to do, an example in C).
fn rule_detail(rule: Rule) -> (&'static str, &'static str, &'static str) {
    const INVERSION: &str = "\
void *pay(void *a)    { lock(&accounts); lock(&ledger);   /* ... */ unlock(&ledger); unlock(&accounts); }
void *refund(void *a) { lock(&ledger);   lock(&accounts); /* ... */ unlock(&accounts); unlock(&ledger); }";
    const TAKE_IN_ONE_ORDER: &str = "Take the locks in one global order everywhere (here \
        accounts before ledger), or merge them into one lock; a lock taken only to reach the \
        other can often be released first.";
    match rule {
        Rule::LockCycle => (
            "The requests of a cycle of lock acquisitions are in distinct threads, hold no \
             common lock, and the sync-preserving closure of the events before them (thread \
             order, create/join, barriers, once, semaphores, conditions; critical sections \
             kept in trace order) contains none of them: running that closure first leaves \
             every thread of the cycle blocked. The witness is that schedule; the recorded run \
             itself did not need to deadlock.",
            TAKE_IN_ONE_ORDER,
            INVERSION,
        ),
        Rule::LockOrder => (
            "The class-level lock-order graph (an edge A -> B: a thread requested B holding A) \
             has a cycle, but no instance of it could be predicted: the edges are ordered by \
             happens-before, share a gate lock, come from one thread, from different traces or \
             segments, or their critical sections cannot be reordered. The reason under the \
             finding says which. Another run, another input or another caller can still \
             deadlock.",
            TAKE_IN_ONE_ORDER,
            INVERSION,
        ),
        Rule::SameClassNesting => (
            "Two locks of one class (initialised at one line, or one named class) were nested, \
             and no instance-level cycle was predicted: code that locks two of them in an \
             order that depends on its arguments deadlocks when two threads pass them the \
             other way round.",
            "Nest locks of one class in a fixed order of the objects (by id or address), or \
             declare the order with foresight_lock_subclass / a rank (recorder/include/\
             foresight.h) when it is already fixed.",
            "\
void transfer(struct account *from, struct account *to) {
    lock(&from->m); lock(&to->m);   /* transfer(a, b) and transfer(b, a) deadlock */
    /* ... */
    unlock(&to->m); unlock(&from->m);
}",
        ),
        Rule::JoinWhileHolding => (
            "A thread joins another while holding a lock that the joined thread requests \
             before it exits; predicted when a sync-preserving reordering has the joiner \
             holding the lock before the other thread's request.",
            "Release the lock before pthread_join, or have the thread finish its locked work \
             before the join is reached.",
            "\
lock(&state);
pthread_join(worker, NULL);   /* worker calls lock(&state) before returning */
unlock(&state);",
        ),
        Rule::BarrierWhileHolding => (
            "A thread waits at a barrier holding a lock that another participant takes before \
             it reaches the barrier: the holder waits for it at the barrier, it waits for the \
             lock.",
            "Release locks before pthread_barrier_wait.",
            "\
lock(&m); pthread_barrier_wait(&b); unlock(&m);   /* thread 1 */
lock(&m); unlock(&m); pthread_barrier_wait(&b);   /* thread 2 */",
        ),
        Rule::CondWaitWhileHolding => (
            "A thread waits on a condition variable holding a lock other than the \
             condition's own mutex (pthread_cond_wait releases only that one), and the thread \
             that signals takes that other lock first.",
            "Release the other lock before waiting, or signal without taking it.",
            "\
lock(&outer); lock(&m); while (!ready) pthread_cond_wait(&c, &m); unlock(&m); unlock(&outer);
lock(&outer); lock(&m); ready = 1; pthread_cond_signal(&c); unlock(&m); unlock(&outer);",
        ),
        Rule::SemWaitWhileHolding => (
            "A thread waits on a semaphore holding a lock that the thread which posts it takes \
             before the post.",
            "Release the lock before sem_wait, or post before taking the lock.",
            "\
lock(&m); sem_wait(&s); unlock(&m);   /* thread 1 */
lock(&m); sem_post(&s); unlock(&m);   /* thread 2 */",
        ),
        Rule::HandoffReadWhileHolding => (
            "A thread blocks reading a pipe, socketpair or eventfd made in the process while \
             holding a lock that the thread which writes it takes before the write: a \
             hand-off like a semaphore's post and wait. Predicted when a sync-preserving \
             reordering has the reader blocked with the channel empty and the writer blocked \
             on the lock.",
            "Release the lock before the read, or write before taking the lock.",
            "\
lock(&m); read(fds[0], &job, sizeof job); unlock(&m);    /* thread 1 */
lock(&m); write(fds[1], &job, sizeof job); unlock(&m);   /* thread 2 */",
        ),
        Rule::RwlockReadRecursion => (
            "A thread read-locks an rwlock it already read-holds while another thread requests \
             it for writing, and that request can come between the two reads. A \
             writer-preferring rwlock queues the second read behind the writer, which waits \
             for the first read. glibc's default prefers readers, so this is potential.",
            "Do not take a read lock recursively: pass the fact that it is held down to the \
             inner code.",
            "\
pthread_rwlock_rdlock(&rw); lookup(); pthread_rwlock_unlock(&rw);  /* lookup() read-locks rw again */
pthread_rwlock_wrlock(&rw); /* ... */ pthread_rwlock_unlock(&rw);  /* another thread */",
        ),
        Rule::LockRank => (
            "Locks given ranks with foresight_lock_rank (recorder/include/foresight.h) must be \
             acquired in increasing rank; a lock was requested while a lock of the same or a \
             higher rank was held. Whatever the schedule, the declared discipline is broken. \
             Trylocks and locks without a rank are not checked.",
            "Acquire in rank order, or change the declared ranks if the order is the intended \
             one.",
            "\
foresight_lock_rank(&db, 1); foresight_lock_rank(&cache, 2);
lock(&cache); lock(&db);   /* rank 1 requested holding rank 2 */",
        ),
        Rule::HappensBefore => (
            "The two accesses are unordered by C11 happens-before in the recorded run \
             (create/join, locks, barriers, once, semaphores, conditions, release/acquire \
             atomics and fences, annotations): a data race of the run itself, undefined \
             behaviour in C and C++.",
            "Protect the variable with one lock on every access, or make it atomic.",
            "\
int hits;                               /* shared */
void *worker(void *a) { hits++; return NULL; }   /* two threads, no lock */",
        ),
        Rule::SyncPreserving => (
            "The recorded run ordered the two accesses only through lock hand-offs (one \
             thread released a lock the other took later) while they hold no common lock: a \
             reordering that keeps every critical section's order, every read's writer and all \
             other synchronisation runs the two back to back. The witness is that schedule. \
             Happens-before alone cannot see it.",
            "Protect the variable with the lock its other accesses hold, or make it atomic.",
            "\
void *a(void *p) { total = 1; lock(&m); n++; unlock(&m); return NULL; }
void *b(void *p) { lock(&m); n++; unlock(&m); print(total); return NULL; } /* races with a's write */",
        ),
        Rule::SyncReversal => (
            "No sync-preserving reordering exposes the pair, because a critical section one \
             access sits in came first on its lock; a reordering that runs the later \
             conflicting sections on that lock first (every read keeping its writer, every \
             lock free when taken) enables both accesses at once. The witness marks the \
             sections moved ahead (`moved ahead of …`).",
            "Protect the variable with one lock on every access, or make it atomic; a flag set \
             under a lock does not order the accesses made outside it.",
            "\
void *a(void *p) { data = 1; lock(&m); flag = 1; unlock(&m); return NULL; }
void *b(void *p) { lock(&m); int f = flag; unlock(&m); if (!f) data = 2; return NULL; }",
        ),
        Rule::BlockedSelfLock => (
            "When the trace ended, a thread was requesting a non-recursive lock it held itself \
             (or write-requesting an rwlock it read-held): it can never return.",
            "Do not re-lock a held mutex: split the function into a locked and an unlocked \
             part, or make the lock recursive on purpose.",
            "lock(&m); helper();   /* helper() calls lock(&m) again */",
        ),
        Rule::BlockedLockCycle => (
            "When the trace ended, threads were blocked in a cycle of lock requests, each lock \
             held by the next thread of the cycle (a read request behind a queued writer waits \
             for that writer): the recorded run deadlocked.",
            TAKE_IN_ONE_ORDER,
            INVERSION,
        ),
        Rule::BlockedWaitCycle => (
            "When the trace ended, threads were blocked in a cycle with a join or a \
             pthread_once in it: a thread joining one that waits for a lock it holds, a once \
             routine that waits for its own caller.",
            "Release the lock before the join, or break the cycle the report lists.",
            "\
lock(&state); pthread_join(worker, NULL);   /* worker is blocked in lock(&state) */",
        ),
        Rule::BlockedWait => (
            "When the run was stopped (a signal other than Ctrl-C or SIGTERM through record, \
             record --hang-timeout, recording stopped early; not when the program exited by \
             itself), threads were blocked with no cycle among them: in a join, at a barrier, \
             in a condition or semaphore wait, or requesting a lock held by a thread that was \
             running, had exited, was in a timed wait or was itself stalled.",
            "Look at what each blocked thread waited for: a signal never sent, a lock never \
             released by a thread that exited, a join of a thread that never ends.",
            "\
lock(&m); if (error) return NULL;   /* exits holding m */
/* every later lock(&m) waits forever */",
        ),
        Rule::BlockingWhileHolding => (
            "A thread held locks across a call that can block for as long as another thread \
             or process decides: read/write on a pipe, FIFO or socket, recv/send, accept, \
             connect, poll, select, epoll_wait, a sleep of 1 ms or more, a wait for a child, \
             fsync. Not reported: calls that cannot block (O_NONBLOCK, a zero timeout), I/O on \
             a regular file, back-off sleeps under 1 ms.",
            "Do the blocking call outside the lock: copy what it needs under the lock, release \
             it, then call.",
            "\
lock(&queue_lock);
read(pipe_fd, &c, 1);   /* every thread that needs queue_lock waits for the pipe */
unlock(&queue_lock);",
        ),
        Rule::HandlerInterruptsHolder => (
            "The recorder marks the events a thread records inside a handler the program \
             installed (sigaction, signal, sigset) and records each thread's signal mask \
             (pthread_sigmask, sigprocmask, the mask a thread starts with). A lock class taken \
             in the handler for signal S and also outside any handler by a thread that did not \
             block S then is reported with both sites: S may arrive while that thread holds \
             the lock. Not reported: both sides read locks of an rwlock, or the handler only \
             tries the lock.",
            "Do not lock in a handler: set a volatile sig_atomic_t flag (or write to a pipe, \
             sem_post) and do the work in normal context, or handle the signal in a thread of \
             its own with sigwait. At the least block S (pthread_sigmask) around every \
             critical section of the lock.",
            "\
void on_usr1(int s) { lock(&stats_lock); hits++; unlock(&stats_lock); }
/* main: */ lock(&stats_lock); hits++; unlock(&stats_lock);  /* SIGUSR1 here: deadlock */",
        ),
        Rule::LockInHandler => (
            "Every lock call recorded inside a signal handler, one finding per site: POSIX \
             lists no lock function as async-signal-safe (pthread_mutex_lock, the rwlock and \
             spin locks), so a handler that calls one may corrupt or deadlock the lock it \
             interrupted, even where the program blocks the signal around the lock.",
            "Move the work out of the handler: set a volatile sig_atomic_t flag and act on it \
             in normal context, or wait for the signal with sigwait in a thread of its own.",
            "\
static volatile sig_atomic_t reload;
void on_hup(int s) { reload = 1; }   /* no lock in the handler */",
        ),
    }
}

/// The rules a name given to `--explain` means: a rule (`sync-reversal`) or a kind of finding
/// (`wait-deadlock`: each of its rules). `None` for a name that is neither.
pub fn rules_named(name: &str) -> Option<Vec<Rule>> {
    let name = name.trim().to_ascii_lowercase().replace(['_', ' '], "-");
    if let Some(&rule) = Rule::VARIANTS.iter().find(|r| r.to_string() == name) {
        return Some(vec![rule]);
    }
    let kind = Kind::VARIANTS.iter().find(|k| k.name() == name)?;
    Some(
        Rule::VARIANTS
            .iter()
            .copied()
            .filter(|&r| kind_of(r) == *kind)
            .collect(),
    )
}

/// Every name `--explain` knows, kinds first, for the message that lists them.
pub fn known_names() -> Vec<String> {
    let mut names: Vec<String> = Kind::VARIANTS
        .iter()
        .map(|k| k.name().to_string())
        .collect();
    for r in Rule::VARIANTS {
        let r = r.to_string();
        if !names.contains(&r) {
            names.push(r);
        }
    }
    names
}

/// The explanation of `rules`, as `--explain` prints it.
pub fn explain(rules: &[Rule]) -> String {
    let mut out = String::new();
    let mut kinds_said = Vec::new();
    for &rule in rules {
        let kind = kind_of(rule);
        let (short, full) = kind_description(kind);
        let (how, fix, example) = rule_detail(rule);
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("{kind} (rule {rule}): {short}\n\n"));
        if !kinds_said.contains(&kind) {
            out.push_str(&wrap(full, ""));
            out.push('\n');
            kinds_said.push(kind);
        }
        out.push_str(&wrap(how, "How foresight finds it: "));
        out.push_str(&wrap(fix, "What to do: "));
        out.push_str("Example:\n");
        for line in example.lines() {
            out.push_str("    ");
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `text` after `lead`, in lines of at most 80 columns.
fn wrap(text: &str, lead: &str) -> String {
    const WIDTH: usize = 80;
    let mut out = String::new();
    let mut line = lead.trim_end().to_string();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_explained_under_its_own_name_and_its_kind() {
        for &rule in Rule::VARIANTS {
            assert_eq!(rules_named(&rule.to_string()), Some(vec![rule]));
            let of_kind = rules_named(kind_of(rule).name()).unwrap();
            assert!(of_kind.contains(&rule), "{rule}");
            assert!(explain(&[rule]).contains("Example:"), "{rule}");
        }
        assert_eq!(rules_named("no-such-rule"), None);
        for name in known_names() {
            assert!(rules_named(&name).is_some(), "{name}");
        }
    }
}
