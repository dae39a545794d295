//! `kfaws-trainer`: thin CLI over the library. `train` trains (see `--help`); exit codes are
//! documented in [`kfaws_trainer::error`].

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kfaws_trainer::contract::sagemaker::SageMakerLayout;
use kfaws_trainer::contract::{self, TrainArgs};
use kfaws_trainer::error::{TrainError, EXIT_TERMINATED};
use kfaws_trainer::serve::{self, Classifier, ServeArgs};
use kfaws_trainer::{prometheus, train};

/// Data-parallel burn image classifier for PyTorchJob, SageMaker and local runs.
#[derive(Debug, Parser)]
#[command(version = kfaws_trainer::VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train (SageMaker invokes the container with `train`).
    #[command(after_help = kfaws_trainer_contract::hyperparameters_help())]
    Train(Box<TrainArgs>),
    /// Serve the trained model (SageMaker invokes the container with `serve`).
    Serve(ServeArgs),
    /// Write one test-split image of a dataset as PNG and print its class, to try an endpoint with.
    Sample(SampleArgs),
    /// Read a dataset directory as `train` would, without training: prints
    /// `dataset=NAME train=N test=N shape=CxHxW`, or the reason `train` would refuse it (exit 1).
    CheckData(CheckDataArgs),
}

/// `kfaws-trainer check-data` flags.
#[derive(Debug, clap::Args)]
struct CheckDataArgs {
    /// Directory holding the dataset (as for `train`).
    #[arg(long)]
    data_dir: std::path::PathBuf,
    /// The `dataset` hyperparameter the job will be given, if any: mnist, fashion-mnist, cifar10.
    #[arg(long)]
    dataset: Option<String>,
}

/// `kfaws-trainer sample` flags.
#[derive(Debug, clap::Args)]
struct SampleArgs {
    /// Directory holding the dataset (as for `train`).
    #[arg(long)]
    data_dir: std::path::PathBuf,
    /// Index of the example in the test split.
    #[arg(long, default_value_t = 0)]
    index: usize,
    /// The dataset to read, as the `dataset` hyperparameter: mnist, fashion-mnist, cifar10
    /// (needed where the directory holds two datasets).
    #[arg(long)]
    dataset: Option<String>,
    /// The PNG file to write.
    #[arg(long)]
    output: std::path::PathBuf,
}

fn main() -> ExitCode {
    // Flags that do not parse are configuration errors like any other: exit 1 (clap's own
    // usage code is 2), so PyTorchJob's ExitCode policy and SageMaker see one code for them.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                write_parse_failure(&e);
                ExitCode::from(kfaws_trainer::error::EXIT_CONFIG as u8)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let log = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // A failed write would be reported with `eprintln!`, which panics (exit 101) when
        // stderr is the closed pipe: the log line is lost, the exit code is kept.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let filter = |default: &str| {
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into())
    };
    if let Command::CheckData(_) = cli.command {
        // `kfaws train` relays these lines as they are: warnings only, without time or level.
        log.without_time()
            .with_level(false)
            .with_target(false)
            .with_env_filter(filter("warn"))
            .init();
    } else {
        log.with_env_filter(filter("info")).init();
    }
    match cli.command {
        Command::Train(args) => run_train(&args),
        Command::Serve(args) => run_serve(&args),
        Command::Sample(args) => run_sample(&args),
        Command::CheckData(args) => run_check_data(&args),
    }
}

