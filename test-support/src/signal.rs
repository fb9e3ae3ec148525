//! Unix signals to a test's processes (`-TERM`, `-INT`, `-STOP`, `-CONT`,
//! `-KILL`), through `kill(1)`: the crates are `unsafe`-free, so no
//! `libc::kill`.

use std::process::Command;

/// Sends `signal` (`-TERM`, `-STOP`, …) to the process `pid`, and fails the
/// test if `kill` cannot deliver it.
pub fn send(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill(1) runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// Sends `signal` to a running tokio child.
pub fn send_to_child(child: &tokio::process::Child, signal: &str) {
    send(child.id().expect("the child is running"), signal);
}
