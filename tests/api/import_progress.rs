//! `sticky-routing import`'s plain progress line: what a long run prints
//! every five seconds when its stderr is no terminal (a pipe, a log file).

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::support::bulk::script_calls;
use crate::support::bulk::{Target, generated};
use crate::support::{Topology, drain, service_binary, spawn_piped, until_while_running};

/// Lines of a child's stderr as they come.
fn lines_of(stderr: Option<tokio::process::ChildStderr>) -> mpsc::UnboundedReceiver<String> {
    let (sender, receiver) = mpsc::unbounded_channel();
    let mut lines = BufReader::new(stderr.unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let _ = sender.send(line);
        }
    });
    receiver
}

#[tokio::test]
async fn a_long_import_without_a_terminal_prints_a_plain_progress_line() {
    const PART: usize = 3_000;
    let target = Target::start(Topology::Single).await;
    let port = target.redis.data_ports()[0];
    let (text, _) = generated(3 * PART, 500, 4, 0x5107);
    let ends: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).collect();
    let parts = [
        &text[..ends[PART]],
        &text[ends[PART]..ends[2 * PART]],
        &text[ends[2 * PART]..],
    ];
    let started = Instant::now();
    let mut command = service_binary(&target.vars(&[]));
    command.args(["import", "--format", "csv", "-"]);
    let mut child = spawn_piped(command);
    let mut stdin = child.stdin.take().unwrap();
    let stdout = drain(child.stdout.take());
    let mut stderr = lines_of(child.stderr.take());
    // Rows at once, more rows 2.5 s later (both applied within the first
    // 5 s: no line yet), and the last rows after 5.5 s: the line.
    for (part, at) in parts.iter().zip([0, 2_500, 5_500]) {
        tokio::time::sleep_until((started + Duration::from_millis(at)).into()).await;
        if at == 5_500 {
            let early: Vec<String> = std::iter::from_fn(|| stderr.try_recv().ok()).collect();
            assert!(
                !early.iter().any(|l| l.starts_with("import:")),
                "a progress line before 5 s: {early:?}"
            );
        }
        let calls = script_calls(port);
        stdin.write_all(part.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        let applying = until_while_running(&mut child, Duration::from_secs(30), || {
            script_calls(port) > calls
        });
        assert!(applying.await, "rows written at {at} ms were never applied");
    }
    let line = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = stderr
                .recv()
                .await
                .expect("stderr ended with no progress line");
            if line.starts_with("import:") {
                return line;
            }
        }
    })
    .await
    .expect("a progress line within 30 s of the last rows");
    let elapsed = started.elapsed().as_secs_f64();
    drop(stdin);
    let (rows, rate): (u64, u64) = line
        .strip_prefix("import: ")
        .and_then(|rest| rest.strip_suffix(" rows/s"))
        .and_then(|rest| rest.split_once(" rows, "))
        .and_then(|(n, r)| Some((n.parse().ok()?, r.parse().ok()?)))
        .unwrap_or_else(|| panic!("not `import: N rows, R rows/s`: {line:?}"));
    assert!(rows > 0 && rows <= 3 * PART as u64, "{line}");
    // Rows over the run's time so far, which is past the line's 5 s.
    let (n, r) = (rows as f64, rate as f64);
    assert!(
        r <= n / 5.0 + 1.0 && r + 1.0 >= n / elapsed,
        "{line} after {elapsed:.1} s"
    );
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the import ends")
        .unwrap();
    let stdout = stdout.await.unwrap();
    assert_eq!(status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("import done: 9000 rows"), "{stdout}");
}
