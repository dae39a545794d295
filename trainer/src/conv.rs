//! Stride-1, unpadded 2-D convolution (the reference network's two 5×5 layers) with its
//! gradients, for burn's Flex CPU backend.
//!
//! Why: the convolutions were ≈ 2/3 of a training step (measured with burn-flex 0.22.1, one
//! thread, 32 Fashion-MNIST images: forward 0.47–0.82 ms per layer, weight gradient 0.47–0.68,
//! input gradient 0.41–0.68). burn-flex lowers them to im2col + GEMM, which for 1–16 channels
//! spends most of its time building the column matrix.
//!
//! How: a plane of `H × W` pixels stored row after row is a vector, and a valid correlation
//! with a `K × K` kernel reads, for the output at `(r, c)`, the pixels at
//! `p + kh·W + kw` with `p = r·W + c`. Computing the output at every `p` in
//! `0 .. (OH − 1)·W + OW` — the "wide" output, whose `K − 1` extra columns per row are discarded
//! — makes every kernel tap one contiguous, shifted slice of the input, so the inner loop is a
//! multiply-add of whole vectors with no row tails (which cost a direct kernel on 28- and
//! 10-pixel rows of CIFAR-10 more than it saved). The same holds for both gradients:
//! - weight: `∂W[o, i, kh, kw] = Σₙ Σₚ g[n, o, p] · x[n, i, p + kh·W + kw]` with the output
//!   gradient `g` laid out wide and zero in the extra columns;
//! - input: `∂x[n, i, q] = Σₒ Σ W[o, i, kh, kw] · g[n, o, q − kh·W − kw]`, a correlation of the
//!   zero-bordered wide gradient with the kernel flipped (a tap that wraps into the previous row
//!   lands on a zero column because the extra columns, `K − 1` per row, are at least as many as
//!   a tap can shift).
//!
//! Registers hold a block of 4 output channels × 16 positions (8 AVX vectors) in the forward
//! and input-gradient kernels, and 2 output channels × the K taps of a kernel row (10 vectors for
//! K = 5) in the weight gradient's, which keeps 8-lane partial sums per weight over 8 images
//! before adding the lanes up. The kernels are plain Rust, compiled once for AVX2 + FMA and once
//! portably, chosen at run time by `pulp::Arch` (LLVM's auto-vectoriser emits the vector
//! instructions). Every sum runs in a fixed order with `f32::mul_add`, so results depend neither
//! on the thread count nor on the CPU (without FMA, `mul_add` is a slow library call: x86-64
//! CPUs have had FMA since 2013, aarch64 always). Compared with burn's `conv2d` they differ by
//! rounding only (tests: 1e-5 of the largest magnitude per layer, 1e-4 for the whole network's
//! loss gradients).
//!
//! Like [`crate::pool`] this is a burn backend extension with a handwritten backward pass;
//! [`runs_valid_conv`] says when the model uses it (f32 on Flex, stride 1, no padding, dilation 1,
//! one group, a bias); burn's `Conv2d::forward` runs everywhere else (the `cuda` feature).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{backend_extension, Autodiff, Backend, Dispatch, Flex, TensorMetadata};
use burn::nn::conv::Conv2d;
use burn::nn::PaddingConfig2d;
use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use rayon::prelude::*;
use std::ops::Range;

/// Batches with at least this many multiply-adds per call are spread over rayon's pool (image by
/// image); smaller ones run on the calling thread.
const PARALLEL_MIN_MACS: usize = 1 << 20;

/// Images per partial sum of the weight gradient. Fixed, so that the summation order (and the
/// result, bit for bit) does not depend on how many threads share the work.
const IMAGES_PER_PARTIAL: usize = 8;

/// Output channels per register block of the forward and input-gradient kernels.
const CHANNEL_BLOCK: usize = 4;

/// Positions per register block of the forward and input-gradient kernels (two 8-lane vectors).
const POSITIONS: usize = LANES * VECTORS;

/// 8-lane vectors per register block of the forward and input-gradient kernels.
const VECTORS: usize = 2;

/// Positions per step of the weight-gradient kernel (one 8-lane vector).
const LANES: usize = 8;

/// The convolution, routed by burn's `Dispatch` to the backend of its inputs.
#[backend_extension(Flex, Autodiff)]
pub trait ValidConv2d: Backend {
    /// `conv2d(x, weight, bias)` with stride 1, no padding, dilation 1 and one group.
    ///
    /// Shapes: `x` `[N, C, H, W]`, `weight` `[O, C, K, K]`, `bias` `[O]` →
    /// `[N, O, H − K + 1, W − K + 1]` (`K ≤ H`, `K ≤ W`).
    fn conv2d_valid(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self>;
}

/// The gradient kernels a backend supplies so that `Autodiff<B>` can train through
/// [`ValidConv2d`].
pub trait ValidConv2dKernels: ValidConv2d {
    /// Gradient with respect to `x` (shape `x_shape`, `[N, C, H, W]`) given the output gradient
    /// `grad` `[N, O, H − K + 1, W − K + 1]` and `weight` `[O, C, K, K]`.
    fn conv2d_valid_x_backward(
        weight: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        x_shape: Shape,
    ) -> FloatTensor<Self>;

