//! The gates of a queue's walk: each job in queue order passes them one after the other until
//! one decides it, and that [`Verdict`] (start, wait with a reason, preempt, borrow later, or
//! stop the walk) is what the pass records for the job (`pass.rs`).
//!
//! In order: the held line (a blocked head ahead), quota, features, image, mounts, the backfill
//! window, placement with the backfill reservation, preemption, and the head-of-line policy
//! (strict, skip-after-N, or EASY backfill in `backfill.rs`), which decides every job that got
//! that far.
//! A gate that lets a job on returns `Continue` with what it found (placement: why the job
//! does not fit), so a later gate never works it out again.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow::{self, Break, Continue};

use berth_model::{Binding, JobId, PendingKind, PendingReason};

use crate::backfill::{Ask, JobEnds, Reservation, reserve};
use crate::ledger::NodeLedger;
use crate::order::{Order, Source};
use crate::pool::{self, Pool};
use crate::quota::Book;
use crate::running_set::{Basis, Ends, KeptEnds, RunningSet, StartedEnd};
use crate::words::Words;
use crate::{HeadOfLine, Millis, PassInput, PendingJob, Preempt, QueueConfig, RunningJob, preempt};

/// Blocked jobs beyond the queue's `reservations` that may try for one in a pass: each try
/// walks the running jobs' ends, and a job that gets none (its nodes are down) should not
/// make every later blocked job pay for the walk again.
const SPARE_RESERVATION_TRIES: u32 = 3;

/// Blocked jobs that may look for victims in one queue and pass: each look weighs the
/// queue's running jobs node by node, and a deep queue of blocked jobs should not pay it for
/// every job (the first ones in order are the ones preemption is for).
const MAX_PREEMPTION_PLANS: u32 = 4;

/// How borrowed work is reclaimed in a queue without preemption: requeued, at once.
const BORROW_RECLAIM: crate::Preemption =
    crate::Preemption { action: crate::PreemptAction::Requeue, min_runtime_ms: 0 };

/// A queue's running jobs (by id), and the caller's running set when it keeps one
/// (`schedule_set`; `input.running` is then empty).
pub(crate) struct Running<'i, 'a> {
    pub list: &'i [&'a RunningJob],
    pub kept: Option<&'a RunningSet>,
}

/// What the walk decides for one job.
pub(crate) enum Verdict {
    /// It starts now, one binding per kernel.
    Start(Vec<Binding>),
    /// It waits. `blocked`: it held the queue back in this pass (its `blocked_passes` grows).
    Wait { reason: PendingReason, blocked: bool, expected_start: Option<Millis> },
    /// It waits while these victims stop for it.
    Preempt { victims: Vec<Preempt>, reason: PendingReason },
    /// It is over its quota but may borrow: it is tried again after the queue's other jobs.
    Borrow,
    /// The walk ends: this job and every one after it wait untried, with this reason.
    Stop(PendingReason),
}

impl Verdict {
    fn wait(reason: PendingReason) -> Verdict {
        Verdict::Wait { reason, blocked: false, expected_start: None }
    }
}

/// What [`Walk::reserve_for`] found.
enum Reserved {
    /// The queue's reservations for this pass are all given (or tried).
    NoneLeft,
    /// The job fits nowhere even once every running job has ended.
    Unfit,
    /// Reserved: its start, and the reservation described for the job's reason (empty when
    /// the caller reads no message).
    At(Millis, String),
}

/// A gate's answer: `Continue` lets the job on to the next gate (with what this one found),
/// `Break` decides it.
type Gate<T = ()> = ControlFlow<Verdict, T>;

