//! The dashboard's own health in `/stats` (`dashboard_*`) and `/metrics` (`cg_dashboard_*`):
//! rows written, events dropped at a full queue, failed writes, rows retention deleted, live
//! subscribers. One table ([`DASHBOARD_FIELDS`]) rendered into both, like the store's.

use std::sync::atomic::Ordering::Relaxed;

use dashboard::Dashboard;
use modes::stats::table::{Field, MetricType};

use crate::store_stats::{count, row};

/// What the rows read; all zero without a dashboard.
#[derive(Debug, Default)]
pub struct DashboardView {
    pub on: bool,
    pub captured: u64,
    pub dropped: u64,
    pub write_errors: u64,
    pub evicted_rows: u64,
    pub subscribers: usize,
    pub subscribers_evicted: u64,
}

impl DashboardView {
    pub fn of(dashboard: Option<&Dashboard>) -> DashboardView {
        let Some(d) = dashboard else {
            return DashboardView::default();
        };
        let c = d.counts();
        DashboardView {
            on: true,
            captured: c.captured.load(Relaxed),
            dropped: c.dropped.load(Relaxed),
            write_errors: c.write_errors.load(Relaxed),
            evicted_rows: c.evicted_rows.load(Relaxed),
            subscribers: d.subscribers(),
            subscribers_evicted: c.subscribers_evicted.load(Relaxed),
        }
    }
}

use MetricType::{Counter, Gauge};

pub static DASHBOARD_FIELDS: &[Field<DashboardView>] = &[
    row(
        "dashboard_enabled",
        "cg_dashboard_enabled",
        Gauge,
        "bool",
        "1 when requests are captured for the dashboard (`--dashboard`, or a state store on disk).",
        |v| count(u64::from(v.on)),
    ),
    row(
        "dashboard_captured",
        "cg_dashboard_captured_total",
        Counter,
        "requests",
        "Requests written to the dashboard's file.",
        |v| count(v.captured),
    ),
    row(
        "dashboard_dropped",
        "cg_dashboard_dropped_total",
        Counter,
        "requests",
        "Requests not captured because the writer's queue (4,096) was full: capture drops, it never waits.",
        |v| count(v.dropped),
    ),
    row(
        "dashboard_write_errors",
        "cg_dashboard_write_errors_total",
        Counter,
        "requests",
        "Requests lost to a failed write of the dashboard's file (logged).",
        |v| count(v.write_errors),
    ),
    row(
        "dashboard_evicted_rows",
        "cg_dashboard_evicted_rows_total",
        Counter,
        "rows",
        "Rows deleted by retention (`--dashboard-retention-hours`, `--dashboard-max-mb`).",
        |v| count(v.evicted_rows),
    ),
    row(
        "dashboard_subscribers",
        "cg_dashboard_subscribers",
        Gauge,
        "connections",
        "Live feeds open (`/dashboard/api/events`).",
        |v| count(v.subscribers),
    ),
    row(
        "dashboard_subscribers_evicted",
        "cg_dashboard_subscribers_evicted_total",
        Counter,
        "connections",
        "Live feeds closed for not reading (a full buffer, or rows unread for 2 s).",
        |v| count(v.subscribers_evicted),
    ),
];
