//! Parsing and printing of resource quantities as users type them.
//!
//! Memory accepts both unit families and keeps them apart, because `4GB` and `4GiB` differ by
//! 7%: binary units (`KiB`, `MiB`, `GiB`, `TiB`, and Slurm's bare `K`, `M`, `G`, `T`) are powers
//! of 1024; decimal units (`kB`/`KB`, `MB`, `GB`, `TB`) are powers of 1000. A bare number is
//! refused: Slurm reads it as MiB, Kubernetes as bytes, so either guess surprises someone.
//!
//! Every parser computes the exact value in `u128` with checked arithmetic and refuses anything
//! above its maximum (`MAX_*` below), naming the maximum: a value never wraps into a small one
//! (a `307445734561825861m` time limit once became 44 s). The maxima leave room for the
//! conversions downstream (milliseconds and microseconds in `i64`, sums over kernels).

use thiserror::Error;

/// The longest duration accepted anywhere (time limits, TTLs, half-lives): 100 years.
pub const MAX_DURATION_SECS: u64 = 36_500 * 86_400;
/// The largest memory size accepted: 1 EiB (2^60 bytes).
pub const MAX_MEM_BYTES: u64 = 1 << 60;
/// The most CPUs (in millicores) or GPUs (in thousandths) accepted: a million.
pub const MAX_MILLI: u64 = 1_000_000_000;

/// A quantity the user typed that berth cannot read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error("invalid {what} `{input}`: {hint}")]
    Invalid { what: &'static str, input: String, hint: String },
}

fn invalid(what: &'static str, input: &str, hint: impl Into<String>) -> QuantityError {
    QuantityError::Invalid { what, input: input.to_string(), hint: hint.into() }
}

fn too_large(what: &'static str, input: &str, max: &str) -> QuantityError {
    invalid(what, input, format!("larger than the maximum, {max}"))
}

/// A run of ASCII digits as a number; `None` when it is empty, not all digits, or beyond `u128`
/// (which callers treat as too large, since every maximum is far below it).
fn digits(s: &str) -> Option<Result<u128, ()>> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse::<u128>().map_err(|_| ()))
}

/// Parses a non-negative decimal with at most three fractional digits into thousandths, exactly
/// (`None` inside the `Ok` when it does not fit in `u128`, i.e. beyond every maximum).
fn parse_milli(what: &'static str, s: &str) -> Result<Option<u128>, QuantityError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(invalid(what, s, "must not be negative"));
    }
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let well_formed = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() && frac.is_empty() || !well_formed(int) || !well_formed(frac) {
        return Err(invalid(what, s, "expected a number such as 2 or 0.5"));
    }
    if frac.len() > 3 {
        return Err(invalid(what, s, "at most three decimal places (thousandths) are supported"));
    }
    let Ok(int) = digits(int).unwrap_or(Ok(0)) else { return Ok(None) };
    let f = format!("{frac:0<3}").parse::<u128>().unwrap_or(0);
    Ok(int.checked_mul(1000).and_then(|v| v.checked_add(f)))
}

/// Thousandths within `MAX_MILLI`, or an error naming the maximum.
fn bounded_milli(what: &'static str, s: &str, max: &str) -> Result<u64, QuantityError> {
    match parse_milli(what, s)? {
        Some(v) if v <= MAX_MILLI as u128 => Ok(v as u64),
        _ => Err(too_large(what, s, max)),
    }
}

/// Parses a CPU count (`2`, `0.5`) into millicores. Zero is refused.
pub fn parse_cpus(s: &str) -> Result<u64, QuantityError> {
    let v = bounded_milli("cpus", s, "1000000 CPUs")?;
    if v == 0 {
        return Err(invalid("cpus", s, "must be greater than zero"));
    }
    Ok(v)
}