/// One queue's walk: its working ledgers, its order, and what earlier jobs left behind for
/// the later ones (a blocked head, a reservation, victims already taken).
pub(crate) struct Walk<'i, 'a> {
    input: &'i PassInput<'a>,
    q: &'i QueueConfig,
    /// This queue's running jobs, by id.
    running: &'i [&'a RunningJob],
    /// The caller's kept running set (`schedule_set`): backfill walks its timeline instead of
    /// sorting `input.running`'s ends.
    kept: Option<&'a RunningSet>,
    pub pool: Pool<'a>,
    pub order: Order<'a>,
    /// The position of the job that holds the rest of the queue back (strict, skip-after).
    blocker: Option<u32>,
    /// The position of the first job that could not start and let later ones be tried, and
    /// how many were tried since (bounded by the window).
    first_blocked: Option<u32>,
    tried_past: u32,
    /// The backfill reservations made in this pass, in queue order.
    reservations: Vec<Reservation>,
    /// Their nodes.
    reserved_nodes: BTreeSet<usize>,
    /// The reason of the jobs that would delay the one at a position, once written (`delays`).
    delay_reason: Option<(u32, PendingReason)>,
    tries: u32,
    /// Jobs submitted at this time or before are past the wait bound (`reserve_after`).
    aged_cutoff: Option<Millis>,
    /// Jobs started in this pass (end, id, bindings, what the end rests on), for backfill's
    /// timeline.
    started: Vec<StartedEnd>,
    /// Without preemption, only borrowed work can be reclaimed: none running, no plan to make
    /// (the walk of the running jobs cost every blocked job of a deep queue).
    any_borrowed: bool,
    victims: BTreeSet<JobId>,
    /// Preemption plans looked for in this pass.
    plans: u32,
    /// Shapes (with their [`JobEnds`]) that a reservation (at that position) refused since the
    /// pool last changed.
    delaying: Vec<(pool::ShapeKey, JobEnds, u32)>,
    /// What every reservation of the pass reads of the kept running set: one walk of its ends,
    /// made on the first reservation and extended as far as any of them goes.
    kept_ends: OnceCell<KeptEnds<'a>>,
    /// Whether reasons get their messages ([`Words`]).
    words: Words,
}

impl<'i, 'a> Walk<'i, 'a> {
    /// `nodes`: the queue's ledgers, sorted by name; `source`: its pending jobs.
    pub fn new(
        input: &'i PassInput<'a>,
        q: &'i QueueConfig,
        Running { list: running, kept }: Running<'i, 'a>,
        nodes: Vec<&'a NodeLedger>,
        source: Source<'a>,
        words: Words,
    ) -> Self {
        let totals = [
            nodes.iter().map(|l| l.cpus_total() as u64 * 1000).sum(),
            nodes.iter().map(|l| l.mem_total()).sum(),
            nodes.iter().map(|l| l.topology().gpus.len() as u64 * 1000).sum(),
        ];
        let pool = Pool::new(nodes, q.scoring, source.floors(), words);
        let aged_cutoff = q.reserve_after_ms.map(|b| input.now.saturating_sub(b));
        let of_queue = match kept {
            Some(set) => crate::orderings::Running::Kept(set.queue(source.name)),
            None => crate::orderings::Running::List(running),
        };
        let order = Order::new(q.ordering, &q.las_thresholds, source, of_queue, input.fair_share, totals, aged_cutoff);
        Walk {
            input,
            q,
            running,
            kept,
            pool,
            order,
            blocker: None,
            first_blocked: None,
            tried_past: 0,
            reservations: Vec::new(),
            reserved_nodes: BTreeSet::new(),
            delay_reason: None,
            tries: 0,
            aged_cutoff,
            started: Vec::new(),
            any_borrowed: running.iter().any(|r| r.borrowed),
            victims: BTreeSet::new(),
            plans: 0,
            delaying: Vec::new(),
            kept_ends: OnceCell::new(),
            words,
        }
    }

    /// A reason of `kind`, with its message when the caller reads messages.
    fn reason(&self, kind: PendingKind, text: impl FnOnce() -> String) -> PendingReason {
        self.words.reason(kind, text)
    }

    /// Whether a blocked head or a backfill reservation holds the queue back (borrowers may
    /// not pass either).
    pub fn held_back(&self) -> bool {
        self.blocker.is_some() || !self.reservations.is_empty()
    }

