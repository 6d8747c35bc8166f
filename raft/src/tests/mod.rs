mod crash;
mod fixtures;
mod group_commit;
mod node_restart;
mod suite;