    /// Gradient with respect to the weight (shape `weight_shape`, `[O, C, K, K]`) given `x`
    /// `[N, C, H, W]` and the output gradient `grad`.
    fn conv2d_valid_weight_backward(
        x: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        weight_shape: Shape,
    ) -> FloatTensor<Self>;

    /// Gradient with respect to the bias `[O]`: the output gradient summed over images and
    /// positions.
    fn conv2d_valid_bias_backward(grad: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// `conv2d` with stride 1, no padding, dilation 1, one group: `x` `[N, C, H, W]`, `weight`
/// `[O, C, K, K]`, `bias` `[O]` → `[N, O, H − K + 1, W − K + 1]`; differentiable on an autodiff
/// device.
///
/// # Panics
/// Unless the tensors are f32 on burn's Flex backend with the shapes above (see
/// [`runs_valid_conv`]).
pub fn conv2d_valid(x: Tensor<4>, weight: Tensor<4>, bias: Tensor<1>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as ValidConv2d>::conv2d_valid(
        x.into_dispatch(),
        weight.into_dispatch(),
        bias.into_dispatch(),
    ))
}

/// Whether [`conv2d_valid`] computes `conv.forward(x)`: f32 on burn's Flex backend, a square
/// kernel no larger than the input, stride 1, no padding, dilation 1, one group and a bias.
pub fn runs_valid_conv(x: &Tensor<4>, conv: &Conv2d) -> bool {
    let [_, channels, h, w] = x.dims();
    let weight = conv.weight.val();
    let [_, weight_channels, kh, kw] = weight.dims();
    let on_flex = matches!(
        x.device().inner().as_dispatch(),
        burn::backend::DispatchDevice::Flex(_)
    );
    on_flex
        && x.dtype() == DType::F32
        && weight.dtype() == DType::F32
        && conv
            .bias
            .as_ref()
            .is_some_and(|b| b.val().dtype() == DType::F32)
        && conv.stride == [1, 1]
        && conv.dilation == [1, 1]
        && conv.groups == 1
        && matches!(
            conv.padding,
            PaddingConfig2d::Valid | PaddingConfig2d::Explicit(0, 0, 0, 0)
        )
        && weight_channels == channels
        && kh == kw
        && kh >= 1
        && kh <= h
        && kw <= w
}

/// Sizes of one convolution, in elements.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    images: usize,
    channels_in: usize,
    channels_out: usize,
    height: usize,
    width: usize,
    kernel: usize,
}

impl Geometry {
    fn new(x_shape: &Shape, weight_shape: &Shape) -> Self {
        assert_eq!(x_shape.num_dims(), 4, "conv2d_valid takes x [N, C, H, W]");
        assert_eq!(
            weight_shape.num_dims(),
            4,
            "conv2d_valid takes weight [O, C, K, K]"
        );
        let geometry = Self {
            images: x_shape[0],
            channels_in: x_shape[1],
            channels_out: weight_shape[0],
            height: x_shape[2],
            width: x_shape[3],
            kernel: weight_shape[2],
        };
        assert_eq!(
            weight_shape[1], geometry.channels_in,
            "weight input channels"
        );
        assert_eq!(weight_shape[3], geometry.kernel, "square kernel");
        assert!(
            geometry.kernel >= 1 && geometry.kernel <= geometry.height.min(geometry.width),
            "kernel larger than the input"
        );
        geometry
    }

    fn out_height(&self) -> usize {
        self.height - self.kernel + 1
    }

    fn out_width(&self) -> usize {
        self.width - self.kernel + 1
    }

    fn plane(&self) -> usize {
        self.height * self.width
    }

    fn out_plane(&self) -> usize {
        self.out_height() * self.out_width()
    }

    /// Positions of the wide output: `(OH − 1)·W + OW`.
    fn wide_len(&self) -> usize {
        (self.out_height() - 1) * self.width + self.out_width()
    }

    /// Zeros before the wide output gradient in its bordered plane: the largest tap shift,
    /// `(K − 1)·(W + 1)`.
    fn border(&self) -> usize {
        (self.kernel - 1) * (self.width + 1)
    }

    /// Length of a bordered gradient plane: the input plane plus [`Self::border`].
    fn bordered_plane(&self) -> usize {
        self.plane() + self.border()
    }

    fn out_shape(&self) -> Shape {
        Shape::new([
            self.images,
            self.channels_out,
            self.out_height(),
            self.out_width(),
        ])
    }