    /// Takes `job`, at queue position `pos`, through the gates.
    pub fn judge(&mut self, job: &'a PendingJob, pos: u32, book: &mut Book) -> Verdict {
        match self.gates(job, pos, book) {
            Break(v) | Continue(v) => v,
        }
    }

    fn gates(&mut self, job: &'a PendingJob, pos: u32, book: &mut Book) -> Gate<Verdict> {
        self.held_line()?;
        quota(job, book, self.words)?;
        self.features(job)?;
        self.image(job)?;
        self.mounts(job)?;
        self.window()?;
        let now = self.input.now;
        let end = JobEnds {
            expected: now.saturating_add(self.limit(job)),
            by_limit: job.time_limit_ms.map_or(Millis::MAX, |l| now.saturating_add(l)),
        };
        let why = self.placement(job, pos, end, book)?;
        self.preemption(job)?;
        Continue(self.head_of_line(job, pos, why))
    }

    /// How long the job is expected to run: its estimate, else its limit, else the queue's
    /// default limit (an estimate above the limit counts as the limit).
    fn limit(&self, job: &PendingJob) -> Millis {
        let limit = job.time_limit_ms.unwrap_or(self.q.default_time_limit_ms);
        job.estimate_ms.map_or(limit, |e| e.min(limit))
    }

    /// Behind a job that holds the line, the walk stops.
    fn held_line(&self) -> Gate {
        let Some(at) = self.blocker else { return Continue(()) };
        // By position, never by id: the job ahead may be another user's private job (the
        // reason is shown to this job's owner).
        let reason =
            self.reason(PendingKind::Priority, || format!("priority: waiting behind the job at position {at}"));
        Break(Verdict::Stop(reason))
    }

    /// A job whose features (`--constraint`) no ready node offers waits without holding the
    /// queue back: only such a node, not the jobs behind it, lets it start. (A constraint no
    /// node of the queue offers at all is refused at submit.)
    fn features(&self, job: &PendingJob) -> Gate {
        match &job.constraint {
            Some(c) if !self.pool.any_offers(job) => {
                let text = || format!("constraint: no ready node in queue {} offers {c}", self.q.name);
                Break(Verdict::wait(self.reason(PendingKind::NoNodes, text)))
            }
            _ => Continue(()),
        }
    }

    /// A job whose image no node has waits without holding the queue back: loading the image
    /// somewhere, not the jobs behind it, is what lets it start.
    fn image(&self, job: &PendingJob) -> Gate {
        match &job.image {
            Some(image) if !self.pool.any_has_image(image) => {
                Break(Verdict::wait(self.reason(PendingKind::Image, || format!("image: {image} not on any node"))))
            }
            _ => Continue(()),
        }
    }

    /// Likewise a job whose host mounts no such node allows: an admin's allow-list, not the
    /// jobs behind it, is what lets it start.
    fn mounts(&self, job: &PendingJob) -> Gate {
        if job.folders && !self.pool.any_mounts_folders() {
            let text = || {
                format!(
                    "folders: no ready node in queue {} can mount data folders into a process job (their agents \
                     are not root): run berth as root there, or the job in a container (--image)",
                    self.q.name
                )
            };
            return Break(Verdict::wait(self.reason(PendingKind::Mount, text)));
        }
        if job.mounts.is_empty() {
            return Continue(());
        }
        match self.pool.mounts_refused(job) {
            Some(refused) => Break(Verdict::wait(self.reason(PendingKind::Mount, || refused.to_string()))),
            None => Continue(()),
        }
    }

    /// Past the first job that could not start, only `backfill_window` more are tried.
    fn window(&mut self) -> Gate {
        let Some(at) = self.first_blocked else { return Continue(()) };
        let n = self.q.backfill_window;
        if self.tried_past < n {
            self.tried_past += 1;
            return Continue(());
        }
        let s = if n == 1 { "" } else { "s" };
        let text = || {
            format!(
                "priority: beyond the backfill window: the queue tries {n} job{s} past the first that cannot \
                 start (position {at})"
            )
        };
        Break(Verdict::Stop(self.reason(PendingKind::Priority, text)))
    }

