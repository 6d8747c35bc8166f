mod committed_lag;
mod crash;
mod fixtures;
mod group_commit;
mod latency;
mod node_restart;
mod reclaim;
mod suite;