    /// Image `n`'s `C` input planes within `x` `[N, C, H, W]`.
    fn input_image<'a>(&self, x: &'a [f32], n: usize) -> &'a [f32] {
        let len = self.channels_in * self.plane();
        &x[n * len..][..len]
    }

    /// Image `n`'s `O` output planes within `y` `[N, O, OH, OW]`.
    fn output_image<'a>(&self, y: &'a [f32], n: usize) -> &'a [f32] {
        let len = self.channels_out * self.out_plane();
        &y[n * len..][..len]
    }

    /// `channels` planes of `plane` values each, in this convolution's rows and kernel.
    fn taps<'a>(
        &self,
        input: &'a [f32],
        plane: usize,
        channels: usize,
        nonzero: Range<usize>,
    ) -> Taps<'a> {
        Taps {
            input,
            plane,
            channels,
            row: self.width,
            kernel: self.kernel,
            nonzero,
        }
    }

    /// Multiply-adds of one pass (forward or either gradient).
    fn macs(&self) -> usize {
        self.images
            * self.channels_out
            * self.channels_in
            * self.kernel
            * self.kernel
            * self.out_plane()
    }
}

fn f32_data(tensor: &FlexTensor) -> &[f32] {
    tensor.as_slice().expect("contiguous f32 tensor")
}

fn check_f32(tensors: &[&FlexTensor]) {
    for tensor in tensors {
        assert_eq!(
            tensor.dtype(),
            DType::F32,
            "conv2d_valid is implemented for f32"
        );
    }
}

/// Runs `f(image, out_chunk)` over `out` split into per-image chunks, in parallel when `parallel`.
fn per_image(out: &mut [f32], chunk: usize, parallel: bool, f: impl Fn(usize, &mut [f32]) + Sync) {
    if chunk == 0 {
        return;
    }
    if parallel {
        out.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(n, c)| f(n, c));
    } else {
        out.chunks_mut(chunk).enumerate().for_each(|(n, c)| f(n, c));
    }
}

impl ValidConv2d for Flex {
    fn conv2d_valid(x: FlexTensor, weight: FlexTensor, bias: FlexTensor) -> FlexTensor {
        check_f32(&[&x, &weight, &bias]);
        let g = Geometry::new(&x.shape(), &weight.shape());
        assert_eq!(bias.shape().num_elements(), g.channels_out, "bias [O]");
        let (x, weight, bias) = (
            x.to_contiguous(),
            weight.to_contiguous(),
            bias.to_contiguous(),
        );
        let (x, bias) = (f32_data(&x), f32_data(&bias));
        let packed = pack(
            f32_data(&weight),
            g.channels_out,
            g.channels_in,
            g.kernel,
            false,
        );
        let mut out = vec![0.0f32; g.out_shape().num_elements()];
        let out_image = g.channels_out * g.out_plane();
        per_image(
            &mut out,
            out_image,
            g.macs() >= PARALLEL_MIN_MACS,
            |n, out| {
                let input = g.input_image(x, n);
                let mut wide = vec![0.0f32; g.channels_out * g.out_height() * g.width];
                correlate(
                    g.taps(input, g.plane(), g.channels_in, 0..g.plane()),
                    &packed,
                    bias,
                    &mut wide,
                    g.out_height() * g.width,
                    g.wide_len(),
                );
                // Keep the first OW of every W columns.
                let (oh, ow, w) = (g.out_height(), g.out_width(), g.width);
                for (plane, wide) in out.chunks_mut(oh * ow).zip(wide.chunks(oh * w)) {
                    for (row, wide_row) in plane.chunks_mut(ow).zip(wide.chunks(w)) {
                        row.copy_from_slice(&wide_row[..ow]);
                    }
                }
            },
        );
        FlexTensor::from_data(TensorData::new(out, g.out_shape()))
    }
}

/// The output gradient of image `n` as bordered wide planes: for each output channel,
/// [`Geometry::border`] zeros, then `OH` rows of `W` (the gradient in the first `OW` columns,
/// zeros after), then zeros up to [`Geometry::bordered_plane`].
fn bordered_gradient(grad: &[f32], g: &Geometry, n: usize) -> Vec<f32> {
    let (oh, ow, w) = (g.out_height(), g.out_width(), g.width);
    let mut planes = vec![0.0f32; g.channels_out * g.bordered_plane()];
    let image = g.output_image(grad, n);
    for (plane, grad) in planes
        .chunks_mut(g.bordered_plane())
        .zip(image.chunks(g.out_plane()))
    {
        for r in 0..oh {
            plane[g.border() + r * w..][..ow].copy_from_slice(&grad[r * ow..][..ow]);
        }
    }
    planes
}