    /// The verdict of the job at `at` that would delay the reservation of the job at `pos`.
    /// While the queue has reservations to give, it gets one too (it is as blocked as a job
    /// that does not fit: without one, a later job's reservation could take its turn and be
    /// pushed back once it is reserved); else its reason is the same for every such job of
    /// the pass, so written once and copied.
    fn delays(&mut self, job: &PendingJob, at: u32, pos: u32) -> Verdict {
        let delay = || format!("backfill: would delay the reserved start of the job at position {pos}");
        if let Reserved::At(start, describe) = self.reserve_for(job, at) {
            let reason = self.reason(PendingKind::Backfill, || format!("{}; {describe}", delay()));
            return Verdict::Wait { reason, blocked: true, expected_start: Some(start) };
        }
        if self.delay_reason.as_ref().is_none_or(|(p, _)| *p != pos) {
            self.delay_reason = Some((pos, self.reason(PendingKind::Backfill, delay)));
        }
        let reason = self.delay_reason.as_ref().expect("written above").1.clone();
        Verdict::Wait { reason, blocked: false, expected_start: None }
    }

    /// Places the job on the working ledgers where it cannot delay the backfill reservation,
    /// and starts it; else lets it on with why it does not fit.
    fn placement(&mut self, job: &PendingJob, at: u32, end: JobEnds, book: &mut Book) -> Gate<String> {
        // Nothing changed since a job of this shape ending no later was refused: this one is
        // refused the same way, without placing it twice.
        if !self.reservations.is_empty()
            && !pool::narrow(job)
            && let Some(&(_, _, pos)) =
                self.delaying.iter().find(|&&(shape, until, _)| shape == pool::shape(job) && end.no_sooner(until))
        {
            return Break(self.delays(job, at, pos));
        }
        let mut chosen = match self.pool.place(job) {
            Ok(chosen) => chosen,
            Err(why) => return Continue(why),
        };
        let mut trials = Vec::with_capacity(self.reservations.len());
        let mut refused = None;
        for r in &self.reservations {
            match r.admits(&self.pool, &chosen, end) {
                Some(t) => trials.push(t),
                None => {
                    refused = Some(r.pos);
                    break;
                }
            }
        }
        if let Some(pos) = refused {
            // Placed where it would delay a reservation: try away from every reserved node.
            self.pool.uncommit(&chosen);
            let avoid: Vec<usize> = self.reserved_nodes.iter().copied().collect();
            chosen = self.pool.find(job, &avoid);
            if chosen.len() < job.kernel_count() as usize {
                if !pool::narrow(job) {
                    self.delaying.push((pool::shape(job), end, pos));
                }
                return Break(self.delays(job, at, pos));
            }
            self.pool.commit(&chosen);
        } else {
            for (r, t) in self.reservations.iter_mut().zip(trials) {
                r.keep(t);
            }
        }
        self.delaying.clear();
        self.order.started(job);
        book.started(job);
        let bindings: Vec<Binding> = chosen.into_iter().map(|(_, b)| b).collect();
        if self.reserves() {
            let basis = Basis::of(self.input.now, job.time_limit_ms, job.estimate_ms, end.expected);
            self.started.push((end.expected, job.id, bindings.clone(), basis));
        }
        Break(Verdict::Start(bindings))
    }

