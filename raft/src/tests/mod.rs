mod committed_lag;
mod crash;
mod fixtures;
mod group_commit;
mod horizons;
mod latency;
mod node_restart;
mod reclaim;
