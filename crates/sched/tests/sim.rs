//! `berth_sched::sim`: tiny hand-made traces (tests/traces/) with hand-computed schedules,
//! parsing and cleaning rules, and determinism.

use berth_sched::sim::{
    self, Cluster, JobOutcome, Metrics, PhillyOptions, Policy, SimOptions, SwfOptions, Trace, TraceFormat, jain,
    parse_philly, parse_swf,
};

fn path(name: &str) -> String {
    format!("{}/tests/traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(name: &str) -> Trace {
    let text = std::fs::read_to_string(path(name)).unwrap();
    let format = TraceFormat::from_path(name).unwrap();
    sim::parse(format, text.as_bytes()).unwrap()
}

fn gpu_cluster(nodes: u32, gpus: u32) -> Cluster {
    Cluster { nodes, gpus_per_node: gpus, cpus_per_node: 8, mem_per_node: 64 << 30 }
}

fn cpu_cluster(nodes: u32) -> Cluster {
    Cluster { nodes, gpus_per_node: 0, cpus_per_node: 8, mem_per_node: 4 << 30 }
}

fn run(trace: &Trace, cluster: Cluster, policy: Policy, opts: SimOptions) -> (Metrics, Vec<JobOutcome>) {
    sim::simulate_detailed(trace, &cluster, policy, &opts).unwrap()
}

/// (start, end) in seconds per job, in trace (submit) order.
fn times(out: &[JobOutcome]) -> Vec<(i64, i64)> {
    out.iter().map(|o| (o.start_ms.unwrap() / 1000, o.end_ms.unwrap() / 1000)).collect()
}

fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

fn oracle() -> SimOptions {
    SimOptions { time_limit_from_duration: true, ..SimOptions::default() }
}

#[test]
fn fifo_on_one_gpu_runs_jobs_in_submit_order() {
    // A (vca, t=0, 100 s), B (vcb, t=10, 50 s), C (vca, t=20, 30 s) on one GPU.
    let trace = load("fifo3.csv");
    let (m, out) = run(&trace, gpu_cluster(1, 1), Policy::Fifo, SimOptions::default());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (150, 180)]);
    assert_eq!((m.jobs, m.finished, m.unfinished, m.skipped_too_big), (3, 3, 0, 0));
    // JCT 100, 140, 160; waits 0, 90, 130.
    close(m.jct_mean_s, 400.0 / 3.0);
    close(m.jct_median_s, 140.0);
    close(m.jct_p99_s, 160.0);
    close(m.wait_mean_s, 220.0 / 3.0);
    close(m.wait_p99_s, 130.0);
    close(m.makespan_s, 180.0);
    close(m.allocation, 1.0);
    assert_eq!(m.resource, "gpu");
    // Bounded slowdowns: A 1, B 140/50, C 160/30; per VC: vca (1 + 16/3)/2, vcb 2.8.
    close(m.slowdown_mean, (1.0 + 2.8 + 160.0 / 30.0) / 3.0);
    close(m.jain_slowdown, jain(&[(1.0 + 160.0 / 30.0) / 2.0, 2.8]));
    close(m.jain_wait, jain(&[65.0, 90.0]));
    assert_eq!((m.users, m.big_jobs, m.preemptions), (2, 0, 0));
}

#[test]
fn lifo_serves_the_newest_waiting_job_first() {
    let trace = load("fifo3.csv");
    let (m, out) = run(&trace, gpu_cluster(1, 1), Policy::Lifo, SimOptions::default());
    assert_eq!(times(&out), vec![(0, 100), (130, 180), (100, 130)]);
    close(m.jct_mean_s, (100.0 + 170.0 + 110.0) / 3.0);
}

#[test]
fn fifo_holds_short_jobs_behind_a_blocked_wide_one() {
    // One node with 2 GPUs: A (1 GPU, 100 s), B (2 GPUs, 50 s), C (1 GPU, 50 s), D (1 GPU, 200 s).
    // C waits behind B although a GPU is free from t=20; C and D start together when B ends.
    let trace = load("backfill4.csv");
    let (m, out) = run(&trace, gpu_cluster(1, 2), Policy::Fifo, oracle());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (150, 200), (150, 350)]);
    close(m.jct_mean_s, (100.0 + 140.0 + 180.0 + 320.0) / 4.0);
    // 100 + 100 + 50 + 200 GPU-seconds over 2 GPUs × 350 s.
    close(m.allocation, 450.0 / 700.0);
}

