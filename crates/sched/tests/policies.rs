//! Scenario snapshots of the queue policies that bound waits and rank by service: several
//! backfill reservations, the wait bound (aging and firm reservations), `qssf` and `las`
//! (see `support/mod.rs` for the script language).

mod support;

#[test]
fn two_reservations_each_hold_their_own_node() {
    insta::assert_snapshot!(support::run("
        queue default backfill reservations=2
        node n1 cpus=8
        node n2 cpus=8
        run 1 cpus=4 limit=2h on=n1
        run 2 cpus=4 limit=1h on=n2
        job 3 cpus=8 limit=1h
        job 4 cpus=8 limit=1h
        job 5 cpus=2 limit=3h
        pass
    "), @r#"
        pass 1
          wait 3 #1 Resources "resources: needs 8 CPUs; best node n1 has 4 free (2 nodes in queue); reserved to start in 1h on n2 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 4 #2 Resources "resources: needs 8 CPUs; best node n1 has 4 free (2 nodes in queue); reserved to start in 2h on n1 (backfill; by time limits)" blocked=1 expect=+7200s
          wait 5 #3 Backfill "backfill: would delay the reserved start of the job at position 2"
        "#);
}

#[test]
fn with_one_reservation_the_second_blocked_job_is_passed() {
    insta::assert_snapshot!(support::run("
        queue default backfill reservations=1
        node n1 cpus=8
        node n2 cpus=8
        run 1 cpus=4 limit=2h on=n1
        run 2 cpus=4 limit=1h on=n2
        job 3 cpus=8 limit=1h
        job 4 cpus=8 limit=1h
        job 5 cpus=2 limit=3h
        pass
    "), @r#"
        pass 1
          start 5 n1 cpus=4-5 mems=0 mem=1GiB
          wait 3 #1 Resources "resources: needs 8 CPUs; best node n1 has 4 free (2 nodes in queue); reserved to start in 1h on n2 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 4 #2 Resources "resources: needs 8 CPUs; best node n1 has 4 free (2 nodes in queue)"
        "#);
}

#[test]
fn on_one_node_reservations_queue_one_after_another() {
    insta::assert_snapshot!(support::run("
        queue default backfill reservations=3
        node n1 cpus=4
        run 1 cpus=4 limit=1h
        job 2 cpus=4 limit=2h
        job 3 cpus=4 limit=30m
        job 4 cpus=1 limit=4h
        pass
    "), @r#"
        pass 1
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 0 free; reserved to start in 1h on n1 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 3 #2 Resources "resources: needs 4 CPUs, node n1 has 0 free; reserved to start in 3h on n1 (backfill; by time limits)" blocked=1 expect=+10800s
          wait 4 #3 Resources "resources: needs 1 CPU, node n1 has 0 free; reserved to start in 3h30m on n1 (backfill; by time limits)" blocked=1 expect=+12600s
        "#);
}

/// Regression: a job that fitted now but would delay a reservation got none, so a later
/// job took the next reservation, and once the first job was reserved in a later pass the
/// later job's promised start moved back (the reservation property found it).
#[test]
fn a_job_that_would_delay_a_reservation_gets_the_next_one() {
    insta::assert_snapshot!(support::run("
        queue default backfill reservations=2
        node n1 cpus=4
        run 1 cpus=2 limit=2h
        job 2 cpus=4 limit=1h
        job 3 cpus=1 limit=3h
        job 4 cpus=1 limit=30m
        pass
    "), @r#"
        pass 1
          start 4 n1 cpus=2 mems=0 mem=1GiB
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free; reserved to start in 2h on n1 (backfill; by time limits)" blocked=1 expect=+7200s
          wait 3 #2 Backfill "backfill: would delay the reserved start of the job at position 1; reserved to start in 3h on n1 (backfill; by time limits)" blocked=1 expect=+10800s
        "#);
}

/// Regression: a job queued behind reservations took the best-scored reserved node, not the
/// one free soonest (here behind the 1 h job, not the 10 h one).
#[test]
fn a_queued_reservation_takes_the_nodes_free_soonest() {
    insta::assert_snapshot!(support::run("
        queue default backfill reservations=3
        node n1 cpus=4
        node n2 cpus=4
        run 1 cpus=4 limit=1h on=n1
        run 2 cpus=4 limit=1h on=n2
        job 3 cpus=4 limit=10h
        job 4 cpus=4 limit=1h
        job 5 cpus=4 limit=1h
        pass
    "), @r#"
        pass 1
          wait 3 #1 Resources "resources: needs 4 CPUs; best node n1 has 0 free (2 nodes in queue); reserved to start in 1h on n1 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 4 #2 Resources "resources: needs 4 CPUs; best node n1 has 0 free (2 nodes in queue); reserved to start in 1h on n2 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 5 #3 Resources "resources: needs 4 CPUs; best node n1 has 0 free (2 nodes in queue); reserved to start in 2h on n2 (backfill; by time limits)" blocked=1 expect=+7200s
        "#);
}

#[test]
fn past_the_wait_bound_a_job_goes_first_and_its_reservation_is_firm() {
    // Job 2 waited 20 h (bound 12 h): it goes before job 3, which qssf would put first, and
    // job 3 may not use its node although it is expected to end before the reserved start
    // (an estimate, without a time limit that would stop it).
    insta::assert_snapshot!(support::run("
        queue default backfill ordering=qssf after=12h
        node n1 cpus=4
        run 1 cpus=2 limit=30h start=-20h at=-20h
        job 2 cpus=4 limit=5h at=-20h
        job 3 cpus=1 est=10m at=-1h
        pass
    "), @r#"
        pass 1
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free; reserved to start in 10h on n1 (backfill, firm: waited past the queue's bound; by time limits)" blocked=1 expect=+36000s
          wait 3 #2 Backfill "backfill: would delay the reserved start of the job at position 1"
        "#);
}

/// Regression: firm reservations refused every job that could not fit beside the reserved
/// one, even a job whose own (enforced) time limit ends before the reserved start; on an
/// overloaded trace (SDSC Blue at 144 nodes) most jobs pass the bound and backfill collapsed
/// to FIFO (mean JCT 4.1 days instead of hours).
#[test]
fn a_firm_reservation_admits_a_job_whose_own_limit_ends_before_it() {
    insta::assert_snapshot!(support::run("
        queue default backfill ordering=qssf after=12h
        node n1 cpus=4
        run 1 cpus=2 limit=30h start=-20h at=-20h
        job 2 cpus=4 limit=5h at=-20h
        job 3 cpus=1 limit=10m at=-1h
        job 4 cpus=1 est=10m limit=11h at=-1h
        pass
    "), @r#"
        pass 1
          start 3 n1 cpus=2 mems=0 mem=1GiB
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free; reserved to start in 10h on n1 (backfill, firm: waited past the queue's bound; by time limits)" blocked=1 expect=+36000s
          wait 4 #3 Backfill "backfill: would delay the reserved start of the job at position 1"
        "#);
}

/// Regression: under skip-after, a job past the wait bound stepped aside like any other and
/// nothing protected it: on Philly at 80 x 8 an 8-GPU job waited 5.7 days (FIFO's worst:
/// 48 h). It now gets a firm reservation, so later jobs start only where they cannot delay it.
/// Only such a job is reserved: job 5, which would delay it, gets none of the queue's two.
#[test]
fn under_skip_after_a_job_past_the_wait_bound_is_reserved() {
    insta::assert_snapshot!(support::run("
        queue default skip=0 after=12h reservations=2
        node n1 cpus=4
        node n2 cpus=4
        run 1 cpus=2 limit=30h on=n1 start=-20h at=-20h
        run 3 cpus=3 limit=2h on=n2 start=-1h at=-1h
        job 2 cpus=4 limit=5h at=-20h
        job 4 cpus=2 est=10m at=-1h
        job 5 cpus=1 est=10m at=-1h
        job 6 cpus=1 limit=30m at=-1h
        pass
    "), @r#"
        pass 1
          start 4 n1 cpus=2-3 mems=0 mem=1GiB
          start 6 n2 cpus=3 mems=0 mem=1GiB
          wait 2 #1 Resources "resources: needs 4 CPUs; best node n1 has 2 free (2 nodes in queue); reserved to start in 1h on n2 (backfill, firm: waited past the queue's bound; by time limits)" blocked=1 expect=+3600s
          wait 5 #3 Backfill "backfill: would delay the reserved start of the job at position 1"
        "#);
}

#[test]
fn below_the_wait_bound_the_same_reservation_lets_a_short_job_pass() {
    insta::assert_snapshot!(support::run("
        queue default backfill ordering=qssf after=48h
        node n1 cpus=4
        run 1 cpus=2 limit=30h start=-20h at=-20h
        job 2 cpus=4 limit=5h at=-20h
        job 3 cpus=1 est=10m at=-1h
        pass
    "), @r#"
        pass 1
          start 3 n1 cpus=2 mems=0 mem=1GiB
          wait 2 #2 Resources "resources: needs 4 CPUs, node n1 has 1 free; reserved to start in ~10h on n1 (backfill; predicted from earlier runs)" blocked=1 expect=+36000s
        "#);
}

#[test]
fn qssf_puts_the_least_expected_service_first() {
    // Expected service: job 2 4 CPUs × 10 min (its estimate), job 3 1 × 1 h, job 1 4 × 10 h;
    // job 4 has neither estimate nor limit: last.
    insta::assert_snapshot!(support::run("
        queue default backfill ordering=qssf
        node n1 cpus=6
        job 1 cpus=4 limit=10h
        job 2 cpus=4 est=10m limit=10h
        job 3 cpus=1 limit=1h
        job 4 cpus=1
        pass
    "), @r#"
        pass 1
          start 2 n1 cpus=0-3 mems=0 mem=1GiB
          start 3 n1 cpus=4 mems=0 mem=1GiB
          start 4 n1 cpus=5 mems=0 mem=1GiB
          wait 1 #3 Resources "resources: needs 4 CPUs, node n1 has 1 free; reserved to start in ~10m on n1 (backfill; predicted from earlier runs)" blocked=1 expect=+600s
        "#);
}

#[test]
fn las_serves_the_least_attained_level_first_and_preempts_higher_levels() {
    // Job 1 has run 3 h on 2 CPUs (6 device-hours: level 1 of 1h,10h); job 2 never ran
    // (level 0) and stops it; job 3 got 2 device-hours before (level 1) and waits.
    insta::assert_snapshot!(support::run("
        queue default backfill ordering=las las=1h,10h preempt=requeue
        node n1 cpus=2
        run 1 cpus=2 start=-3h preemptible
        job 3 cpus=2 attained=2h
        job 2 cpus=2
        pass
        pass
    "), @r#"
        pass 1
          wait 2 #1 Preempting "preempting: stopping job 1 (priority 0) to free 2 CPUs"
          wait 3 #2 Resources "resources: needs 2 CPUs, node n1 has 0 free; no reservation: it does not fit even when every running job has ended"
          preempt 1 for 2 Requeue
        pass 2
          start 2 n1 cpus=0-1 mems=0 mem=1GiB
          wait 1 #2 Resources "resources: needs 2 CPUs, node n1 has 0 free; reserved to start in 1h on n1 (backfill; assumes the queue's default limit, 1h, for jobs with no time limit and no earlier runs)" blocked=1 expect=+3600s
          wait 3 #3 Resources "resources: needs 2 CPUs, node n1 has 0 free"
        "#);
}

/// Regression (issue 41): a 5-second job running without a time limit made the job behind it
/// "reserved to start at t+59m", the queue's 1 h default read as its run time. With earlier
/// runs to predict from, the start is the predicted one and marked as a prediction; without,
/// the reason says the start only assumes the default limit.
#[test]
fn a_reserved_start_behind_a_short_job_is_its_prediction_and_says_what_it_rests_on() {
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 cpus=1
        run 1 cpus=1 est=5s start=-1s
        job 2 cpus=1
        pass
    "), @r#"
        pass 1
          wait 2 #1 Resources "resources: needs 1 CPU, node n1 has 0 free; reserved to start in ~4s on n1 (backfill; predicted from earlier runs)" blocked=1 expect=+4s
        "#);
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 cpus=1
        run 1 cpus=1 start=-1s
        job 2 cpus=1
        pass
    "), @r#"
        pass 1
          wait 2 #1 Resources "resources: needs 1 CPU, node n1 has 0 free; reserved to start in 59m59s on n1 (backfill; assumes the queue's default limit, 1h, for jobs with no time limit and no earlier runs)" blocked=1 expect=+3599s
        "#);
}
