//! Points in time as Slurm's commands take them (`--begin`, `sacct -S/-E`), read in the local
//! time zone: `2026-12-01T09:30[:00]`, `2026-12-01`, `09:30[:00]` (today, or tomorrow once
//! past, for `--begin`), `MM/DD[/YY][-HH:MM[:SS]]`, `MMDD[YY]`, `now[+-]N[seconds|minutes|
//! hours|days|weeks]`, `today`, `tomorrow`, `midnight`, `noon`, `teatime` (16:00), and
//! RFC 3339 with an offset. A word Slurm does not know is refused with the forms it takes.

use jiff::civil::{Date, DateTime, Time};
use jiff::{Span, Timestamp, Zoned};

/// What a bare clock time means when it has passed today.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PastClock {
    /// `--begin 09:00` at 10:00 is tomorrow's 09:00, as in Slurm.
    Tomorrow,
    /// `sacct -S 09:00` is today's, even when past.
    Today,
}

const FORMS: &str = "use YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], MM/DD[/YY][-HH:MM[:SS]], now[+N{seconds|minutes|hours|days|weeks}], today, tomorrow, midnight, noon or teatime";

/// Reads `s` relative to `now` (its zone is the one a date or clock time is in).
pub fn parse_at(s: &str, now: &Zoned, past: PastClock) -> Result<Timestamp, String> {
    let bad = || format!("invalid time `{s}`: {FORMS}");
    let t = s.trim();
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts);
    }
    let today = now.date();
    let at = |date: Date, time: Time| -> Result<Timestamp, String> {
        date.to_datetime(time).to_zoned(now.time_zone().clone()).map(|z| z.timestamp()).map_err(|e| format!("{s}: {e}"))
    };
    let clock = |c: Time| {
        let d = if past == PastClock::Tomorrow && c < now.time() {
            today.tomorrow().map_err(|e| e.to_string())?
        } else {
            today
        };
        at(d, c)
    };
    match t.to_ascii_lowercase().as_str() {
        "now" => return Ok(now.timestamp()),
        "today" | "midnight" if past == PastClock::Today || t.eq_ignore_ascii_case("today") => {
            return at(today, Time::midnight());
        }
        "midnight" => return at(today.tomorrow().map_err(|e| e.to_string())?, Time::midnight()),
        "tomorrow" => return at(today.tomorrow().map_err(|e| e.to_string())?, Time::midnight()),
        "noon" => return clock(Time::constant(12, 0, 0, 0)),
        "elevenses" => return clock(Time::constant(11, 0, 0, 0)),
        "fika" => return clock(Time::constant(15, 0, 0, 0)),
        "teatime" => return clock(Time::constant(16, 0, 0, 0)),
        _ => {}
    }
    if let Some(rest) = t.strip_prefix("now") {
        return now.timestamp().checked_add(offset(rest).ok_or_else(bad)?).map_err(|e| format!("{s}: {e}"));
    }
    if let Ok(dt) = t.parse::<DateTime>() {
        return at(dt.date(), dt.time());
    }
    if let Ok(d) = t.parse::<Date>() {
        return at(d, Time::midnight());
    }
    if let Some(c) = clock_time(t) {
        return clock(c);
    }
    let (date, time) = match t.split_once('-') {
        Some((d, c)) => (d, Some(clock_time(c).ok_or_else(bad)?)),
        None => (t, None),
    };
    let d = month_day(date, today).ok_or_else(bad)?;
    at(d, time.unwrap_or(Time::midnight()))
}

/// `HH:MM[:SS]`.
fn clock_time(s: &str) -> Option<Time> {
    let parts: Vec<&str> = s.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty() || p.len() > 2) {
        return None;
    }
    let n: Vec<i8> = parts.iter().map(|p| p.parse().ok()).collect::<Option<_>>()?;
    Time::new(n[0], n[1], n.get(2).copied().unwrap_or(0), 0).ok()
}