#[test]
fn backfill_lets_a_short_job_jump_ahead_without_delaying_the_head() {
    // With exact limits, C (ends at 70) fits before B's reservation at 100; D (200 s) does not.
    let trace = load("backfill4.csv");
    let (m, out) = run(&trace, gpu_cluster(1, 2), Policy::Backfill, oracle());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (20, 70), (150, 350)]);
    close(m.jct_mean_s, (100.0 + 140.0 + 50.0 + 320.0) / 4.0);
    close(m.makespan_s, 350.0);
}

#[test]
fn a_config_queue_replays_like_the_policy_it_spells() {
    // `berth sim --config`: a manager's queue (its own name) with backfill's settings gives
    // backfill's schedule, reported under the queue's name.
    let trace = load("backfill4.csv");
    let opts = oracle();
    let mut queue = Policy::Backfill.queue_config(&opts);
    queue.name = "gpu".into();
    let setup = sim::Setup::of_queue(queue, Default::default(), &opts);
    let (m, out) = sim::simulate_setup(&trace, &gpu_cluster(1, 2), &setup, &opts, &mut |_| {}).unwrap();
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (20, 70), (150, 350)]);
    assert_eq!(m.policy, "gpu");
}

#[test]
fn backfill_with_the_default_limit_cannot_see_that_c_is_short() {
    // Philly has no limits: with the 1 h default, C would end after B's reservation.
    let trace = load("backfill4.csv");
    let (_, out) = run(&trace, gpu_cluster(1, 2), Policy::Backfill, SimOptions::default());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (150, 200), (150, 350)]);
}

#[test]
fn swf_backfill_uses_requested_times_as_limits() {
    // The same schedule as backfill4.csv with CPUs: 4 + 8 + 4 + 4 processors on one 8-CPU node.
    let trace = load("backfill4.swf");
    assert_eq!(trace.jobs.len(), 4, "the cancelled job (run −1) is dropped");
    let (m, out) = run(&trace, cpu_cluster(1), Policy::Backfill, SimOptions::default());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (20, 70), (150, 350)]);
    assert_eq!(m.resource, "cpu");
    close(m.allocation, (400.0 + 400.0 + 200.0 + 800.0) / (8.0 * 350.0));
    let (_, out) = run(&trace, cpu_cluster(1), Policy::Fifo, SimOptions::default());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (150, 200), (150, 350)]);
}

#[test]
fn skip_after_ten_behaves_like_fifo_while_the_head_is_blocked_few_times() {
    let trace = load("backfill4.csv");
    let (_, out) = run(&trace, gpu_cluster(1, 2), Policy::Skip, oracle());
    assert_eq!(times(&out), vec![(0, 100), (100, 150), (150, 200), (150, 350)]);
}

#[test]
fn preemption_requeues_a_low_priority_job_for_an_express_one() {
    // Job 1 (low queue) holds the node; job 2 (express) arrives at 700 s, past the 10 min
    // minimum runtime: job 1 is requeued and starts over after job 2.
    let trace = load("preempt2.swf");
    assert!(trace.has_priorities);
    let (m, out) = run(&trace, cpu_cluster(1), Policy::Preempt, SimOptions::default());
    assert_eq!(m.preemptions, 1);
    assert_eq!(times(&out), vec![(0, 1800), (700, 800)]);
    assert_eq!((m.finished, m.unfinished), (2, 0));
    // Checkpointed: job 1 resumes with its remaining 300 s.
    let (_, out) = run(&trace, cpu_cluster(1), Policy::Preempt, SimOptions { checkpoint: true, ..Default::default() });
    assert_eq!(times(&out), vec![(0, 1100), (700, 800)]);
    // Without preemption the express job waits.
    let (m, out) = run(&trace, cpu_cluster(1), Policy::Backfill, SimOptions::default());
    assert_eq!(m.preemptions, 0);
    assert_eq!(times(&out), vec![(0, 1000), (1000, 1100)]);
}

