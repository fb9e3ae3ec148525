//! What an import did, counted per result, and the summary printed at the
//! end.

use std::fmt;
use std::time::Duration;

use crate::bulk::rows::Row;
use crate::domain::admission::AdmissionRefusal;
use crate::domain::counts::{Outcome, Recorded};

/// Rows by what became of them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub applied_success: u64,
    pub applied_failure: u64,
    pub ignored_no_habit: u64,
    pub not_admitted_budget: u64,
    pub not_admitted_memory_guard: u64,
    pub duplicate: u64,
    /// Rows that failed validation.
    pub bad: u64,
    /// Rows Redis refused: a value under the key that the service does not
    /// write. Not applied, and not intentionally so.
    pub refused: u64,
    /// Rows skipped by `--skip`.
    pub skipped: u64,
    /// Valid rows seen by a dry run (nothing applied).
    pub valid: u64,
}

impl Tally {
    /// Counts a finished row.
    pub fn finish(&mut self, row: &Row, recorded: Recorded) {
        let counter = match recorded {
            Recorded::Applied { .. } => match row.command.outcome {
                Outcome::Success => &mut self.applied_success,
                Outcome::GatewayFailure => &mut self.applied_failure,
            },
            Recorded::IgnoredNoHabit => &mut self.ignored_no_habit,
            Recorded::NotAdmitted(AdmissionRefusal::Budget) => &mut self.not_admitted_budget,
            Recorded::NotAdmitted(AdmissionRefusal::MemoryGuard) => {
                &mut self.not_admitted_memory_guard
            }
            Recorded::Duplicate { .. } => &mut self.duplicate,
        };
        *counter += 1;
    }

    /// Every row counted so far, skipped and bad ones included.
    pub fn rows(&self) -> u64 {
        self.applied_success
            + self.applied_failure
            + self.ignored_no_habit
            + self.not_admitted_budget
            + self.not_admitted_memory_guard
            + self.duplicate
            + self.bad
            + self.refused
            + self.skipped
            + self.valid
    }

    /// Adds what another lane counted.
    pub fn absorb(&mut self, other: &Self) {
        self.applied_success += other.applied_success;
        self.applied_failure += other.applied_failure;
        self.ignored_no_habit += other.ignored_no_habit;
        self.not_admitted_budget += other.not_admitted_budget;
        self.not_admitted_memory_guard += other.not_admitted_memory_guard;
        self.duplicate += other.duplicate;
        self.bad += other.bad;
        self.refused += other.refused;
        self.skipped += other.skipped;
        self.valid += other.valid;
    }

    /// Whether some row was neither applied nor intentionally left out.
    pub fn any_bad(&self) -> bool {
        self.bad > 0 || self.refused > 0
    }
}

/// The summary printed at the end.
pub struct Summary<'a> {
    pub tally: &'a Tally,
    pub elapsed: Duration,
    pub dry_run: bool,
    /// Whether every row of the file was read.
    pub complete: bool,
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.tally;
        let processed = t.rows() - t.skipped;
        let secs = self.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            processed as f64 / secs
        } else {
            0.0
        };
        writeln!(
            f,
            "import {}: {processed} rows in {secs:.1} s ({rate:.0} rows/s)",
            match (self.dry_run, self.complete) {
                (true, _) => "dry run (nothing written)",
                (false, true) => "done",
                (false, false) => "stopped early",
            }
        )?;
        let mut line = |name: &str, n: u64| writeln!(f, "  {name:<28} {n:>12}");
        if self.dry_run {
            line("valid", t.valid)?;
        } else {
            line("applied success", t.applied_success)?;
            line("applied gateway_failure", t.applied_failure)?;
            line("ignored_no_habit", t.ignored_no_habit)?;
            line("not_admitted (budget)", t.not_admitted_budget)?;
            line("not_admitted (memory_guard)", t.not_admitted_memory_guard)?;
            line("duplicate", t.duplicate)?;
            if t.refused > 0 {
                line("not applied (foreign value)", t.refused)?;
            }
        }
        line("bad rows", t.bad)?;
        line("skipped (--skip)", t.skipped)
    }
}
