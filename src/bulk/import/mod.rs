//! `sticky-routing import`: historical outcomes from a CSV or JSONL file,
//! applied through RecordOutcome's validation, rules, scripts and admission.
//!
//! A reader thread parses the file while rounds of rows are applied
//! ([`apply`]) on four lanes of customers at once ([`lanes`]), so parsing,
//! the importer's work and Redis's all overlap. Rows are numbered among the
//! file's data rows; "resume with --skip N" is printed whenever the import
//! stops early, N being a row count such that every row before it is
//! finished (applied, or reported) and none after it was applied: a stop
//! (Ctrl-C, SIGTERM) first finishes the rows already handed to a lane.
//!
//! A Redis error that leaves rows unanswered (a timeout, a lost connection)
//! stops the import with exit code 2: a dead or frozen Redis within
//! `REDIS_TIMEOUT` and a few seconds, the import's calls being bounded as
//! both bulk commands' are (`crate::bulk::bulk_redis`). Those rows may or
//! may not have been applied, and the other lanes finish their rows, so
//! the N printed is the first unfinished row and rows after it may already
//! have been applied. For a file, resuming sends them again and applies
//! none of them twice: every row is checked against its customer's import
//! mark (`domain::import_mark`), keyed by the file's identity, which is
//! computed here before the first row is read; so is running the file
//! again. Stdin has no identity (it cannot be read twice): there only an
//! `attempt_id` among the customer's last 8 protects a row. The message
//! says which holds.
//!
//! A key the service does not own (another Redis type, a foreign value) is
//! that row's problem: reported by line, not applied, exit 1; the import
//! goes on.

mod apply;
mod args;
mod lanes;
mod summary;

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::bulk::START_WITHIN;
use crate::bulk::progress::Progress;
use crate::bulk::rows::{FileError, Parsed, RowReader};
use crate::config::Settings;
use crate::domain::import_mark::{FileId, FileIdHasher};
use crate::storage::{NotApplied, RedisStore, StorageError};
use crate::telemetry::Metrics;
use apply::Applier;
use args::ImportArgs;
use summary::{Summary, Tally};

/// Rows per round of a lane: a few thousand per connection make a round
/// trip's cost small against the scripts' own time (bench/README.md,
/// "Import").
const ROUND_ROWS: usize = 4096;
/// Rows the reader hands over at once.
const CHUNK_ROWS: usize = 1024;

const EXIT_BAD_ROWS: u8 = 1;
const EXIT_TROUBLE: u8 = 2;
const EXIT_INTERRUPTED: u8 = 130;

/// Runs `sticky-routing import ARGS` with the process environment `env`.
pub fn run(args: &[String], env: &HashMap<String, String>) -> ExitCode {
    let args = match args::parse(args) {
        Ok(args) => args,
        Err(None) => {
            crate::process::print_to_stdout(&format!("{}\n", args::USAGE));
            return ExitCode::SUCCESS;
        }
        Err(Some(problem)) => {
            eprintln!("sticky-routing import: {problem}\n(see sticky-routing import --help)");
            return ExitCode::from(EXIT_TROUBLE);
        }
    };
    let settings = match Settings::load(args.config_file.as_deref(), env) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("sticky-routing import: {error}");
            return ExitCode::from(EXIT_TROUBLE);
        }
    };
    match crate::bulk::runtime() {
        Ok(runtime) => {
            let code = runtime.block_on(import(args, settings));
            // The reader thread may be blocked on stdin: do not wait for it.
            runtime.shutdown_background();
            code
        }
        Err(error) => {
            eprintln!("sticky-routing import: cannot start the runtime: {error}");
            ExitCode::from(EXIT_TROUBLE)
        }
    }
}

/// What the reader thread hands over.
enum Batch {
    Rows(Vec<(u64, Parsed)>),
    Skipped(u64),
    Failed(FileError),
}

