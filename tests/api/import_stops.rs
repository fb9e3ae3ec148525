//! `sticky-routing import` stopped while it waits on its input: a signal
//! while stdin has no more rows yet, and a read that fails inside `--skip`.
//! Both must end with a resume hint that is exact.

use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rstest::rstest;
use tokio::io::AsyncWriteExt;

use crate::support::bulk::{HEADER, Target, resume_hint};
use crate::support::{Topology, drain, send_to_child, service_binary, spawn_piped};

/// A signal while the import waits for more input (stdin open, no bytes
/// coming) stops it within a second, exit 130, with an exact resume hint:
/// the reader thread blocked on stdin must not hold it.
#[rstest]
#[tokio::test]
async fn a_signal_while_stdin_is_quiet_stops_within_a_second(
    #[values("-INT", "-TERM")] signal: &str,
    #[values(true, false)] dry_run: bool,
) {
    let target = Target::start(Topology::Single).await;
    let mut args = vec!["import", "--no-admission", "--format", "csv", "-"];
    if dry_run {
        args.insert(1, "--dry-run");
    }
    let mut command = service_binary(&target.vars(&[]));
    command.args(&args);
    let mut child = spawn_piped(command);
    let mut stdin = child.stdin.take().unwrap();
    let row = format!("{HEADER}m1,c1,card,credit,stripe,success,1,\n");
    stdin.write_all(row.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    send_to_child(&child, signal);
    let signalled = Instant::now();
    // stdin stays open (held here) until the import has ended.
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("the import ends while stdin is still open")
        .unwrap();
    let took = signalled.elapsed();
    drop(stdin);
    let (stdout, stderr) = (stdout.await.unwrap(), stderr.await.unwrap());
    assert_eq!(status.code(), Some(130), "{stdout}{stderr}");
    assert!(took < Duration::from_secs(1), "it took {took:?} to stop");
    // The reader hands rows over by the thousand, so the row may not have
    // been handed out: the hint is exact either way.
    let resume = resume_hint(&stderr);
    assert!(resume <= 1, "{stderr}");
    let state = target.state().await;
    let applied = u64::from(!dry_run && !state.is_empty());
    assert!(dry_run || applied == resume, "{state:?} {stderr}");
}

/// A read that fails inside `--skip` (here stdin is a non-blocking pipe
/// with nothing more in it: EAGAIN, which no reader retries): the resume
/// point is the rows already skipped, never 0.
#[tokio::test]
async fn a_read_failing_inside_skip_resumes_after_the_skipped_rows() {
    let (mut sender, receiver) = tokio::net::unix::pipe::pipe().unwrap();
    let mut text = String::from(HEADER);
    for c in 0..3 {
        text.push_str(&format!("m1,c{c},card,credit,stripe,success,1,\n"));
    }
    sender.write_all(text.as_bytes()).await.unwrap();
    let stdin: OwnedFd = receiver.into_nonblocking_fd().unwrap();
    let output = service_binary(&[])
        .args(["import", "--dry-run", "--format", "csv", "--skip", "5", "-"])
        .stdin(Stdio::from(stdin))
        .output()
        .await
        .unwrap();
    // The writing end stays open until here: the pipe is empty, not closed.
    drop(sender);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read the file"), "{stderr}");
    assert_eq!(resume_hint(&stderr), 3, "{stderr}");
}
