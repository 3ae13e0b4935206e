//! A test network: hosts in network namespaces of their own (`ip netns`),
//! each joined by a veth pair to a bridge in this namespace that holds the
//! gateway address, where the test, its clients and SeaweedFS live. A host
//! reaches the gateway and the other hosts only over its link, so a fault
//! is a rule in the host's own `iptables` (`DROP`: packets vanish, no
//! reset, as a cable pulled or a firewall dropping).
//!
//! Everything is named after this process and a counter, made by the test
//! and removed when the [`Net`] is dropped (a failing test too): deleting a
//! namespace deletes its end of the veth pair and the pair with it, and
//! its rules with it. Needs root, `ip` (iproute2) and `iptables`
//! (`scripts/setup` installs them).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Networks made by this process so far (names and subnets apart).
static MADE: AtomicU32 = AtomicU32::new(0);

pub struct Net {
    bridge: String,
    /// `10.77.N`: the subnet's first three octets.
    subnet: String,
    hosts: Vec<String>,
}

/// Runs `args`, panicking with what it printed if it fails.
fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| {
            panic!("{args:?}: {e} (ip and iptables are installed by scripts/setup)")
        });
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Net {
    /// A bridge holding the gateway and `hosts` namespaces on it.
    pub fn new(hosts: usize) -> Net {
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id() % 100_000;
        // Interface names are at most 15 bytes.
        let bridge = format!("dsb{pid}n{n}");
        let subnet = format!("10.77.{}", 10 + (pid * 7 + n) % 240);
        let mut net = Net {
            bridge: bridge.clone(),
            subnet,
            hosts: Vec::new(),
        };
        run(&["ip", "link", "add", &bridge, "type", "bridge"]);
        let gateway = format!("{}/24", net.gateway());
        run(&["ip", "addr", "add", &gateway, "dev", &bridge]);
        run(&["ip", "link", "set", &bridge, "up"]);
        for i in 0..hosts {
            let ns = format!("ds-{pid}-{n}-{i}");
            let veth = format!("dsv{pid}n{n}h{i}");
            run(&["ip", "netns", "add", &ns]);
            net.hosts.push(ns.clone());
            run(&[
                "ip", "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            run(&["ip", "link", "set", &veth, "master", &bridge, "up"]);
            let addr = format!("{}/24", net.ip(i));
            run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "eth0"]);
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"]);
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        }
        net
    }

    /// The gateway's address, this namespace's on the bridge.
    pub fn gateway(&self) -> String {
        format!("{}.1", self.subnet)
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, 10 + i)
    }

    /// What runs a command in host `i`'s namespace.
    pub fn runner(&self, i: usize) -> [&str; 4] {
        ["ip", "netns", "exec", &self.hosts[i]]
    }

    /// Adds an `iptables` rule in host `i` (e.g. `-A OUTPUT -d IP -j DROP`).
    pub fn rule(&self, i: usize, rule: &[&str]) {
        let mut args = vec!["ip", "netns", "exec", &self.hosts[i], "iptables"];
        args.extend_from_slice(rule);
        run(&args);
    }

    /// Host `i`'s packets to `ip`'s TCP `port` (every port: none) dropped
    /// on their way out.
    pub fn drop_out(&self, i: usize, ip: &str, port: Option<u16>) {
        let port = port.map(|p| p.to_string());
        let mut rule = vec!["-A", "OUTPUT", "-d", ip, "-p", "tcp"];
        if let Some(p) = &port {
            rule.extend(["--dport", p.as_str()]);
        }
        rule.extend(["-j", "DROP"]);
        self.rule(i, &rule);
    }

    /// Packets from `ip`'s TCP `port` (every port: none) to host `i`
    /// dropped on their way in.
    pub fn drop_in(&self, i: usize, ip: &str, port: Option<u16>) {
        let port = port.map(|p| p.to_string());
        let mut rule = vec!["-A", "INPUT", "-s", ip, "-p", "tcp"];
        if let Some(p) = &port {
            rule.extend(["--sport", p.as_str()]);
        }
        rule.extend(["-j", "DROP"]);
        self.rule(i, &rule);
    }

    /// Every rule of host `i` removed: its link as it was.
    pub fn heal(&self, i: usize) {
        self.rule(i, &["-F"]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Best effort: a panic here would hide the test's own.
        for ns in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
    }
}
