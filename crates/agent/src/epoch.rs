//! Whose commands the agent obeys when several managers stand by for each other
//! (docs/ha.md): every frame of a manager carries the epoch of its leader lease, which grows at every
//! takeover. The agent follows the highest epoch it has seen and refuses a connection or a
//! command of an older one, so a deposed leader that wakes up (a frozen process, a healed
//! partition) cannot act on this node even if it tried.

/// A welcome from a deposed leader: its epoch is older than one this agent followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the manager at {url} leads with epoch {epoch}, older than epoch {highest} this agent already followed: \
     it is a deposed leader, ignoring it"
)]
pub(crate) struct Deposed {
    pub url: String,
    pub epoch: u64,
    pub highest: u64,
}

/// The highest epoch seen, for as long as the agent runs.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    highest: u64,
}

impl Epochs {
    /// A manager welcomed this agent with `epoch`: refused (with why) when an older leader's.
    pub fn welcome(&mut self, epoch: u64, url: &str) -> Result<(), Deposed> {
        if epoch < self.highest {
            return Err(Deposed { url: url.to_string(), epoch, highest: self.highest });
        }
        self.highest = epoch;
        Ok(())
    }

    /// Whether to carry out a command sent with `epoch` (an older one is refused, with a
    /// warning: it can only come from a deposed leader).
    pub fn admit(&mut self, epoch: u64, what: &str) -> bool {
        if epoch < self.highest {
            tracing::warn!(
                epoch,
                following = self.highest,
                "refused a {what} command of an older leader (epoch {epoch}; this agent follows epoch {})",
                self.highest
            );
            return false;
        }
        self.highest = epoch;
        true
    }

    #[cfg(test)]
    pub fn highest(&self) -> u64 {
        self.highest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_highest_epoch_and_refuses_older_ones() {
        let mut e = Epochs::default();
        assert!(e.welcome(0, "http://a").is_ok(), "a manager without a lease");
        assert!(e.welcome(2, "http://a").is_ok());
        assert!(e.admit(2, "start") && e.admit(3, "start"), "the same or a newer leader");
        assert_eq!(e.highest(), 3);
        assert!(!e.admit(2, "start"), "a deposed leader's command");
        let why = e.welcome(2, "http://a").unwrap_err().to_string();
        assert!(why.contains("epoch 2") && why.contains("epoch 3"), "{why}");
        assert_eq!(e.highest(), 3, "refusals change nothing");
    }
}
