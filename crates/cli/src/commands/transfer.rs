//! `berth upload` and `berth download`: the command lines of [`crate::transfer`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Debug, Args)]
pub struct UploadArgs {
    /// The folder: NAME or PROJECT/NAME
    pub folder: String,
    /// A file or directory here (a directory with a trailing `/`: its contents)
    pub local: PathBuf,
    /// Where in the folder [default: its top]
    #[arg(default_value = "")]
    pub dest: String,
}

#[derive(Debug, Args)]
pub struct DownloadArgs {
    /// The folder: NAME or PROJECT/NAME
    pub folder: String,
    /// A file or directory in the folder (`/`: all of it)
    pub path: String,
    /// Where to put it here [default: the current directory]
    pub local: Option<PathBuf>,
}

pub async fn upload(a: UploadArgs) -> anyhow::Result<ExitCode> {
    let r = super::folder::reference(&a.folder)?;
    let dest = crate::transfer::upload::clean_dest(&a.dest)?;
    crate::transfer::upload::run(&crate::client::from_env()?, &r, &a.local, &dest).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn download(a: DownloadArgs) -> anyhow::Result<ExitCode> {
    let r = super::folder::reference(&a.folder)?;
    crate::transfer::download::run(&crate::client::from_env()?, &r, &a.path, a.local.as_deref()).await?;
    Ok(ExitCode::SUCCESS)
}
