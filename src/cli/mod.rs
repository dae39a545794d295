//! Command definitions (clap) and dispatch. Each command's module parses
//! nothing and decides nothing of substance: it loads, calls the library and
//! prints.

/// `println!` that reports a closed stdout (`kfaws plan --json | head`) as
/// an error instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::cli::Output::from)
    }};
}

/// `eprintln!` that never panics: when stderr is a closed pipe too
/// (`kfaws train … 2>&1 | head`), the message is dropped and the command
/// goes on to its exit status (141 for a closed stdout) instead of exiting
/// 101 with "failed printing to stderr".
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `print!` counterpart of `outln!`.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        write!(stdout, $($arg)*).and_then(|()| stdout.flush()).map_err($crate::cli::Output::from)
    }};
}

mod context;
mod eks;
mod endpoint;
mod graph;
mod image;
mod progress;
mod run;
mod state;
mod train;
mod train_sagemaker;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches as _, Parser, Subcommand};
use kfaws::address::Address;
use kfaws::config::ProfileName;
use kfaws::engine::interrupt::{cancel_on_signals, exit_status, STOPPING_CHANGES};
use kfaws::resource::DeleteOptions;
use tokio_util::sync::CancellationToken;

/// kfaws: Kubeflow on AWS, planned, applied and destroyed from one binary.
///
/// Resources (CloudFormation stacks, EKS, IAM, EFS, S3 and Kubernetes
/// components) form a dependency graph that is planned, applied and
/// destroyed in dependency order, with a state file, locking, resume after
/// failure and drift detection.
///
/// Configuration comes from kfaws.toml in the current directory (or
/// --config), overridden by flags. AWS credentials come from --aws-profile
/// when given, else the standard chain (environment, AWS_PROFILE, SSO,
/// instance metadata); AWS_ENDPOINT_URL redirects every AWS call (the local
/// emulator).
#[derive(Debug, Parser)]
#[command(
    name = "kfaws",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command takes.
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// The config file [default: ./kfaws.toml; a missing default file is an empty config].
    #[arg(long, global = true, env = "KFAWS_CONFIG", value_name = "PATH")]
    config: Option<PathBuf>,
    /// Deployment name (also the EKS cluster name) [default: `name` in kfaws.toml].
    #[arg(long, global = true, env = "KFAWS_NAME")]
    name: Option<String>,
    /// AWS Region [default: `region` in kfaws.toml, else AWS_REGION].
    #[arg(long, global = true)]
    region: Option<String>,
    /// Named AWS profile: credentials from that profile only, even when AWS_ACCESS_KEY_ID is set
    /// (AWS_PROFILE instead comes after keys in the environment).
    #[arg(long, global = true, value_name = "PROFILE")]
    aws_profile: Option<String>,
    /// Directory of deployment state [default: `state_dir` in kfaws.toml, else .kfaws beside it].
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// More logs: -v for debug, -vv for trace (RUST_LOG overrides). The AWS
    /// SDK's own TRACE events (raw bodies: tokens, credentials) are left out
    /// unless RUST_LOG names their targets (aws_smithy_runtime, ...).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// Flags of the commands that build a plan.
