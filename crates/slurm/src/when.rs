//! Points in time as people type them on the command line, for the time windows of
//! `berth history --since/--until` and `sacct -S/-E`, and the times those commands print.
//!
//! One parser serves both, so that what works for one works for the other: Slurm's forms
//! (`now`, `now-1hours`, `today`, `midnight`, `YYYY-MM-DD[THH:MM[:SS]]`, `MMDD[YY]`,
//! `MM/DD[/YY]`, `HH:MM[:SS]`), an RFC 3339 time with its offset, and berth's own "this long
//! ago" (`2h`, `30m`, `1d12h`). Times without an offset are local, as in Slurm. `--begin`
//! reads the same forms looking ahead ([`parse_begin`]).

use jiff::civil::{Date, DateTime, Time};
use jiff::{Timestamp, Zoned};

/// The instant `s` names, relative to `now` (whose time zone local times are read in).
pub fn parse_time(s: &str, now: &Zoned) -> Result<Timestamp, String> {
    let t = s.trim();
    let bad = || {
        format!(
            "bad time `{s}`: use a date (2026-11-20, 2026-11-20T10:00[:SS], MMDD[YY], MM/DD[/YY]), HH:MM[:SS], \
             now[-N{{seconds|minutes|hours|days|weeks}}], today, midnight, or a time ago (2h, 30m, 1d)"
        )
    };
    let local = |dt: DateTime| dt.to_zoned(now.time_zone().clone()).map(|z| z.timestamp()).map_err(|_| bad());
    let today = now.date();
    match t.to_ascii_lowercase().as_str() {
        "" => return Err(bad()),
        "today" | "midnight" => return local(today.to_datetime(Time::midnight())),
        "noon" => return local(today.at(12, 0, 0, 0)),
        "elevenses" => return local(today.at(11, 0, 0, 0)),
        "fika" => return local(today.at(15, 0, 0, 0)),
        "teatime" => return local(today.at(16, 0, 0, 0)),
        "tomorrow" => return local(today.tomorrow().map_err(|_| bad())?.to_datetime(Time::midnight())),
        lower if lower.starts_with("now") => return relative(&lower[3..], now).ok_or_else(bad),
        _ => {}
    }
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts);
    }
    if let Some(dt) = slurm_date(t, today) {
        return local(dt);
    }
    if t.contains(':')
        && let Some(time) = clock(t)
    {
        return local(today.to_datetime(time));
    }
    // berth's "this long ago": only with a unit, so that bare numbers stay Slurm's dates.
    if t.bytes().any(|b| b.is_ascii_alphabetic())
        && let Ok(secs) = berth_model::parse_duration(t)
    {
        return now.timestamp().checked_sub(jiff::SignedDuration::from_secs(secs as i64)).map_err(|_| bad());
    }
    Err(bad())
}

/// `--begin` (and `#SBATCH --begin`): the forms of [`parse_time`] looking ahead, as Slurm reads
/// them there: a clock time (or `noon`, `teatime`) already past today is tomorrow's, and
/// `midnight` is the coming one.
pub fn parse_begin(s: &str) -> Result<Timestamp, String> {
    begin_at(s, &Zoned::now())
}

fn begin_at(s: &str, now: &Zoned) -> Result<Timestamp, String> {
    let t = s.trim().to_ascii_lowercase();
    if t == "midnight" {
        return parse_time("tomorrow", now);
    }
    let at = parse_time(s, now)?;
    let clock_only = ["noon", "elevenses", "fika", "teatime"].contains(&t.as_str())
        || (t.contains(':') && !t.contains(['-', 't', '/', '.', '+']) && clock(&t).is_some());
    if clock_only && at < now.timestamp() {
        let next = at.to_zoned(now.time_zone().clone()).checked_add(jiff::Span::new().days(1));
        return next.map(|z| z.timestamp()).map_err(|e| format!("{s}: {e}"));
    }
    Ok(at)
}

/// `-1hours`, `+30minutes`, `-90` (seconds), or nothing: `now` shifted.
fn relative(rest: &str, now: &Zoned) -> Option<Timestamp> {
    if rest.is_empty() {
        return Some(now.timestamp());
    }
    let (sign, rest) = match rest.as_bytes()[0] {
        b'-' => (-1i64, &rest[1..]),
        b'+' => (1, &rest[1..]),
        _ => return None,
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n: i64 = rest[..digits].parse().ok()?;
    let unit: i64 = match &rest[digits..] {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86400,
        "w" | "week" | "weeks" => 7 * 86400,
        _ => return None,
    };
    let secs = n.checked_mul(unit)?.checked_mul(sign)?;
    now.timestamp().checked_add(jiff::SignedDuration::from_secs(secs)).ok()
}

/// Slurm's dates: `YYYY-MM-DD[THH:MM[:SS]]`, `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`.
fn slurm_date(t: &str, today: Date) -> Option<DateTime> {
    let (day, time) = match t.split_once(['T', ' ']) {
        Some((d, c)) => (d, clock(c)?),
        None => (t, Time::midnight()),
    };
    let num = |s: &str| -> Option<i16> { s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse().ok())? };
    let year2 = |y: i16| if y < 100 { 2000 + y } else { y };
    let date = if let [y, m, d] = day.split('-').collect::<Vec<_>>()[..] {
        (y.len() == 4).then_some(())?;
        Date::new(num(y)?, num(m)? as i8, num(d)? as i8).ok()?
    } else if let Some(sep) = ['/', '.'].into_iter().find(|c| day.contains(*c)) {
        match day.split(sep).collect::<Vec<_>>()[..] {
            [m, d] => Date::new(today.year(), num(m)? as i8, num(d)? as i8).ok()?,
            [m, d, y] => Date::new(year2(num(y)?), num(m)? as i8, num(d)? as i8).ok()?,
            _ => return None,
        }
    } else if day.len() == 4 || day.len() == 6 {
        let year = if day.len() == 6 { year2(num(&day[4..])?) } else { today.year() };
        Date::new(year, num(&day[..2])? as i8, num(&day[2..4])? as i8).ok()?
    } else {
        return None;
    };
    Some(date.to_datetime(time))
}

