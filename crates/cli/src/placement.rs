//! The job flags that choose nodes rather than resources, from Slurm: `--constraint` (node
//! features), `--exclusive` (whole nodes) and `--qos` (a priority the admin configured).
//! Flattened into `SpecFlags` (`specflags.rs`), so flags, job files, `#BERTH` and the
//! `#SBATCH` translations of `-C`, `--exclusive` and `-q` all read them the same way.

use berth_model::{Constraint, JobSpec};
use clap::Args;

#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct PlacementFlags {
    /// Node features each of the job's nodes must offer, as Slurm's --constraint: a label KEY
    /// of the node, or KEY=VALUE (`berth nodes` lists them); all of several with `&`, any with
    /// `|` (a100&ib, a100|h100)
    #[arg(long, value_name = "FEATURES", value_parser = parse_constraint, help_heading = "Scheduling")]
    pub constraint: Option<Constraint>,

    /// Whole nodes: each kernel gets all of its node's CPUs, memory and GPUs, and no other job
    /// runs there meanwhile (the resources asked for are the least a node must have)
    #[arg(long, help_heading = "Scheduling")]
    pub exclusive: bool,

    /// Quality of service, one of those the manager's config defines ([qos.NAME]): it sets the
    /// job's priority (and may cap its time limit)
    #[arg(long, value_name = "QOS", help_heading = "Scheduling")]
    pub qos: Option<String>,
}

/// `--constraint FEATURES`.
pub fn parse_constraint(s: &str) -> Result<Constraint, String> {
    s.parse().map_err(|e: berth_model::SpecError| e.0)
}

impl PlacementFlags {
    /// `self` with what `over` gives replacing it (`exclusive` holds when either sets it).
    pub fn overlay(self, over: PlacementFlags) -> PlacementFlags {
        PlacementFlags {
            constraint: over.constraint.or(self.constraint),
            exclusive: over.exclusive || self.exclusive,
            qos: over.qos.or(self.qos),
        }
    }

    /// Writes the flags into `spec`.
    pub fn apply(&self, spec: &mut JobSpec) {
        spec.constraint = self.constraint.clone();
        spec.exclusive = self.exclusive;
        spec.qos = self.qos.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_and_spec() {
        let low =
            PlacementFlags { constraint: Some("a100".parse().unwrap()), exclusive: true, qos: Some("low".into()) };
        let high = PlacementFlags { qos: Some("high".into()), ..Default::default() };
        let both = low.overlay(high);
        assert_eq!((both.constraint.as_ref().map(|c| c.to_string()), both.exclusive), (Some("a100".into()), true));
        let mut spec = JobSpec::command(["true"]);
        both.apply(&mut spec);
        assert_eq!((spec.qos.as_deref(), spec.exclusive), (Some("high"), true));
        assert!(parse_constraint("a*2").unwrap_err().contains("node counts"));
    }
}
