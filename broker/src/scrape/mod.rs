//! Gauges read at scrape time, just before the Prometheus text is rendered: queue depth and
//! group lag, Raft positions, disk and memory. They cost nothing between scrapes, and nothing
//! per message; the event counters and histograms are recorded where the events happen.

mod disk;
mod memory;
mod queues;
mod raft;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use queenmq_storage::SegmentLog;

use crate::engine::bus_prometheus::Render;
use crate::engine::log::SharedLog;
use crate::engine::Shared;

pub struct Scrape {
    pub shared: Arc<Shared>,
    pub log: SharedLog,
    pub segments: Arc<SegmentLog>,
    pub data_dir: PathBuf,
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
            let sample = queues::sample(&s.shared.lock());
            queues::record(&sample, crate::time::wall_clock_us(), &mut seen);
            raft::record(&s.log.status());
            disk::record(&s.segments, &s.data_dir);
            memory::record();
            (s.render)()
        })
    }
}