impl ValidConv2dKernels for Flex {
    fn conv2d_valid_x_backward(weight: FlexTensor, grad: FlexTensor, x_shape: Shape) -> FlexTensor {
        check_f32(&[&weight, &grad]);
        let g = Geometry::new(&x_shape, &weight.shape());
        assert_eq!(grad.shape(), g.out_shape(), "output gradient shape");
        let (weight, grad) = (weight.to_contiguous(), grad.to_contiguous());
        let grad = f32_data(&grad);
        // The input channels become the outputs of a correlation with the flipped kernel.
        let packed = pack(
            f32_data(&weight),
            g.channels_out,
            g.channels_in,
            g.kernel,
            true,
        );
        let mut x_grad = vec![0.0f32; x_shape.num_elements()];
        let image = g.channels_in * g.plane();
        per_image(
            &mut x_grad,
            image,
            g.macs() >= PARALLEL_MIN_MACS,
            |n, out| {
                let bordered = bordered_gradient(grad, &g, n);
                correlate(
                    g.taps(
                        &bordered,
                        g.bordered_plane(),
                        g.channels_out,
                        g.border()..g.border() + g.out_height() * g.width,
                    ),
                    &packed,
                    &[],
                    out,
                    g.plane(),
                    g.plane(),
                );
            },
        );
        FlexTensor::from_data(TensorData::new(x_grad, x_shape))
    }

    fn conv2d_valid_weight_backward(
        x: FlexTensor,
        grad: FlexTensor,
        weight_shape: Shape,
    ) -> FlexTensor {
        check_f32(&[&x, &grad]);
        let g = Geometry::new(&x.shape(), &weight_shape);
        assert_eq!(grad.shape(), g.out_shape(), "output gradient shape");
        let (x, grad) = (x.to_contiguous(), grad.to_contiguous());
        let (x, grad) = (f32_data(&x), f32_data(&grad));
        let partial = |first: usize| {
            let mut sums = vec![[0.0f32; LANES]; weight_shape.num_elements()];
            for n in first..(first + IMAGES_PER_PARTIAL).min(g.images) {
                let bordered = bordered_gradient(grad, &g, n);
                weight_gradient(g.input_image(x, n), &bordered, &g, &mut sums);
            }
            sums.iter()
                .map(|lanes| lanes.iter().sum())
                .collect::<Vec<f32>>()
        };
        let starts: Vec<usize> = (0..g.images).step_by(IMAGES_PER_PARTIAL).collect();
        let partials: Vec<Vec<f32>> = if g.macs() >= PARALLEL_MIN_MACS {
            starts.into_par_iter().map(partial).collect()
        } else {
            starts.into_iter().map(partial).collect()
        };
        // Summed in image order whatever the thread count.
        let mut sum = vec![0.0f32; weight_shape.num_elements()];
        for part in partials {
            sum.iter_mut().zip(part).for_each(|(s, p)| *s += p);
        }
        FlexTensor::from_data(TensorData::new(sum, weight_shape))
    }

    fn conv2d_valid_bias_backward(grad: FlexTensor) -> FlexTensor {
        check_f32(&[&grad]);
        let shape = grad.shape();
        assert_eq!(shape.num_dims(), 4, "output gradient [N, O, OH, OW]");
        let (channels, plane) = (shape[1], shape[2] * shape[3]);
        let grad = grad.to_contiguous();
        let mut sum = vec![0.0f32; channels];
        if plane > 0 {
            for (i, plane) in f32_data(&grad).chunks(plane).enumerate() {
                sum[i % channels] += plane.iter().sum::<f32>();
            }
        }
        FlexTensor::from_data(TensorData::new(sum, [channels]))
    }
}