async fn import(args: ImportArgs, settings: Settings) -> ExitCode {
    let (input, size) = match crate::bulk::open_input(args.file.as_deref()) {
        Ok(opened) => opened,
        Err(problem) => {
            eprintln!("sticky-routing import: {problem}");
            return ExitCode::from(EXIT_TROUBLE);
        }
    };
    // Signals first: hashing a big file takes a while, and a signal must
    // stop that too, not kill the process without its resume hint.
    let stop = watch_signals();
    // Before the first row: the identity is the whole file's.
    let file = match (&args.file, args.dry_run) {
        (Some(path), false) => {
            let hashing = tokio::task::spawn_blocking({
                let path = path.clone();
                move || file_identity(&path)
            });
            let hashed = tokio::select! {
                () = stop.cancelled() => return interrupted(args.skip),
                hashed = hashing => hashed,
            };
            match hashed {
                Ok(Ok(id)) => Some(id),
                Ok(Err(error)) => {
                    eprintln!(
                        "sticky-routing import: cannot read {}: {error}",
                        path.display()
                    );
                    return ExitCode::from(EXIT_TROUBLE);
                }
                Err(error) => {
                    eprintln!("sticky-routing import: hashing the file failed: {error}");
                    return ExitCode::from(EXIT_TROUBLE);
                }
            }
        }
        _ => None,
    };
    let bytes = Arc::new(AtomicU64::new(0));
    let mut batches = spawn_reader(
        input,
        args.format,
        args.tenant.clone(),
        args.skip,
        bytes.clone(),
    );
    let mut run = Run {
        tally: Tally::default(),
        progress: Progress::new("import", size, bytes),
        buffer: VecDeque::new(),
        received: 0,
        reader_done: false,
    };
    let started = Instant::now();
    let ended = if args.dry_run {
        run.validate_only(&mut batches, &stop).await
    } else {
        match connect(&settings).await {
            Ok((store, tasks)) => {
                if !args.no_admission {
                    store.guard_admission_memory(settings.rules.admission_memory_limit, &tasks);
                }
                let applier = Applier {
                    store: &store,
                    rules: &settings.rules,
                    no_admission: args.no_admission,
                    file,
                };
                let ended = run.apply_all(&applier, &mut batches, &stop).await;
                crate::bulk::quit_within(store.quit()).await;
                tasks.close();
                ended
            }
            Err(problem) => {
                run.progress.finish();
                eprintln!("sticky-routing import: {problem}");
                return ExitCode::from(EXIT_TROUBLE);
            }
        }
    };
    run.progress.finish();
    let summary = Summary {
        tally: &run.tally,
        elapsed: started.elapsed(),
        dry_run: args.dry_run,
        complete: matches!(ended, Ended::Complete),
    };
    crate::process::print_to_stdout(&summary.to_string());
    match ended {
        Ended::Complete if run.tally.any_bad() => ExitCode::from(EXIT_BAD_ROWS),
        Ended::Complete => ExitCode::SUCCESS,
        Ended::Interrupted { resume } => interrupted(resume),
        // A usage error found at the header: nothing was read, nothing to
        // resume.
        Ended::FileFailed {
            error: error @ FileError::TenantColumn { line: None },
            ..
        } => {
            eprintln!("sticky-routing import: {error}\n(see sticky-routing import --help)");
            ExitCode::from(EXIT_TROUBLE)
        }
        Ended::FileFailed { error, resume } => {
            eprintln!("sticky-routing import: {error}; resume with --skip {resume}");
            ExitCode::from(EXIT_TROUBLE)
        }
        Ended::RedisFailed { error, resume } => {
            let holds = if file.is_some() {
                "resuming, or running the same file again, applies none of them twice"
            } else {
                "from stdin, a row is never applied twice only if its attempt_id \
                 is among its customer's last 8; import a file for exact resumes"
            };
            eprintln!(
                "sticky-routing import: stopped, Redis failed: {error}\n\
                 resume with --skip {resume}\n\
                 (rows from there on may already have been applied; {holds})"
            );
            ExitCode::from(EXIT_TROUBLE)
        }
    }
}