/// Regression: with a minimum runtime shorter than the checkpoint interval, a victim stopped
/// before its first checkpoint lost its whole run, and a stream of express jobs stopped the
/// same job again and again (on SDSC Blue, `preempt` and `las` made the mean JCT days where
/// FIFO's was hours). `berth sim` now defaults the minimum runtime to the checkpoint interval.
#[test]
fn a_minimum_runtime_below_the_checkpoint_interval_stops_a_job_again_and_again() {
    // Job 1 (low queue, 1 h) holds the one node; an express job of 1 min arrives every 15 min.
    let mut swf = String::from("1 0 0 3600 8 -1 -1 8 3600 -1 1 1 -1 -1 4 -1 -1 -1\n");
    for k in 0..12 {
        swf += &format!("{} {} 0 60 8 -1 -1 8 60 -1 1 2 -1 -1 1 -1 -1 -1\n", k + 2, 700 + 900 * k);
    }
    let trace = parse_swf(swf.as_bytes(), SwfOptions::default()).unwrap();
    let opts =
        |min_runtime_ms| SimOptions { checkpoint_interval_ms: Some(1_800_000), min_runtime_ms, ..Default::default() };
    // 10 min: stopped after every 840 s of its run, before the checkpoint at 30 min, 12 times;
    // it finishes only once the stream has passed (the last express job ends at 10,660 s).
    let (m, out) = run(&trace, cpu_cluster(1), Policy::Preempt, opts(600_000));
    assert_eq!(m.preemptions, 12);
    assert_eq!(out[0].end_ms, Some((10_660 + 3_600) * 1000));
    // 30 min: stopped once (at the first arrival past its minimum runtime, 2,500 s), it
    // resumes from its checkpoint at 1,800 s of work once the three express jobs are done
    // (2,680 s) and finishes its other half; the next express jobs wait for it.
    let (m, out) = run(&trace, cpu_cluster(1), Policy::Preempt, opts(1_800_000));
    assert_eq!(m.preemptions, 1);
    assert_eq!(times(&out)[..5], [(0, 4_480), (2_500, 2_560), (2_560, 2_620), (2_620, 2_680), (4_480, 4_540)]);
    assert_eq!((m.finished, m.unfinished), (13, 0));
}

#[test]
fn preempt_needs_priorities() {
    let trace = load("fifo3.csv");
    let e = sim::simulate(&trace, &gpu_cluster(1, 1), Policy::Preempt, &SimOptions::default()).unwrap_err();
    assert!(e.to_string().contains("no priorities"), "{e}");
}

#[test]
fn jobs_larger_than_the_cluster_are_skipped_and_gangs_span_nodes() {
    let csv = "timestamp,duration,num_gpus,gpu_time,cluster\n\
               2017-10-01 00:00:00,100,16,1600,a\n\
               2017-10-01 00:00:00,100,32,3200,a\n\
               2017-10-01 00:00:05,100,12,1200,b\n";
    let trace = parse_philly(csv.as_bytes(), PhillyOptions::default()).unwrap();
    let cluster = gpu_cluster(2, 8);
    assert_eq!(sim::too_big(&trace, &cluster).len(), 1);
    let (m, out) = run(&trace, cluster, Policy::Fifo, SimOptions::default());
    assert_eq!((m.jobs, m.finished, m.skipped_too_big), (3, 2, 1));
    assert_eq!((out[0].start_ms, out[0].end_ms), (Some(0), Some(100_000)));
    assert!(!out[1].finished && out[1].start_ms.is_none());
    // The 12-GPU gang (2 nodes × 6 GPUs) waits for the 16-GPU one.
    assert_eq!((out[2].start_ms, out[2].end_ms), (Some(100_000), Some(200_000)));
    assert_eq!((m.big_jobs, m.big_wait_max_s), (2, 95.0));
    let (req, nodes) = cluster.shape(&trace.jobs[2]).unwrap();
    assert_eq!((req.gpu_milli, req.cpu_milli, nodes), (6000, 6000, 2));
}

