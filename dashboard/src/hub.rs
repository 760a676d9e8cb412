//! Live summary rows for the dashboard's SSE feed: a fan-out that never waits for a reader.
//!
//! The writer publishes each stored row's summary (never content) once. Every subscriber has a
//! buffer of [`BUFFER`] rows; one whose buffer is full, or that has left rows unread for longer
//! than [`WRITE_TIMEOUT`], is evicted (its stream ends and the page reconnects with
//! `Last-Event-ID`). A ring of the last [`RING`] rows lets a reconnecting page catch up.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;

/// Rows a subscriber may have unread: at least a whole batch of the writer's, which publishes
/// one batch's rows back to back.
pub const BUFFER: usize = 256;
/// Rows kept for a reconnecting subscriber.
pub const RING: usize = 256;
/// How long a subscriber may leave rows unread before it is evicted.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// Subscribers at once.
pub const MAX_SUBSCRIBERS: usize = 64;

/// Too many subscribers.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("too many live dashboard subscribers ({MAX_SUBSCRIBERS})")]
pub struct Full;

/// One row: its id (the request id) and its JSON.
pub type Row = (u64, Arc<str>);

struct Subscriber {
    tx: mpsc::Sender<Row>,
    /// Milliseconds since the hub started when the subscriber last took a row.
    read_at: Arc<AtomicU64>,
    /// Set when the hub evicts it: its stream ends at once, without writing what it had left.
    evicted: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Default)]
pub(super) struct Hub {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    subscribers: Vec<Subscriber>,
    ring: VecDeque<Row>,
    closed: bool,
}

/// A live subscriber's end: rows to replay first, then the live ones.
#[derive(Debug)]
pub struct Subscription {
    pub replay: Vec<Row>,
    rx: mpsc::Receiver<Row>,
    read_at: Arc<AtomicU64>,
    evicted: Arc<std::sync::atomic::AtomicBool>,
}

impl Subscription {
    /// The next live row; `None` when evicted (at once, whatever it had left unread) or the
    /// hub closed.
    pub async fn next(&mut self) -> Option<Row> {
        if self.evicted.load(Ordering::Relaxed) {
            return None;
        }
        let row = self.rx.recv().await;
        self.read_at.store(clock_ms(), Ordering::Relaxed);
        row.filter(|_| !self.evicted.load(Ordering::Relaxed))
    }
}

/// A monotonic millisecond clock shared by the hub and its subscribers.
fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

impl Hub {
    pub(super) fn subscribe(&self, last_event_id: Option<u64>) -> Result<Subscription, Full> {
        let mut inner = self.inner.lock();
        // A page that went away frees its slot now, not at the next row.
        inner.subscribers.retain(|s| !s.tx.is_closed());
        if inner.subscribers.len() >= MAX_SUBSCRIBERS {
            return Err(Full);
        }
        let (tx, rx) = mpsc::channel(BUFFER);
        let read_at = Arc::new(AtomicU64::new(clock_ms()));
        let evicted = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let replay = match last_event_id {
            Some(last) => inner
                .ring
                .iter()
                .filter(|(id, _)| *id > last)
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        if !inner.closed {
            inner.subscribers.push(Subscriber {
                tx,
                read_at: read_at.clone(),
                evicted: evicted.clone(),
            });
        }
        Ok(Subscription {
            replay,
            rx,
            read_at,
            evicted,
        })
    }

    /// Sends `row` to every subscriber, evicting the ones that cannot take it; returns how many
    /// were evicted.
    pub(super) fn publish(&self, row: Row) -> u64 {
        let now = clock_ms();
        let mut inner = self.inner.lock();
        if inner.ring.len() == RING {
            inner.ring.pop_front();
        }
        inner.ring.push_back(row.clone());
        let mut evicted = 0;
        inner.subscribers.retain(|s| {
            if s.tx.is_closed() {
                // Gone on its own: not an eviction.
                return false;
            }
            let unread = s.tx.max_capacity() - s.tx.capacity();
            if unread == 0 {
                // Caught up: the clock for its next row starts now, not at its last read (which
                // may be long ago on a quiet feed).
                s.read_at.store(now, Ordering::Relaxed);
            }
            let stale = unread > 0
                && now.saturating_sub(s.read_at.load(Ordering::Relaxed))
                    > WRITE_TIMEOUT.as_millis() as u64;
            let kept = !stale && s.tx.try_send(row.clone()).is_ok();
            if !kept {
                s.evicted.store(true, Ordering::Relaxed);
                evicted += 1;
            }
            kept
        });
        evicted
    }

    pub(super) fn len(&self) -> usize {
        self.inner.lock().subscribers.len()
    }

    pub(super) fn close(&self) {
        let mut inner = self.inner.lock();
        inner.closed = true;
        inner.subscribers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64) -> Row {
        (id, Arc::from(format!("{{\"id\":{id}}}")))
    }

    #[tokio::test]
    async fn a_reader_gets_every_row_and_a_reconnect_replays_the_ring() {
        let hub = Hub::default();
        let mut sub = hub.subscribe(None).unwrap();
        for id in 1..=3 {
            hub.publish(row(id));
        }
        for id in 1..=3 {
            assert_eq!(sub.next().await.unwrap().0, id);
        }
        let late = hub.subscribe(Some(1)).unwrap();
        assert_eq!(
            late.replay.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![2, 3]
        );
    }

    #[tokio::test]
    async fn a_subscriber_that_stops_reading_is_evicted_and_the_ring_stays_bounded() {
        let hub = Hub::default();
        let mut hung = hub.subscribe(None).unwrap();
        let mut reader = hub.subscribe(None).unwrap();
        let mut evicted = 0;
        for id in 0..(BUFFER as u64 + 10) {
            evicted += hub.publish(row(id));
            assert!(reader.next().await.is_some());
        }
        assert_eq!(evicted, 1, "the hung subscriber, once");
        assert_eq!(hub.len(), 1);
        // The evicted one's stream ends at once, rows left unread or not.
        assert!(hung.next().await.is_none());
        for id in 0..1000 {
            hub.publish(row(id));
            let _ = reader.next().await;
        }
        assert_eq!(hub.inner.lock().ring.len(), RING);
    }

    #[test]
    fn subscribers_are_bounded() {
        let hub = Hub::default();
        let subs: Vec<_> = (0..MAX_SUBSCRIBERS)
            .map(|_| hub.subscribe(None).unwrap())
            .collect();
        assert!(hub.subscribe(None).is_err());
        drop(subs);
        assert!(
            hub.subscribe(None).is_ok(),
            "pages that went away free their slots"
        );
        assert_eq!(hub.publish(row(1)), 0, "leaving is not an eviction");
    }
}