/// Under SageMaker, writes the message of a `train` command whose flags or `TRAINER_*`
/// variables do not parse to the failure file, as [`fail`] does for every later error: such a
/// job's FailureReason would otherwise be empty. The SageMaker root is the one `train` would
/// use (`--sagemaker-root`, else `TRAINER_SAGEMAKER_ROOT`, else `/opt/ml`); nothing is written
/// where its `resourceconfig.json` is absent, or for another command.
fn write_parse_failure(error: &clap::Error) {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if args.first().and_then(|a| a.to_str()) != Some("train") {
        return;
    }
    let root = sagemaker_root_flag(&args[1..])
        .or_else(|| std::env::var_os("TRAINER_SAGEMAKER_ROOT"))
        .unwrap_or_else(|| kfaws_trainer::contract::sagemaker::ROOT.into());
    let layout = SageMakerLayout { root: root.into() };
    if !layout.is_present() {
        return;
    }
    // `render` without ANSI styles: the file is read as plain text.
    let message = error.render().to_string();
    let path = layout.failure_file();
    if let Err(e) = write_failure(&path, message.trim_end()) {
        // The log is not set up yet; a closed stderr loses the line, not the exit code.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "cannot write the failure reason to {}: {e}",
            path.display()
        );
    }
}

/// The value of `--sagemaker-root VALUE` or `--sagemaker-root=VALUE` among `train`'s
/// arguments (the last one given, as clap takes it), read without clap because they did
/// not parse.
fn sagemaker_root_flag(args: &[std::ffi::OsString]) -> Option<std::ffi::OsString> {
    const FLAG: &str = "--sagemaker-root";
    let mut found = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else { continue };
        if text == "--" {
            break;
        }
        if text == FLAG {
            found = args.next().cloned();
        } else if let Some(value) = text.strip_prefix(FLAG).and_then(|v| v.strip_prefix('=')) {
            found = Some(value.into());
        }
    }
    found
}

/// A flag set by SIGTERM (how orchestrators stop a container) or SIGINT (Ctrl-C in a
/// terminal, which signals the whole process group, every rank of a local job included).
fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for (signal, name) in [
        (signal_hook::consts::SIGTERM, "SIGTERM"),
        (signal_hook::consts::SIGINT, "SIGINT"),
    ] {
        if let Err(e) = signal_hook::flag::register(signal, Arc::clone(&stop)) {
            tracing::warn!("cannot watch {name}, stopping will not be graceful: {e}");
        }
    }
    stop
}

/// After SIGTERM or SIGINT the training loop checkpoints and exits after its next step, within
/// milliseconds. A rank blocked elsewhere (waiting for peers to answer) would only notice at
/// its timeout, past the orchestrator's SIGKILL: this watchdog exits with 143 once `grace` has
/// passed since the signal; at once if the ranks have not all joined yet
/// ([`train::RENDEZVOUS_DONE`]: waiting for a peer that may never come, with nothing to save).
fn stop_deadline(stop: Arc<AtomicBool>, grace: Duration) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if !train::RENDEZVOUS_DONE.load(Ordering::SeqCst) {
            tracing::error!(
                "signalled to stop before training started (loading data, or waiting for the \
                 other ranks to join); nothing to save, exiting"
            );
            std::process::exit(EXIT_TERMINATED);
        }
        std::thread::sleep(grace);
        tracing::error!(
            "signalled to stop, but not stopped after {grace:?} (blocked waiting for peers); exiting"
        );
        std::process::exit(EXIT_TERMINATED);
    });
}