#[test]
fn philly_rows_are_sorted_and_rebased() {
    let trace = load("fifo3.csv");
    let submits: Vec<i64> = trace.jobs.iter().map(|j| j.submit_ms).collect();
    assert_eq!(submits, vec![0, 10_000, 20_000]);
    let lines: Vec<usize> = trace.jobs.iter().map(|j| j.line).collect();
    assert_eq!(lines, vec![3, 2, 4]);
    assert_eq!(trace.jobs[1].user, "vcb");
    assert_eq!((trace.jobs[0].gpus, trace.jobs[0].duration_ms, trace.jobs[0].time_limit_ms), (1, 100_000, None));
    assert!(!trace.has_priorities);
}

#[test]
fn philly_drops_jobs_before_2017_09_24_unless_asked() {
    let csv = "timestamp,duration,num_gpus,gpu_time,cluster\n\
               2017-10-01 00:00:00,10,1,10,a\n\
               2017-09-04 10:30:41,99,1,99,b\n\
               2017-09-24 00:00:00,20,2,40,a\n";
    let t = parse_philly(csv.as_bytes(), PhillyOptions::default()).unwrap();
    assert_eq!(t.jobs.len(), 2);
    assert_eq!(t.jobs[1].submit_ms, 7 * 86_400_000);
    assert_eq!(t.notes, vec!["dropped 1 jobs submitted before 2017-09-24 (use --keep-early to keep them)"]);
    let t = parse_philly(csv.as_bytes(), PhillyOptions { keep_early: true }).unwrap();
    assert_eq!(t.jobs.len(), 3);
    assert_eq!(t.jobs[0].user, "b");
    assert_eq!(sim::parse_timestamp("2017-09-24 00:00:00"), Some(1_506_211_200));
    // A year whose day count would overflow is not a timestamp.
    assert_eq!(sim::parse_timestamp("9223372036854775807-01-01 00:00:00"), None);
    assert_eq!(sim::parse_timestamp("2017-13-01 00:00:00"), None);
}

#[test]
fn malformed_philly_lines_are_errors_with_line_numbers() {
    let cases = [
        ("2017-10-01 00:00:00,abc,1,1,a", "line 2: bad duration `abc`"),
        ("2017-10-01,10,1,10,a", "line 2: bad timestamp `2017-10-01`"),
        ("2017-10-01 00:00:00,10,0,0,a", "line 2: bad num_gpus `0`"),
        ("2017-10-01 00:00:00,10,1,10", "line 2: expected 5 comma-separated fields"),
        ("2017-10-01 00:00:00,10,1,10,", "line 2: empty cluster"),
    ];
    for (row, want) in cases {
        let csv = format!("timestamp,duration,num_gpus,gpu_time,cluster\n{row}\n");
        let e = parse_philly(csv.as_bytes(), PhillyOptions::default()).unwrap_err().to_string();
        assert!(e.starts_with(want), "{row}: {e}");
    }
}

/// line, submit s, duration s, cpus, limit s, priority, user
type Row<'a> = (usize, i64, i64, u32, Option<i64>, i32, &'a str);

