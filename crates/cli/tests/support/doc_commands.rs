//! The `berth ...` commands that docs and messages show, as argument lists to check against
//! the binary's command line (e2e_readme.rs). Shell lines of `sh` blocks are split as a shell
//! would (quotes, `\` continuations, `#` comments, pipes, `$(...)`, `&&`, `;`, redirections,
//! `VAR=value` prefixes); inline code spans may be synopses (`[--flag X]`, `A|B`, `<key>`,
//! `ID...`), which become one concrete command. Placeholders whose value must parse (a job id,
//! a count, an address) get a value from a small table; the others (NAME, FILE) stand as they are.

/// A command line found in a file.
pub struct Found {
    /// `file:line`.
    pub at: String,
    pub text: String,
    /// From an inline code span or a message (a mention, maybe a synopsis), not a shell line.
    pub inline: bool,
}

/// One `berth` command: its arguments (without `berth`).
#[derive(Debug)]
pub struct BerthCommand {
    pub args: Vec<String>,
    /// It leaves things out (`...`, or a mention such as `berth token revoke`): required
    /// arguments, values and subcommands may be missing.
    pub partial: bool,
}

/// Placeholders that must parse as a value of their flag or argument, and what stands for them.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("ID", "1"),
    ("JOB", "1"),
    ("N", "2"),
    ("W", "2"),
    ("ADDR", "127.0.0.1:9102"),
    ("IP", "127.0.0.1"),
    ("STATES", "PENDING"),
    ("SHELL", "bash"),
    ("MODE", "append"),
    ("REMOTE", "8888"),
    ("DIR", "/shared/dir"),
    ("COMMAND", "ps"),
];

/// The logical lines (continuations joined) of every ```sh block of a Markdown file.
pub fn block_lines(name: &str, body: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    let mut lines = body.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if let Some(lang) = line.strip_prefix("```") {
            fence = if fence.is_some() { None } else { Some(lang.trim()) };
            continue;
        }
        if fence != Some("sh") {
            continue;
        }
        let mut text = line.to_string();
        while text.ends_with('\\') {
            text.pop();
            match lines.next() {
                Some((_, next)) => text.push_str(next),
                None => break,
            }
        }
        found.push(Found { at: format!("{name}:{}", i + 1), text, inline: false });
    }
    found
}

/// The inline code spans of a Markdown file, outside fenced blocks, that start with `berth `
/// (a span may run over a line break).
pub fn inline_spans(name: &str, body: &str) -> Vec<Found> {
    // Fenced blocks blanked out, their line breaks kept for the line numbers.
    let mut prose = String::new();
    let mut fenced = false;
    for line in body.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            prose.push_str(line);
        }
        prose.push('\n');
    }
    spans(name, &prose, 1)
}

/// The code spans starting with `berth ` in a Rust source file's messages: its lines outside
/// comments (string literals and their continuations), and the `///` help text of the CLI's
/// command line definitions.
pub fn source_spans(name: &str, body: &str) -> Vec<Found> {
    let help_text = name.starts_with("crates/cli/src/");
    let mut found = Vec::new();
    for (i, line) in body.lines().enumerate() {
        let t = line.trim_start();
        let wanted = if t.starts_with("///") { help_text } else { !t.starts_with("//") };
        if wanted {
            // Format arguments (`{id}`, `{}`) stand for values: a job id parses as any.
            found.extend(spans(name, &braces_as_one(line), i + 1));
        }
    }
    found
}