/// `MM/DD[/YY]`, `MM.DD[.YY]` or `MMDD[YY]` (a two-digit year is 20YY; none: this year).
fn month_day(s: &str, today: Date) -> Option<Date> {
    let nums: Vec<&str> = if s.contains(['/', '.']) {
        s.split(['/', '.']).collect()
    } else if s.len() == 4 || s.len() == 6 {
        vec![&s[..2], &s[2..4], &s[4..]].into_iter().filter(|p| !p.is_empty()).collect()
    } else {
        return None;
    };
    if !(2..=3).contains(&nums.len()) || nums.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return None;
    }
    let month: i8 = nums[0].parse().ok()?;
    let day: i8 = nums[1].parse().ok()?;
    let year: i16 = match nums.get(2) {
        Some(y) if y.len() == 2 => 2000 + y.parse::<i16>().ok()?,
        Some(y) if y.len() == 4 => y.parse().ok()?,
        Some(_) => return None,
        None => today.year(),
    };
    Date::new(year, month, day).ok()
}

/// `+N[unit]` or `-N[unit]` after `now` (no unit: seconds, as in Slurm).
fn offset(s: &str) -> Option<Span> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1i64, &s[1..]),
        b'-' => (-1i64, &s[1..]),
        _ => return None,
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let n: i64 = rest[..digits].parse().ok()?;
    let secs = match rest[digits..].to_ascii_lowercase().as_str() {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        "w" | "week" | "weeks" => 7 * 86_400,
        _ => return None,
    };
    Span::new().try_seconds(sign * n.checked_mul(secs)?).ok()
}

/// `--begin` as clap reads it: now in the local zone.
pub fn parse_begin(s: &str) -> Result<Timestamp, String> {
    parse_at(s, &Zoned::now(), PastClock::Tomorrow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Zoned {
        "2026-11-26T10:30:00[UTC]".parse().unwrap()
    }

    fn at(s: &str, past: PastClock) -> String {
        parse_at(s, &now(), past).unwrap_or_else(|e| panic!("{e}")).to_string()
    }

    #[test]
    fn slurms_forms_read_in_the_local_zone() {
        let b = |s| at(s, PastClock::Tomorrow);
        assert_eq!(b("2026-12-01T09:15"), "2026-12-01T09:15:00Z");
        assert_eq!(b("2026-12-01T09:15:30"), "2026-12-01T09:15:30Z");
        assert_eq!(b("2026-12-01"), "2026-12-01T00:00:00Z");
        assert_eq!(b("16:00"), "2026-11-26T16:00:00Z");
        assert_eq!(b("09:00"), "2026-11-27T09:00:00Z", "past: tomorrow");
        assert_eq!(at("09:00", PastClock::Today), "2026-11-26T09:00:00Z");
        assert_eq!(b("now"), "2026-11-26T10:30:00Z");
        assert_eq!(b("now+90"), "2026-11-26T10:31:30Z");
        assert_eq!(b("now+2hours"), "2026-11-26T12:30:00Z");
        assert_eq!(b("now-1days"), "2026-11-25T10:30:00Z");
        assert_eq!(b("tomorrow"), "2026-11-27T00:00:00Z");
        assert_eq!(b("midnight"), "2026-11-27T00:00:00Z");
        assert_eq!(at("midnight", PastClock::Today), "2026-11-26T00:00:00Z");
        assert_eq!(b("teatime"), "2026-11-26T16:00:00Z");
        assert_eq!(b("12/24"), "2026-12-24T00:00:00Z");
        assert_eq!(b("12/24/27-08:00"), "2027-12-24T08:00:00Z");
        assert_eq!(b("1224"), "2026-12-24T00:00:00Z");
        assert_eq!(b("2026-12-01T09:00:00+01:00"), "2026-12-01T08:00:00Z");
    }

    #[test]
    fn anything_else_is_refused_with_the_forms() {
        for s in ["soon", "25:00", "now+3fortnights", "13/40", "2026-13-01", "now+", "12345", ""] {
            let e = parse_at(s, &now(), PastClock::Tomorrow).unwrap_err();
            assert!(e.contains("YYYY-MM-DD"), "{s}: {e}");
        }
    }
}