#[test]
fn swf_cleaning_rules() {
    let trace = load("clean.swf");
    // Job 12 (run 0) is dropped; the rest sorted by submit and rebased on job 11's.
    let got: Vec<Row> = trace
        .jobs
        .iter()
        .map(|j| {
            (
                j.line,
                j.submit_ms / 1000,
                j.duration_ms / 1000,
                j.cpus,
                j.time_limit_ms.map(|l| l / 1000),
                j.priority,
                j.user.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (3, 0, 200, 8, Some(200), 1, "u8"),   // run 500 > requested 200: clamped
            (5, 150, 60, 24, Some(100), 2, "u9"), // allocated −1: requested 24 procs
            (2, 200, 50, 16, Some(100), 0, "u7"),
        ]
    );
    assert!(trace.has_priorities);
    assert_eq!(trace.notes.len(), 2, "{:?}", trace.notes);
    let raised =
        parse_swf(std::fs::read_to_string(path("clean.swf")).unwrap().as_bytes(), SwfOptions { no_clamp: true })
            .unwrap();
    assert_eq!((raised.jobs[0].duration_ms, raised.jobs[0].time_limit_ms), (500_000, Some(500_000)));
    // 24 processors on 8-CPU nodes: a gang of 3 nodes; on 2 nodes it is too big.
    let (req, nodes) = cpu_cluster(4).shape(&trace.jobs[1]).unwrap();
    assert_eq!((req.cpu_milli, nodes), (8000, 3));
    assert!(cpu_cluster(2).shape(&trace.jobs[1]).is_err());
}

#[test]
fn malformed_swf_lines_are_errors_with_line_numbers() {
    let good = "1 0 0 10 8 -1 -1 8 10 -1 1 1 -1 -1 3 -1 -1 -1";
    let cases = [
        ("1 0 0 10 8 -1 -1 8 10 -1 1 1 -1 -1 3 -1 -1", "line 3: expected 18 whitespace-separated SWF fields, got 17"),
        ("1 0 0 ten 8 -1 -1 8 10 -1 1 1 -1 -1 3 -1 -1 -1", "line 3: field 4 (run time) `ten` is not a number"),
        ("1 -5 0 10 8 -1 -1 8 10 -1 1 1 -1 -1 3 -1 -1 -1", "line 3: field 2 (submit time) `-5` is negative"),
        // Seconds that would wrap when turned into milliseconds.
        (
            "1 0 0 9223372036854775 8 -1 -1 8 10 -1 1 1 -1 -1 3 -1 -1 -1",
            "line 3: field 4 (run time) `9223372036854775` is too large: at most 3153600000",
        ),
    ];
    for (row, want) in cases {
        let text = format!("; header\n{good}\n{row}\n");
        let e = parse_swf(text.as_bytes(), SwfOptions::default()).unwrap_err().to_string();
        assert_eq!(e, want);
    }
}

#[test]
fn format_from_the_file_name() {
    assert_eq!(TraceFormat::from_path("x/philly.csv"), Some(TraceFormat::Philly));
    assert_eq!(TraceFormat::from_path("SDSC-BLUE.swf.gz"), Some(TraceFormat::Swf));
    assert_eq!(TraceFormat::from_path("log.SWF"), Some(TraceFormat::Swf));
    assert_eq!(TraceFormat::from_path("trace.json"), None);
    assert!("pbs".parse::<TraceFormat>().is_err());
    assert!("fifo,backfill".parse::<Policy>().is_err());
    assert_eq!("fair-share".parse::<Policy>(), Ok(Policy::FairShare));
}

#[test]
fn window_and_limit_select_and_rebase() {
    let mut trace = load("backfill4.csv");
    trace.select(sim::Window { start_ms: Some(10_000), end_ms: Some(30_000), limit: None });
    let submits: Vec<i64> = trace.jobs.iter().map(|j| j.submit_ms).collect();
    assert_eq!(submits, vec![0, 10_000]);
    let mut trace = load("backfill4.csv");
    trace.select(sim::Window { limit: Some(1), ..Default::default() });
    assert_eq!(trace.jobs.len(), 1);
    let mut trace = load("backfill4.csv");
    trace.scale_arrivals(0.5);
    assert_eq!(trace.jobs[3].submit_ms, 15_000);
}

/// A deterministic pseudo-random GPU trace: `n` jobs over a few users.
fn synthetic_philly(n: usize) -> String {
    let mut s = String::from("timestamp,duration,num_gpus,gpu_time,cluster\n");
    let mut x: u64 = 42;
    let mut next = || {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let mut t = 0u64;
    for _ in 0..n {
        t += next() % 120;
        let dur = 30 + next() % 3000;
        let gpus = [1, 1, 1, 1, 2, 4, 8, 16][(next() % 8) as usize];
        let user = ["a", "b", "c", "d"][(next() % 4) as usize];
        let (h, m, sec) = (t / 3600, (t / 60) % 60, t % 60);
        s.push_str(&format!(
            "2017-10-{:02} {:02}:{m:02}:{sec:02},{dur},{gpus},{},{user}\n",
            1 + h / 24,
            h % 24,
            dur * gpus
        ));
    }
    s
}

#[test]
fn replays_are_deterministic_and_sane() {
    let text = synthetic_philly(400);
    let trace = parse_philly(text.as_bytes(), PhillyOptions::default()).unwrap();
    for policy in Policy::ALL.iter().copied().filter(|p| *p != Policy::Preempt) {
        let a = run(&trace, gpu_cluster(4, 8), policy, SimOptions::default());
        let b = run(&trace, gpu_cluster(4, 8), policy, SimOptions::default());
        assert_eq!(a, b, "{policy:?}");
        let (m, out) = a;
        assert_eq!((m.finished, m.unfinished), (400, 0), "{policy:?}");
        assert!(m.allocation <= 1.0 + 1e-9 && m.allocation > 0.0, "{policy:?}: {}", m.allocation);
        for o in &out {
            assert!(o.end_ms.unwrap() - o.submit_ms >= o.duration_ms, "{policy:?}: {o:?}");
            assert!(o.start_ms.unwrap() >= o.submit_ms);
        }
    }
}

#[test]
fn progress_reports_rise_to_every_job_settled_and_change_nothing() {
    let trace = load("backfill4.swf");
    let mut seen = Vec::new();
    let observed =
        sim::simulate_observed(&trace, &cpu_cluster(1), Policy::Backfill, &SimOptions::default(), &mut |p| {
            seen.push(p)
        })
        .unwrap();
    let plain = run(&trace, cpu_cluster(1), Policy::Backfill, SimOptions::default());
    assert_eq!(observed, plain, "observing a replay must not change it");
    assert!(!seen.is_empty());
    assert!(seen.windows(2).all(|w| w[0].settled <= w[1].settled), "{seen:?}");
    assert!(seen.iter().all(|p| p.total == 4 && p.settled <= p.total), "{seen:?}");
    assert_eq!(seen.last().map(|p| p.settled), Some(4), "the last report has every job settled");
}

/// One 8-GPU node: a 10 h 1-GPU job, an 8-GPU job right after, then a 30 min 1-GPU job every
/// 10 min for two days. `qssf` always prefers the small jobs (0.5 GPU-hours against 8).
fn big_behind_a_stream() -> Trace {
    let mut s = String::from("timestamp,duration,num_gpus,gpu_time,cluster\n");
    s.push_str("2017-10-01 00:00:00,36000,1,36000,a\n2017-10-01 00:00:01,3600,8,28800,b\n");
    for k in 1..=288u64 {
        let t = k * 600;
        let (h, m) = (t / 3600, (t / 60) % 60);
        s.push_str(&format!("2017-10-{:02} {:02}:{m:02}:00,1800,1,1800,c\n", 1 + h / 24, h % 24));
    }
    parse_philly(s.as_bytes(), PhillyOptions::default()).unwrap()
}

#[test]
fn the_wait_bound_stops_qssf_starving_a_big_job() {
    let trace = big_behind_a_stream();
    let unbounded = SimOptions { reserve_after_ms: None, ..SimOptions::default() };
    let (m, _) = run(&trace, gpu_cluster(1, 8), Policy::Qssf, unbounded);
    assert!(m.big_wait_max_s > 40.0 * 3600.0, "starved until the stream ends: {}", m.big_wait_max_s);
    // Bound 12 h: it goes first then, its node drains (the 10 h job ended; the small jobs end
    // within 30 min) and nothing new starts there.
    let (m, _) = run(&trace, gpu_cluster(1, 8), Policy::Qssf, SimOptions::default());
    assert!(m.big_wait_max_s <= 12.5 * 3600.0, "bounded: {}", m.big_wait_max_s);
    assert!(m.big_wait_max_s >= 12.0 * 3600.0, "not before the bound: {}", m.big_wait_max_s);
}

#[test]
fn predictions_come_from_completed_runs_and_never_stop_a_job() {
    let trace = big_behind_a_stream();
    let (m, out) = run(&trace, gpu_cluster(1, 8), Policy::Backfill, SimOptions::default());
    // Jobs of user c after the first completion are predicted exactly (30 min each).
    assert!(m.prediction.predicted > 250 && m.prediction.within_2x > 0.95, "{:?}", m.prediction);
    assert!(out.iter().all(|o| o.finished && o.end_ms.unwrap() - o.start_ms.unwrap() >= o.duration_ms));
    let (m, _) =
        run(&trace, gpu_cluster(1, 8), Policy::Backfill, SimOptions { predict: false, ..SimOptions::default() });
    assert_eq!(m.prediction.predicted, 0);
}
