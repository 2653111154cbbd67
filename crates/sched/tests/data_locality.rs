//! Cache-aware placement: among the nodes that can take a job, those whose dataset cache holds
//! more of its datasets come first, whatever the queue's scoring; a holder that cannot take
//! the job is passed over, never waited for.

mod support;

#[test]
fn the_node_holding_the_data_wins_over_the_score() {
    insta::assert_snapshot!(support::run("
        queue default scoring=binpack
        node n1 cpus=4
        node n2 cpus=4
        node n3 cpus=4
        job 1 cpus=4 data=n3:5GiB,n2:1GiB
        job 2 cpus=4 data=n3:5GiB,n2:1GiB
        job 3 cpus=4 data=n3:5GiB,n2:1GiB
        pass
    "), @r#"
        pass 1
          start 1 n3 cpus=0-3 mems=0 mem=1GiB
          start 2 n2 cpus=0-3 mems=0 mem=1GiB
          start 3 n1 cpus=0-3 mems=0 mem=1GiB
        "#);
}

#[test]
fn a_gang_takes_the_holders_first_then_the_score() {
    insta::assert_snapshot!(support::run("
        queue default scoring=spread
        node n1 cpus=4
        node n2 cpus=4
        node n3 cpus=4
        run 9 cpus=1
        job 1 cpus=2 nodes=2 data=n3:1GiB
        pass
    "), @r#"
        pass 1
          start 1
            kernel 0 n3 cpus=0-1 mems=0 mem=1GiB
            kernel 1 n2 cpus=0-1 mems=0 mem=1GiB
        "#);
}

/// A serving endpoint's replicas spread: the nodes a job avoids (its siblings') are taken only
/// when no other node can take it, in score order among themselves.
#[test]
fn avoided_nodes_come_last_but_are_not_refused() {
    insta::assert_snapshot!(support::run("
        queue default scoring=binpack
        node n1 cpus=4
        node n2 cpus=4
        job 1 cpus=2 avoid=n1
        job 2 cpus=2 avoid=n1
        job 3 cpus=2 avoid=n1
        pass
    "), @r#"
        pass 1
          start 1 n2 cpus=0-1 mems=0 mem=1GiB
          start 2 n2 cpus=2-3 mems=0 mem=1GiB
          start 3 n1 cpus=0-1 mems=0 mem=1GiB
        "#);
}