#[derive(Debug, Args, Clone)]
pub struct PlanFlags {
    /// Deployment profile [default: the one recorded in state, else kfaws.toml, else vanilla].
    #[arg(long, value_enum)]
    profile: Option<ProfileName>,
    /// Limit to these addresses and their dependencies (apply) or dependants (destroy); repeatable.
    #[arg(long, value_name = "ADDR")]
    target: Vec<Address>,
    /// At most this many resources change (or are read) at once.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=256))]
    parallelism: u16,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the config and every name it derives, without calling AWS.
    Validate {
        /// Deployment profile to validate.
        #[arg(long, value_enum)]
        profile: Option<ProfileName>,
    },
    /// Show what apply (or destroy) would do.
    ///
    /// Refreshes every recorded resource live, diffs desired vs recorded vs
    /// live and prints each change with its reason: + create, ~ update in
    /// place, -/+ replace, - destroy, <= read. Changes made outside kfaws are
    /// reported as drift.
    Plan {
        #[command(flatten)]
        plan: PlanFlags,
        /// Plan a destroy instead.
        #[arg(long, conflicts_with = "replace")]
        destroy: bool,
        /// Replace this resource although nothing about it changed (see apply); repeatable.
        #[arg(long, value_name = "ADDR")]
        replace: Vec<Address>,
        /// Delete every object version of the artifact bucket before its stack is deleted
        /// or replaced (see destroy); saved with --out.
        #[arg(long)]
        force_destroy_buckets: bool,
        /// Save the plan to FILE for `kfaws apply FILE` (also `-out FILE`).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
        /// Exit 0 for no changes, 2 for changes, 1 for errors.
        #[arg(long)]
        detailed_exitcode: bool,
    },
    /// Create or update the deployment's resources.
    ///
    /// Walks the graph in dependency order with bounded parallelism. A
    /// failure stops its dependants, lets independent resources finish,
    /// marks the failed resource tainted and exits 1; run apply again to
    /// resume. Ctrl-C stops new work and exits 130 (SIGTERM 143) once in-flight calls are
    /// recorded.
    Apply {
        /// A plan saved by `kfaws plan --out FILE`: apply exactly it, without asking.
        #[arg(value_name = "PLAN_FILE")]
        plan_file: Option<PathBuf>,
        #[command(flatten)]
        plan: PlanFlags,
        /// Replace this resource although nothing about it changed: delete it, then
        /// create it (Terraform's -replace); repeatable. Refused for a resource that
        /// others in the state depend on, except a node group: destroy it with
        /// --target, then apply.
        #[arg(long, value_name = "ADDR")]
        replace: Vec<Address>,
        /// Delete every object version and delete marker of the artifact bucket before
        /// its stack is deleted or replaced (e.g. --replace stack.storage; they cannot
        /// be recovered); without it a non-empty bucket stops the apply before anything
        /// is deleted.
        #[arg(long)]
        force_destroy_buckets: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        auto_approve: bool,
    },
    /// Delete every resource of the deployment, dependants first.
    ///
    /// Before anything is deleted, the plan checks what would stop the
    /// destroy half way: an artifact bucket that holds objects (any object
    /// version or delete marker), and resources in the VPC that kfaws did
    /// not create and may not remove (reported by id). Network interfaces
    /// and load balancer security groups that Kubernetes left for the
    /// cluster are removed before the network.
    Destroy {
        #[command(flatten)]
        plan: PlanFlags,
        /// Delete every object version and delete marker of the artifact bucket before
        /// deleting it (they cannot be recovered); without it a non-empty bucket stops
        /// the destroy before anything is deleted.
        #[arg(long)]
        force_destroy_buckets: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        auto_approve: bool,
    },
    /// Print the deployment's outputs (VPC, subnets, EFS, bucket, roles, ...).
    Output {
        /// One output by name (e.g. vpc_id), or any resource output as <address>.<output>
        /// (e.g. stack.network.VpcId).
        #[arg(id = "output", value_name = "NAME")]
        output: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Inspect and repair the state.
    #[command(subcommand)]
    State(StateCommand),
    /// Clear a resource's taint (Terraform's untaint).
    ///
    /// For a tainted resource you have checked: the next plan compares it with the config
    /// and the live resource, as any other, instead of replacing it.
    Untaint {
        /// The address.
        address: Address,
    },
    /// Not a kfaws command: `kfaws apply --replace ADDR` replaces a resource (Terraform
    /// 0.15.2 and later recommend -replace over taint), with the replacement in its plan.
    #[command(hide = true)]
    Taint {
        /// The address.
        address: Address,
    },
    /// Write the deployment's EKS cluster into a kubeconfig, authenticating with `kfaws eks get-token`.
    ///
    /// Adds or replaces a cluster and a user named by the cluster ARN and a
    /// context (the ARN, or --alias), and makes the context current, as
    /// `aws eks update-kubeconfig` does; other entries are kept. The file is
    /// written atomically with mode 0600. Needs no AWS CLI.
    Kubeconfig {
        /// The kubeconfig to write [default: the first path in KUBECONFIG, else ~/.kube/config].
        #[arg(long, value_name = "PATH")]
        kubeconfig: Option<PathBuf>,
        /// Name of the context [default: the cluster ARN].
        #[arg(long, value_name = "NAME")]
        alias: Option<String>,
    },
    /// Amazon EKS helpers.
    #[command(subcommand)]
    Eks(EksCommand),
    /// The trainer's container image.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Train the bundled trainer: locally, as a Kubeflow PyTorchJob, or as a SageMaker training job.
    ///
    /// The job name is generated once (or given) and valid for both
    /// Kubernetes and SageMaker; hyperparameters are checked against
    /// SageMaker's limits and the trainer's names and rules for every
    /// runtime, and everything else (data
    /// source, deployment outputs, image, the PyTorchJob CRD) before the job
    /// is created. Ctrl-C stops a SageMaker job (StopTrainingJob) or the
    /// local processes (SIGTERM: the trainer checkpoints).
    Train(Box<train::TrainArgs>),
    /// SageMaker real-time endpoints for trained models.
    #[command(subcommand)]
    Endpoint(EndpointCommand),
    /// Print the resource graph in Graphviz DOT.
    Graph {
        /// Deployment profile.
        #[arg(long, value_enum)]
        profile: Option<ProfileName>,
        /// Colour nodes by planned action (refreshes like `plan`); the graph is then the
        /// plan's, in execution order, with the resources apply deletes.
        #[arg(long)]
        plan: bool,
    },
}

#[derive(Debug, Subcommand)]
enum EksCommand {
    /// Print an EKS authentication token as a Kubernetes ExecCredential (JSON).
    ///
    /// The token is a presigned STS GetCallerIdentity request with the
    /// cluster name signed in (x-k8s-aws-id), as `aws eks get-token` makes it;
    /// kubectl runs this as the exec credential plugin `kfaws kubeconfig`
    /// writes. Credentials come from the standard chain (AWS_PROFILE or
    /// --aws-profile, ...); the region from --region, else AWS_REGION or the
    /// profile; AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL redirect the request.
    GetToken {
        /// The EKS cluster the token is for.
        #[arg(long, value_name = "NAME")]
        cluster_name: String,
    },
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build the trainer image without Docker: one reproducible layer with
    /// the trainer binary and exactly the shared libraries it loads, Docker
    /// v2 schema 2 media types (what SageMaker accepts), written as an OCI
    /// layout directory (DIR/oci) and a `docker load` tarball (DIR/image.tar).
    /// The same binary always gives the same digest.
    Build {
        /// The kfaws-trainer binary [default: kfaws-trainer beside this kfaws].
        #[arg(long, value_name = "PATH")]
        trainer: Option<PathBuf>,
        /// Where to write the image.
        #[arg(long, value_name = "DIR", default_value = "kfaws-trainer-image")]
        output: PathBuf,
        /// Name and tag of the image [default: kfaws-trainer:<this version>].
        #[arg(long, value_name = "NAME:TAG")]
        tag: Option<String>,
    },
    /// Push the built image to Amazon ECR: creates the repository if missing
    /// (AES256 encryption, scan on push, immutable tags), authenticates with
    /// GetAuthorizationToken, uploads the blobs the registry lacks and the
    /// manifest. Prints `<repositoryUri>@sha256:<hex>`.
    Push {
        /// The image directory `kfaws image build` wrote (its OCI layout, DIR/oci).
        #[arg(long, value_name = "DIR", default_value = kfaws::image::push::DEFAULT_IMAGE_DIR)]
        image: PathBuf,
        /// The ECR repository name [default: the name the image was built
        /// as, without its registry host, else kfaws-trainer].
        #[arg(long, value_name = "NAME")]
        repository: Option<String>,
        /// The tag [default: the tag the image was built with, else latest].
        #[arg(long, value_name = "TAG")]
        tag: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum EndpointCommand {
    /// Deploy a completed SageMaker training job's model: CreateModel (the
    /// job's image and model artifact), CreateEndpointConfig, CreateEndpoint,
    /// then wait for InService. Recorded in the state first; `kfaws destroy`
    /// deletes it.
    Deploy {
        /// The training job whose model to serve.
        #[arg(long, value_name = "NAME")]
        job: String,
        /// The endpoint name [default: the job name].
        // Own ids: `name` is the global --name (the deployment).
        #[arg(long = "endpoint-name", id = "endpoint_name", value_name = "NAME")]
        name: Option<String>,
        /// Instance type.
        #[arg(long, default_value = "ml.m5.large")]
        instance_type: String,
        /// Instances.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
        instance_count: i32,
    },
    /// Classify an image (PNG or JPEG of up to 4096 × 4096 pixels, resized to the model's input) or
    /// send JSON instances; prints the class and scores.
    Invoke {
        /// The endpoint.
        #[arg(id = "endpoint", value_name = "ENDPOINT")]
        name: String,
        /// An image file, sent as application/x-image.
        #[arg(long, value_name = "FILE", conflicts_with = "json")]
        image: Option<PathBuf>,
        /// A JSON file ({"instances": [[...pixels...]]}), sent as application/json.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Delete an endpoint kfaws deployed, with its endpoint config and model.
    Delete {
        /// The endpoint.
        #[arg(id = "endpoint", value_name = "ENDPOINT")]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum StateCommand {
    /// List recorded resources with their status.
    List,
    /// Show one recorded resource as JSON.
    Show {
        /// The address.
        address: Address,
    },
    /// Forget a resource: kfaws stops managing it; it is NOT deleted.
    Rm {
        /// The address.
        address: Address,
    },
    /// Remove a stale lock left by a command that died.
    Unlock {
        /// The lock ID printed by the refused command.
        id: String,
        /// Remove it even though its pid runs on this host (a pid reused by
        /// another program).
        #[arg(long)]
        force: bool,
    },
}

/// Parses `args` and runs the command; returns the process exit code.
/// The flags of a command and its subcommands, as [`terraform_spelling`] reads them.
#[derive(Debug, Default)]
pub struct Flags {
    /// Every long flag (`destroy`, `force-destroy-buckets`, `out`, …).
    pub longs: BTreeSet<String>,
    /// Every short flag (`v`, `h`).
    pub shorts: BTreeSet<char>,
    /// The long flags that take a value (`out`, `target`, `job-name`).
    pub valued: BTreeSet<String>,
}

/// The flags of `command` and its subcommands.
fn flags_of(command: &clap::Command) -> Flags {
    let mut flags = Flags::default();
    let mut stack = vec![command.clone()];
    while let Some(c) = stack.pop() {
        for a in c.get_arguments() {
            let longs: Vec<String> = a
                .get_long_and_visible_aliases()
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect();
            if a.get_action().takes_values() {
                flags.valued.extend(longs.iter().cloned());
            }
            flags.longs.extend(longs);
            flags
                .shorts
                .extend(a.get_short_and_visible_aliases().into_iter().flatten());
        }
        flags.longs.extend(["help", "version"].map(str::to_string));
        flags.shorts.extend(['h', 'V']);
        stack.extend(c.get_subcommands().cloned());
    }
    flags
}

/// `args` with Terraform's one-dash spelling of kfaws' long flags (`-destroy`, `-out FILE`,
/// `-target=ADDR`, `-force-destroy-buckets`; Terraform CLI docs, "Command: plan") made the
/// two-dash one clap reads (it would take `-destroy` for the short flags `-d -e -s …`), and
/// a word after a flag that takes a value, starting with `-` but no flag of kfaws
/// (`-out -x.plan`, `--job-name -x`), made that flag's value (`--out=-x.plan`), as Go's
/// `flag` package behind Terraform's CLI takes it (clap would read it as an unknown flag).
/// `flags` are the CLI's ([`flags_of`]); arguments after `--`, numbers (`-1`) and clusters
/// of short flags (`-vv`) are left as they are. Pure.
///
/// # Errors
/// For a one-dash word that is neither (`-no-color`, `-lock=false`: a Terraform flag kfaws
/// does not have), naming it; and for `apply -destroy`, which kfaws spells `kfaws destroy`.
pub fn terraform_spelling(
    args: impl IntoIterator<Item = OsString>,
    flags: &Flags,
) -> Result<Vec<OsString>, String> {
    let shorts_only = |name: &str| name.chars().all(|c| flags.shorts.contains(&c));
    let mut rest = false;
    // The last word was a long flag that takes a value, without `=VALUE`.
    let mut wants_value = false;
    let mut out: Vec<OsString> = Vec::new();
    for a in args {
        let after_flag = std::mem::take(&mut wants_value);
        let Some(s) = a.to_str().filter(|_| !rest) else {
            out.push(a);
            continue;
        };
        rest = s == "--";
        let name = s
            .strip_prefix('-')
            .filter(|n| n.starts_with(|c: char| c.is_ascii_alphabetic()))
            .map(|n| n.split_once('=').map_or(n, |(name, _)| name));
        let valued = s
            .strip_prefix("--")
            .or(name)
            .is_some_and(|n| !s.contains('=') && flags.valued.contains(n));
        match name {
            Some(name) if name.len() > 1 && flags.longs.contains(name) => {
                out.push(format!("-{s}").into())
            }
            Some(name) if after_flag && !shorts_only(name) => {
                let flag = out.pop().expect("the flag before it");
                let mut joined = flag;
                joined.push("=");
                joined.push(s);
                out.push(joined);
                continue;
            }
            Some(name) if name.len() > 1 && !shorts_only(name) => {
                return Err(format!(
                    "unknown option '{s}': kfaws takes Terraform's one-dash spelling only for \
                     flags it has (`-destroy`, `-target=ADDR`, `-out FILE`, …); see `kfaws \
                     <command> --help`"
                ))
            }
            _ => out.push(a),
        }
        wants_value = valued;
    }
    let words: Vec<&str> = out.iter().filter_map(|a| a.to_str()).collect();
    let command = words.iter().skip(1).find(|w| !w.starts_with('-'));
    if command == Some(&"apply") && words.contains(&"--destroy") {
        return Err(
            "kfaws apply has no --destroy: run `kfaws destroy` (Terraform's `apply -destroy`), or \
             `kfaws plan --destroy -out FILE` then `kfaws apply FILE`"
                .into(),
        );
    }
    Ok(out)
}

pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    // Usage errors exit 1, not clap's 2: `plan --detailed-exitcode` uses 2
    // for "changes present", and a script must not mistake one for the other.
    let args = match terraform_spelling(args, &flags_of(&Cli::command())) {
        Ok(args) => args,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let parsed = Cli::command()
        .try_get_matches_from(&args)
        .and_then(|matches| {
            let mut cli = Cli::from_arg_matches(&matches)?;
            if let (Command::Train(train), Some(sub)) =
                (&mut cli.command, matches.subcommand_matches("train"))
            {
                train.note_given(sub);
            }
            Ok(cli)
        });
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            if let Some(variable) = bad_value_from_environment(&e, &args) {
                errln!("note: the value came from the environment variable {variable}");
            }
            return ExitCode::from(if e.use_stderr() { 1 } else { 0 });
        }
    };
    init_logging(cli.global.verbose);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("the tokio runtime starts");
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => ExitCode::from(code),
        // The reader of our output went away (`| head`): stop quietly, as
        // SIGPIPE's default action would, with the shell's 128 + 13.
        Err(e)
            if e.downcast_ref::<Output>()
                .is_some_and(|o| o.0.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::from(141)
        }
        Err(e) if e.is::<Interrupted>() => {
            errln!("Interrupted before any change was made; the state is unchanged.");
            ExitCode::from(exit_status())
        }
        Err(e) => {
            errln!("Error: {}", render_error(&e));
            ExitCode::from(1)
        }
    }
}

/// The environment variable that gave the value a usage error refuses, when
/// the flag is not on the command line: clap's message names only the flag
/// (`invalid value 'k8s' for '--runtime <RUNTIME>'`), which a user who never
/// typed it cannot find.
fn bad_value_from_environment(error: &clap::Error, args: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    // "--runtime <RUNTIME>" → "--runtime"
    let flag = arg.split_whitespace().next()?;
    let typed = args
        .iter()
        .filter_map(|a| a.to_str())
        .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|v| v.starts_with('=')));
    if typed || !flag.starts_with("--") {
        return None;
    }
    let variable = environment_of(&Cli::command(), &flag[2..])?;
    std::env::var_os(&variable).is_some().then_some(variable)
}

