//! What the user sees while an import or a replay runs: on a terminal a progress bar
//! (rows, rows/s, and the ETA when the file's size is known); otherwise a
//! plain line on stderr every five seconds. Bad rows are printed above the
//! bar, so it never tears them.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the plain progress line is printed.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    /// The command, naming the plain line.
    command: &'static str,
    bar: Option<ProgressBar>,
    started: Instant,
    last_line: Instant,
    /// The file's size, when it is a regular file.
    size: Option<u64>,
    bytes: Arc<AtomicU64>,
}

impl Progress {
    /// `bytes` counts what `command` read of a file of `size` bytes.
    pub fn new(command: &'static str, size: Option<u64>, bytes: Arc<AtomicU64>) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let (bar, template) = match size {
                Some(size) => (
                    ProgressBar::new(size),
                    "{spinner} [{bar:30}] {percent:>3}% {msg} ETA {eta}",
                ),
                None => (ProgressBar::no_length(), "{spinner} {msg} {elapsed}"),
            };
            bar.set_draw_target(ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Self {
            command,
            bar,
            started: Instant::now(),
            last_line: Instant::now(),
            size,
            bytes,
        }
    }

    /// Reports `rows` data rows done so far.
    pub fn update(&mut self, rows: u64) {
        let elapsed = self.started.elapsed().as_secs_f64().max(0.001);
        let rate = rows as f64 / elapsed;
        let bytes = self.bytes.load(Ordering::Relaxed);
        match &self.bar {
            Some(bar) => {
                bar.set_position(bytes);
                bar.set_message(format!("{rows} rows, {rate:.0} rows/s"));
            }
            None if self.last_line.elapsed() >= PLAIN_EVERY => {
                self.last_line = Instant::now();
                let share = self
                    .size
                    .filter(|&size| size > 0)
                    .map(|size| format!(", {:.0}% of the file", bytes as f64 * 100.0 / size as f64))
                    .unwrap_or_default();
                eprintln!("{}: {rows} rows, {rate:.0} rows/s{share}", self.command);
            }
            None => {}
        }
    }

    /// Prints a line (a bad row, a warning) to stderr.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Removes the bar, before the summary.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