/// `HH:MM[:SS]`.
fn clock(s: &str) -> Option<Time> {
    let parts: Vec<i8> = s.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    match parts[..] {
        [h, m] => Time::new(h, m, 0, 0).ok(),
        [h, m, sec] => Time::new(h, m, sec, 0).ok(),
        _ => None,
    }
}

/// A time as Slurm prints it (`2026-11-20T10:00:05`, local), `Unknown` for none.
pub fn slurm_time(ts: Option<Timestamp>) -> String {
    match ts {
        Some(t) => t.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%dT%H:%M:%S").to_string(),
        None => "Unknown".into(),
    }
}

/// A duration as squeue prints it (`%M`, `%l`): `0:05`, `12:34`, `1:02:03`, `2-03:04:05`.
pub fn squeue_duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs % 86400 / 3600, secs % 3600 / 60, secs % 60);
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// A duration as sacct prints it (`Elapsed`, `Timelimit`): `00:00:05`, `1-02:03:04`.
pub fn sacct_duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs % 86400 / 3600, secs % 3600 / 60, secs % 60);
    if d > 0 { format!("{d}-{h:02}:{m:02}:{s:02}") } else { format!("{h:02}:{m:02}:{s:02}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Zoned {
        "2026-11-20T10:30:00+00:00[UTC]".parse().unwrap()
    }

    fn at(s: &str) -> String {
        parse_time(s, &now()).map(|t| t.to_string()).unwrap_or_else(|e| e)
    }

    #[test]
    fn slurm_and_berth_forms() {
        assert_eq!(at("now"), "2026-11-20T10:30:00Z");
        assert_eq!(at("now-1hours"), "2026-11-20T09:30:00Z");
        assert_eq!(at("NOW-90"), "2026-11-20T10:28:30Z");
        assert_eq!(at("now+2days"), "2026-11-22T10:30:00Z");
        assert_eq!(at("now-1weeks"), "2026-11-13T10:30:00Z");
        assert_eq!(at("today"), "2026-11-20T00:00:00Z");
        assert_eq!(at("midnight"), "2026-11-20T00:00:00Z");
        assert_eq!(at("2026-11-19"), "2026-11-19T00:00:00Z");
        assert_eq!(at("2026-11-19T08:15"), "2026-11-19T08:15:00Z");
        assert_eq!(at("2026-11-19T08:15:07"), "2026-11-19T08:15:07Z");
        assert_eq!(at("1118"), "2026-11-18T00:00:00Z");
        assert_eq!(at("111825"), "2025-11-18T00:00:00Z");
        assert_eq!(at("11/18"), "2026-11-18T00:00:00Z");
        assert_eq!(at("11/18/25"), "2025-11-18T00:00:00Z");
        assert_eq!(at("08:00"), "2026-11-20T08:00:00Z");
        assert_eq!(at("2h"), "2026-11-20T08:30:00Z");
        assert_eq!(at("1d12h"), "2026-11-18T22:30:00Z");
        assert_eq!(at("2026-11-19T08:15:00+02:00"), "2026-11-19T06:15:00Z");
    }

    #[test]
    fn begin_times_look_ahead() {
        let b = |s: &str| begin_at(s, &now()).map(|t| t.to_string()).unwrap_or_else(|e| e);
        assert_eq!(b("16:00"), "2026-11-20T16:00:00Z");
        assert_eq!(b("09:00"), "2026-11-21T09:00:00Z", "past: tomorrow's");
        assert_eq!(b("teatime"), "2026-11-20T16:00:00Z");
        assert_eq!(b("midnight"), "2026-11-21T00:00:00Z");
        assert_eq!(b("now+2hours"), "2026-11-20T12:30:00Z");
        assert_eq!(b("2026-12-01T09:00"), "2026-12-01T09:00:00Z");
        assert_eq!(b("11/18"), "2026-11-18T00:00:00Z", "a date is that date, even past");
        assert!(b("soon").starts_with("bad time `soon`"));
    }

    #[test]
    fn nonsense_is_refused_saying_what_works() {
        for bad in ["", "yesterdayish", "now-", "now-3fortnights", "2026-13-01", "1342", "25:00", "12345"] {
            let e = parse_time(bad, &now()).unwrap_err();
            assert!(e.starts_with(&format!("bad time `{bad}`")) && e.contains("now["), "{bad}: {e}");
        }
    }

    #[test]
    fn durations_as_slurm_prints_them() {
        assert_eq!(squeue_duration(5), "0:05");
        assert_eq!(squeue_duration(754), "12:34");
        assert_eq!(squeue_duration(3723), "1:02:03");
        assert_eq!(squeue_duration(2 * 86400 + 3 * 3600 + 4 * 60 + 5), "2-03:04:05");
        assert_eq!(sacct_duration(5), "00:00:05");
        assert_eq!(sacct_duration(86400 + 3723), "1-01:02:03");
        assert_eq!(slurm_time(None), "Unknown");
    }
}
