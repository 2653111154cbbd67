//! Several kernels of one job on one node (`--kernels N`) and host-mount allow-lists, as
//! scheduler scenarios (see `support/mod.rs` for the language).

mod support;

#[test]
fn kernels_of_a_job_share_one_node_with_disjoint_devices() {
    insta::assert_snapshot!(support::run("
        queue default skip=0
        node n1 cpus=4 gpus=2 images=img
        node n2 cpus=8 gpus=4 images=img
        job 1 kernels=3 cpus=2 gpus=1 image=img
        job 2 kernels=2 cpus=2 gpus=1 image=img
        job 3 kernels=2 cpus=3 image=img
        pass
    "), @r#"
        pass 1
          start 1
            kernel 0 n2 cpus=0-1 mems=0 mem=1GiB gpus=0:1
            kernel 1 n2 cpus=2-3 mems=0 mem=1GiB gpus=1:1
            kernel 2 n2 cpus=4-5 mems=0 mem=1GiB gpus=2:1
          start 2
            kernel 0 n1 cpus=0-1 mems=0 mem=1GiB gpus=0:1
            kernel 1 n1 cpus=2-3 mems=0 mem=1GiB gpus=1:1
          wait 3 #3 Resources "resources: needs 2 kernels with 3 CPUs and 1GiB memory each free on one node, 0 of 2 ready nodes can take them"
        "#);
}

#[test]
fn mounts_go_only_where_allowed_and_do_not_hold_the_queue() {
    insta::assert_snapshot!(support::run("
        queue default strict
        node n1 cpus=4 mounts=/data
        node n2 cpus=4 mounts=
        node n3 cpus=4
        job 1 cpus=4 mounts=/data/imagenet
        job 2 cpus=1 mounts=/home/alice
        job 3 cpus=1 mounts=/data,/home
        job 4 cpus=4 mounts=/data
        job 5 cpus=1
        pass
    "), @r#"
        pass 1
          start 1 n1 cpus=0-3 mems=0 mem=1GiB
          wait 2 #2 Mount "mount: /home/alice not allowed on any node"
          wait 3 #3 Mount "mount: /home not allowed on any node"
          wait 4 #4 Resources "resources: needs 4 CPUs; best node n1 has 0 free (3 nodes in queue)" blocked=1
          wait 5 #5 Priority "priority: waiting behind the job at position 4"
        "#);
}

#[test]
fn a_multi_kernel_job_preempts_what_it_needs_on_one_node() {
    insta::assert_snapshot!(support::run("
        queue default preempt=requeue
        node n1 cpus=4 gpus=2 images=img
        run 7 gpus=1 prio=0 preemptible start=-1h
        job 1 kernels=2 gpus=1 prio=5
        pass
        pass
    "), @r#"
        pass 1
          wait 1 #1 Preempting "preempting: stopping job 7 (priority 0) to free 1 GPU"
          preempt 7 for 1 Requeue
        pass 2
          start 1
            kernel 0 n1 cpus=0 mems=0 mem=1GiB gpus=0:1
            kernel 1 n1 cpus=1 mems=0 mem=1GiB gpus=1:1
          wait 7 #2 Resources "resources: needs 1 GPU, node n1 has 0 free" blocked=1
        "#);
}

#[test]
fn a_process_job_with_folders_goes_only_where_the_agent_can_mount_them() {
    insta::assert_snapshot!(support::run("
        queue default backfill
        node n1 cpus=4 nofolders
        node n2 cpus=2
        job 1 cpus=4 folders
        job 2 cpus=2 folders
        job 3 cpus=4
        pass
        down n2
        job 4 cpus=1 folders
        pass
    "), @r#"
        pass 1
          start 2 n2 cpus=0-1 mems=0 mem=1GiB
          start 3 n1 cpus=0-3 mems=0 mem=1GiB
          wait 1 #1 Resources "resources: needs 4 CPUs; best node n2 has 2 free (2 nodes in queue); 1 of 2 ready nodes cannot mount data folders (their agents are not root); no reservation: it does not fit even when every running job has ended"
        down n2
        pass 2
          wait 1 #1 Mount "folders: no ready node in queue default can mount data folders into a process job (their agents are not root): run berth as root there, or the job in a container (--image)"
          wait 4 #2 Mount "folders: no ready node in queue default can mount data folders into a process job (their agents are not root): run berth as root there, or the job in a container (--image)"
        "#);
}
