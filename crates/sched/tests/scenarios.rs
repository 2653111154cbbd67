//! Data-driven scheduler decisions: each case is a scenario script (see `support/mod.rs`)
//! and an inline snapshot of every pass it runs.

mod support;

#[test]
fn fifo_in_submit_order_and_strict_head_of_line() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=4
        job 1 cpus=2
        job 2 cpus=2
        job 3 cpus=2
        job 4 cpus=1
        pass
        finish 1
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-1 mems=0 mem=1GiB
          start 2 n1 cpus=2-3 mems=0 mem=1GiB
          wait 3 #3 Resources "resources: needs 2 CPUs, node n1 has 0 free" blocked=1
          wait 4 #4 Priority "priority: waiting behind the job at position 3"
        finish 1
        pass 2
          start 3 n1 cpus=0-1 mems=0 mem=1GiB
          wait 4 #2 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=1
        "#);
}

#[test]
fn priority_bands_before_fifo() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=2
        job 1 prio=0
        job 2 prio=10
        job 3 prio=10
        job 4 prio=-5
        pass
    "), @r#"
        pass 1
          start 2 n1 cpus=0 mems=0 mem=1GiB
          start 3 n1 cpus=1 mems=0 mem=1GiB
          wait 1 #3 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=1
          wait 4 #4 Priority "priority: waiting behind the job at position 3"
        "#);
}

