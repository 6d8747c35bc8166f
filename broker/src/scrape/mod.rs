//! Gauges read at scrape time, just before the Prometheus text is rendered: queue depth and
//! group lag (from the copy the engine takes, see engine/metrics_sample.rs), Raft positions,
//! disk and memory. They cost nothing between scrapes, and nothing
//! per message; the event counters and histograms are recorded where the events happen.

mod disk;
pub(crate) mod memory;
mod queues;
mod raft;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::engine::bus_prometheus::Render;
use crate::group::Registry;
pub use queues::{sample as sample_queues, Sample as QueuesSample};

pub struct Scrape {
    /// Every group's gauges, labelled with its tenant (operators scrape nodes, so one page
    /// shows every tenant); a group's are left out while it is being rebuilt.
    pub groups: Arc<Registry>,
    pub data_dir: PathBuf,
    pub memory: Arc<crate::memory::Memory>,
    /// Renders what the recorder holds.
    pub render: Render,
}

impl Scrape {
    /// The render the bus serves: refresh the gauges, then render everything.
    pub fn into_render(self) -> Render {
        let seen: Mutex<HashMap<Arc<str>, queues::Seen>> = Mutex::default();
        let scrape = Arc::new((self, seen));
        Arc::new(move || {
            let (s, seen) = &*scrape;
            // One scrape at a time, so the label sets `seen` remembers are those last set.
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            for group in s.groups.running() {
                let tenant = &group.tenant;
                let live = group.live.get();
                metrics::gauge!("queen_group_serving", "tenant" => tenant.to_string())
                    .set(if live.is_ok() { 1.0 } else { 0.0 });
                let Ok(live) = live else { continue };
                // The engine's copy, never the state itself: a scrape must not stall a cycle.
                if let Some(sample) = live.shared.sample.get() {
                    let seen = seen.entry(tenant.clone()).or_default();
                    queues::record(tenant, &sample.gauges, crate::time::wall_clock_us(), seen);
                }
                raft::record(tenant, &live.log.status());
                disk::record_group(tenant, &live.segments, &group.dir);
            }
            disk::record_node(&s.data_dir);
            memory::record();
            s.memory.publish();
            (s.render)()
        })
    }
}
