//! Gauges read at scrape time, just before the Prometheus text is rendered: queue depth and
//! group lag (from the copy the engine takes, see engine/metrics_sample.rs), Raft positions,
//! disk and memory. They cost nothing between scrapes, and nothing
//! per message; the event counters and histograms are recorded where the events happen.

mod disk;
pub(crate) mod memory;
mod queues;
mod raft;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::engine::bus_prometheus::Render;
use crate::group::LiveSlot;
pub use queues::{sample as sample_queues, Sample as QueuesSample};

pub struct Scrape {
    /// The group's gauges are left out while it is being rebuilt.
    pub live: Arc<LiveSlot>,
    pub data_dir: PathBuf,
    pub memory: Arc<crate::memory::Memory>,
    /// Renders what the recorder holds.
    pub render: Render,
}

impl Scrape {
    /// The render the bus serves: refresh the gauges, then render everything.
    pub fn into_render(self) -> Render {
        let scrape = Arc::new((self, Mutex::new(queues::Seen::default())));
        Arc::new(move || {
            let (s, seen) = &*scrape;
            // One scrape at a time, so the label sets `seen` remembers are those last set.
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            if let Ok(live) = s.live.get() {
                // The engine's copy, never the state itself: a scrape must not stall a cycle.
                if let Some(sample) = live.shared.sample.get() {
                    queues::record(&sample.gauges, crate::time::wall_clock_us(), &mut seen);
                }
                raft::record(&live.log.status());
                disk::record(&live.segments, &s.data_dir);
            }
            memory::record();
            s.memory.publish();
            (s.render)()
        })
    }
}
