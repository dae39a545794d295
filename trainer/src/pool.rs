//! ReLU followed by 2×2 max-pooling with stride 2, fused into one pass, with its own backward
//! pass, for burn's Flex CPU backend.
//!
//! The reference network applies `max_pool2d(relu(conv(x)), 2)` twice. burn-flex runs every 2-D
//! max-pool through its general 3-D kernel (padding, dilation and ceil mode on each output, an
//! integer division per element); measured here that forward alone was ≈ 1 ms of a ≈ 9 ms
//! batch-64 step on one thread. Because ReLU is monotone, `max(relu(w)) = relu(max(w))` for every
//! window `w`, so one pass over the input gives the pooled, rectified output and, for training,
//! the position of each window's maximum. The gradient of the pair is then the output gradient
//! copied to that position where the output is positive and zero elsewhere, which is exactly what
//! burn's (and PyTorch's) `relu_backward ∘ max_pool2d_backward` give: windows do not overlap at
//! stride 2, and ties go to the first maximum in row-major order as in PyTorch's CPU kernel
//! (`aten/src/ATen/native/cpu/MaxPoolKernel.cpp`: `val > maxval || isnan(val)`).
//!
//! The operation is a burn backend extension (`#[backend_extension]`, burn book "Backend
//! Extension"): [`ReluMaxPool`] is implemented for [`Flex`] (inference) and for
//! `Autodiff<B>` over any backend with [`ReluMaxPoolKernels`] (training, with the handwritten
//! backward). On other devices (the `cuda` feature) the model uses burn's own `relu` and
//! `max_pool2d` instead ([`runs_fused`]).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{backend_extension, Autodiff, Backend, Dispatch, Flex, TensorMetadata};
use burn::prelude::*;
use burn::tensor::{DType, TensorData};
use rayon::prelude::*;

/// Inputs of at least this many elements are pooled plane by plane on rayon's pool; smaller ones
/// on the calling thread (splitting a few thousand elements costs more than it saves).
const PARALLEL_MIN_ELEMENTS: usize = 1 << 15;

/// The fused operation, routed by burn's `Dispatch` to the backend of its input.
#[backend_extension(Flex, Autodiff)]
pub trait ReluMaxPool: Backend {
    /// `max_pool2d(relu(x), kernel 2, stride 2, no padding)`.
    ///
    /// Shapes: `x` `[N, C, H, W]` → `[N, C, ⌊H/2⌋, ⌊W/2⌋]` (a last odd row or column is dropped,
    /// as PyTorch's `MaxPool2d(2)` without `ceil_mode`).
    fn relu_max_pool2x2(x: FloatTensor<Self>) -> FloatTensor<Self>;
}

/// The kernels a backend supplies, besides its forward pass, so that `Autodiff<B>` can train
/// through [`ReluMaxPool`].
pub trait ReluMaxPoolKernels: ReluMaxPool {
    /// Forward pass keeping, for each output, the index within its `[H, W]` input plane of the
    /// window maximum, or −1 where the output is 0 (ReLU cut it: no gradient flows).
    ///
    /// Shapes: `x` `[N, C, H, W]` → (output and indices, both `[N, C, ⌊H/2⌋, ⌊W/2⌋]`).
    fn relu_max_pool2x2_with_indices(x: FloatTensor<Self>) -> (FloatTensor<Self>, IntTensor<Self>);

