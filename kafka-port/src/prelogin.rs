//! Admission of connections that have not finished TLS and login yet. They are strangers:
//! they get their own, smaller cap (`kafka_max_prelogin_connections`) and a cap per source
//! IP, so that a crowd of them cannot fill the port (`max_connections`) before a logged-in
//! client gets a slot. The slot is given back once the connection has logged in (or has
//! finished its TLS handshake, on a port without SASL), or when it closes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct PreLoginGate {
    slots: Arc<Semaphore>,
    per_ip: usize,
    /// Pre-login connections per source IP; an entry lives while it counts one, so the map
    /// never holds more entries than the gate has slots.
    by_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection's pre-login slot; dropping it gives the slot back.
pub struct PreLogin {
    _slot: OwnedSemaphorePermit,
    ip: IpAddr,
    gate: Arc<PreLoginGate>,
}

impl PreLoginGate {
    pub fn new(total: usize, per_ip: usize) -> Arc<Self> {
        Arc::new(PreLoginGate {
            slots: Arc::new(Semaphore::new(total.clamp(1, Semaphore::MAX_PERMITS))),
            per_ip: per_ip.max(1),
            by_ip: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a new connection from `ip`, or `None` when the gate or that IP's share of
    /// it is full (the connection is then closed at accept).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<PreLogin> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        let mut by_ip = self.by_ip.lock().unwrap_or_else(|e| e.into_inner());
        let n = by_ip.entry(ip).or_insert(0);
        if *n >= self.per_ip {
            return None;
        }
        *n += 1;
        Some(PreLogin {
            _slot: slot,
            ip,
            gate: self.clone(),
        })
    }
}

impl Drop for PreLogin {
    fn drop(&mut self) {
        let mut by_ip = self.gate.by_ip.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = by_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                by_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_caps_all_and_each_ip_and_gives_slots_back() {
        let gate = PreLoginGate::new(3, 2);
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let a1 = gate.admit(a).expect("first of a");
        let a2 = gate.admit(a).expect("second of a");
        assert!(gate.admit(a).is_none(), "a's share is 2");
        let b1 = gate.admit(b).expect("b has its own share");
        assert!(gate.admit(b).is_none(), "the gate holds 3");
        drop(a1);
        let b2 = gate.admit(b).expect("a slot came back");
        drop((a2, b1, b2));
        assert!(gate.by_ip.lock().expect("lock").is_empty());
        assert_eq!(gate.slots.available_permits(), 3);
    }
}
