//! Node features (`--constraint`) and whole nodes (`--exclusive`) as scheduler decisions:
//! scenario scripts (see `support/mod.rs`) with an inline snapshot of every pass.

mod support;

#[test]
fn a_constraint_keeps_a_job_to_the_nodes_that_offer_it() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=4 labels=gpu=v100
        node n2 cpus=4 labels=a100=yes,ib=hdr
        node n3 cpus=4 labels=a100=yes
        job 1 constraint=a100&ib
        job 2 constraint=gpu=v100|h100
        job 3 constraint=h100        # no node offers it: waits, holding nobody back
        job 4 cpus=4 constraint=ib   # n2 is the only one, and busy: blocks the strict queue
        job 5
        pass
        finish 1
        pass
    "), @r#"
        pass 1
          start 1 n2 cpus=0 mems=0 mem=1GiB
          start 2 n1 cpus=0 mems=0 mem=1GiB
          wait 3 #3 NoNodes "constraint: no ready node in queue default offers h100"
          wait 4 #4 Resources "resources: needs 4 CPUs; best node n2 has 3 free (3 nodes in queue)" blocked=1
          wait 5 #5 Priority "priority: waiting behind the job at position 4"
        finish 1
        pass 2
          start 4 n2 cpus=0-3 mems=0 mem=1GiB
          start 5 n1 cpus=1 mems=0 mem=1GiB
          wait 3 #1 NoNodes "constraint: no ready node in queue default offers h100"
        "#);
}

#[test]
fn an_exclusive_job_takes_a_whole_node_and_nothing_shares_it() {
    insta::assert_snapshot!(support::run("
        node n1 cpus=4 mem=8GiB gpus=2 numa=2
        node n2 cpus=4 mem=8GiB
        job 1 gpus=1 exclusive       # needs a GPU: n1, all of it
        job 2 cpus=1
        job 3 cpus=1
        pass
        finish 1
        job 4 exclusive nodes=2      # n2 runs jobs 2 and 3
        pass
        finish 2
        finish 3
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-3 mems=0-1 mem=8GiB gpus=0:1,1:1
          start 2 n2 cpus=0 mems=0 mem=1GiB
          start 3 n2 cpus=1 mems=0 mem=1GiB
        finish 1
        pass 2
          wait 4 #1 Resources "resources: needs 2 whole nodes (--exclusive) with at least 1 CPU and 1GiB memory, 1 of 2 ready nodes can take it" blocked=1
        finish 2
        finish 3
        pass 3
          start 4
            kernel 0 n1 cpus=0-3 mems=0-1 mem=8GiB gpus=0:1,1:1
            kernel 1 n2 cpus=0-3 mems=0 mem=8GiB
        "#);
}

#[test]
fn a_waiting_exclusive_job_is_reserved_a_whole_node() {
    // Backfill: the exclusive job waits for the node to empty; a job that would still run
    // then must not start beside it, one that ends before may.
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 cpus=4
        run 1 cpus=1 limit=1h
        job 2 exclusive limit=1h
        job 3 cpus=1 limit=2h
        job 4 cpus=1 limit=30m
        pass
        finish 1
        finish 4
        pass
    "), @r#"
        pass 1
          start 4 n1 cpus=1 mems=0 mem=1GiB
          wait 2 #1 Resources "resources: needs 1 whole node (--exclusive) with at least 1 CPU and 1GiB memory, 0 of 1 ready nodes can take it; reserved to start in 1h on n1 (backfill; by time limits)" blocked=1 expect=+3600s
          wait 3 #2 Backfill "backfill: would delay the reserved start of the job at position 1"
        finish 1
        finish 4
        pass 2
          start 2 n1 cpus=0-3 mems=0 mem=32GiB
          wait 3 #2 Resources "resources: needs 1 CPU, node n1 has 0 free; reserved to start in 1h on n1 (backfill; by time limits)" blocked=1 expect=+3600s
        "#);
}

#[test]
fn an_exclusive_job_preempts_everything_on_its_node() {
    insta::assert_snapshot!(support::run("
        queue default preempt=requeue
        node n1 cpus=4
        run 1 cpus=1 preemptible start=-1h
        run 2 cpus=1 preemptible start=-1h
        job 3 exclusive prio=10
        pass
        pass
    "), @r#"
        pass 1
          wait 3 #1 Preempting "preempting: stopping jobs 1 (priority 0), 2 (priority 0) to free a whole node with at least 1 CPU and 1GiB memory (--exclusive)"
          preempt 1 for 3 Requeue
          preempt 2 for 3 Requeue
        pass 2
          start 3 n1 cpus=0-3 mems=0 mem=32GiB
          wait 1 #2 Resources "resources: needs 1 CPU, node n1 has 0 free" blocked=1
          wait 2 #3 Priority "priority: waiting behind the job at position 2"
        "#);
}