/// Sets `stop` (as SIGTERM does) once the launcher `launcher` (kfaws) is gone: this process's
/// own parent changed since it started (a parent that dies has its children re-parented, to
/// init or a subreaper: proc(5) `PPid`), or `launcher` no longer runs (`/proc/<pid>` gone or
/// a zombie). The second covers a `--trainer` wrapper that runs the trainer as its child
/// rather than `exec`ing it: the wrapper, not kfaws, is the parent then, and outlives a
/// killed kfaws. Checked every 500 ms, so a killed launcher is noticed within about half a
/// second, also if it died before this started.
fn watch_parent(launcher: u32, stop: Arc<AtomicBool>) {
    let started_under = std::os::unix::process::parent_id();
    std::thread::spawn(move || loop {
        let now = std::os::unix::process::parent_id();
        if now != started_under || !runs(launcher) {
            tracing::warn!(
                launcher,
                parent = now,
                "the process that started this rank is gone; stopping as after SIGTERM"
            );
            stop.store(true, Ordering::SeqCst);
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    });
}

/// Whether process `pid` runs: `/proc/<pid>/stat` exists and its state (the field after the
/// parenthesised command name, proc(5)) is not `Z` (a zombie has exited).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// The dataset a `--dataset` flag names, if given.
fn dataset_hint(name: Option<&str>) -> Result<Option<kfaws_trainer_contract::DatasetKind>, String> {
    name.map(|name| {
        kfaws_trainer_contract::DatasetKind::parse(name)
            .ok_or_else(|| format!("--dataset {name}: not one of mnist, fashion-mnist, cifar10"))
    })
    .transpose()
}

/// Writes test image `index` as PNG (grey for one channel, RGB for three) and prints
/// `label=<class name> index=<class index>` on stdout.
fn run_sample(args: &SampleArgs) -> ExitCode {
    let written = (|| -> Result<String, String> {
        let hint = dataset_hint(args.dataset.as_deref())?;
        let dataset =
            kfaws_trainer::data::load_dir(&args.data_dir, hint).map_err(|e| e.to_string())?;
        let split = &dataset.test;
        if args.index >= split.len() {
            return Err(format!(
                "--index {} is past the test split's {} examples",
                args.index,
                split.len()
            ));
        }
        let [c, h, w] = split.shape;
        let pixels = split.image(args.index);
        let (w, h) = (w as u32, h as u32);
        let result = if c == 1 {
            image::GrayImage::from_raw(w, h, pixels.to_vec())
                .map(|i| i.save_with_format(&args.output, image::ImageFormat::Png))
        } else {
            // Channel-major (C×H×W) to interleaved RGB.
            let plane = (w * h) as usize;
            let rgb: Vec<u8> = (0..plane)
                .flat_map(|p| (0..3).map(move |ch| (ch, p)))
                .map(|(ch, p)| pixels[ch * plane + p])
                .collect();
            image::RgbImage::from_raw(w, h, rgb)
                .map(|i| i.save_with_format(&args.output, image::ImageFormat::Png))
        };
        result
            .ok_or("image size mismatch")?
            .map_err(|e| format!("{}: {e}", args.output.display()))?;
        let label = usize::from(split.labels[args.index]);
        Ok(format!(
            "label={} index={label}",
            dataset.kind.classes()[label]
        ))
    })();
    match written {
        Ok(line) => {
            emit(&line);
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(kfaws_trainer::error::EXIT_CONFIG as u8)
        }
    }
}

/// Loads the dataset exactly as `train` does (every file read whole, so a truncated file or a
/// wrong magic number is found) and prints one line describing it. The error, if any, goes to
/// stderr as one plain line (no log prefix): `kfaws train` shows it as the reason it refuses
/// `--data` before starting ranks or uploading.
fn run_check_data(args: &CheckDataArgs) -> ExitCode {
    use std::io::Write as _;
    let checked = (|| -> Result<String, String> {
        let hint = dataset_hint(args.dataset.as_deref())?;
        let dataset =
            kfaws_trainer::data::load_dir(&args.data_dir, hint).map_err(|e| e.to_string())?;
        let [c, h, w] = dataset.train.shape;
        Ok(format!(
            "dataset={} train={} test={} shape={c}x{h}x{w}",
            dataset.kind.name(),
            dataset.train.len(),
            dataset.test.len()
        ))
    })();
    match checked {
        Ok(line) => {
            emit(&line);
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "{e}");
            ExitCode::from(kfaws_trainer::error::EXIT_CONFIG as u8)
        }
    }
}

fn run_serve(args: &ServeArgs) -> ExitCode {
    let stop = stop_flag();
    let served = Classifier::load(&args.model_dir).and_then(|classifier| {
        let classifier = classifier.with_max_image_pixels(args.max_image_pixels);
        serve::serve(classifier, args, &stop)
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(kfaws_trainer::error::EXIT_CONFIG as u8)
        }
    }
}

