//! What a node may be called: the name an agent registers as, and the names a queue's
//! `nodes` list selects nodes by (in the config file or through the API).

/// Node names: letters, digits, `-`, `_`, `.`, at most 253 bytes.
pub fn valid_node_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}