/// Parses a GPU count into thousandths of a device. A fraction below one (`0.5`) shares one
/// device; one or more must be whole devices (`1`, `2`). `0` means no GPU.
pub fn parse_gpus(s: &str) -> Result<u64, QuantityError> {
    let v = bounded_milli("gpus", s, "1000000 GPUs")?;
    if v > 1000 && !v.is_multiple_of(1000) {
        return Err(invalid(
            "gpus",
            s,
            "a request above one GPU must be a whole number (fractions share a single GPU: use 0.5, not 1.5)",
        ));
    }
    Ok(v)
}

/// Parses a memory size such as `4GiB`, `512MiB`, `4GB` or `4G` into bytes (see module doc).
/// A fraction of a byte rounds down; a size that rounds down to nothing is refused.
pub fn parse_mem(s: &str) -> Result<u64, QuantityError> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u128 = match unit.trim() {
        "" => {
            return Err(invalid(
                "memory size",
                s,
                "add a unit: 4GiB (binary, 4×2^30 bytes) or 4GB (decimal, 4×10^9 bytes)",
            ));
        }
        "B" | "b" => 1,
        "K" | "k" | "KiB" | "Ki" => 1 << 10,
        "M" | "m" | "MiB" | "Mi" => 1 << 20,
        "G" | "g" | "GiB" | "Gi" => 1 << 30,
        "T" | "t" | "TiB" | "Ti" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        u => {
            return Err(invalid(
                "memory size",
                s,
                format!("unknown unit `{u}`: use B, KiB, MiB, GiB, TiB (binary) or kB, MB, GB, TB (decimal)"),
            ));
        }
    };
    match parse_milli("memory size", num)?.and_then(|m| m.checked_mul(mult)).map(|b| b / 1000) {
        Some(0) => Err(invalid("memory size", s, "must be greater than zero (at least one byte)")),
        Some(b) if b <= MAX_MEM_BYTES as u128 => Ok(b as u64),
        _ => Err(too_large("memory size", s, "1048576TiB (1 EiB)")),
    }
}

/// Parses a duration: `90` (seconds), `90s`, `30m`, `2h`, `1d`, `1h30m`, or Slurm's `HH:MM:SS`
/// and `D-HH:MM:SS`. Returns seconds; zero is refused, and so is anything above
/// [`MAX_DURATION_SECS`].
pub fn parse_duration(s: &str) -> Result<u64, QuantityError> {
    let t = s.trim();
    let bad = || invalid("duration", s, "use 90s, 30m, 2h, 1d, 1h30m or HH:MM:SS");
    let too_long = || too_large("duration", s, "36500d (100 years)");
    // `None`: beyond u128, so beyond the maximum.
    let num = |p: &str| digits(p).ok_or_else(bad).map(Result::ok);
    let secs: Option<u128> = if t.contains(':') {
        let (days, rest) = match t.split_once('-') {
            Some((d, r)) => (num(d)?, r),
            None => (Some(0), t),
        };
        let parts = rest.split(':').map(num).collect::<Result<Vec<_>, _>>()?;
        let weights: &[u128] = match parts.len() {
            2 => &[60, 1],
            3 => &[3600, 60, 1],
            _ => return Err(bad()),
        };
        let mut total = days.and_then(|d| d.checked_mul(86_400));
        for (p, w) in parts.iter().zip(weights) {
            total = total.zip(*p).and_then(|(t, p)| t.checked_add(p.checked_mul(*w)?));
        }
        total
    } else if let Some(n) = digits(t) {
        n.ok()
    } else {
        let mut total = Some(0u128);
        let mut rest = t;
        if t.is_empty() {
            return Err(bad());
        }
        while !rest.is_empty() {
            let end = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
            let n = num(&rest[..end])?;
            let unit: u128 = match rest[end..].chars().next() {
                Some('s') => 1,
                Some('m') => 60,
                Some('h') => 3600,
                Some('d') => 86_400,
                _ => return Err(bad()),
            };
            total = total.zip(n).and_then(|(t, n)| t.checked_add(n.checked_mul(unit)?));
            rest = &rest[end + 1..];
        }
        total
    };
    match secs {
        Some(0) => Err(invalid("duration", s, "must be greater than zero")),
        Some(v) if v <= MAX_DURATION_SECS as u128 => Ok(v as u64),
        _ => Err(too_long()),
    }
}

