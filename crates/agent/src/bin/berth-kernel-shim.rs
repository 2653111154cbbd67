//! The kernel shim as its own executable, for the agent's tests (which cannot run the `berth`
//! binary): `berth-kernel-shim kernel-shim STATUS_FD EXIT_FILE PROGRAM [ARGS...]`, the same
//! arguments `berth kernel-shim` takes. See `berth_agent::runtime::shim`.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let args = match args.first() {
        Some(a) if a == berth_agent::runtime::SHIM_SUBCOMMAND => &args[1..],
        _ => &args[..],
    };
    berth_agent::runtime::shim_main(args)
}