    /// Stops running jobs to make room, when the queue allows it. Borrowed work of other
    /// projects is preempted first, even in a queue without preemption (then requeued at
    /// once); a borrowing job never preempts.
    fn preemption(&mut self, job: &PendingJob) -> Gate {
        let Some(policy) = self.q.preemption.or(Some(BORROW_RECLAIM).filter(|_| self.any_borrowed)) else {
            return Continue(());
        };
        // Stopping jobs for less service (las, qssf) is looked for once per pass: every
        // blocked job could, and each look weighs victim sets node by node.
        let by_service = matches!(self.q.ordering, crate::Ordering::Las | crate::Ordering::Qssf);
        if self.plans >= if by_service { 1 } else { MAX_PREEMPTION_PLANS } {
            return Continue(());
        }
        self.plans += 1;
        let las = (self.q.ordering == crate::Ordering::Las).then_some(&self.q.las_thresholds[..]);
        let qssf = self.q.ordering == crate::Ordering::Qssf;
        let rules = preempt::Rules {
            policy,
            by_priority: self.q.preemption.is_some(),
            las,
            qssf,
            aged_cutoff: self.aged_cutoff,
            bound_ms: self.q.reserve_after_ms,
            now: self.input.now,
        };
        let Some(plan) = preempt::plan(&self.pool, job, self.running, &self.victims, rules) else {
            return Continue(());
        };
        let mut names = Vec::new();
        let mut victims = Vec::new();
        for &v in &plan.victims {
            let prio = self.running.iter().find(|r| r.id == v).map_or(0, |r| r.priority);
            names.push(format!("{v} (priority {prio})"));
            self.victims.insert(v);
            victims.push(Preempt { victim: v, for_job: job.id, action: policy.action });
        }
        for &i in &plan.nodes {
            self.pool.hold(i);
        }
        self.delaying.clear();
        let s = if names.len() == 1 { "" } else { "s" };
        let text = || format!("preempting: stopping job{s} {} to free {}", names.join(", "), plan.frees);
        Break(Verdict::Preempt { victims, reason: self.reason(PendingKind::Preempting, text) })
    }

    /// The job cannot start: the queue's policy says whether it holds the jobs behind it.
    fn head_of_line(&mut self, job: &PendingJob, pos: u32, why: String) -> Verdict {
        let words = self.words;
        let resources = |text: &dyn Fn() -> String, blocked: bool| Verdict::Wait {
            reason: words.reason(PendingKind::Resources, text),
            blocked,
            expected_start: None,
        };
        let reserved = |start: Millis, describe: String| Verdict::Wait {
            reason: words.reason(PendingKind::Resources, || format!("resources: {why}; {describe}")),
            blocked: true,
            expected_start: Some(start),
        };
        match self.q.head_of_line {
            HeadOfLine::Strict => {
                self.blocker = Some(pos);
                resources(&|| resources_text(&why), true)
            }
            // `SkipAfter(n)`: the job holds the line for n passes, then steps aside and only
            // waits for itself, so one huge job cannot stall a queue forever. A job past the
            // wait bound is reserved instead (firm): stepping aside for good is what starves
            // a wide job on a busy queue, and holding the line would idle every node for it.
            HeadOfLine::SkipAfter(n) => {
                self.first_blocked.get_or_insert(pos);
                if let Reserved::At(start, describe) = self.reserve_for(job, pos) {
                    return reserved(start, describe);
                }
                let blocks = job.blocked_passes < n;
                if blocks {
                    self.blocker = Some(pos);
                }
                resources(&|| resources_text(&why), blocks)
            }
            HeadOfLine::Backfill => {
                self.first_blocked.get_or_insert(pos);
                match self.reserve_for(job, pos) {
                    Reserved::At(start, describe) => reserved(start, describe),
                    Reserved::Unfit => resources(
                        &|| {
                            format!(
                                "resources: {why}; no reservation: it does not fit even when every running job has \
                                 ended"
                            )
                        },
                        false,
                    ),
                    Reserved::NoneLeft => resources(&|| resources_text(&why), false),
                }
            }
        }
    }