    /// Gradient with respect to the input: `grad` at each index of `indices`, 0 elsewhere.
    ///
    /// Shapes: `input_shape` `[N, C, H, W]`; `grad` and `indices` `[N, C, ⌊H/2⌋, ⌊W/2⌋]`.
    fn relu_max_pool2x2_backward(
        input_shape: Shape,
        grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> FloatTensor<Self>;
}

/// `max_pool2d(relu(x), 2)` for `[N, C, H, W]` images, output `[N, C, ⌊H/2⌋, ⌊W/2⌋]`;
/// differentiable on an autodiff device.
///
/// # Panics
/// Unless [`runs_fused`] for `x`: burn's dispatch panics for a backend the extension does not
/// list, and the Flex kernel takes f32 planes of at most `i32::MAX` pixels.
pub fn relu_max_pool2x2(x: Tensor<4>) -> Tensor<4> {
    Tensor::from_dispatch(<Dispatch as ReluMaxPool>::relu_max_pool2x2(
        x.into_dispatch(),
    ))
}

/// Whether [`relu_max_pool2x2`] takes `x`: an f32 tensor on burn's Flex CPU backend (directly or
/// under autodiff) whose `[H, W]` planes index with an i32.
pub fn runs_fused(x: &Tensor<4>) -> bool {
    let [_, _, h, w] = x.dims();
    let on_flex = matches!(
        x.device().inner().as_dispatch(),
        burn::backend::DispatchDevice::Flex(_)
    );
    on_flex && x.dtype() == DType::F32 && fits_i32(h * w)
}

/// Whether every position of a plane of `pixels` elements fits the i32 indices.
fn fits_i32(pixels: usize) -> bool {
    i32::try_from(pixels).is_ok()
}

impl ReluMaxPool for Flex {
    fn relu_max_pool2x2(x: FloatTensor<Self>) -> FloatTensor<Self> {
        forward_flex(x, false).0
    }
}

impl ReluMaxPoolKernels for Flex {
    fn relu_max_pool2x2_with_indices(x: FlexTensor) -> (FlexTensor, FlexTensor) {
        let (output, indices) = forward_flex(x, true);
        (output, indices.expect("indices were asked for"))
    }

