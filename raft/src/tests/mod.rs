mod fixtures;
mod node_restart;
mod suite;
