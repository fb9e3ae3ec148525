//! The bulk commands give up quickly on a Redis that is not there or stops
//! answering: `import` and `export` against a refused port or a peer that
//! accepts TCP and never answers exit 2 within 5 s, naming the problem, and
//! an export whose Redis is killed or frozen mid-read exits 2 within the
//! Redis timeout and a few seconds, and one whose Redis is restarted
//! mid-read (answering again at once) exits 2 too, saying why, with no
//! file. (An import whose Redis fails mid-file: import_failures.rs, which
//! also resumes it.)

use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rstest::rstest;

use crate::support::bulk::HEADER;
use crate::support::bulk::export_command;
use crate::support::{
    RedisFailure, RedisServer, SERVICE_PASSWORD, SERVICE_USER, bulk_gives_up_within, drain, fill,
    free_port, service_binary, until_while_running,
};

/// How soon a bulk command must give up on a Redis it cannot reach at all.
const UNREACHABLE_WITHIN: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum Bulk {
    Import,
    Export,
}

/// How Redis is out of reach.
#[derive(Debug, Clone, Copy)]
enum Unreachable {
    /// Nothing listens: the connection is refused at once.
    Refused,
    /// A listener that never accepts: the kernel completes the handshake,
    /// and nothing ever answers (a hung Redis, a black-holing proxy).
    Silent,
}

/// `bulk` against `url`, with its file in `dir`: an import of one row, or
/// an export to a file.
fn bulk_command(bulk: Bulk, url: String, dir: &Path) -> tokio::process::Command {
    match bulk {
        Bulk::Import => {
            let file = dir.join("one.csv");
            std::fs::write(
                &file,
                format!("{HEADER}m1,c1,card,credit,stripe,success,1,\n"),
            )
            .unwrap();
            let vars = [
                ("STICKY_ROUTING_REDIS_URL", url),
                ("STICKY_ROUTING_REDIS_USERNAME", SERVICE_USER.to_owned()),
                ("STICKY_ROUTING_REDIS_PASSWORD", SERVICE_PASSWORD.to_owned()),
            ];
            let mut command = service_binary(&vars);
            command.args(["import", "--no-admission"]).arg(file);
            command
        }
        Bulk::Export => export_command(url, &[dir.join("out.csv").to_str().unwrap()]),
    }
}

#[rstest]
#[tokio::test]
async fn an_unreachable_redis_at_the_start_is_exit_2_within_5_s(
    #[values(Bulk::Import, Bulk::Export)] bulk: Bulk,
    #[values(Unreachable::Refused, Unreachable::Silent)] unreachable: Unreachable,
) {
    // Held to the end of the test, and never accepted from.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = match unreachable {
        Unreachable::Refused => free_port(),
        Unreachable::Silent => listener.local_addr().unwrap().port(),
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let mut command = bulk_command(bulk, url.clone(), dir.path());
    // Twice the bound, so that a slow run still shows how slow it was.
    let output = tokio::time::timeout(2 * UNREACHABLE_WITHIN, command.output())
        .await
        .unwrap_or_else(|_| panic!("{bulk:?} still ran {:?} later", 2 * UNREACHABLE_WITHIN))
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "{bulk:?}, Redis {unreachable:?}: exit {:?} after {took:?}",
        output.status.code()
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        took < UNREACHABLE_WITHIN,
        "{bulk:?} took {took:?}: {stderr}"
    );
    assert!(
        stderr.contains(&format!("cannot reach Redis at {url}")),
        "{stderr}"
    );
    let says = match unreachable {
        Unreachable::Refused => "refused",
        Unreachable::Silent => "timed out",
    };
    assert!(stderr.to_lowercase().contains(says), "{stderr}");
    // Nothing written: the export's file is created only once it is done.
    assert!(!dir.path().join("out.csv").exists());
}

/// An export of Redis on `redis` into a file, once it has written rows
/// (the writer flushes every 256 KiB): the read is under way. Its stderr,
/// and the folder that holds the file, which must stay empty if it fails.
struct ExportUnderWay {
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<String>,
    dir: tempfile::TempDir,
}

impl ExportUnderWay {
    async fn start(redis: &RedisServer) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("habits.csv");
        let partial = dir.path().join("habits.csv.partial");
        let mut child = export_command(redis.url(), &[file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = drain(child.stderr.take());
        let reading = until_while_running(&mut child, Duration::from_secs(30), || {
            std::fs::metadata(&partial).is_ok_and(|m| m.len() > 0)
        });
        assert!(
            reading.await,
            "the export wrote nothing, or finished before Redis failed: fill more customers"
        );
        Self { child, stderr, dir }
    }

    /// Waits for the export to end, at most [`bulk_gives_up_within`] after
    /// Redis failed (`failure`, for the messages); asserts it exited 2 and
    /// left no file, and returns its stderr.
    async fn failed(mut self, failure: &str) -> String {
        let struck = Instant::now();
        let status =
            tokio::time::timeout_at((struck + bulk_gives_up_within()).into(), self.child.wait())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "the export still ran {:?} after Redis was {failure}",
                        bulk_gives_up_within()
                    )
                })
                .unwrap();
        eprintln!(
            "Redis {failure}: the export exited {:?} later",
            struck.elapsed()
        );
        let stderr = self.stderr.await.unwrap();
        assert_eq!(status.code(), Some(2), "{stderr}");
        let left: Vec<_> = std::fs::read_dir(self.dir.path()).unwrap().collect();
        assert!(left.is_empty(), "a failed export left a file: {left:?}");
        stderr
    }
}

#[rstest]
#[tokio::test]
async fn export_with_redis_failing_mid_read_is_exit_2_in_time(
    #[values(RedisFailure::Killed, RedisFailure::Frozen)] failure: RedisFailure,
) {
    let mut redis = RedisServer::start();
    fill(redis.port, 200_000);
    let export = ExportUnderWay::start(&redis).await;
    match failure {
        RedisFailure::Killed => redis.stop(),
        RedisFailure::Frozen => redis.signal("-STOP"),
    }
    let stderr = export.failed(&format!("{failure:?}")).await;
    assert!(stderr.contains("redis failed during the read"), "{stderr}");
}

/// Redis killed and started again on its port mid-export: fred reconnects
/// and would go on with a SCAN cursor that the new process never gave (it
/// is empty here, so the scan would end at once and look complete). The
/// export ends with exit 2, saying why, and no file.
#[tokio::test]
async fn export_with_redis_restarted_mid_read_is_exit_2_and_says_why() {
    let mut redis = RedisServer::start();
    fill(redis.port, 200_000);
    let export = ExportUnderWay::start(&redis).await;
    redis.restart();
    let stderr = export.failed("restarted").await;
    assert!(
        stderr.contains("redis was reconnected or restarted during the read"),
        "{stderr}"
    );
    assert!(!stderr.contains("done:"), "{stderr}");
}
