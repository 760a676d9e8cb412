//! `experiment:` — a randomised split of sessions between sluice's pipeline (the treatment arm)
//! and forwarding untouched (the control arm), so that what sluice saves is measured on the
//! user's own traffic rather than replayed (docs/guide.md, "Is it saving me money?").
//!
//! The arm is a pure function of the experiment's name and the session key: every replica and
//! every restart puts a session in the same arm, and a new name reshuffles.

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One side of the split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arm {
    /// Forwarded byte-identically; what sluice would have done is computed off the request path.
    Control,
    /// The configured pipeline.
    Treatment,
}

impl Arm {
    /// As written in YAML, `/stats` labels and the report.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Control => "control",
            Arm::Treatment => "treatment",
        }
    }

    /// From its name (a stored record's).
    pub fn named(name: &str) -> Option<Arm> {
        [Arm::Control, Arm::Treatment]
            .into_iter()
            .find(|arm| arm.name() == name)
    }
}

/// `experiment:` (and `sluice serve --ab SHARE`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExperimentConfig {
    /// Defaults to `ab`. Salts the assignment (a new name reshuffles every session) and keys
    /// the experiment's records in the store.
    pub name: String,
    /// The share of sessions in the control arm, strictly between 0 and 1. Absent: no
    /// experiment (unless `winner` is set).
    pub control_share: Option<f64>,
    /// Ends the experiment: every session gets this arm, and nothing more is recorded (the
    /// records stay readable with `sluice ab report`).
    pub winner: Option<Arm>,
    /// Defaults to `1800` (30 minutes). A session with no request for this many seconds is
    /// finished and counts in the comparison; before that it is counted as open.
    pub idle_seconds: u64,
}

impl Default for ExperimentConfig {
    fn default() -> ExperimentConfig {
        ExperimentConfig {
            name: "ab".to_owned(),
            control_share: None,
            winner: None,
            idle_seconds: 1800,
        }
    }
}

impl ExperimentConfig {
    /// Whether sessions are being split and recorded now.
    pub fn running(&self) -> bool {
        self.winner.is_none() && self.control_share.is_some()
    }

    /// Whether the experiment decides any session's arm (running, or ended with a winner).
    pub fn enabled(&self) -> bool {
        self.winner.is_some() || self.control_share.is_some()
    }

    /// The arm of `session` (its full key, credential scope included); `None` without an
    /// experiment. The hash of the name and the key, as a fraction of 2^64, against the share.
    pub fn arm(&self, session: &str) -> Option<Arm> {
        if let Some(winner) = self.winner {
            return Some(winner);
        }
        let share = self.control_share?;
        let mut hasher = Sha256::new();
        hasher.update(self.name.as_bytes());
        hasher.update([0]);
        hasher.update(session.as_bytes());
        let digest = hasher.finalize();
        let mut head = [0u8; 8];
        head.copy_from_slice(&digest[..8]);
        let fraction = u64::from_be_bytes(head) as f64 / 2f64.powi(64);
        Some(if fraction < share {
            Arm::Control
        } else {
            Arm::Treatment
        })
    }

    /// The problems of its values, as `(key path, message)`.
    pub(super) fn problems(&self) -> Vec<(&'static str, &'static str)> {
        let mut problems = Vec::new();
        if self.control_share.is_some_and(|s| !(s > 0.0 && s < 1.0)) {
            problems.push((
                "experiment.control_share",
                "must be strictly between 0 and 1",
            ));
        }
        if self.name.is_empty() || self.name.len() > 64 || self.name.contains(['{', '}', '\0']) {
            problems.push((
                "experiment.name",
                "must be 1 to 64 characters, without braces",
            ));
        }
        if self.idle_seconds == 0 {
            problems.push(("experiment.idle_seconds", "must be at least 1"));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `scope\0session-0` to `-7` are in the control arm of `ab` at 0.5.
    const PINNED: [bool; 8] = [false, false, true, false, false, false, true, true];

    fn share(control_share: f64) -> ExperimentConfig {
        ExperimentConfig {
            control_share: Some(control_share),
            ..ExperimentConfig::default()
        }
    }

    /// The arm depends on the session and the name only, and the shares come out as asked.
    #[test]
    fn sessions_split_by_the_share_and_stay_put() {
        let half = share(0.5);
        let keys: Vec<String> = (0..4000).map(|i| format!("scope\0session-{i}")).collect();
        let control = keys
            .iter()
            .filter(|k| half.arm(k) == Some(Arm::Control))
            .count();
        assert!((1850..2150).contains(&control), "{control} of 4000");
        // Pinned: a change to the hash would move every running experiment's sessions.
        let pinned: Vec<bool> = keys[..8]
            .iter()
            .map(|k| half.arm(k) == Some(Arm::Control))
            .collect();
        assert_eq!(pinned, PINNED, "the assignment rule changed");
        let tenth = share(0.1);
        let few = keys
            .iter()
            .filter(|k| tenth.arm(k) == Some(Arm::Control))
            .count();
        assert!((320..480).contains(&few), "{few} of 4000");
        // A new name reshuffles: about half the sessions change arm.
        let renamed = ExperimentConfig {
            name: "ab-2".to_owned(),
            ..share(0.5)
        };
        let moved = keys
            .iter()
            .filter(|k| renamed.arm(k) != half.arm(k))
            .count();
        assert!((1800..2200).contains(&moved), "{moved} of 4000 moved");
    }

    #[test]
    fn a_winner_ends_the_split_and_no_experiment_assigns_nothing() {
        let ended = ExperimentConfig {
            winner: Some(Arm::Treatment),
            ..share(0.5)
        };
        assert!(!ended.running() && ended.enabled());
        assert!((0..100).all(|i| ended.arm(&format!("s{i}")) == Some(Arm::Treatment)));
        let none = ExperimentConfig::default();
        assert!(!none.enabled() && none.arm("s").is_none());
    }

    #[test]
    fn bad_values_are_named() {
        for bad in [0.0, 1.0, -0.5, 2.0, f64::NAN] {
            assert_eq!(
                share(bad).problems()[0].0,
                "experiment.control_share",
                "{bad}"
            );
        }
        assert!(share(0.3).problems().is_empty());
        let braces = ExperimentConfig {
            name: "a{b}".to_owned(),
            ..share(0.3)
        };
        assert_eq!(braces.problems()[0].0, "experiment.name");
    }
}
