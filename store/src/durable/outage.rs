//! Carrying sessions through a backend outage (see docs/dev/state.md, "Outages"): serving
//! a turn from the copy while the backend does not answer, holding its writes, and settling what
//! the outage did once the backend answers again.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{DurableStore, Opened, Unavailable, add, bump};
use crate::backend::Commit;
use crate::copies::{Copy, Held};

/// How often a replica holding writes asks a failing backend whether it is back.
const PROBE_EVERY: Duration = Duration::from_secs(1);

impl DurableStore {
    /// Whether `copy` is current for a backend whose session is at `version`, after whatever an
    /// outage did. Writes held here that build on `version` make it current: they go with this
    /// turn's commit. A backend *behind* the copy lost writes (a restart without persistence, a
    /// failover to a replica that lagged): the copy, newer than anything the backend has, is
    /// written back whole. Otherwise another replica wrote since: the copy is read again, and
    /// of what it held only the originals are kept (an id names one content, and markers
    /// forwarded through the outage need them); its replay entries would overwrite the other
    /// replica's decisions, and are counted lost.
    pub(super) fn reconcile(&self, copy: &mut Copy, version: u64) -> bool {
        if copy.version == Some(version) {
            return true;
        }
        let mine = match &copy.held {
            Some(held) if held.builds_on(version) => {
                copy.version = Some(version);
                return true;
            }
            Some(held) => Some(held.base),
            // What the backend confirmed, not `version`, which a commit still on its way (a
            // lapsed lease's) has moved ahead.
            None => copy.confirmed_version,
        };
        if mine.is_some_and(|mine| version < mine) {
            bump(&self.counters.regressions);
            let gone = copy
                .stored_ids
                .iter()
                .filter(|id| !copy.stashes.contains_key(*id))
                .count();
            add(&self.counters.writes_lost, gone);
            tracing::warn!(
                store = %self.backend.describe(),
                originals_lost = gone,
                "the state store lost a session's writes (a restart without persistence?): written back from this replica's copy"
            );
            copy.stored_ids.clear();
            copy.dirty_stashes = copy.stashes.keys().cloned().collect();
            copy.dirty_frozen = copy.frozen.keys().cloned().collect();
            copy.version = Some(version);
            // What was held goes with this commit, and is counted written with it.
            if let Some(held) = &mut copy.held {
                held.base = version;
                held.fences.clear();
            }
            return true;
        }
        if copy.held.is_some() {
            add(&self.counters.writes_lost, copy.dirty_frozen.len());
            copy.dirty_frozen.clear();
            copy.held = (!copy.dirty_stashes.is_empty()).then(|| Held {
                base: version,
                fences: Vec::new(),
                entries: copy.dirty_stashes.len(),
            });
        }
        // Known to be behind: never carried until it is read again.
        copy.version = None;
        copy.confirmed = None;
        false
    }