impl<B: ValidConv2dKernels, C: CheckpointStrategy> ValidConv2d for Autodiff<B, C> {
    fn conv2d_valid(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        /// Backward step: the state is the input and the weight.
        #[derive(Debug)]
        struct ValidConv2dBackward;

        impl<B: ValidConv2dKernels> Backward<B, 3> for ValidConv2dBackward {
            type State = (FloatTensor<B>, FloatTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 3>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let [x_node, weight_node, bias_node] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                let (x, weight) = ops.state;
                if let Some(node) = x_node {
                    let x_grad =
                        B::conv2d_valid_x_backward(weight.clone(), grad.clone(), x.shape());
                    grads.register::<B>(node.id, x_grad);
                }
                if let Some(node) = weight_node {
                    let weight_grad =
                        B::conv2d_valid_weight_backward(x, grad.clone(), weight.shape());
                    grads.register::<B>(node.id, weight_grad);
                }
                if let Some(node) = bias_node {
                    grads.register::<B>(node.id, B::conv2d_valid_bias_backward(grad));
                }
            }
        }

        let (x, x_node) = x.into_parts();
        let (weight, weight_node) = weight.into_parts();
        let (bias, bias_node) = bias.into_parts();
        match ValidConv2dBackward
            .prepare::<C>([x_node, weight_node, bias_node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let output = B::conv2d_valid(x.clone(), weight.clone(), bias);
                prep.finish((x, weight), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::conv2d_valid(x, weight, bias)),
        }
    }
}

/// Weights `[O, C, K, K]` rearranged as `[C, K, K, O]` so that a block of output channels reads
/// consecutive values; with `flip`, the transposed and flipped kernel of the input gradient,
/// `[O, K, K, C]` with `w'[o][kh][kw][c] = w[o][c][K−1−kh][K−1−kw]`.
fn pack(weight: &[f32], out: usize, inp: usize, k: usize, flip: bool) -> Vec<f32> {
    let mut packed = vec![0.0f32; weight.len()];
    for o in 0..out {
        for c in 0..inp {
            for kh in 0..k {
                for kw in 0..k {
                    let value = weight[((o * inp + c) * k + kh) * k + kw];
                    let at = if flip {
                        ((o * k + (k - 1 - kh)) * k + (k - 1 - kw)) * inp + c
                    } else {
                        ((c * k + kh) * k + kw) * out + o
                    };
                    packed[at] = value;
                }
            }
        }
    }
    packed
}

/// The input side of a correlation: `channels` planes of `plane` values, rows `row` wide, read
/// through a `kernel × kernel` window; outside `nonzero` (positions within each plane) every
/// value is zero.
#[derive(Clone)]
struct Taps<'a> {
    input: &'a [f32],
    plane: usize,
    channels: usize,
    row: usize,
    kernel: usize,
    nonzero: Range<usize>,
}

impl Taps<'_> {
    /// The kernel rows `kh` whose taps, for the outputs `p0 .. p0 + width`, can read a non-zero
    /// value: the others would add exact zeros (the bordered gradient's first and last rows).
    fn kernel_rows(&self, p0: usize, width: usize) -> Range<usize> {
        let reach = width + self.kernel - 1;
        let first = (self.nonzero.start + 1)
            .saturating_sub(p0 + reach)
            .div_ceil(self.row);
        let end = self
            .nonzero
            .end
            .saturating_sub(p0)
            .div_ceil(self.row)
            .min(self.kernel);
        first..end.max(first)
    }
}

/// `out[o][p] = bias[o] + Σ_c Σ_kh Σ_kw packed[c][kh][kw][o] · input[c][p + kh·row + kw]` for
/// `p < len`, with `out` planes `out_plane` apart (`bias` empty: 0). Needs
/// `len − 1 + (K − 1)·(row + 1) < plane`.
fn correlate(
    taps: Taps,
    packed: &[f32],
    bias: &[f32],
    out: &mut [f32],
    out_plane: usize,
    len: usize,
) {
    /// The arguments, as a `pulp::WithSimd` whose body is inlined into pulp's
    /// target-feature function (a closure is not).
    struct Op<'a> {
        taps: Taps<'a>,
        packed: &'a [f32],
        bias: &'a [f32],
        out: &'a mut [f32],
        out_plane: usize,
        len: usize,
    }
    impl pulp::WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) {
            correlate_body(
                self.taps,
                self.packed,
                self.bias,
                self.out,
                self.out_plane,
                self.len,
            )
        }
    }
    pulp::Arch::new().dispatch(Op {
        taps,
        packed,
        bias,
        out,
        out_plane,
        len,
    })
}

#[inline(always)]
fn correlate_body(
    taps: Taps,
    packed: &[f32],
    bias: &[f32],
    out: &mut [f32],
    out_plane: usize,
    len: usize,
) {
    let outputs = packed.len() / (taps.channels * taps.kernel * taps.kernel);
    let mut first = 0;
    while first < outputs {
        let block = (outputs - first).min(CHANNEL_BLOCK);
        match block {
            4 => correlate_block::<4>(&taps, packed, bias, out, out_plane, len, first, outputs),
            3 => correlate_block::<3>(&taps, packed, bias, out, out_plane, len, first, outputs),
            2 => correlate_block::<2>(&taps, packed, bias, out, out_plane, len, first, outputs),
            _ => correlate_block::<1>(&taps, packed, bias, out, out_plane, len, first, outputs),
        }
        first += block;
    }
}

