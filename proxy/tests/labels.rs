//! One label per session in the logs and on the dashboard: `serve` hands the dashboard's key to
//! the logs before the first request. Its own test binary, because the logs' key is set once
//! per process.

#[test]
fn the_logs_label_a_session_as_the_dashboard_does() {
    let (dashboard, said) = proxy::cli::serve_dashboard(&["--store", "memory"]).unwrap();
    let dashboard = dashboard.expect("`--store memory` keeps a dashboard in memory");
    assert!(said.contains("in memory"), "{said}");
    let session = "k0123456789abcdef:a-session";
    let shown = engine::session::label(dashboard.session_key(), session);
    assert_eq!(modes::loud::log_id(session), shown);
    // Another session reads differently, and neither reads as its key.
    assert_ne!(modes::loud::log_id("k0123456789abcdef:another"), shown);
    assert!(!shown.contains("a-session"));
}
