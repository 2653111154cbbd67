//! Property tests of the quantity parsers: no input wraps or panics. Whatever is typed, an
//! accepted value equals its exact mathematical value (computed here in `u128`), and a value
//! above the parser's maximum is an error that names the maximum.

use proptest::prelude::*;

use super::*;

/// What a parser must answer for an exact value: zero and values above `max` are errors.
fn expect(exact: Option<u128>, max: u64, got: Result<u64, QuantityError>, input: &str) -> Result<(), TestCaseError> {
    match exact {
        Some(0) => prop_assert!(got.is_err(), "{input}: zero accepted"),
        Some(v) if v <= max as u128 => prop_assert_eq!(got.map(u128::from), Ok(v), "{}", input),
        _ => {
            let e = got.expect_err(input).to_string();
            prop_assert!(e.contains("maximum"), "{input}: {e}");
        }
    }
    Ok(())
}

/// Numbers around `max / weight` (the boundary), anywhere in `u64`, and anywhere in `u128`.
fn around(max: u128, weight: u128) -> BoxedStrategy<u128> {
    let edge = max / weight;
    prop_oneof![
        0..=edge.saturating_mul(2) + 2,
        edge.saturating_sub(3)..=edge + 3,
        any::<u64>().prop_map(u128::from),
        any::<u128>(),
    ]
    .boxed()
}

fn unit_then_number(
    units: &'static [(&'static str, u128)],
    max: u64,
) -> impl Strategy<Value = (&'static str, u128, u128)> {
    prop::sample::select(units).prop_flat_map(move |(u, w)| (Just(u), Just(w), around(max as u128, w)))
}

const DURATION_UNITS: &[(&str, u128)] = &[("", 1), ("s", 1), ("m", 60), ("h", 3600), ("d", 86_400)];
const MEM_UNITS: &[(&str, u128)] = &[
    ("B", 1),
    ("KiB", 1 << 10),
    ("M", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("kB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

proptest! {
    #[test]
    fn a_duration_in_one_unit_is_exact_or_refused((unit, w, n) in unit_then_number(DURATION_UNITS, MAX_DURATION_SECS)) {
        let s = format!("{n}{unit}");
        expect(n.checked_mul(w), MAX_DURATION_SECS, parse_duration(&s), &s)?;
    }

    #[test]
    fn a_compound_duration_is_exact_or_refused(
        d in around(MAX_DURATION_SECS as u128, 86_400),
        h in around(MAX_DURATION_SECS as u128, 3600),
        m in around(MAX_DURATION_SECS as u128, 60),
        s in around(MAX_DURATION_SECS as u128, 1),
        slurm in any::<bool>(),
    ) {
        let text = if slurm { format!("{d}-{h}:{m}:{s}") } else { format!("{d}d{h}h{m}m{s}s") };
        let exact = (|| d.checked_mul(86_400)?.checked_add(h.checked_mul(3600)?)?.checked_add(m.checked_mul(60)?)?.checked_add(s))();
        expect(exact, MAX_DURATION_SECS, parse_duration(&text), &text)?;
    }

    #[test]
    fn a_memory_size_is_exact_or_refused((unit, w, n) in unit_then_number(MEM_UNITS, MAX_MEM_BYTES), frac in 0u128..1000, with_frac in any::<bool>()) {
        let (s, milli) = if with_frac { (format!("{n}.{frac:03}{unit}"), n.checked_mul(1000).and_then(|v| v.checked_add(frac))) }
            else { (format!("{n}{unit}"), n.checked_mul(1000)) };
        expect(milli.and_then(|m| m.checked_mul(w)).map(|b| b / 1000), MAX_MEM_BYTES, parse_mem(&s), &s)?;
    }

    #[test]
    fn cpus_and_gpus_are_exact_or_refused(n in around(MAX_MILLI as u128, 1000), frac in 0u128..1000) {
        let s = format!("{n}.{frac:03}");
        let exact = n.checked_mul(1000).and_then(|v| v.checked_add(frac));
        expect(exact, MAX_MILLI, parse_cpus(&s), &s)?;
        let whole = format!("{n}");
        if n == 0 {
            prop_assert_eq!(parse_gpus(&whole), Ok(0));
        } else {
            expect(n.checked_mul(1000), MAX_MILLI, parse_gpus(&whole), &whole)?;
        }
    }

    #[test]
    fn no_input_panics(s in "[0-9smhdKMGTiB:.\\- ]{0,40}", t in any::<String>()) {
        for x in [&s, &t] {
            let _ = (parse_duration(x), parse_mem(x), parse_cpus(x), parse_gpus(x));
        }
    }
}

#[test]
fn the_reported_overflows_are_refused_with_the_maximum() {
    for s in [
        "307445734561825861m",
        "213503982334602d",
        "18446744073709551616",
        "99999999999999999999999999999999999999999d",
    ] {
        let e = parse_duration(s).unwrap_err().to_string();
        assert!(e.contains(s) && e.contains("maximum, 36500d"), "{e}");
    }
    assert_eq!(parse_duration("36500d").unwrap(), MAX_DURATION_SECS);
    assert!(parse_duration("36500d1s").is_err());
    let e = parse_mem("16777216TiB").unwrap_err().to_string();
    assert!(e.contains("maximum, 1048576TiB"), "{e}");
    assert_eq!(parse_mem("1048576TiB").unwrap(), MAX_MEM_BYTES);
    assert!(parse_cpus("18446744073709551616").unwrap_err().to_string().contains("maximum"));
}
