//! One request's dashboard event, filled in as the request goes and sent when it is done.
//!
//! A [`Capture`] is cheap to clone; every part of the request that learns something holds one
//! (the relay learns the provider's usage when the reply ends, the expand loop its rounds,
//! observe mode's shadow run the projection). When the last clone is dropped the event goes to
//! the dashboard with one non-blocking send, so the request path never waits for it and a
//! request cut short is still recorded with what was known. Under a running A/B experiment the
//! same event closes the request's [`Tab`], so the dashboard and the experiment see one request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dashboard::{ComponentEvent, ContentSource, Dashboard, Event, ReplyUsage};
use engine::pipeline::{Kind, RunReport};
use engine::wire::Dialect;
use http::HeaderMap;
use parking_lot::Mutex;

use crate::experiment::{Book, Tab};

/// The caller's own switch for content capture: `x-context-guru-capture: off` keeps this
/// request's message text out of the dashboard even when the operator allows it. (Every
/// `x-context-guru-*` header stays at sluice: none goes upstream.)
pub const CONSENT_HEADER: &str = "x-context-guru-capture";

/// See the module docs.
#[derive(Clone)]
pub struct Capture {
    pending: Arc<Pending>,
}

struct Pending {
    dashboard: Option<Arc<Dashboard>>,
    event: Mutex<Event>,
    /// Content may be kept for this request (both switches open).
    content: bool,
    /// The request's share of a running A/B experiment (`crate::experiment`).
    tab: Mutex<Option<Tab>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let event = std::mem::take(self.event.get_mut());
        if let Some(tab) = self.tab.get_mut().take() {
            tab.finish(
                event.status,
                event.model.as_deref(),
                event.dialect,
                event.expand_rounds,
            );
        }
        if let Some(dashboard) = &self.dashboard {
            dashboard.record(event);
        }
    }
}