    fn relu_max_pool2x2_backward(
        input_shape: Shape,
        grad: FlexTensor,
        indices: FlexTensor,
    ) -> FlexTensor {
        let grad = grad.to_contiguous();
        let indices = indices.to_contiguous();
        let grad: &[f32] = grad.as_slice().expect("contiguous f32 gradient");
        let indices: &[i32] = indices.as_slice().expect("contiguous i32 indices");
        let plane_in = input_shape[2] * input_shape[3];
        let plane_out = (input_shape[2] / 2) * (input_shape[3] / 2);
        let mut input_grad = vec![0.0f32; input_shape.num_elements()];
        let scatter = |(plane, out): (usize, &mut [f32])| {
            let range = plane * plane_out..(plane + 1) * plane_out;
            for (&index, &g) in indices[range.clone()].iter().zip(&grad[range]) {
                // Windows do not overlap, so each input position receives at most one value.
                if let Ok(index) = usize::try_from(index) {
                    out[index] = g;
                }
            }
        };
        if plane_in > 0 {
            if input_grad.len() >= PARALLEL_MIN_ELEMENTS {
                input_grad
                    .par_chunks_mut(plane_in)
                    .enumerate()
                    .for_each(scatter);
            } else {
                input_grad
                    .chunks_mut(plane_in)
                    .enumerate()
                    .for_each(scatter);
            }
        }
        FlexTensor::from_data(TensorData::new(input_grad, input_shape))
    }
}

impl<B: ReluMaxPoolKernels, C: CheckpointStrategy> ReluMaxPool for Autodiff<B, C> {
    fn relu_max_pool2x2(x: FloatTensor<Self>) -> FloatTensor<Self> {
        /// Backward step: the state is the input's shape and the maxima's positions.
        #[derive(Debug)]
        struct ReluMaxPoolBackward;

        impl<B: ReluMaxPoolKernels> Backward<B, 1> for ReluMaxPoolBackward {
            type State = (Shape, IntTensor<B>);

            fn backward(
                self,
                ops: Ops<Self::State, 1>,
                grads: &mut Gradients,
                _checkpointer: &mut Checkpointer,
            ) {
                let [parent] = ops.parents;
                let grad = grads.consume::<B>(&ops.node);
                if let Some(parent) = parent {
                    let (input_shape, indices) = ops.state;
                    grads.register::<B>(
                        parent.id,
                        B::relu_max_pool2x2_backward(input_shape, grad, indices),
                    );
                }
            }
        }

        let (primitive, node) = x.into_parts();
        match ReluMaxPoolBackward
            .prepare::<C>([node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let input_shape = primitive.shape();
                let (output, indices) = B::relu_max_pool2x2_with_indices(primitive);
                prep.finish((input_shape, indices), output)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::relu_max_pool2x2(primitive)),
        }
    }
}

/// The Flex forward pass: output and, when `with_indices`, the maxima's positions (i32).
///
/// # Panics
/// If `x` is not a rank-4 f32 tensor with planes of at most `i32::MAX` pixels (see
/// [`runs_fused`]).
fn forward_flex(x: FlexTensor, with_indices: bool) -> (FlexTensor, Option<FlexTensor>) {
    let shape = x.shape();
    assert_eq!(shape.num_dims(), 4, "relu_max_pool2x2 takes [N, C, H, W]");
    assert_eq!(
        x.dtype(),
        DType::F32,
        "relu_max_pool2x2 is implemented for f32"
    );
    let (planes, h, w) = (shape[0] * shape[1], shape[2], shape[3]);
    assert!(fits_i32(h * w), "relu_max_pool2x2 indexes planes with i32");
    let (out_h, out_w) = (h / 2, w / 2);
    let out_shape = Shape::new([shape[0], shape[1], out_h, out_w]);
    let x = x.to_contiguous();
    let input: &[f32] = x.as_slice().expect("contiguous f32 input");

    let plane_out = out_h * out_w;
    let mut output = vec![0.0f32; planes * plane_out];
    let mut indices = vec![0i32; if with_indices { output.len() } else { 0 }];
    if plane_out > 0 {
        let parallel = input.len() >= PARALLEL_MIN_ELEMENTS;
        let plane = |p: usize, out: &mut [f32], idx: &mut [i32]| {
            pool_plane(&input[p * h * w..(p + 1) * h * w], w, out, idx)
        };
        match (with_indices, parallel) {
            (true, true) => output
                .par_chunks_mut(plane_out)
                .zip(indices.par_chunks_mut(plane_out))
                .enumerate()
                .for_each(|(p, (out, idx))| plane(p, out, idx)),
            (true, false) => output
                .chunks_mut(plane_out)
                .zip(indices.chunks_mut(plane_out))
                .enumerate()
                .for_each(|(p, (out, idx))| plane(p, out, idx)),
            (false, true) => output
                .par_chunks_mut(plane_out)
                .enumerate()
                .for_each(|(p, out)| plane(p, out, &mut [])),
            (false, false) => output
                .chunks_mut(plane_out)
                .enumerate()
                .for_each(|(p, out)| plane(p, out, &mut [])),
        }
    }
    let output = FlexTensor::from_data(TensorData::new(output, out_shape.clone()));
    let indices = with_indices.then(|| FlexTensor::from_data(TensorData::new(indices, out_shape)));
    (output, indices)
}

/// Pools one `[H, W]` plane of row width `w` into `out` (`⌊H/2⌋ × ⌊W/2⌋`, row-major), writing
/// each maximum's position to `idx` when it is not empty.
///
/// Ties keep the first maximum in row-major window order and the last NaN wins, as PyTorch's and
/// burn-flex's kernels; the output is the rectified maximum (NaN stays NaN, as `relu(NaN)`).
fn pool_plane(input: &[f32], w: usize, out: &mut [f32], idx: &mut [i32]) {
    let out_w = w / 2;
    let with_indices = !idx.is_empty();
    for (r, out_row) in out.chunks_exact_mut(out_w).enumerate() {
        let top = &input[2 * r * w..2 * r * w + w];
        let bottom = &input[(2 * r + 1) * w..(2 * r + 2) * w];
        for (c, value) in out_row.iter_mut().enumerate() {
            let window = [top[2 * c], top[2 * c + 1], bottom[2 * c], bottom[2 * c + 1]];
            let (mut max, mut at) = (window[0], 0);
            for (k, &v) in window.iter().enumerate().skip(1) {
                if v > max || v.is_nan() {
                    (max, at) = (v, k);
                }
            }
            let keep = max > 0.0 || max.is_nan();
            *value = if keep { max } else { 0.0 };
            if with_indices {
                let position = (2 * r + at / 2) * w + 2 * c + at % 2;
                idx[r * out_w + c] = if keep { position as i32 } else { -1 };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::pool::MaxPool2dConfig;
    use burn::nn::Relu;
    use burn::tensor::Distribution;

    /// burn's own modules, as the model used them before this kernel: the definition the fused
    /// kernel must reproduce.
    fn reference(x: Tensor<4>) -> Tensor<4> {
        let pool = MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init();
        pool.forward(Relu::new().forward(x))
    }

    /// Random inputs with many negatives and exact ties (values rounded to quarters): odd and
    /// even heights and widths, both sides of the parallel threshold, an empty output, and a
    /// non-contiguous view (H and W swapped).
    fn inputs(device: &Device) -> Vec<Tensor<4>> {
        let shapes = [
            [2, 3, 7, 6],
            [2, 3, 6, 7],
            [1, 2, 5, 9],
            [3, 6, 28, 28],
            [64, 6, 28, 28],
            [1, 1, 1, 5],
        ];
        let random = |shape: [usize; 4]| {
            let x = Tensor::<4>::random(shape, Distribution::Uniform(-2.0, 2.0), device);
            (x * 4.0).round() / 4.0
        };
        let mut inputs: Vec<_> = shapes.into_iter().map(random).collect();
        inputs.push(random([2, 3, 9, 6]).swap_dims(2, 3));
        inputs
    }

    #[test]
    fn forward_equals_relu_then_max_pool() {
        // Flex alone (inference), and under autodiff tracked (the kernel with indices) and not.
        for device in [Device::flex(), Device::flex().autodiff()] {
            for x in inputs(&device) {
                assert!(runs_fused(&x));
                let expected = reference(x.clone()).into_data();
                relu_max_pool2x2(x.clone())
                    .into_data()
                    .assert_eq(&expected, true);
                if device.is_autodiff() {
                    let tracked = relu_max_pool2x2(x.require_grad());
                    tracked.into_data().assert_eq(&expected, true);
                }
            }
        }
    }

    #[test]
    fn gradient_equals_relu_then_max_pool() {
        let device = Device::flex().autodiff();
        for x in inputs(&device) {
            // A weighted sum makes every output's gradient distinct.
            let weights = Tensor::<4>::random(
                relu_max_pool2x2(x.clone()).dims(),
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            let gradient = |pool: fn(Tensor<4>) -> Tensor<4>| {
                let x = x.clone().detach().require_grad();
                let grads = (pool(x.clone()) * weights.clone()).sum().backward();
                x.grad(&grads).expect("x is tracked").into_data()
            };
            let fused = gradient(relu_max_pool2x2);
            let expected = gradient(reference);
            fused.assert_eq(&expected, true);
            // Not vacuous: where there is an output, some inputs receive a gradient.
            let has_output = weights.shape().num_elements() > 0;
            assert_eq!(fused.iter::<f32>().any(|g| g != 0.0), has_output);
        }
    }

    #[test]
    fn ties_and_nan_follow_pytorch() {
        // Windows: all equal → first position; NaN wins; all negative → 0 and no gradient; two
        // NaNs → the last.
        let nan = f32::NAN;
        #[rustfmt::skip]
        let plane = [
            1.0, 1.0, nan, 3.0, -1.0, -2.0, nan, 1.0,
            1.0, 1.0, 2.0, 0.5, -3.0, -0.5, 2.0, nan,
        ];
        let (mut out, mut idx) = ([0.0; 4], [0; 4]);
        pool_plane(&plane, 8, &mut out, &mut idx);
        assert_eq!(out[0], 1.0);
        assert!(out[1].is_nan() && out[3].is_nan());
        assert_eq!(out[2], 0.0);
        assert_eq!(idx, [0, 2, -1, 15]);
    }

    #[test]
    fn other_element_types_are_not_fused() {
        let x = Tensor::<4>::zeros([1, 1, 4, 4], &Device::flex()).cast(DType::F64);
        assert!(!runs_fused(&x));
    }
}