fn braces_as_one(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => {
                out.push('1');
                rest = &rest[open + close + 1..];
            }
            None => {
                rest = &rest[open..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The `` `berth ...` `` spans of `text`, whose first line is line `first` of `name`, each at
/// the line it starts on.
fn spans(name: &str, text: &str, first: usize) -> Vec<Found> {
    let mut found = Vec::new();
    let mut parts = text.split('`');
    let mut line = first;
    // Odd parts are inside backticks.
    while let Some(outside) = parts.next() {
        line += outside.matches('\n').count();
        let Some(inside) = parts.next() else { break };
        if inside.starts_with("berth ") {
            found.push(Found { at: format!("{name}:{line}"), text: inside.replace('\n', " "), inline: true });
        }
        line += inside.matches('\n').count();
    }
    found
}

/// A word of a shell line, or an operator between commands.
#[derive(Debug, PartialEq)]
enum Token {
    Word { text: String, quoted: bool },
    Op(&'static str),
}

const OPERATORS: &[&str] = &["&&", "||", "$(", ">>", "2>", "|", ";", ">", "<", ")", "&"];

/// Splits a shell line into words and operators, as `sh` would (quotes removed; a `#` that
/// starts a word starts a comment).
fn tokenize(line: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word: Option<(String, bool)> = None;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    let flush = |word: &mut Option<(String, bool)>, tokens: &mut Vec<Token>| {
        if let Some((text, quoted)) = word.take() {
            tokens.push(Token::Word { text, quoted });
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..].iter().take(2).collect();
        if c.is_whitespace() {
            flush(&mut word, &mut tokens);
            i += 1;
        } else if c == '#' && word.is_none() {
            break;
        } else if let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op))
            && !(*op == "2>" && word.is_some())
        {
            flush(&mut word, &mut tokens);
            tokens.push(Token::Op(op));
            i += op.len();
        } else if c == '\'' || c == '"' {
            let w = word.get_or_insert_with(|| (String::new(), true));
            w.1 = true;
            i += 1;
            while i < chars.len() && chars[i] != c {
                if c == '"' && chars[i] == '\\' && i + 1 < chars.len() {
                    i += 1;
                }
                w.0.push(chars[i]);
                i += 1;
            }
            i += 1;
        } else if c == '\\' && i + 1 < chars.len() {
            word.get_or_insert_with(|| (String::new(), false)).0.push(chars[i + 1]);
            i += 2;
        } else {
            word.get_or_insert_with(|| (String::new(), false)).0.push(c);
            i += 1;
        }
    }
    flush(&mut word, &mut tokens);
    tokens
}

/// A synopsis as a command line: optional flags (`[--name X]`) given, other optional parts
/// (`[ID]`, `[LOCAL:]`) left out, alternatives (`A|B`, `--a/--b`, `[-x | -y]`) the first,
/// `<key>` as `x` (a key press, `<TAB>`, left out), and a trailing `...` of a word dropped.
pub fn concrete(synopsis: &str) -> String {
    let mut out = String::new();
    let mut rest = synopsis;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let Some(close) = rest[open..].find(']') else { break };
        let group = &rest[open + 1..open + close];
        if group.starts_with('-') {
            out.push_str(group.split(" | ").next().unwrap());
        }
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    let words: Vec<String> = out
        .split(' ')
        .map(|w| {
            // `<TAB>` is a key press (completion), any other `<key>` a value.
            let w = match w {
                "<TAB>" => "",
                w if w.starts_with('<') && w.ends_with('>') => "x",
                w => w,
            };
            let w = if w.starts_with('|') { w } else { w.split('|').next().unwrap() };
            let w = if w.starts_with('-') { w.split("/-").next().unwrap() } else { w };
            let w = if w.len() > 3 { w.trim_end_matches("...").trim_end_matches('…') } else { w };
            if w == "*" { "" } else { w }.to_string()
        })
        .collect();
    words.join(" ")
}

/// The `berth` commands of a shell line (or, `inline`, of a code span or message).
pub fn berth_commands(line: &str, inline: bool) -> Vec<BerthCommand> {
    let line = if inline { concrete(line) } else { line.to_string() };
    let mut commands = Vec::new();
    let mut current: Vec<(String, bool)> = Vec::new();
    let mut redirect = false;
    let mut finish = |current: &mut Vec<(String, bool)>| {
        let words = std::mem::take(current);
        // `VAR=value berth ...`: the assignments are the shell's.
        let mut words = words.into_iter().skip_while(|(w, q)| !q && is_assignment(w)).peekable();
        // `... | xargs -r berth cancel`: the command xargs runs.
        if words.next_if(|(w, _)| w == "xargs").is_some() {
            while words.next_if(|(w, _)| w.starts_with('-')).is_some() {}
        }
        if words.next().is_some_and(|(w, _)| w == "berth") {
            let mut partial = inline;
            let mut args = Vec::new();
            for (w, quoted) in words {
                if !quoted && (w == "..." || w == "…") {
                    partial = true;
                } else {
                    args.push(value(&w, quoted));
                }
            }
            commands.push(BerthCommand { args, partial });
        }
    };
    for token in tokenize(&line) {
        match token {
            Token::Op(op) if [">", ">>", "2>", "<"].contains(&op) => redirect = true,
            Token::Op(_) => finish(&mut current),
            Token::Word { .. } if redirect => redirect = false,
            Token::Word { text, quoted } => current.push((text, quoted)),
        }
    }
    finish(&mut current);
    commands
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// A word with its placeholder replaced and `$VAR`s (job ids of earlier lines) as `1`.
fn value(word: &str, quoted: bool) -> String {
    if !quoted && let Some((_, v)) = PLACEHOLDERS.iter().find(|(p, _)| *p == word) {
        return v.to_string();
    }
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(|c| c.is_ascii_alphabetic() || *c == '_') {
            while chars.peek().is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_') {
                chars.next();
            }
            out.push('1');
        } else {
            out.push(c);
        }
    }
    out
}
