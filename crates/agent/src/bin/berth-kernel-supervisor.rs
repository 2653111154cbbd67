//! The kernel supervisor as its own executable, for the agent's tests (which cannot run the
//! `berth` binary): `berth-kernel-supervisor kernel-supervisor`, what `berth kernel-supervisor`
//! runs. See `berth_agent::runtime::supervisor`.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let args = match args.first() {
        Some(a) if a == berth_agent::runtime::SUPERVISOR_SUBCOMMAND => &args[1..],
        _ => &args[..],
    };
    berth_agent::runtime::supervisor_main(args)
}
