//! One progress bar for a transfer (bytes, rate, ETA) on a terminal; nothing otherwise.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub fn bar(total: u64, what: &str) -> ProgressBar {
    let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    b.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    b.set_message(what.to_string());
    b
}