/// Output channels `first .. first + CB` of [`correlate`], [`POSITIONS`] positions at a time; the
/// last block overlaps the one before rather than running a shorter tail (outputs are written,
/// not accumulated, so recomputing a position is harmless).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn correlate_block<const CB: usize>(
    taps: &Taps,
    packed: &[f32],
    bias: &[f32],
    out: &mut [f32],
    out_plane: usize,
    len: usize,
    first: usize,
    outputs: usize,
) {
    let k = taps.kernel;
    let init: [f32; CB] = std::array::from_fn(|j| bias.get(first + j).copied().unwrap_or(0.0));
    if len < POSITIONS {
        for p in 0..len {
            let mut acc = init;
            for c in 0..taps.channels {
                let plane = &taps.input[c * taps.plane..][..taps.plane];
                for kh in 0..k {
                    for kw in 0..k {
                        let x = plane[p + kh * taps.row + kw];
                        let w = &packed[((c * k + kh) * k + kw) * outputs + first..][..CB];
                        for j in 0..CB {
                            acc[j] = w[j].mul_add(x, acc[j]);
                        }
                    }
                }
            }
            for j in 0..CB {
                out[(first + j) * out_plane + p] = acc[j];
            }
        }
        return;
    }
    let mut start = 0;
    loop {
        let p0 = start.min(len - POSITIONS);
        let mut acc: [[[f32; LANES]; VECTORS]; CB] =
            std::array::from_fn(|j| [[init[j]; LANES]; VECTORS]);
        let rows = taps.kernel_rows(p0, POSITIONS);
        for c in 0..taps.channels {
            let plane = &taps.input[c * taps.plane..][..taps.plane];
            for kh in rows.clone() {
                for kw in 0..k {
                    let x = &plane[p0 + kh * taps.row + kw..][..POSITIONS];
                    let x: [&[f32; LANES]; VECTORS] = std::array::from_fn(|v| {
                        x[v * LANES..][..LANES].try_into().expect("LANES values")
                    });
                    let w = &packed[((c * k + kh) * k + kw) * outputs + first..][..CB];
                    for j in 0..CB {
                        for v in 0..VECTORS {
                            for l in 0..LANES {
                                acc[j][v][l] = w[j].mul_add(x[v][l], acc[j][v][l]);
                            }
                        }
                    }
                }
            }
        }
        for j in 0..CB {
            for v in 0..VECTORS {
                out[(first + j) * out_plane + p0 + v * LANES..][..LANES]
                    .copy_from_slice(&acc[j][v]);
            }
        }
        if p0 + POSITIONS >= len {
            break;
        }
        start = p0 + POSITIONS;
    }
}

/// Adds one image's weight gradient to `sums`, one [`LANES`]-wide partial sum per weight
/// (`[O, C, K, K]` order; the lanes are added up once per [`IMAGES_PER_PARTIAL`] images):
/// `input` its `C` planes, `bordered` its output gradient from [`bordered_gradient`].
fn weight_gradient(input: &[f32], bordered: &[f32], g: &Geometry, sums: &mut [[f32; LANES]]) {
    /// The arguments, as a `pulp::WithSimd` (see [`correlate`]).
    struct Op<'a> {
        input: &'a [f32],
        bordered: &'a [f32],
        g: &'a Geometry,
        sums: &'a mut [[f32; LANES]],
    }
    impl pulp::WithSimd for Op<'_> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) {
            let Op {
                input,
                bordered,
                g,
                sums,
            } = self;
            match g.kernel {
                5 if g.wide_len() >= LANES => weight_gradient_body::<5>(input, bordered, g, sums),
                3 if g.wide_len() >= LANES => weight_gradient_body::<3>(input, bordered, g, sums),
                _ => weight_gradient_any(input, bordered, g, sums),
            }
        }
    }
    pulp::Arch::new().dispatch(Op {
        input,
        bordered,
        g,
        sums,
    })
}

/// [`weight_gradient`] for a `K × K` kernel known at compile time and a wide output of at least
/// [`LANES`] positions: pairs of output channels × the `K` taps of one kernel row in registers,
/// [`LANES`] positions per step. A last partial step overlaps the one before it, with the
/// gradient of the positions already counted set to zero.
#[inline(always)]
fn weight_gradient_body<const K: usize>(
    input: &[f32],
    bordered: &[f32],
    g: &Geometry,
    sums: &mut [[f32; LANES]],
) {
    let (len, row) = (g.wide_len(), g.width);
    let full = len / LANES * LANES;
    let grad_plane = |o: usize| &bordered[o * g.bordered_plane() + g.border()..][..len];
    // The last, overlapping step starts at `len − LANES`; its first `skip` positions were
    // counted already and get a zero gradient.
    let (last, skip) = (len - LANES, full + LANES - len);
    let masked = |grad: &[f32]| -> [f32; LANES] {
        std::array::from_fn(|l| if l < skip { 0.0 } else { grad[last + l] })
    };
    let mut o = 0;
    while o < g.channels_out {
        let outputs = if o + 1 < g.channels_out { 2 } else { 1 };
        let (g0, g1) = (grad_plane(o), grad_plane(o + outputs - 1));
        let tail = (full < len).then(|| (masked(g0), masked(g1)));
        for c in 0..g.channels_in {
            let plane = &input[c * g.plane()..][..g.plane()];
            for kh in 0..K {
                let first = ((o * g.channels_in + c) * K + kh) * K;
                let second = (((o + outputs - 1) * g.channels_in + c) * K + kh) * K;
                let mut acc = [[[0.0f32; LANES]; K]; 2];
                acc[0].copy_from_slice(&sums[first..first + K]);
                acc[1].copy_from_slice(&sums[second..second + K]);
                for p in (0..full).step_by(LANES) {
                    let d0: &[f32; LANES] = g0[p..][..LANES].try_into().expect("LANES values");
                    let d1: &[f32; LANES] = g1[p..][..LANES].try_into().expect("LANES values");
                    weight_step(&mut acc, d0, d1, &plane[p + kh * row..]);
                }
                if let Some((d0, d1)) = &tail {
                    weight_step(&mut acc, d0, d1, &plane[last + kh * row..]);
                }
                sums[first..first + K].copy_from_slice(&acc[0]);
                if outputs == 2 {
                    sums[second..second + K].copy_from_slice(&acc[1]);
                }
            }
        }
        o += outputs;
    }
}