/// A stop by SIGINT or SIGTERM, with every row before `resume` finished.
fn interrupted(resume: u64) -> ExitCode {
    eprintln!("sticky-routing import: interrupted; resume with --skip {resume}");
    ExitCode::from(EXIT_INTERRUPTED)
}

/// How the rows ran out.
enum Ended {
    Complete,
    Interrupted {
        resume: u64,
    },
    FileFailed {
        error: FileError,
        resume: u64,
    },
    RedisFailed {
        error: crate::storage::StorageError,
        resume: u64,
    },
}

/// The identity of the file at `path`: its whole content hashed.
fn file_identity(path: &std::path::Path) -> std::io::Result<FileId> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = FileIdHasher::default();
    let mut buffer = vec![0; 256 * 1024];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => return Ok(hasher.finish()),
            Ok(n) => hasher.update(&buffer[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
}

/// The store, connected, with its scripts loaded; or why not.
async fn connect(settings: &Settings) -> Result<(RedisStore, TaskTracker), String> {
    let redis = crate::bulk::bulk_redis(&settings.redis);
    let metrics = Metrics::new().map_err(|e| format!("cannot set up metrics: {e}"))?;
    let tasks = TaskTracker::new();
    let store = RedisStore::connect(&redis, &tasks, Arc::new(metrics))
        .map_err(|e| format!("cannot connect to Redis: {e}"))?;
    let problem = if !store.wait_connected(START_WITHIN).await {
        let why = store.connection_problem();
        Some(why.unwrap_or_else(|| format!("no connection within {START_WITHIN:?}")))
    } else {
        let loaded = store.preload_batch_script().await;
        loaded
            .err()
            .map(|error| format!("loading the scripts failed: {error}"))
    };
    let lacking = match problem {
        Some(_) => None,
        None => lacking_permission(&store).await,
    };
    match (problem, lacking) {
        (None, None) => Ok((store, tasks)),
        (Some(why), _) => {
            crate::bulk::quit_within(store.quit()).await;
            Err(crate::bulk::unreachable(&redis, &why))
        }
        (None, Some(lacking)) => {
            crate::bulk::quit_within(store.quit()).await;
            Err(format!(
                "Redis at {}: {lacking}; nothing was imported \
                 (deploy/redis-acl.txt lists what the service needs)",
                redis.url
            ))
        }
    }
}

/// What the Redis user lacks, as the readiness check's permission probe
/// finds it on every node; `None` when it lacks nothing or the probe could
/// not tell (any other failure shows on the first batch, as it would
/// anyway). Checked before the first row so that a narrow user stops the
/// import with nothing written rather than row by row.
async fn lacking_permission(store: &RedisStore) -> Option<String> {
    match store.ping(Instant::now() + START_WITHIN).await {
        Err(StorageError::Unavailable {
            why: NotApplied::Permission,
            detail,
        }) => Some(detail),
        _ => None,
    }
}

/// Reads the file on its own thread (it may block on stdin), handing over
/// chunks of numbered rows, every one `tenant`'s when `--tenant` names one.
/// `skip` rows are counted, not validated.
fn spawn_reader(
    input: Box<dyn Read + Send>,
    format: crate::bulk::Format,
    tenant: Option<crate::domain::tenant::Tenant>,
    skip: u64,
    bytes: Arc<AtomicU64>,
) -> mpsc::Receiver<Batch> {
    let (sender, receiver) = mpsc::channel(8);
    std::thread::spawn(move || {
        let opened = RowReader::new(input, format, bytes).and_then(|reader| match tenant {
            Some(tenant) => reader.for_tenant(tenant),
            None => Ok(reader),
        });
        let mut reader = match opened {
            Ok(reader) => reader,
            Err(error) => {
                let _ = sender.blocking_send(Batch::Failed(error));
                return;
            }
        };
        let mut index = 0;
        let mut chunk = Vec::with_capacity(CHUNK_ROWS);
        while let Some(next) = reader.next_row() {
            match next {
                Ok(_) if index < skip => {
                    index += 1;
                    if index == skip && sender.blocking_send(Batch::Skipped(skip)).is_err() {
                        return;
                    }
                }
                Ok(parsed) => {
                    chunk.push((index, parsed));
                    index += 1;
                    if chunk.len() == CHUNK_ROWS {
                        let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_ROWS));
                        if sender.blocking_send(Batch::Rows(full)).is_err() {
                            return;
                        }
                    }
                }
                Err(error) => {
                    // Rows skipped so far are finished: the resume point
                    // must not fall back before them.
                    if index < skip {
                        let _ = sender.blocking_send(Batch::Skipped(index));
                    }
                    let _ = sender.blocking_send(Batch::Rows(chunk));
                    let _ = sender.blocking_send(Batch::Failed(error));
                    return;
                }
            }
        }
        if index < skip {
            let _ = sender.blocking_send(Batch::Skipped(index));
        }
        let _ = sender.blocking_send(Batch::Rows(chunk));
    });
    receiver
}