    /// A backfill reservation for a job that cannot start now, while the queue has some to
    /// give (under skip-after, to a job past the wait bound only).
    fn reserve_for(&mut self, job: &PendingJob, pos: u32) -> Reserved {
        let wanted = self.q.reservations.max(1);
        let may = self.reserves() && (self.q.head_of_line == HeadOfLine::Backfill || self.is_aged(job));
        if !may || self.reservations.len() as u32 >= wanted || self.tries >= wanted + SPARE_RESERVATION_TRIES {
            return Reserved::NoneLeft;
        }
        self.tries += 1;
        let now = self.input.now;
        let firm = self.is_aged(job);
        let ask = Ask { job, pos, firm, taken: &self.reserved_nodes, queued: &BTreeMap::new() };
        let mut made = reserve(&self.pool, ask, self.ends(), now);
        if made.is_none() && !self.reserved_nodes.is_empty() {
            // Only reserved nodes can take it (one node, or a small cluster): it queues
            // behind the jobs reserved there, from their expected end on.
            let mut queued: BTreeMap<usize, (Millis, Basis)> = BTreeMap::new();
            for e in &self.reservations {
                let j = e.job();
                let until = e.start.saturating_add(self.limit(j));
                let basis = e.basis.weakest(Basis::of(e.start, j.time_limit_ms, j.estimate_ms, until));
                for &i in &e.nodes {
                    let t = queued.entry(i).or_insert((until, basis));
                    *t = (t.0.max(until), t.1.weakest(basis));
                }
            }
            let none = BTreeSet::new();
            made = reserve(&self.pool, Ask { job, pos, firm, taken: &none, queued: &queued }, self.ends(), now);
        }
        let Some(r) = made else { return Reserved::Unfit };
        self.reserved_nodes.extend(r.nodes.iter().copied());
        let describe = match self.words {
            Words::All => r.describe(&self.pool, now, self.q.default_time_limit_ms),
            Words::KindsOnly => String::new(),
        };
        let reserved = Reserved::At(r.start, describe);
        self.reservations.push(r);
        reserved
    }

    /// Whether the queue may give reservations (then it needs this pass's starts on the
    /// timeline): backfill does, and skip-after to jobs past the wait bound.
    fn reserves(&self) -> bool {
        match self.q.head_of_line {
            HeadOfLine::Backfill => true,
            HeadOfLine::SkipAfter(_) => self.aged_cutoff.is_some(),
            HeadOfLine::Strict => false,
        }
    }

    /// Whether the job waited past the queue's bound (`reserve_after`).
    fn is_aged(&self, job: &PendingJob) -> bool {
        self.aged_cutoff.is_some_and(|c| job.submitted_at <= c)
    }

    /// When each binding on the queue's nodes is released: running jobs at the end of their
    /// limit (or now, when past it), jobs started in this pass at `now + limit`.
    fn ends(&self) -> Ends<'_, 'a> {
        let fallback = self.q.default_time_limit_ms;
        match self.kept {
            Some(set) => {
                let kept = self
                    .kept_ends
                    .get_or_init(|| KeptEnds::new(&self.pool, set, self.input.queues, fallback, self.input.now));
                Ends::merge(kept, &self.started, self.input.now)
            }
            None => {
                // Most running jobs are this queue's: no search for its default.
                let default_of = |name: &str| {
                    if name == self.q.name {
                        return fallback;
                    }
                    self.input.queues.iter().find(|q| q.name == name).map_or(fallback, |q| q.default_time_limit_ms)
                };
                Ends::heap(self.input.running, &self.started, default_of, self.input.now)
            }
        }
    }
}

/// Over quota, a job waits for its own user's or project's jobs and never holds others back.
/// Borrowing takes only what is left once every job within its quota had its turn in this
/// pass (else a requeued borrower would take back the room it was preempted for).
fn quota(job: &PendingJob, book: &Book, words: Words) -> Gate {
    match book.admits(job) {
        Ok(false) => Continue(()),
        Ok(true) => Break(Verdict::Borrow),
        Err(over) => Break(Verdict::wait(words.reason(PendingKind::Quota, || over.to_string()))),
    }
}

/// `resources: WHY`, allocated once at its final size: a deep queue's walk writes one per
/// job it tries, and `format!` grows its buffer on the way.
fn resources_text(why: &str) -> String {
    const PREFIX: &str = "resources: ";
    let mut text = String::with_capacity(PREFIX.len() + why.len());
    text.push_str(PREFIX);
    text.push_str(why);
    text
}
