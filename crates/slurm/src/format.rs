//! Slurm's output formats, shared by squeue and sinfo: `-o "%.18i %.9P %j"` (a field is
//! `%[.][-][width]code`; `.` right-justifies, `-` left-justifies, the default; a width pads and
//! truncates, none prints the value as it is; other text is copied) and `-O "JobID,Name:30"`
//! (`Name[:[.]width]`, 20 wide by default). Padding and truncation follow Slurm's
//! `_print_str` byte for byte, since scripts cut squeue's columns by position.

/// One piece of a format: text to copy, or a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Text(String),
    Field { code: char, width: usize, right: bool },
}

/// Parses a `%` format. Codes are not checked here: [`render`]'s caller knows them.
pub fn parse(spec: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut text = String::new();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            text.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            text.push('%');
            continue;
        }
        let mut right = false;
        while let Some(&m) = chars.peek().filter(|m| **m == '.' || **m == '-') {
            right = m == '.';
            chars.next();
        }
        let mut width = 0usize;
        while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
            width = width.saturating_mul(10).saturating_add(d as usize);
            chars.next();
        }
        let Some(code) = chars.next() else {
            // A `%` at the end: Slurm ignores it.
            break;
        };
        if !text.is_empty() {
            items.push(Item::Text(std::mem::take(&mut text)));
        }
        items.push(Item::Field { code, width, right });
    }
    if !text.is_empty() {
        items.push(Item::Text(text));
    }
    items
}

/// Parses a `-O` field list (`JobID,Name:30,State:.10`) with `code` mapping a name (any case)
/// to its format code. Fields are 20 wide unless a width is given, as in Slurm.
pub fn parse_long(spec: &str, code: impl Fn(&str) -> Option<char>) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    for field in spec.split(',').filter(|f| !f.is_empty()) {
        let (name, size) = field.split_once(':').unwrap_or((field, ""));
        let c = code(name).ok_or_else(|| format!("invalid --Format field: {name}"))?;
        let right = size.starts_with('.');
        let digits = size.trim_start_matches('.');
        let width = if digits.is_empty() {
            20
        } else {
            digits.parse().map_err(|_| format!("invalid --Format field width: {field}"))?
        };
        items.push(Item::Field { code: c, width, right });
    }
    Ok(items)
}

/// One line: each field's value from `value` (`None`: a code the command does not know,
/// which prints nothing, as Slurm drops it), padded and cut as its format says.
pub fn render(items: &[Item], value: impl FnMut(char) -> Option<String>) -> String {
    render_keeping(items, value, |_| false)
}

/// [`render`], except that a right-justified value of a code `whole` names is never cut: Slurm
/// prints times (`%M`, `%l`) whole past their width (`1-00:00:00` in `%.9l`).
pub fn render_keeping(
    items: &[Item],
    mut value: impl FnMut(char) -> Option<String>,
    whole: impl Fn(char) -> bool,
) -> String {
    let mut out = String::new();
    for item in items {
        match item {
            Item::Text(t) => out.push_str(t),
            Item::Field { code, width, right } => {
                if let Some(v) = value(*code) {
                    let keep = *right && whole(*code) && v.chars().count() > *width;
                    out.push_str(&if keep { v } else { pad(&v, *width, *right) });
                }
            }
        }
    }
    out
}

/// The codes of `items` that `known` does not know, for one warning each.
pub fn unknown_codes(items: &[Item], known: impl Fn(char) -> bool) -> Vec<char> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Field { code, .. } if !known(*code) => Some(*code),
            _ => None,
        })
        .collect()
}

/// `value` in `width` columns: cut to its first `width` characters, then padded with spaces
/// on the left (`right`) or the right; width 0 leaves it as it is.
pub fn pad(value: &str, width: usize, right: bool) -> String {
    if width == 0 {
        return value.to_string();
    }
    let cut: String = value.chars().take(width).collect();
    if right { format!("{cut:>width$}") } else { format!("{cut:<width$}") }
}

/// Node names as Slurm writes a list of them: runs of numbered names folded
/// (`n1,n2,n3,gpu07` → `n[1-3],gpu07`), zero padding kept.
pub fn hostlist(names: &[String]) -> String {
    berth_model::hostlist::compress_sorted(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(code: char, width: usize, right: bool) -> Item {
        Item::Field { code, width, right }
    }

    #[test]
    fn parses_fields_and_text() {
        assert_eq!(
            parse("%.18i %-9P%j|%%"),
            vec![f('i', 18, true), Item::Text(" ".into()), f('P', 9, false), f('j', 0, false), Item::Text("|%".into())]
        );
        assert_eq!(parse("%.i"), vec![f('i', 0, true)]);
        assert_eq!(parse("id %"), vec![Item::Text("id ".into())]);
    }

    #[test]
    fn pads_and_cuts_like_slurm() {
        assert_eq!(pad("12345", 8, true), "   12345");
        assert_eq!(pad("12345", 8, false), "12345   ");
        assert_eq!(pad("a-long-name", 8, false), "a-long-n");
        assert_eq!(pad("a-long-name", 8, true), "a-long-n", "Slurm keeps the first characters either way");
        assert_eq!(pad("anything", 0, true), "anything");
    }

    #[test]
    fn renders_and_drops_unknown_codes() {
        let items = parse("%.5i %y|%j");
        let line = render(&items, |c| match c {
            'i' => Some("42".into()),
            'j' => Some("train".into()),
            _ => None,
        });
        assert_eq!(line, "   42 |train");
        assert_eq!(unknown_codes(&items, |c| "ij".contains(c)), vec!['y']);
    }

    #[test]
    fn host_lists() {
        let h = |s: &str| hostlist(&s.split(',').map(str::to_string).collect::<Vec<_>>());
        assert_eq!(h("n1"), "n1");
        assert_eq!(h("n1,n2,n3,n5"), "n[1-3,5]");
        assert_eq!(h("gpu07,gpu08,login,n2"), "gpu[07-08],login,n2");
        assert_eq!(h("b3,a1"), "b3,a1");
        assert_eq!(hostlist(&[]), "");
    }

    #[test]
    fn long_format() {
        let code = |n: &str| match n.to_ascii_lowercase().as_str() {
            "jobid" => Some('i'),
            "name" => Some('j'),
            _ => None,
        };
        assert_eq!(parse_long("JobID,Name:.30", code).unwrap(), vec![f('i', 20, false), f('j', 30, true)]);
        assert_eq!(parse_long("jobid,bogus", code).unwrap_err(), "invalid --Format field: bogus");
        assert!(parse_long("name:x", code).is_err());
    }
}