/// Cancelled once SIGINT or SIGTERM arrives. A token, not a flag: the
/// import may be waiting for the reader (stdin open, no bytes coming), and
/// that wait must end on the signal, not when the input does.
fn watch_signals() -> CancellationToken {
    let stop = CancellationToken::new();
    let flag = stop.clone();
    tokio::spawn(async move {
        crate::process::shutdown_signal().await;
        flag.cancel();
    });
    stop
}

/// The import's running state.
struct Run {
    tally: Tally,
    progress: Progress,
    /// Rows read and not yet in a round.
    buffer: VecDeque<(u64, Parsed)>,
    /// Data rows received from the reader (skipped ones included).
    received: u64,
    reader_done: bool,
}

impl Run {
    /// Waits for the reader's next chunk into the buffer; `Err` on a file
    /// error. Does nothing once the reader is done, and returns with
    /// nothing received once `stop` is cancelled (the caller checks it).
    async fn receive(
        &mut self,
        batches: &mut mpsc::Receiver<Batch>,
        stop: &CancellationToken,
    ) -> Result<(), FileError> {
        if self.reader_done {
            return Ok(());
        }
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => return Ok(()),
            next = batches.recv() => next,
        };
        match next {
            None => self.reader_done = true,
            Some(Batch::Rows(rows)) => {
                if let Some((last, _)) = rows.last() {
                    self.received = last + 1;
                }
                self.buffer.extend(rows);
            }
            Some(Batch::Skipped(n)) => {
                self.tally.skipped = n;
                self.received = self.received.max(n);
            }
            Some(Batch::Failed(error)) => {
                self.reader_done = true;
                return Err(error);
            }
        }
        Ok(())
    }

    fn bad_row(&mut self, line: u64, reason: &str) {
        self.tally.bad += 1;
        self.progress.println(&format!("line {line}: {reason}"));
    }

    async fn validate_only(
        &mut self,
        batches: &mut mpsc::Receiver<Batch>,
        stop: &CancellationToken,
    ) -> Ended {
        loop {
            if stop.is_cancelled() {
                return Ended::Interrupted {
                    resume: self.first_unread(),
                };
            }
            while let Some((_, parsed)) = self.buffer.pop_front() {
                match parsed {
                    Parsed::Row(_) => self.tally.valid += 1,
                    Parsed::Bad { line, reason } => self.bad_row(line, &reason),
                }
            }
            self.progress.update(self.tally.rows());
            if self.reader_done {
                return Ended::Complete;
            }
            if let Err(error) = self.receive(batches, stop).await {
                return Ended::FileFailed {
                    error,
                    resume: self.received,
                };
            }
        }
    }

    /// The first data row not yet taken from the reader's chunks.
    fn first_unread(&self) -> u64 {
        self.buffer
            .front()
            .map_or(self.received, |(index, _)| *index)
    }
}
