//! `berth completions SHELL` and `berth man`: shell completion scripts (`clap_complete`'s
//! dynamic engine: see `crate::completion`) and manual pages (`clap_mangen`), both from the clap
//! definition of the command line, so they never fall behind it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in: bash, zsh, fish, elvish or powershell
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write berth.1 and a page per subcommand (berth-submit.1, berth-cache-bucket-create.1,
    /// ...) into this directory, created if missing; without it, berth.1 goes to stdout
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Prints the completion script for `args.shell`: it calls `berth` back on each TAB, which
/// answers from the command line's definition and, for job ids, from the manager
/// (`crate::completion`).
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    crate::completion::registration(args.shell, &mut std::io::stdout()).context("cannot write the script")?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the manual pages of `cmd` (the whole `berth` command).
pub fn man(args: ManArgs, cmd: clap::Command) -> anyhow::Result<ExitCode> {
    let Some(dir) = args.out else {
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut out).context("cannot render the manual page")?;
        std::io::Write::write_all(&mut std::io::stdout(), &out).context("cannot write to stdout")?;
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(cmd, &dir).with_context(|| format!("cannot write manual pages to {}", dir.display()))?;
    let count = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".1"))
        .count();
    println!("wrote {count} manual pages to {} (read one with `man -l {}/berth.1`)", dir.display(), dir.display());
    Ok(ExitCode::SUCCESS)
}