impl Capture {
    /// A request starting now, or `None` without a dashboard or an experiment.
    pub fn start(
        dashboard: Option<&Arc<Dashboard>>,
        book: Option<&Arc<Book>>,
        dialect: Dialect,
        mode: &'static str,
        headers: &HeaderMap,
    ) -> Option<Capture> {
        if dashboard.is_none() && book.is_none() {
            return None;
        }
        let dashboard = dashboard.cloned();
        let declined = headers
            .get(CONSENT_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "off" | "no" | "false" | "0"
                )
            });
        let blocked = if !dashboard.as_ref().is_some_and(|d| d.content_enabled()) {
            Some("operator")
        } else if declined {
            Some("tenant")
        } else {
            None
        };
        let event = Event {
            ts_ms: dashboard::now_ms(),
            dialect: Some(dialect),
            mode,
            // Until an answer is known: the client went away first (nginx's "client closed").
            status: 499,
            capture_blocked_by: blocked,
            ..Event::default()
        };
        Some(Capture {
            pending: Arc::new(Pending {
                dashboard,
                event: Mutex::new(event),
                content: blocked.is_none(),
                tab: Mutex::new(book.map(|book| Tab::start(book.clone(), headers))),
            }),
        })
    }

    fn with(&self, f: impl FnOnce(&mut Event)) {
        f(&mut self.pending.event.lock());
    }

    /// The turn's outcome: what the pipeline did, and the content it changed when allowed (the
    /// forwarded messages are moved into the event then, not copied: nothing after the turn
    /// reads them).
    pub fn turn(&self, forward: &mut modes::turn::Forward, original: &Bytes, dialect: Dialect) {
        let messages = forward.messages.len() as u32;
        let wanted = self.pending.content && forward.report.saved_tokens() > 0;
        let hold = wanted
            .then(|| {
                self.pending
                    .dashboard
                    .as_ref()?
                    .hold_content(original.len())
            })
            .flatten();
        let over_budget = wanted && hold.is_none();
        let content = hold.map(|hold| ContentSource {
            dialect,
            original: original.clone(),
            forwarded: std::mem::take(&mut forward.messages),
            hold,
        });
        self.with(|e| {
            if over_budget {
                e.capture_blocked_by = Some("budget");
            }
            e.session = Some(forward.session.clone());
            e.model = forward.model.clone();
            e.stream = forward.stream;
            e.messages = messages;
            e.added_us = forward.added.as_micros() as u64;
            e.declared_tokens = forward.declared_tokens as u64;
            e.content = content;
            report_into(e, &forward.report);
        });
    }

    /// Observe mode's shadow run: what sync would have done, nothing cut.
    pub fn projection(&self, forward: &modes::turn::Forward) {
        self.with(|e| {
            e.session = Some(forward.session.clone());
            e.model = forward.model.clone();
            e.stream = forward.stream;
            e.messages = forward.messages.len() as u32;
            e.projected = true;
            // Nothing was changed on the wire, so there is no text before and after to keep.
            e.capture_blocked_by.get_or_insert("observe");
            report_into(e, &forward.report);
        });
    }

    /// A request forwarded as it came, and why.
    pub fn untouched(&self, why: &'static str, session: Option<&str>) {
        self.with(|e| {
            e.untouched = Some(why);
            if e.session.is_none() {
                e.session = session.map(str::to_owned);
            }
        });
    }

    /// The upstream's answer head (or sluice's own status when it could not be reached).
    pub fn answered(&self, status: u16, upstream: Option<Duration>) {
        self.with(|e| {
            e.status = status;
            e.upstream_ms = upstream.map(|d| d.as_millis() as u64);
        });
    }

    /// What the provider reported when its reply ended (its model names the row when the
    /// request did not).
    pub fn usage(&self, usage: ReplyUsage) {
        self.with(|e| {
            if e.model.is_none() {
                e.model.clone_from(&usage.model);
            }
            e.usage = usage;
        });
    }

    /// The request's session (its key; `None` when none was named) and so its arm, in a
    /// running experiment.
    pub fn assign(&self, session: Option<&str>, body: &[u8]) {
        if let Some(tab) = self.pending.tab.lock().as_mut() {
            tab.assign(session, body);
        }
    }

    /// Whether the request is measured for an experiment.
    pub fn in_experiment(&self) -> bool {
        self.pending.tab.lock().is_some()
    }

    /// The usage of the reply the agent got (every round's), and whether it broke off.
    pub fn delivered(&self, usage: ReplyUsage, cut: bool) {
        if let Some(tab) = self.pending.tab.lock().as_mut() {
            tab.delivered(usage, cut);
        }
    }

    /// What the request's settled provider report, or one of its expand rounds, added to the
    /// billed saving.
    pub fn billed(&self, billed: &engine::savings::BilledSaving) {
        self.with(|e| e.billed.add(billed));
    }

    /// One expand round, restoring `tokens` of originals and sending a prompt of
    /// `reread_tokens` again.
    pub fn expand_round(&self, tokens: u64, reread_tokens: u64) {
        self.with(|e| {
            e.expand_rounds += 1;
            e.expand_tokens += tokens;
            e.expand_reread_tokens += reread_tokens;
        });
    }
}

fn report_into(e: &mut Event, report: &RunReport) {
    e.tokens_before = report.tokens_before as u64;
    // Observe mode forwarded everything: the projection's `tokens_after` is what sync would
    // have sent, kept so the saving reads as projected.
    e.tokens_after = report.tokens_after as u64;
    e.components = report
        .components
        .iter()
        .map(|c| ComponentEvent {
            name: c.name,
            kind: match c.kind {
                Kind::Reformat => "reformat",
                Kind::Offload => "offload",
            },
            acted: c.acted,
            mutated: c.mutated,
            reverted: c.reverted.as_ref().map(engine::pipeline::Revert::label),
            saved_tokens: c.saved_tokens as u64,
            duration_us: c.duration_us,
            gates: c.gates.iter().map(|(gate, n)| (*gate, *n)).collect(),
            changed: c.changed.clone(),
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The access log and the dashboard show one label for one session: the same function
    /// (`engine::session::label`) with the same key.
    #[test]
    fn the_logs_and_the_dashboard_label_a_session_alike() {
        let dash = Dashboard::open(dashboard::DashboardOptions::default()).unwrap();
        let key = dash.session_key().to_vec();
        let session = "k0123456789abcdef:a-session";
        dash.record(Event {
            ts_ms: dashboard::now_ms(),
            session: Some(session.into()),
            mode: "sync",
            status: 200,
            ..Event::default()
        });
        dash.flush();
        let stored: Option<String> = dash
            .read(|c| c.query_row("SELECT session FROM requests", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(stored, Some(engine::session::label(&key, session)));
        dash.close();
    }
}