/// One step of [`weight_gradient_body`]: `acc[j][kw] += d_j · x[kw .. kw + LANES]`.
#[inline(always)]
fn weight_step<const K: usize>(
    acc: &mut [[[f32; LANES]; K]; 2],
    d0: &[f32; LANES],
    d1: &[f32; LANES],
    x: &[f32],
) {
    for kw in 0..K {
        let x: &[f32; LANES] = x[kw..][..LANES].try_into().expect("LANES values");
        for l in 0..LANES {
            acc[0][kw][l] = d0[l].mul_add(x[l], acc[0][kw][l]);
            acc[1][kw][l] = d1[l].mul_add(x[l], acc[1][kw][l]);
        }
    }
}

/// [`weight_gradient`] for any kernel size, one sum at a time (into lane 0).
#[inline(always)]
fn weight_gradient_any(input: &[f32], bordered: &[f32], g: &Geometry, sums: &mut [[f32; LANES]]) {
    let (len, row, k) = (g.wide_len(), g.width, g.kernel);
    for o in 0..g.channels_out {
        let grad = &bordered[o * g.bordered_plane() + g.border()..][..len];
        for c in 0..g.channels_in {
            let plane = &input[c * g.plane()..][..g.plane()];
            for kh in 0..k {
                for kw in 0..k {
                    let shifted = &plane[kh * row + kw..][..len];
                    let sum = &mut sums[((o * g.channels_in + c) * k + kh) * k + kw][0];
                    *sum = grad
                        .iter()
                        .zip(shifted)
                        .fold(*sum, |acc, (&d, &x)| d.mul_add(x, acc));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::conv::Conv2dConfig;
    use burn::tensor::Distribution;

    /// Shapes `[N, C, H, W]` and `O`, `K`: both layers on both datasets (batch 32 crosses the
    /// parallel threshold), odd sizes, outputs narrower than a register block, a 1×1 and a
    /// 3×3 kernel, a kernel as large as the input, one output channel, 7 output channels (blocks
    /// of 4 and 3).
    const CASES: [([usize; 4], usize, usize); 10] = [
        ([32, 1, 28, 28], 6, 5),
        ([32, 6, 12, 12], 16, 5),
        ([4, 3, 32, 32], 6, 5),
        ([4, 6, 14, 14], 16, 5),
        ([3, 2, 9, 7], 7, 5),
        ([2, 3, 6, 5], 4, 3),
        ([2, 2, 5, 5], 3, 5),
        ([2, 4, 4, 6], 1, 1),
        ([1, 1, 20, 5], 2, 4),
        ([5, 16, 8, 8], 6, 5),
    ];

    fn conv(channels: usize, out: usize, kernel: usize, device: &Device) -> Conv2d {
        Conv2dConfig::new([channels, out], [kernel, kernel]).init(device)
    }

    /// `a` equals `b` element by element up to 1e-5 of `magnitude`, the sum of the absolute values
    /// of the terms that make up that element: the bound of a floating-point sum's error grows
    /// with Σ|terms|, not with the (possibly cancelled) result (Higham, *Accuracy and Stability of
    /// Numerical Algorithms*, 2nd ed., §4.2). 1e-5 is about 170 units of round-off of it (f32:
    /// u = 2^-24 ≈ 6e-8); the two implementations add in different orders and with or without
    /// fused multiply-adds. `b` must not be all zeros.
    fn assert_close(a: TensorData, b: TensorData, magnitude: TensorData, what: &str) {
        let [a, b, magnitude] = [a, b, magnitude].map(|d| d.try_to_vec::<f32>().unwrap());
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        assert_eq!(a.len(), magnitude.len(), "{what}: magnitude length");
        assert!(
            b.iter().any(|v| *v != 0.0),
            "{what}: reference is all zeros"
        );
        for (i, ((x, y), m)) in a.iter().zip(&b).zip(&magnitude).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * m,
                "{what}[{i}]: {x} vs {y} (sum of the terms' magnitudes {m})"
            );
        }
    }

    /// burn's convolution of the given tensors, stride 1, no padding.
    fn burn_conv(x: Tensor<4>, weight: Tensor<4>, bias: Tensor<1>) -> Tensor<4> {
        let options = burn::tensor::ops::ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
        burn::tensor::module::conv2d(x, weight, Some(bias), options)
    }

    #[test]
    fn forward_equals_burn_conv2d() {
        for device in [Device::flex(), Device::flex().autodiff()] {
            for (shape, out, kernel) in CASES {
                let layer = conv(shape[1], out, kernel, &device);
                let x = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
                assert!(runs_valid_conv(&x, &layer), "{shape:?}");
                let bias = layer.bias.as_ref().unwrap().val();
                let ours = conv2d_valid(x.clone(), layer.weight.val(), bias.clone());
                // Σ|x·w| + |b| for each output: the same convolution of absolute values.
                let magnitude = burn_conv(x.clone().abs(), layer.weight.val().abs(), bias.abs());
                assert_close(
                    ours.into_data(),
                    layer.forward(x).into_data(),
                    magnitude.into_data(),
                    "forward",
                );
            }
        }
    }

    #[test]
    fn gradients_equal_burn_conv2d() {
        let device = Device::flex().autodiff();
        for (shape, out, kernel) in CASES {
            let layer = conv(shape[1], out, kernel, &device);
            let x = Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
            let out_dims = layer.forward(x.clone()).dims();
            // A weighted sum makes every output's gradient distinct.
            let weights = Tensor::<4>::random(out_dims, Distribution::Normal(0.0, 1.0), &device);
            // `ours`: which convolution; `absolute`: the same problem on absolute values, whose
            // gradients are the sums of the magnitudes of the terms of each gradient element.
            let grads = |ours: bool, absolute: bool| {
                let prepare = |t: Tensor<4>| if absolute { t.abs() } else { t };
                let x = prepare(x.clone()).detach().require_grad();
                let weight = prepare(layer.weight.val()).detach().require_grad();
                let bias = layer.bias.as_ref().unwrap().val();
                let bias = if absolute { bias.abs() } else { bias };
                let bias = bias.detach().require_grad();
                let y = if ours {
                    conv2d_valid(x.clone(), weight.clone(), bias.clone())
                } else {
                    burn_conv(x.clone(), weight.clone(), bias.clone())
                };
                let grads = (y * prepare(weights.clone())).sum().backward();
                [
                    x.grad(&grads).unwrap().into_data(),
                    weight.grad(&grads).unwrap().into_data(),
                    bias.grad(&grads).unwrap().into_data(),
                ]
            };
            let [ours, reference, magnitude] =
                [grads(true, false), grads(false, false), grads(false, true)];
            let named = ours.into_iter().zip(reference).zip(magnitude);
            for (((a, b), m), what) in named.zip(["x", "weight", "bias"]) {
                assert_close(a, b, m, &format!("{what} gradient for {shape:?}"));
            }
        }
    }

    #[test]
    fn weight_gradient_does_not_depend_on_threads() {
        let device = Device::flex();
        let x = Tensor::<4>::random([40, 6, 12, 12], Distribution::Normal(0.0, 1.0), &device);
        let grad = Tensor::<4>::random([40, 16, 8, 8], Distribution::Normal(0.0, 1.0), &device);
        let run = || {
            Flex::conv2d_valid_weight_backward(
                FlexTensor::from_data(x.clone().into_data()),
                FlexTensor::from_data(grad.clone().into_data()),
                Shape::new([16, 6, 5, 5]),
            )
        };
        let many = f32_data(&run()).to_vec();
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap()
            .install(|| f32_data(&run()).to_vec());
        assert_eq!(many, one);
    }

    #[test]
    fn other_configurations_are_not_taken() {
        let device = Device::flex();
        let x = Tensor::<4>::zeros([1, 1, 8, 8], &device);
        let padded = Conv2dConfig::new([1, 2], [3, 3])
            .with_padding(PaddingConfig2d::Same)
            .init(&device);
        let strided = Conv2dConfig::new([1, 2], [3, 3])
            .with_stride([2, 2])
            .init(&device);
        let no_bias = Conv2dConfig::new([1, 2], [3, 3])
            .with_bias(false)
            .init(&device);
        let wide = Conv2dConfig::new([1, 2], [3, 5]).init(&device);
        for layer in [padded, strided, no_bias, wide] {
            assert!(!runs_valid_conv(&x, &layer));
        }
        assert!(runs_valid_conv(&x, &conv(1, 2, 3, &device)));
        assert!(!runs_valid_conv(
            &x.cast(DType::F64),
            &conv(1, 2, 3, &device)
        ));
    }
}