    /// Serves a turn from the copy while the backend does not answer, if the copy may be
    /// trusted: the backend confirmed it within `outage_grace`, and held copies still fit in
    /// the memory budget (past it, turns go upstream unmodified, as past the grace).
    pub(super) fn carry(self: &Arc<Self>, session: &str) -> Option<Opened> {
        let mut copies = self.copies.lock();
        let full = copies.bytes > self.limits.cache_bytes;
        let copy = copies.sessions.get(session)?;
        let found = copy.version?;
        let within = copy
            .confirmed
            .is_some_and(|at| at.elapsed() <= self.limits.outage_grace);
        if !within || full {
            if !self.grace_said.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    store = %self.backend.describe(),
                    grace = ?self.limits.outage_grace,
                    over_memory = full,
                    "state store outage outlasts what this replica can carry: its sessions go upstream unmodified until it answers"
                );
            }
            return None;
        }
        let copy = copies.touch(session);
        copy.open += 1;
        if !std::mem::replace(&mut copy.carried, true) {
            bump(&self.counters.carried_sessions);
        }
        bump(&self.counters.carried_turns);
        Some(Opened {
            store: self.clone(),
            session: session.to_owned(),
            fence: None,
            reloaded: false,
            loaded: true,
            found,
            carried: true,
            closed: false,
        })
    }

    /// Releases the leases of commits that got no answer, which the backend may still hold
    /// (a restarted Redis with its append-only file keeps them until they expire): else this
    /// replica's own old turn would keep its session's next turn waiting.
    pub(super) async fn release_held_leases(&self, session: &str) -> Result<(), Unavailable> {
        let fences = {
            let copies = self.copies.lock();
            match copies.get(session).and_then(|c| c.held.as_ref()) {
                Some(held) if !held.fences.is_empty() => held.fences.clone(),
                _ => return Ok(()),
            }
        };
        for fence in fences {
            let release = Commit {
                fence,
                release_only: true,
                ttl: self.limits.ttl,
                ..Commit::default()
            };
            self.call(self.backend.commit(session, release))
                .await
                .map_err(|_| Unavailable::Backend)?;
        }
        Ok(())
    }

    /// Keeps a carried turn's writes in its copy until the backend answers.
    pub(super) fn hold(&self, session: &str) {
        let mut copies = self.copies.lock();
        let Some(copy) = copies.sessions.get_mut(session) else {
            return;
        };
        copy.open = copy.open.saturating_sub(1);
        let dirty = copy.dirty();
        if dirty == 0 && copy.held.is_none() {
            return;
        }
        let base = copy.version.unwrap_or(0);
        let held = copy.held.get_or_insert_with(|| Held {
            base,
            ..Held::default()
        });
        add(
            &self.counters.writes_held,
            dirty.saturating_sub(held.entries),
        );
        held.entries = dirty;
        self.holding.store(true, Ordering::Relaxed);
        drop(copies);
        self.probe_behind();
    }

    /// While copies hold writes, asks the backend once a second whether it is back, so that a
    /// replica with no traffic left writes them too (the call that succeeds writes them).
    pub(super) fn probe_behind(&self) {
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(store) = self.me.upgrade() else {
            self.probing.store(false, Ordering::Release);
            return;
        };
        self.runtime.spawn(async move {
            while store.holding.load(Ordering::Relaxed) {
                tokio::time::sleep(PROBE_EVERY).await;
                if store.call(store.backend.ping()).await.is_ok() {
                    break;
                }
            }
            store.probing.store(false, Ordering::Release);
        });
    }

    /// Writes behind every copy's held writes, once the backend answers again, so they do
    /// not wait for their sessions' next turns (which may never come).
    pub(super) fn write_held_behind(&self) {
        if !self.holding.load(Ordering::Relaxed) || self.writing_held.swap(true, Ordering::AcqRel) {
            return;
        }
        let Some(store) = self.me.upgrade() else {
            return;
        };
        self.runtime.spawn(async move {
            let sessions: Vec<String> = {
                let copies = store.copies.lock();
                copies
                    .sessions
                    .iter()
                    .filter(|(_, c)| c.open == 0 && c.held.is_some())
                    .map(|(s, _)| s.clone())
                    .collect()
            };
            let mut written = 0usize;
            for session in &sessions {
                // A session whose turn is open, or whose lease another replica has, keeps its
                // writes for its next turn here.
                let Ok(opened) = store.open_as(session, false).await else {
                    continue;
                };
                if opened.close().wait(store.limits.call_timeout).await {
                    written += 1;
                }
            }
            let left = {
                // Under the lock that every setter of `holding` holds, so a failure between the
                // check and the store cannot be overwritten.
                let copies = store.copies.lock();
                let left = copies.sessions.values().any(|c| c.held.is_some());
                store.holding.store(left, Ordering::Relaxed);
                left
            };
            store.writing_held.store(false, Ordering::Release);
            // A session this could not write (its lease elsewhere, a demoted primary) is tried
            // again after the next probe, traffic or not.
            if left {
                store.probe_behind();
            }
            if written > 0 {
                tracing::info!(
                    store = %store.backend.describe(),
                    sessions = written,
                    "writes held through the store's outage are written"
                );
            }
        });
    }
}