fn run_train(args: &TrainArgs) -> ExitCode {
    let stop = stop_flag();
    stop_deadline(Arc::clone(&stop), Duration::from_secs(args.stop_grace_secs));
    if let Some(parent) = args.parent_pid {
        watch_parent(parent, Arc::clone(&stop));
    }
    let config = match contract::resolve(args, &|name| std::env::var(name).ok()) {
        Ok(config) => config,
        Err(e) => {
            // Under SageMaker the reason must reach FailureReason even when the configuration
            // itself is what failed.
            let layout = SageMakerLayout {
                root: args.sagemaker_root.clone(),
            };
            let failure_file = layout.is_present().then(|| layout.failure_file());
            return fail(&TrainError::from(e), failure_file.as_deref());
        }
    };
    // A reason an earlier run under the same root left (SageMaker starts each job with a fresh
    // /opt/ml; a reused local root does not) would outlive this run's success.
    if let Some(path) = &config.failure_file {
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(
                    "cannot remove the earlier failure reason {}: {e}",
                    path.display()
                );
            }
        }
    }
    // Evaluation, and training with one replica, run on rayon's global pool.
    if let Err(e) = config.parallelism.build_global_pool() {
        tracing::warn!("rayon's global pool was already started: {e}");
    }
    let rv = &config.rendezvous;
    tracing::info!(
        threads = config.parallelism.threads,
        replicas = config.parallelism.replicas,
        "parallelism"
    );
    tracing::info!(
        launcher = ?config.launcher, rank = rv.rank, world_size = rv.world_size,
        master = %format!("{}:{}", rv.master_addr, rv.master_port),
        all_reduce = rv.all_reduce.name(),
        connect_timeout_s = rv.connect_timeout.as_secs(),
        collective_timeout_s = rv.collective_timeout.as_secs(),
        data = %config.data_dir.display(), "starting"
    );
    let result = train::load_dataset(&config).and_then(|dataset| {
        tracing::info!(
            dataset = dataset.kind.name(),
            train = dataset.train.len(),
            test = dataset.test.len(),
            "dataset loaded"
        );
        let is_rank0 = rv.rank == 0;
        let latest = prometheus::Latest::default();
        if let (Some(port), true) = (config.metrics_port, is_rank0) {
            match prometheus::spawn(&config.rendezvous.bind_addr, port, latest.clone()) {
                Ok(addr) => tracing::info!(%addr, "Prometheus metrics on /metrics"),
                Err(e) => tracing::warn!("no metrics endpoint: {e}"),
            }
        }
        let outcome = train::train(&config, &dataset, &stop, |progress| {
            if is_rank0 {
                if let train::Progress::Epoch(metrics) = &progress {
                    emit(&metrics.line());
                }
                latest.lock().expect("metrics lock").record(progress);
            }
        })?;
        if let (Some(summary), true) = (outcome.evaluated, is_rank0) {
            emit(&summary.line());
        }
        Ok(outcome)
    });
    match result {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => fail(&e, config.failure_file.as_deref()),
    }
}

/// Prints a result or metric line on stdout, ignoring a failed write: the
/// model, not stdout, is what training produces, so a reader that went away
/// (`kfaws-trainer train | head`) must not end the run with a panic (exit
/// 101, no checkpoint, which an `ExitCode` restart policy would not retry).
fn emit(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Logs the error, writes it where SageMaker reads the failure reason, and maps the exit code.
fn fail(error: &TrainError, failure_file: Option<&std::path::Path>) -> ExitCode {
    tracing::error!("{error}");
    if let Some(path) = failure_file {
        if let Err(e) = write_failure(path, &error.to_string()) {
            tracing::warn!(path = %path.display(), "cannot write the failure reason: {e}");
        }
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(1))
}

/// Writes `reason` to SageMaker's failure file `path`, creating its directory.
fn write_failure(path: &std::path::Path, reason: &str) -> std::io::Result<()> {
    path.parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| std::fs::write(path, reason))
}