#[test]
fn strict_never_lets_a_small_job_pass() {
    insta::assert_snapshot!(support::run("
        queue default strict
        node n1 cpus=4
        job 1 cpus=3
        job 2 cpus=4
        job 3 cpus=1
        pass
        pass
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-2 mems=0 mem=1GiB
          wait 2 #2 Resources "resources: needs 4 CPUs, node n1 has 1 free" blocked=1
          wait 3 #3 Priority "priority: waiting behind the job at position 2"
        pass 2
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 1 free" blocked=2
          wait 3 #2 Priority "priority: waiting behind the job at position 1"
        pass 3
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 1 free" blocked=3
          wait 3 #2 Priority "priority: waiting behind the job at position 1"
        "#);
}

#[test]
fn skip_after_two_passes_lets_later_jobs_start() {
    insta::assert_snapshot!(support::run("
        queue default skip=2
        node n1 cpus=4
        job 1 cpus=3
        job 2 cpus=4
        job 3 cpus=1
        job 4 cpus=1
        pass
        pass
        pass
        finish 1
        finish 3
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-2 mems=0 mem=1GiB
          wait 2 #2 Resources "resources: needs 4 CPUs, node n1 has 1 free" blocked=1
          wait 3 #3 Priority "priority: waiting behind the job at position 2"
          wait 4 #4 Priority "priority: waiting behind the job at position 2"
        pass 2
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 1 free" blocked=2
          wait 3 #2 Priority "priority: waiting behind the job at position 1"
          wait 4 #3 Priority "priority: waiting behind the job at position 1"
        pass 3
          start 3 n1 cpus=3 mems=0 mem=1GiB
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 1 free" blocked=2
          wait 4 #3 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=1
        finish 1
        finish 3
        pass 4
          start 2 n1 cpus=0-3 mems=0 mem=1GiB
          wait 4 #2 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=2
        "#);
}

#[test]
fn skip_after_zero_never_blocks() {
    insta::assert_snapshot!(support::run("
        queue default skip=0
        node n1 cpus=2
        job 1 cpus=4
        job 2 cpus=1
        pass
    "), @r#"
        pass 1
          start 2 n1 cpus=0 mems=0 mem=1GiB
          wait 1 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free"
        "#);
}

#[test]
fn backend_ai_demo_three_half_gpus_on_one_gpu() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=8 gpus=1
        job 1 gpus=0.5
        job 2 gpus=0.5
        job 3 gpus=0.5
        pass
        finish 1
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0 mems=0 mem=1GiB gpus=0:0.5
          start 2 n1 cpus=1 mems=0 mem=1GiB gpus=0:0.5
          wait 3 #3 Resources "resources: needs 0.5 GPU, node n1 has 0 free" blocked=1
        finish 1
        pass 2
          start 3 n1 cpus=0 mems=0 mem=1GiB gpus=0:0.5
        "#);
}

#[test]
fn half_and_seven_tenths_do_not_share() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=8 gpus=2
        job 1 gpus=0.5
        job 2 gpus=0.7
        job 3 gpus=0.5
        job 4 gpus=1
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0 mems=0 mem=1GiB gpus=0:0.5
          start 2 n1 cpus=1 mems=0 mem=1GiB gpus=1:0.7
          start 3 n1 cpus=2 mems=0 mem=1GiB gpus=0:0.5
          wait 4 #4 Resources "resources: needs 1 GPU, node n1 has 0.3 free" blocked=1
        "#);
}

#[test]
fn gang_is_all_or_nothing() {
    insta::assert_snapshot!(support::run("
        node n1 gpus=1
        node n2 gpus=1
        node n3 gpus=1
        job 1 gpus=1
        job 2 gpus=1 nodes=3
        pass
        finish 1
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0 mems=0 mem=1GiB gpus=0:1
          wait 2 #2 Resources "resources: needs 3 nodes with 1 GPU, 1 CPU and 1GiB memory free, 2 have" blocked=1
        finish 1
        pass 2
          start 2
            kernel 0 n1 cpus=0 mems=0 mem=1GiB gpus=0:1
            kernel 1 n2 cpus=0 mems=0 mem=1GiB gpus=0:1
            kernel 2 n3 cpus=0 mems=0 mem=1GiB gpus=0:1
        "#);
}

#[test]
fn gang_that_fits_gets_distinct_nodes() {
    insta::assert_snapshot!(support::run("
        node n1 gpus=2
        node n2 gpus=2
        node n3 gpus=2
        job 1 gpus=2 cpus=4 nodes=2
        job 2 gpus=1 nodes=2
        job 3 gpus=1 nodes=2
        pass
    "), @r#"
        pass 1
          start 1
            kernel 0 n1 cpus=0-3 mems=0 mem=1GiB gpus=0:1,1:1
            kernel 1 n2 cpus=0-3 mems=0 mem=1GiB gpus=0:1,1:1
          wait 2 #2 Resources "resources: needs 2 nodes with 1 GPU, 1 CPU and 1GiB memory free, 1 has" blocked=1
          wait 3 #3 Priority "priority: waiting behind the job at position 2"
        "#);
}

#[test]
fn unknown_queue_and_queues_without_nodes() {
    insta::assert_snapshot!(support::run("
        queue default
        queue batch
        queue empty
        node n1 queue=batch
        node n2 queue=default down
        job 1 queue=nope
        job 2 queue=batch
        job 3 queue=empty
        job 4
        job 5 queue=nope
        pass
        up n2
        pass
    "), @r#"
        pass 1
          start 2 n1 cpus=0 mems=0 mem=1GiB
          wait 4 #1 NoNodes "no ready node in queue default"
          wait 3 #1 NoNodes "no ready node in queue empty"
          wait 1 #1 Queue "queue `nope` does not exist"
          wait 5 #2 Queue "queue `nope` does not exist"
        up n2
        pass 2
          start 4 n2 cpus=0 mems=0 mem=1GiB
          wait 3 #1 NoNodes "no ready node in queue empty"
          wait 1 #1 Queue "queue `nope` does not exist"
          wait 5 #2 Queue "queue `nope` does not exist"
        "#);
}

#[test]
fn best_node_summary_over_several_nodes() {
    insta::assert_snapshot!(support::run("
        node n1 gpus=0
        node n2 gpus=1
        node n3 gpus=2
        node n4 gpus=2
        job 1 gpus=1
        job 2 gpus=1
        job 3 gpus=2
        job 4 gpus=2
        job 5 cpus=9 prio=-1
        pass
    "), @r#"
        pass 1
          start 1 n2 cpus=0 mems=0 mem=1GiB gpus=0:1
          start 2 n3 cpus=0 mems=0 mem=1GiB gpus=0:1
          start 3 n4 cpus=0 mems=0 mem=1GiB gpus=0:1,1:1
          wait 4 #4 Resources "resources: needs 2 GPUs; best node n3 has 1 free (4 nodes in queue)" blocked=1
          wait 5 #5 Priority "priority: waiting behind the job at position 4"
        "#);
}

#[test]
fn resource_reasons_name_the_missing_resource() {
    insta::assert_snapshot!(support::run("
        queue default skip=0
        node n1 cpus=4 mem=8GiB gpus=1
        job 1 cpus=6
        job 2 mem=10GiB
        job 3 cpus=1.5 mem=2GiB
        job 4 gpus=2
        pass
    "), @r#"
        pass 1
          start 3 n1 cpus=0-1 mems=0 mem=2GiB
          wait 1 #1 Resources "resources: needs 6 CPUs, node n1 has 4 free"
          wait 2 #2 Resources "resources: needs 10GiB memory, node n1 has 8GiB free"
          wait 4 #4 Resources "resources: needs 2 GPUs, node n1 has 1 free"
        "#);
}

#[test]
fn binpack_fills_one_node_before_the_next() {
    insta::assert_snapshot!(support::run("
        node n2 cpus=4
        node n1 cpus=4
        job 1 cpus=2
        job 2 cpus=2
        job 3 cpus=2
        pass
        finish 1
        finish 2
        job 4 cpus=1
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-1 mems=0 mem=1GiB
          start 2 n1 cpus=2-3 mems=0 mem=1GiB
          start 3 n2 cpus=0-1 mems=0 mem=1GiB
        finish 1
        finish 2
        pass 2
          start 4 n2 cpus=2 mems=0 mem=1GiB
        "#);
}

#[test]
fn numa_local_cpus_next_to_the_gpus() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=16 mem=64GiB gpus=2 numa=2 smt
        job 1 gpus=1 cpus=4 mem=8GiB
        job 2 gpus=1 cpus=4 mem=8GiB
        job 3 cpus=2 numa=interleave
        job 4 cpus=3 numa=none
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-1,8-9 mems=0 mem=8GiB gpus=0:1
          start 2 n1 cpus=4-5,12-13 mems=1 mem=8GiB gpus=1:1
          start 3 n1 cpus=2,6 mems=0-1 mem=1GiB
          start 4 n1 cpus=3,10-11 mems=0-1 mem=1GiB
        "#);
}

#[test]
fn require_local_and_single_node_wait_for_a_whole_numa_node() {
    insta::assert_snapshot!(support::run("
        queue default skip=0
        node n1 cpus=8 mem=32GiB gpus=2 numa=2
        job 1 cpus=3
        job 2 cpus=3 numa=require-local
        job 3 cpus=3 gpus=1 numa=single-node
        job 4 cpus=2 gpus=1 numa=single-node
        job 5 cpus=1 gpus=1 numa=single-node
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-2 mems=0 mem=1GiB
          start 2 n1 cpus=4-6 mems=1 mem=1GiB
          start 5 n1 cpus=3 mems=0 mem=1GiB gpus=0:1
          wait 3 #3 Resources "resources: needs 3 CPUs, node n1 has 2 free"
          wait 4 #4 Resources "resources: needs 1 GPU, 2 CPUs and 1GiB memory on one NUMA node (single-node), node n1 has no such NUMA node free"
        "#);
}

#[test]
fn draining_node_takes_no_new_work() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=4
        node n2 cpus=4
        down n1
        job 1 cpus=4
        job 2 cpus=4
        pass
    "), @r#"
        down n1
        pass 1
          start 1 n2 cpus=0-3 mems=0 mem=1GiB
          wait 2 #2 Resources "resources: needs 4 CPUs, node n2 has 0 free" blocked=1
        "#);
}

#[test]
fn lifo_takes_the_newest_first() {
    insta::assert_snapshot!(support::run("
        queue default ordering=lifo
        node n1 cpus=2
        job 1
        job 2
        job 3
        job 4 prio=1
        pass
    "), @r#"
        pass 1
          start 4 n1 cpus=0 mems=0 mem=1GiB
          start 3 n1 cpus=1 mems=0 mem=1GiB
          wait 2 #3 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=1
          wait 1 #4 Priority "priority: waiting behind the job at position 3"
        "#);
}

#[test]
fn drf_alternates_between_two_users() {
    insta::assert_snapshot!(support::run("
        queue default ordering=drf skip=0
        node n1 cpus=8 gpus=4 mem=64GiB
        run 1 gpus=1 user=alice
        job 2 gpus=1 user=alice
        job 3 gpus=1 user=alice
        job 4 cpus=2 user=bob
        job 5 cpus=2 user=bob
        job 6 gpus=1 user=bob
        pass
    "), @r#"
        pass 1
          start 4 n1 cpus=1-2 mems=0 mem=1GiB
          start 2 n1 cpus=3 mems=0 mem=1GiB gpus=1:1
          start 5 n1 cpus=4-5 mems=0 mem=1GiB
          start 3 n1 cpus=6 mems=0 mem=1GiB gpus=2:1
          start 6 n1 cpus=7 mems=0 mem=1GiB gpus=3:1
        "#);
}

#[test]
fn fair_share_prefers_the_project_under_its_share() {
    insta::assert_snapshot!(support::run("
        queue default ordering=fair-share
        node n1 cpus=2
        weight big 3
        usage project big 60
        usage project small 40
        usage user ann 50
        usage user al 10
        job 1 user=ann project=big
        job 2 user=sam project=small
        job 3 user=al project=big
        job 4 user=ann project=big
        pass
    "), @r#"
        pass 1
          start 3 n1 cpus=0 mems=0 mem=1GiB
          start 1 n1 cpus=1 mems=0 mem=1GiB
          wait 4 #3 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=1
          wait 2 #4 Priority "priority: waiting behind the job at position 3"
        "#);
}

#[test]
fn backfill_starts_a_short_job_before_the_reservation_and_refuses_a_long_one() {
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 cpus=4 gpus=4
        node n2 cpus=4 gpus=2
        run 1 gpus=3 cpus=1 start=-30m limit=1h on=n1
        run 2 gpus=2 cpus=2 start=-10m limit=2h on=n2
        job 3 gpus=4 cpus=4 limit=4h
        job 4 gpus=1 limit=3h
        job 5 gpus=1 limit=20m
        job 6 cpus=1 limit=3h
        pass
    "), @r#"
        pass 1
          start 5 n1 cpus=1 mems=0 mem=1GiB gpus=3:1
          start 6 n2 cpus=2 mems=0 mem=1GiB
          wait 3 #1 Resources "resources: needs 4 GPUs; best node n1 has 1 free (2 nodes in queue); reserved to start in 30m on n1 (backfill; by time limits)" blocked=1 expect=+1800s
          wait 4 #2 Backfill "backfill: would delay the reserved start of the job at position 1"
        "#);
}

#[test]
fn backfill_without_limits_uses_the_queue_default_and_overdue_jobs_run_as_long_again() {
    // Job 1 has no limit and has run 3 h, past the 2 h default: it is expected to run 3 h
    // more (not to end now), so the 1 h job 3 fits before the reserved start.
    insta::assert_snapshot!(support::run("
        queue default backfill default=2h
        node n1 cpus=4
        run 1 cpus=3 start=-3h
        job 2 cpus=4
        job 3 cpus=1 limit=1h
        pass
    "), @r#"
        pass 1
          start 3 n1 cpus=3 mems=0 mem=1GiB
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 1 free; reserved to start in 3h on n1 (backfill; assumes the queue's default limit, 2h, for jobs with no time limit and no earlier runs)" blocked=1 expect=+10800s
        "#);
}

#[test]
fn a_job_past_its_limit_counts_as_ending_now() {
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 cpus=4
        run 1 cpus=3 start=-3h limit=2h
        job 2 cpus=4
        job 3 cpus=1 limit=1h
        pass
    "), @r#"
        pass 1
          wait 2 #1 Resources "resources: needs 4 CPUs, node n1 has 1 free; reserved to start now on n1 (backfill; by time limits)" blocked=1 expect=+0s
          wait 3 #2 Backfill "backfill: would delay the reserved start of the job at position 1"
        "#);
}

#[test]
fn gang_under_backfill_reserves_every_node() {
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 gpus=1
        node n2 gpus=1
        node n3 gpus=1
        run 1 gpus=1 limit=1h on=n1
        run 2 gpus=1 limit=2h on=n2
        job 3 gpus=1 nodes=3 limit=1h
        job 4 gpus=1 limit=30m
        job 5 gpus=1 limit=90m
        job 6 cpus=1 limit=5h
        pass
    "), @r#"
        pass 1
          start 4 n3 cpus=0 mems=0 mem=1GiB gpus=0:1
          start 6 n1 cpus=1 mems=0 mem=1GiB
          wait 3 #1 Resources "resources: needs 3 nodes with 1 GPU, 1 CPU and 1GiB memory free, 1 has; reserved to start in 2h on n1, n2, n3 (backfill; by time limits)" blocked=1 expect=+7200s
          wait 5 #3 Resources "resources: needs 1 GPU; best node n1 has 0 free (3 nodes in queue)"
        "#);
}

#[test]
fn spread_versus_binpack() {
    insta::assert_snapshot!(support::run("
        queue default scoring=spread
        queue packed
        node n1 cpus=4
        node n2 cpus=4
        node n3 cpus=4
        node p1 cpus=4 queue=packed
        node p2 cpus=4 queue=packed
        job 1
        job 2
        job 3
        job 4
        job 11 queue=packed
        job 12 queue=packed
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0 mems=0 mem=1GiB
          start 2 n2 cpus=0 mems=0 mem=1GiB
          start 3 n3 cpus=0 mems=0 mem=1GiB
          start 4 n1 cpus=1 mems=0 mem=1GiB
          start 11 p1 cpus=0 mems=0 mem=1GiB
          start 12 p1 cpus=1 mems=0 mem=1GiB
        "#);
}

#[test]
fn preemption_stops_exactly_the_needed_victims() {
    insta::assert_snapshot!(support::run("
        queue default preempt=requeue,min=10m
        node n1 gpus=4 cpus=8
        node n2 gpus=4 cpus=8
        run 1 gpus=2 start=-1h preemptible on=n1
        run 2 gpus=1 start=-2h preemptible on=n1
        run 3 gpus=1 start=-1h preemptible prio=1 on=n1
        run 4 gpus=2 start=-1h preemptible on=n2
        run 5 gpus=2 start=-5m preemptible on=n2
        job 9 gpus=3 prio=5
        job 10 cpus=1
        pass
        pass
    "), @r#"
        pass 1
          start 10 n2 cpus=2 mems=0 mem=1GiB
          wait 9 #1 Preempting "preempting: stopping jobs 1 (priority 0), 2 (priority 0) to free 3 GPUs"
          preempt 1 for 9 Requeue
          preempt 2 for 9 Requeue
        pass 2
          start 9 n1 cpus=0 mems=0 mem=1GiB gpus=0:1,1:1,2:1
          wait 1 #2 Resources "resources: needs 2 GPUs; best node n1 has 0 free (2 nodes in queue)" blocked=1
          wait 2 #3 Priority "priority: waiting behind the job at position 2"
        "#);
}

#[test]
fn preemption_respects_min_runtime_equal_priority_and_preemptible() {
    insta::assert_snapshot!(support::run("
        queue default preempt=cancel,min=10m
        node n1 gpus=2
        run 1 gpus=1 start=-5m preemptible
        run 2 gpus=1 start=-1h prio=5 preemptible
        job 3 gpus=1 prio=5
        pass
        now 10m
        pass
    "), @r#"
        pass 1
          wait 3 #1 Resources "resources: needs 1 GPU, node n1 has 0 free" blocked=1
        pass 2
          wait 3 #1 Preempting "preempting: stopping job 1 (priority 0) to free 1 GPU" blocked=1
          preempt 1 for 3 Cancel
        "#);
}

#[test]
fn preemption_for_a_gang_and_never_twice_the_same_victim() {
    insta::assert_snapshot!(support::run("
        queue default preempt=requeue
        node n1 gpus=1
        node n2 gpus=1
        node n3 gpus=1
        run 1 gpus=1 preemptible on=n1
        run 2 gpus=1 preemptible prio=1 on=n2
        job 5 gpus=1 nodes=3 prio=3
        job 6 gpus=1 prio=2
        pass
    "), @r#"
        pass 1
          wait 5 #1 Preempting "preempting: stopping jobs 1 (priority 0), 2 (priority 1) to free 1 GPU on 2 nodes"
          wait 6 #2 Resources "resources: needs 1 GPU, 1 CPU and 1GiB memory; every ready node is held for a job that is preempting" blocked=1
          preempt 1 for 5 Requeue
          preempt 2 for 5 Requeue
        "#);
}

#[test]
fn image_jobs_go_only_where_the_image_is() {
    insta::assert_snapshot!(support::run("
        queue default skip=0
        node n1 cpus=4
        node n2 cpus=4 images=pytorch:2.4,busybox
        node n3 cpus=4 images=*
        job 1 cpus=4 image=pytorch:2.4
        job 2 cpus=4 image=pytorch:2.4
        job 3 cpus=1 image=tensorflow:2.2
        job 4 cpus=4 image=busybox:latest
        job 5 cpus=4
        pass
    "), @r#"
        pass 1
          start 1 n2 cpus=0-3 mems=0 mem=1GiB
          start 2 n3 cpus=0-3 mems=0 mem=1GiB
          start 5 n1 cpus=0-3 mems=0 mem=1GiB
          wait 3 #3 Resources "resources: needs 1 CPU; best node n3 has 0 free (3 nodes in queue)"
          wait 4 #4 Resources "resources: needs 4 CPUs; best node n2 has 0 free (3 nodes in queue)"
        "#);
}

#[test]
fn a_job_whose_image_no_node_has_waits_without_holding_the_queue() {
    insta::assert_snapshot!(support::run("
        queue default strict
        node n1 cpus=4 images=busybox:1
        job 1 cpus=1 image=pytorch:2.4
        job 2 cpus=1 image=busybox:1
        job 3 cpus=1
        pass
    "), @r#"
        pass 1
          start 2 n1 cpus=0 mems=0 mem=1GiB
          start 3 n1 cpus=1 mems=0 mem=1GiB
          wait 1 #1 Image "image: pytorch:2.4 not on any node"
        "#);
}

#[test]
fn backfill_tries_only_its_window_of_jobs_after_the_first_that_cannot_start() {
    // Job 2 cannot start and gets the reservation; jobs 3 and 4 are tried (3 starts, 4 does
    // not fit), and everything behind them waits untried, even job 6, which would fit.
    insta::assert_snapshot!(support::run("
        queue default backfill window=2
        node n1 cpus=4
        job 1 cpus=2 limit=1h
        job 2 cpus=4 limit=1h
        job 3 cpus=1 limit=30m
        job 4 cpus=2 limit=30m
        job 5 cpus=2 limit=30m
        job 6 cpus=1 limit=30m
        pass
        finish 1
        finish 3
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-1 mems=0 mem=1GiB
          start 3 n1 cpus=2 mems=0 mem=1GiB
          wait 2 #2 Resources "resources: needs 4 CPUs, node n1 has 2 free; reserved to start in 1h on n1 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 4 #4 Resources "resources: needs 2 CPUs, node n1 has 1 free"
          wait 5 #5 Priority "priority: beyond the backfill window: the queue tries 2 jobs past the first that cannot start (position 2)"
          wait 6 #6 Priority "priority: beyond the backfill window: the queue tries 2 jobs past the first that cannot start (position 2)"
        finish 1
        finish 3
        pass 2
          start 2 n1 cpus=0-3 mems=0 mem=1GiB
          wait 4 #2 Resources "resources: needs 2 CPUs, node n1 has 0 free; reserved to start in 1h on n1 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 5 #3 Resources "resources: needs 2 CPUs, node n1 has 0 free"
          wait 6 #4 Resources "resources: needs 1 CPU, node n1 has 0 free"
        "#);
}

#[test]
fn skip_after_tries_only_its_window_of_jobs_once_the_head_steps_aside() {
    insta::assert_snapshot!(support::run("
        queue default skip=1 window=2
        node n1 cpus=2
        job 1 cpus=4
        job 2 cpus=4
        job 3 cpus=1
        job 4 cpus=1
        pass
        pass
        pass
    "), @r#"
        pass 1
          wait 1 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free" blocked=1
          wait 2 #2 Priority "priority: waiting behind the job at position 1"
          wait 3 #3 Priority "priority: waiting behind the job at position 1"
          wait 4 #4 Priority "priority: waiting behind the job at position 1"
        pass 2
          wait 1 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free" blocked=1
          wait 2 #2 Resources "resources: needs 4 CPUs, node n1 has 2 free" blocked=1
          wait 3 #3 Priority "priority: waiting behind the job at position 2"
          wait 4 #4 Priority "priority: waiting behind the job at position 2"
        pass 3
          start 3 n1 cpus=0 mems=0 mem=1GiB
          wait 1 #1 Resources "resources: needs 4 CPUs, node n1 has 2 free" blocked=1
          wait 2 #2 Resources "resources: needs 4 CPUs, node n1 has 2 free" blocked=1
          wait 4 #4 Priority "priority: beyond the backfill window: the queue tries 2 jobs past the first that cannot start (position 1)"
        "#);
}