/// The `env` of the flag `--long` in `command` or any of its subcommands.
fn environment_of(command: &clap::Command, long: &str) -> Option<String> {
    command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .or_else(|| {
            command
                .get_subcommands()
                .find_map(|sub| environment_of(sub, long))
        })
}

/// The error and its causes, leaving out a cause whose text the message
/// before it already contains (thiserror messages often embed their source).
fn render_error(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

/// Writing to stdout failed, usually because the reader went away.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output: {0}")]
pub struct Output(#[from] std::io::Error);

/// The command was interrupted (Ctrl-C, SIGTERM, SIGHUP) before it changed anything.
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// What the first interrupt of a command that changes nothing says.
const STOPPING_READS: &str = "stopping; nothing was changed. Interrupt again to exit at once.";

/// Runs `work` unless an interrupt comes first; dropping `work` is safe
/// because it writes nothing (planning, reading, asking).
pub async fn interruptible<T>(
    cancel: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Result<T, Interrupted> {
    tokio::select! {
        out = work => Ok(out),
        () = cancel.cancelled() => Err(Interrupted),
    }
}

/// The AWS SDK's targets whose TRACE events hold raw request and response
/// bodies (ECR authorization tokens, STS credentials): dropped under `-vv`
/// and under a `RUST_LOG` that does not name them itself.
const SDK_WIRE_TARGETS: [&str; 3] = [
    "aws_smithy_runtime",
    "aws_smithy_runtime_api",
    "aws_smithy_http_client",
];

/// Whether `target` is one of [`SDK_WIRE_TARGETS`] or a module under one.
fn is_sdk_wire_target(target: &str) -> bool {
    SDK_WIRE_TARGETS.iter().any(|t| {
        target
            .strip_prefix(t)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

fn init_logging(verbose: u8) {
    use tracing_subscriber::filter::{filter_fn, FilterExt as _};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;

    let default = match verbose {
        // kube's client logs every failed response at ERROR; kfaws retries
        // or reports them with their context itself (-v shows them).
        // The SDK's credential chain logs each failing provider at WARN,
        // request dumps included; the failure reaches kfaws's own error
        // (aws::identity) with the reason.
        0 => "warn,kube_client=off,aws_config::meta::credentials::chain=error",
        1 => "kfaws=debug,info",
        _ => "trace",
    };
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty());
    // Only a RUST_LOG that names an SDK target asks for its bodies.
    let wire_asked = from_env
        .as_deref()
        .is_some_and(|v| SDK_WIRE_TARGETS.iter().any(|t| v.contains(t)));
    let filter = from_env
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(v).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    let no_wire = filter_fn(move |meta| {
        wire_asked || *meta.level() != tracing::Level::TRACE || !is_sdk_wire_target(meta.target())
    });
    // At the default level the log holds only warnings and errors, read as
    // messages: no timestamp (the terminal shows when) and no module path.
    // -v and RUST_LOG are for debugging: both are kept.
    let plain = verbose == 0 && std::env::var_os("RUST_LOG").is_none_or(|v| v.is_empty());
    let layer = tracing_subscriber::fmt::layer()
        // Spinners on the terminal are hidden while a line is written.
        .with_writer(|| kfaws::engine::progress::LogWriter)
        // A failed write would be reported with `eprintln!`, which
        // panics (exit 101) when stderr is a closed pipe.
        .log_internal_errors(false)
        // Colour only for a terminal: a log file or CI output stays plain.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(!plain);
    let layer = if plain {
        layer
            .without_time()
            .with_filter(filter.and(no_wire))
            .boxed()
    } else {
        layer.with_filter(filter.and(no_wire)).boxed()
    };
    tracing_subscriber::registry().with(layer).init();
}

async fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    // Before anything takes the state lock: no signal may leave it behind.
    let cancel = cancel_on_signals(match &cli.command {
        Command::Train(args) => match args.runtime {
            Some(kfaws::train::Runtime::Local) => {
                "stopping the training job: no rank starts after this, and every rank running \
                 checkpoints and exits. Interrupt again to exit at once."
            }
            // The interrupt may come before the job exists (checks, upload).
            Some(kfaws::train::Runtime::Sagemaker) => {
                "stopping: no training job is created after this, and one already \
                 created is stopped (StopTrainingJob; the trainer checkpoints). Interrupt again \
                 to exit at once."
            }
            Some(kfaws::train::Runtime::Kubernetes) => {
                "stopping: no PyTorchJob is created after this, and one already created \
                 keeps running (kfaws stops waiting). Interrupt again to exit at once."
            }
            // The runtime comes from kfaws.toml, read later.
            None => {
                "stopping the training job (local: every rank checkpoints \
                 and exits; sagemaker: StopTrainingJob once created, none created after this; \
                 kubernetes: none created after this, one created keeps running while kfaws stops \
                 waiting). Interrupt again \
                 to exit at once."
            }
        },
        Command::Endpoint(EndpointCommand::Deploy { .. }) => {
            "stopping: nothing is created after the call in flight, if any, and kfaws stops \
             waiting for the endpoint (what was created stays recorded, for `kfaws endpoint \
             delete` or destroy). Interrupt again to exit at once."
        }
        Command::Image(ImageCommand::Push { .. }) => {
            "stopping: the push stops after the call in flight (no further \
             blob or tag is written). Interrupt again to exit at once."
        }
        // These read, plan or print; they change no infrastructure.
        Command::Validate { .. }
        | Command::Plan { .. }
        | Command::Output { .. }
        | Command::Graph { .. } => STOPPING_READS,
        _ => STOPPING_CHANGES,
    });
    let cancel = &cancel;
    let g = cli.global;
    match cli.command {
        Command::Validate { profile } => context::validate(&g, profile),
        Command::Plan {
            plan,
            destroy,
            replace,
            force_destroy_buckets,
            out,
            json,
            detailed_exitcode,
        } => {
            run::plan(
                &g,
                &plan,
                run::Goal {
                    destroy,
                    delete_options: DeleteOptions {
                        force_destroy_buckets,
                    },
                    replace: &replace,
                },
                out.as_deref(),
                json,
                detailed_exitcode,
                cancel,
            )
            .await
        }
        Command::Apply {
            plan_file: Some(file),
            plan,
            replace,
            force_destroy_buckets,
            ..
        } => {
            if !plan.target.is_empty() || !replace.is_empty() || plan.profile.is_some() {
                anyhow::bail!(
                    "--target, --replace and --profile cannot change a saved plan; run `kfaws \
                     plan` again with them"
                );
            }
            run::apply_saved(&g, &file, plan.parallelism, force_destroy_buckets, cancel).await
        }
        Command::Apply {
            plan_file: None,
            plan,
            replace,
            force_destroy_buckets,
            auto_approve,
        } => {
            let goal = run::Goal {
                destroy: false,
                delete_options: DeleteOptions {
                    force_destroy_buckets,
                },
                replace: &replace,
            };
            run::apply(&g, &plan, goal, auto_approve, cancel).await
        }
        Command::Destroy {
            plan,
            auto_approve,
            force_destroy_buckets,
        } => {
            let goal = run::Goal {
                destroy: true,
                delete_options: DeleteOptions {
                    force_destroy_buckets,
                },
                replace: &[],
            };
            run::apply(&g, &plan, goal, auto_approve, cancel).await
        }
        Command::Output { output, json } => state::output(&g, output.as_deref(), json),
        Command::State(StateCommand::List) => state::list(&g),
        Command::State(StateCommand::Show { address }) => state::show(&g, &address),
        Command::State(StateCommand::Rm { address }) => state::rm(&g, &address),
        Command::State(StateCommand::Unlock { id, force }) => state::unlock(&g, &id, force),
        Command::Untaint { address } => state::untaint(&g, &address),
        Command::Taint { address } => anyhow::bail!(
            "kfaws has no taint: run `kfaws apply --replace {address}` (Terraform 0.15.2 and \
             later recommend -replace over taint); its plan shows the replacement before anything \
             is deleted"
        ),
        Command::Kubeconfig { kubeconfig, alias } => {
            eks::kubeconfig(&g, kubeconfig.as_deref(), alias.as_deref()).await
        }
        Command::Eks(EksCommand::GetToken { cluster_name }) => {
            eks::get_token(&g, &cluster_name).await
        }
        Command::Image(ImageCommand::Build {
            trainer,
            output,
            tag,
        }) => image::build(trainer.as_deref(), &output, tag.as_deref()),
        Command::Image(ImageCommand::Push {
            image,
            repository,
            tag,
        }) => image::push(&g, &image, repository.as_deref(), tag.as_deref(), cancel).await,
        Command::Graph { profile, plan } => graph::graph(&g, profile, plan, cancel).await,
        Command::Train(args) => train::train(&g, &args, cancel).await,
        Command::Endpoint(EndpointCommand::Deploy {
            job,
            name,
            instance_type,
            instance_count,
        }) => {
            endpoint::deploy(
                &g,
                &job,
                name.as_deref(),
                &instance_type,
                instance_count,
                cancel,
            )
            .await
        }
        Command::Endpoint(EndpointCommand::Invoke { name, image, json }) => {
            endpoint::invoke(&g, &name, image.as_deref(), json.as_deref()).await
        }
        Command::Endpoint(EndpointCommand::Delete { name }) => endpoint::delete(&g, &name).await,
    }
}

#[cfg(test)]
mod tests {
    use super::{is_sdk_wire_target, terraform_spelling};

    #[test]
    fn terraforms_one_dash_flags_are_read_as_two_dash_ones() {
        use clap::CommandFactory as _;
        let flags = super::flags_of(&super::Cli::command());
        let spelled = |args: &[&str]| -> Result<Vec<String>, String> {
            Ok(terraform_spelling(args.iter().map(Into::into), &flags)?
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect())
        };
        assert_eq!(
            spelled(&[
                "kfaws",
                "plan",
                "-destroy",
                "-out",
                "tf.plan",
                "-target=stack.efs",
                "-force-destroy-buckets",
                "-vv",
                "--json"
            ])
            .unwrap(),
            [
                "kfaws",
                "plan",
                "--destroy",
                "--out",
                "tf.plan",
                "--target=stack.efs",
                "--force-destroy-buckets",
                "-vv",
                "--json"
            ]
        );
        // Numbers, short flags and what follows `--` are left alone.
        assert_eq!(
            spelled(&["kfaws", "train", "--lr", "-1", "-h", "--", "-destroy"]).unwrap(),
            ["kfaws", "train", "--lr", "-1", "-h", "--", "-destroy"]
        );
        // A value starting with a dash is the value of the flag before it, in either
        // spelling; a flag of kfaws there is not.
        assert_eq!(
            spelled(&["kfaws", "plan", "-out", "-x y", "--target", "-t"]).unwrap(),
            ["kfaws", "plan", "--out=-x y", "--target=-t"]
        );
        assert_eq!(
            spelled(&[
                "kfaws",
                "train",
                "--job-name",
                "-lead",
                "-v",
                "--epochs",
                "-1"
            ])
            .unwrap(),
            ["kfaws", "train", "--job-name=-lead", "-v", "--epochs", "-1"]
        );
        assert_eq!(
            spelled(&["kfaws", "plan", "-out=a", "-destroy", "--out", "-v"]).unwrap(),
            ["kfaws", "plan", "--out=a", "--destroy", "--out", "-v"]
        );
        // A Terraform flag kfaws does not have is named, not read as short flags.
        for unknown in ["-lock=false", "-no-color", "-refresh=false", "-destory"] {
            let e = spelled(&["kfaws", "plan", unknown]).unwrap_err();
            assert!(e.starts_with(&format!("unknown option '{unknown}'")), "{e}");
        }
        let e = spelled(&["kfaws", "apply", "-destroy"]).unwrap_err();
        assert!(e.contains("run `kfaws destroy`"), "{e}");
    }

    #[test]
    fn sdk_wire_targets_match_their_modules_only() {
        assert!(is_sdk_wire_target("aws_smithy_runtime"));
        assert!(is_sdk_wire_target(
            "aws_smithy_runtime::client::orchestrator"
        ));
        assert!(is_sdk_wire_target("aws_smithy_http_client::hyper_014"));
        assert!(!is_sdk_wire_target("aws_smithy_runtime_x"));
        assert!(!is_sdk_wire_target("aws_config::imds"));
        assert!(!is_sdk_wire_target("kfaws::aws::stack"));
    }
}