/// Prints seconds the way `parse_duration` reads them (`1d2h`, `1h30m`, `45s`, `0s`).
pub fn format_duration(secs: u64) -> String {
    let mut out = String::new();
    let (d, h, m, s) = (secs / 86400, secs % 86400 / 3600, secs % 3600 / 60, secs % 60);
    for (v, unit) in [(d, "d"), (h, "h"), (m, "m"), (s, "s")] {
        if v > 0 {
            out.push_str(&format!("{v}{unit}"));
        }
    }
    if out.is_empty() { "0s".into() } else { out }
}

/// Prints bytes with the largest binary unit that keeps one decimal (`1.5GiB`).
pub fn format_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || (v.fract() == 0.0) { format!("{}{}", v as u64, UNITS[i]) } else { format!("{v:.1}{}", UNITS[i]) }
}

/// Prints thousandths as a decimal without trailing zeros (`500` → `0.5`, `2000` → `2`).
pub fn format_gpu_milli(m: u64) -> String {
    if m.is_multiple_of(1000) {
        return (m / 1000).to_string();
    }
    let s = format!("{}.{:03}", m / 1000, m % 1000);
    s.trim_end_matches('0').to_string()
}

#[cfg(test)]
#[path = "quantity_props.rs"]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units_keep_binary_and_decimal_apart() {
        assert_eq!(parse_mem("4GiB").unwrap(), 4 << 30);
        assert_eq!(parse_mem("4G").unwrap(), 4 << 30);
        assert_eq!(parse_mem("4GB").unwrap(), 4_000_000_000);
        assert_eq!(parse_mem("1.5MiB").unwrap(), 3 << 19);
        assert_eq!(parse_mem("512MB").unwrap(), 512_000_000);
        assert!(parse_mem("4").unwrap_err().to_string().contains("add a unit"));
        assert!(parse_mem("4XB").is_err());
        assert!(parse_mem("-4GiB").unwrap_err().to_string().contains("negative"));
        assert!(parse_mem("0GiB").unwrap_err().to_string().contains("greater than zero"));
    }

    #[test]
    fn cpus_and_gpus_are_thousandths() {
        assert_eq!(parse_cpus("2").unwrap(), 2000);
        assert_eq!(parse_cpus("0.25").unwrap(), 250);
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("-1").is_err());
        assert!(parse_cpus("1.0001").is_err());
        assert_eq!(parse_gpus("0.5").unwrap(), 500);
        assert_eq!(parse_gpus("2").unwrap(), 2000);
        assert_eq!(parse_gpus("0").unwrap(), 0);
        assert!(parse_gpus("1.5").unwrap_err().to_string().contains("whole number"));
        assert!(parse_gpus("abc").is_err());
    }

    #[test]
    fn durations_in_every_accepted_shape() {
        assert_eq!(parse_duration("90").unwrap(), 90);
        assert_eq!(parse_duration("1h30m").unwrap(), 5400);
        assert_eq!(parse_duration("2d").unwrap(), 172800);
        assert_eq!(parse_duration("01:00:00").unwrap(), 3600);
        assert_eq!(parse_duration("1-00:00:10").unwrap(), 86410);
        assert_eq!(parse_duration("10:05").unwrap(), 605);
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn durations_print_as_they_parse() {
        assert_eq!(format_duration(0), "0s");
        assert_eq!(format_duration(90), "1m30s");
        assert_eq!(format_duration(3600), "1h");
        assert_eq!(format_duration(93_784), "1d2h3m4s");
        for s in [1, 59, 61, 3599, 86_400, 200_000] {
            assert_eq!(parse_duration(&format_duration(s)).unwrap(), s);
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(4 << 30), "4GiB");
        assert_eq!(format_bytes(1536 << 20), "1.5GiB");
        assert_eq!(format_bytes(12), "12B");
        assert_eq!(format_gpu_milli(500), "0.5");
        assert_eq!(format_gpu_milli(2000), "2");
        assert_eq!(format_gpu_milli(250), "0.25");
    }
}
