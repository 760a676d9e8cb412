//! A double-entry ledger: every posting must balance before it is recorded.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub account: String,
    pub amount_cents: i64,
    pub memo: String,
}

#[derive(Debug, PartialEq, Eq)]
pub enum LedgerError {
    Empty,
    Frozen,
    UnknownAccount(String),
    Unbalanced { debits: i64, credits: i64 },
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LedgerError::UnknownAccount(name) => write!(f, "unknown account {name}"),
            LedgerError::Unbalanced { debits, credits } => write!(f, "{debits} != {credits}"),
            other => write!(f, "{other:?}"),
        }
    }
}

impl std::error::Error for LedgerError {}

#[derive(Debug, Default)]
pub struct Ledger {
    balances: HashMap<String, i64>,
    journal: Vec<Vec<Entry>>,
    frozen: bool,
}

impl Ledger {
    pub fn with_accounts<I: IntoIterator<Item = String>>(accounts: I) -> Self {
        let balances = accounts.into_iter().map(|a| (a, 0)).collect();
        Ledger { balances, ..Ledger::default() }
    }

    pub fn balance_of(&self, account: &str) -> i64 {
        let found = self.balances.get(account);
        found.copied().unwrap_or(0)
    }

    pub fn freeze(&mut self) {
        self.frozen = true;
    }

    /// Records one balanced posting and returns its journal index.
    pub fn post(&mut self, entries: Vec<Entry>) -> Result<usize, LedgerError> {
        if self.frozen {
            return Err(LedgerError::Frozen);
        }
        if entries.is_empty() {
            return Err(LedgerError::Empty);
        }
        let mut debit_sum: i64 = 0;
        let mut credit_sum: i64 = 0;
        for entry in &entries {
            if !self.balances.contains_key(&entry.account) {
                return Err(LedgerError::UnknownAccount(entry.account.clone()));
            }
            if entry.amount_cents >= 0 {
                debit_sum += entry.amount_cents;
            } else {
                credit_sum -= entry.amount_cents;
            }
        }
        if debit_sum != credit_sum {
            return Err(LedgerError::Unbalanced { debits: debit_sum, credits: credit_sum });
        }
        for entry in &entries {
            if let Some(running_balance) = self.balances.get_mut(&entry.account) {
                *running_balance += entry.amount_cents;
            }
        }
        self.journal.push(entries);
        Ok(self.journal.len() - 1)
    }

    /// Balances by account name, recomputed from the journal, with the drift from the cache.
    pub fn trial_balance(&self) -> BTreeMap<String, (i64, i64)> {
        let mut replayed_totals: HashMap<&str, i64> = HashMap::new();
        for posting in &self.journal {
            for entry in posting {
                *replayed_totals.entry(entry.account.as_str()).or_insert(0) += entry.amount_cents;
            }
        }
        let mut sorted_report = BTreeMap::new();
        for (account, cached) in &self.balances {
            let replayed = replayed_totals.get(account.as_str()).copied().unwrap_or(0);
            let drift_cents = cached - replayed;
            if drift_cents != 0 {
                eprintln!("ledger drift on {account}: cached {cached}, replayed {replayed}");
            }
            sorted_report.insert(account.clone(), (*cached, drift_cents));
        }
        sorted_report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(account: &str, amount_cents: i64) -> Entry {
        Entry { account: account.to_string(), amount_cents, memo: String::new() }
    }

    #[test]
    fn unbalanced_posting_is_rejected() {
        let mut ledger = Ledger::with_accounts(["cash".to_string(), "sales".to_string()]);
        let result = ledger.post(vec![entry("cash", 500), entry("sales", -400)]);
        assert_eq!(result, Err(LedgerError::Unbalanced { debits: 500, credits: 400 }));
    }
}
