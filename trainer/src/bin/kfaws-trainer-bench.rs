//! `kfaws-trainer-bench`: the trainer's figures for `make bench`, one `bench=…` line each:
//! training throughput of one process (the same `Learner::step` as `train`, all-reduce of a
//! world of one), in-process inference latency of one PNG image (decode, resize, forward), and
//! the latency of one all-reduce, star against ring, among 2–4 ranks (threads of this process
//! on loopback) for the model's sizes and 10× and 100× the CIFAR-10 model. Threads follow `RAYON_NUM_THREADS` (default: all cores). `trainer/bench/run.sh` puts these
//! side by side with PyTorch and multi-rank runs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use kfaws_trainer::data::{self, DatasetKind};
use kfaws_trainer::dist::{Agreement, AllReduce, Communicator, Rendezvous};
use kfaws_trainer::model::Net;
use kfaws_trainer::optim::Sgd;
use kfaws_trainer::params::flatten_params;
use kfaws_trainer::replicas::Parallelism;
use kfaws_trainer::serve::Classifier;
use kfaws_trainer::train::{device_for, write_model, Learner};

/// Benchmarks of the trainer.
#[derive(Debug, Parser)]
struct Args {
    /// Fashion-MNIST directory.
    #[arg(long, default_value = "/usr/share/datasets/fashion-mnist")]
    data_dir: PathBuf,
    /// Training batch size.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Timed training steps.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// Timed inference requests.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Timed all-reduces per configuration at the model's size (fewer for the larger vectors).
    #[arg(long, default_value_t = 200)]
    rounds: usize,
    /// Threads in all (default: `RAYON_NUM_THREADS`, else all CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// Compute device, as the `backend` hyperparameter: `gloo` (burn's flex CPU backend) or
    /// `nccl` (CUDA device 0; needs a `--features cuda` build).
    #[arg(long, default_value = "gloo")]
    backend: String,
    /// Model replicas the batch is split across (default as `kfaws-trainer train`).
    #[arg(long)]
    replicas: Option<usize>,
    /// Only the all-reduce figures (no dataset needed).
    #[arg(long, conflicts_with = "no_all_reduce")]
    all_reduce_only: bool,
    /// No all-reduce figures.
    #[arg(long)]
    no_all_reduce: bool,
}

/// Parameters of the reference network for Fashion-MNIST (1×28×28) and CIFAR-10 (3×32×32).
const MODEL_SIZES: [usize; 2] = [44_426, 62_006];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if !args.all_reduce_only {
        train_and_serve(&args)?;
    }
    if args.no_all_reduce {
        return Ok(());
    }
    let sizes = MODEL_SIZES
        .into_iter()
        .chain([10, 100].map(|x| x * MODEL_SIZES[1]));
    for floats in sizes {
        // The same volume of data per configuration, at least 20 rounds.
        let rounds = (args.rounds * MODEL_SIZES[1] / floats).max(20);
        for world in [2, 3, 4] {
            for algorithm in [AllReduce::Star, AllReduce::Ring] {
                let (p50, p99) = all_reduce_ms(world, floats, rounds, algorithm)?;
                println!(
                    "bench=all_reduce algorithm={} world_size={world} floats={floats} \
                     rounds={rounds} p50_ms={p50:.3} p99_ms={p99:.3}",
                    algorithm.name()
                );
            }
        }
    }
    Ok(())
}

/// Training throughput and inference latency.
fn train_and_serve(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let dataset = data::load_dir(&args.data_dir, Some(DatasetKind::FashionMnist))?;
    let device = device_for(&args.backend)?.autodiff();
    device.seed(1);
    let model = Net::new(dataset.kind.shape(), &device);
    let params = flatten_params(&model);
    let parallelism = Parallelism::from_settings(
        args.threads,
        args.replicas,
        args.batch_size,
        args.backend == "gloo",
        &|name| std::env::var(name).ok(),
    )?;
    parallelism.build_global_pool()?;
    let mut learner = Learner::new(
        model,
        params,
        Sgd::new(0.02, 0.9),
        &device,
        parallelism.replicas,
    );
    let mut comm = Communicator::single();
    let indices: Vec<usize> = (0..dataset.train.len()).collect();
    let mut batches = indices.chunks(args.batch_size).cycle();
    let mut started = Instant::now();
    for step in 0..args.warmup + args.steps {
        if step == args.warmup {
            started = Instant::now();
        }
        let batch = data::make_batch(
            &dataset.train,
            dataset.kind,
            batches.next().expect("cycle"),
            None,
        );
        learner.step(batch, &mut comm, false)?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "bench=train_throughput backend={} batch_size={} steps={} threads={} replicas={} images_per_sec={:.0}",
        args.backend,
        args.batch_size,
        args.steps,
        parallelism.threads,
        parallelism.replicas,
        (args.steps * args.batch_size) as f64 / secs
    );

    let dir = tempfile_dir()?;
    write_model(&learner.model, &dataset, None, &dir)?;
    let classifier = Classifier::load(&dir)?;
    let image =
        image::GrayImage::from_raw(28, 28, dataset.test.image(0).to_vec()).ok_or("28×28 image")?;
    let mut png = std::io::Cursor::new(Vec::new());
    image.write_to(&mut png, image::ImageFormat::Png)?;
    let mut latencies: Vec<f64> = (0..args.requests)
        .map(|_| {
            let t = Instant::now();
            classifier
                .invoke("application/x-image", png.get_ref())
                .map(|_| t.elapsed().as_secs_f64() * 1e3)
        })
        .collect::<Result<_, _>>()
        .map_err(|r| r.message)?;
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!(
        "bench=inference_latency requests={} p50_ms={:.3} p99_ms={:.3}",
        args.requests,
        pct(0.50),
        pct(0.99)
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Median and 99th percentile (ms) of an all-reduce of `floats` values among `world`
/// in-process ranks on loopback, as seen by rank 0, after 5 untimed rounds: the figures
/// behind the choice of algorithm in `dist`.
fn all_reduce_ms(
    world: usize,
    floats: usize,
    rounds: usize,
    algorithm: AllReduce,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let agreement = Agreement {
        param_count: floats as u64,
        config: "{}".to_string(),
    };
    let ranks: Vec<_> = (0..world)
        .map(|rank| {
            let rv = Rendezvous {
                master_addr: "127.0.0.1".into(),
                master_port: port,
                bind_addr: "127.0.0.1".into(),
                rank,
                world_size: world,
                connect_timeout: Duration::from_secs(30),
                collective_timeout: Duration::from_secs(30),
                all_reduce: algorithm,
            };
            let agreement = agreement.clone();
            std::thread::spawn(move || -> Result<Vec<f64>, String> {
                let mut comm = Communicator::connect(&rv, &agreement).map_err(|e| e.to_string())?;
                let mut values = vec![rank as f32; floats];
                let mut times = (0..5 + rounds)
                    .map(|_| {
                        let t = Instant::now();
                        comm.all_reduce_mean(&mut values)
                            .map_err(|e| e.to_string())?;
                        Ok(t.elapsed().as_secs_f64() * 1e3)
                    })
                    .collect::<Result<Vec<f64>, String>>()?;
                Ok(times.split_off(5))
            })
        })
        .collect();
    let mut times = Vec::new();
    for (rank, handle) in ranks.into_iter().enumerate() {
        let measured = handle.join().map_err(|_| "rank panicked")??;
        if rank == 0 {
            times = measured;
        }
    }
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
    Ok((pct(0.50), pct(0.99)))
}

/// A private scratch directory for the model the latency benchmark serves.
fn tempfile_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("kfaws-trainer-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
