//! The reference network of the PyTorch CIFAR-10 tutorial ("Training a classifier"), a LeNet-5
//! variant: conv 3→6 k5, ReLU, max-pool 2, conv 6→16 k5, ReLU, max-pool 2, flatten,
//! linear →120, ReLU, 120→84, ReLU, 84→10. Channels and input size follow the dataset.

use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::prelude::*;

/// The classifier. Input `[batch, C, H, W]` normalised pixels, output `[batch, 10]` logits.
#[derive(Module, Debug)]
pub struct Net {
    conv1: Conv2d,
    conv2: Conv2d,
    pool: MaxPool2d,
    fc1: Linear,
    fc2: Linear,
    fc3: Linear,
    relu: Relu,
}

/// Number of output classes of every supported dataset.
pub const NUM_CLASSES: usize = 10;

/// Inputs of the first linear layer for an input of `[C, H, W]`: 16 channels of
/// `((H - 4) / 2 - 4) / 2 × ((W - 4) / 2 - 4) / 2` (400 for 32×32, 256 for 28×28).
///
/// # Errors
/// `None` when the input is too small for two 5×5 convolutions and two 2×2 pools (< 16 px).
pub fn flat_features(shape: [usize; 3]) -> Option<usize> {
    let side = |n: usize| {
        n.checked_sub(4)
            .map(|n| n / 2)
            .and_then(|n| n.checked_sub(4))
            .map(|n| n / 2)
    };
    let (h, w) = (side(shape[1])?, side(shape[2])?);
    (h > 0 && w > 0).then_some(16 * h * w)
}

impl Net {
    /// Builds the network for `[C, H, W]` inputs on `device` (initialised from the device's
    /// random generator; call `device.seed(..)` first for a reproducible start).
    ///
    /// # Panics
    /// If the input is smaller than 16×16 (see [`flat_features`]); dataset kinds never are.
    pub fn new(shape: [usize; 3], device: &Device) -> Self {
        let flat = flat_features(shape).expect("input of at least 16×16 pixels");
        Self {
            conv1: Conv2dConfig::new([shape[0], 6], [5, 5]).init(device),
            conv2: Conv2dConfig::new([6, 16], [5, 5]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(flat, 120).init(device),
            fc2: LinearConfig::new(120, 84).init(device),
            fc3: LinearConfig::new(84, NUM_CLASSES).init(device),
            relu: Relu::new(),
        }
    }

    /// ReLU then 2×2 max-pool: the fused kernel of [`crate::pool`] for f32 on the CPU backend,
    /// burn's modules elsewhere (they compute the same function).
    fn relu_pool(&self, x: Tensor<4>) -> Tensor<4> {
        if crate::pool::runs_fused(&x) {
            crate::pool::relu_max_pool2x2(x)
        } else {
            self.pool.forward(self.relu.forward(x))
        }
    }

    /// Logits `[batch, 10]` for normalised images `[batch, C, H, W]`.
    pub fn forward(&self, images: Tensor<4>) -> Tensor<2> {
        let x = self.relu_pool(self.conv1.forward(images));
        let x = self.relu_pool(self.conv2.forward(x));
        let x: Tensor<2> = x.flatten(1, 3);
        let x = self.relu.forward(self.fc1.forward(x));
        let x = self.relu.forward(self.fc2.forward(x));
        self.fc3.forward(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_count_matches_the_reference() {
        // 456 + 2,416 + 48,120 + 10,164 + 850 (PyTorch tutorial network on 3×32×32).
        let device = Device::flex();
        assert_eq!(Net::new([3, 32, 32], &device).num_params(), 62_006);
        // Fashion-MNIST: conv1 has 1 input channel (156) and fc1 256 inputs (30,840).
        assert_eq!(
            Net::new([1, 28, 28], &device).num_params(),
            156 + 2_416 + 30_840 + 10_164 + 850
        );
    }

    #[test]
    fn flat_features_follow_input_size() {
        assert_eq!(flat_features([3, 32, 32]), Some(400));
        assert_eq!(flat_features([1, 28, 28]), Some(256));
        assert_eq!(flat_features([1, 12, 12]), None);
    }

    #[test]
    fn forward_gives_ten_logits_per_image() {
        let device = Device::flex();
        let net = Net::new([1, 28, 28], &device);
        let logits = net.forward(Tensor::zeros([5, 1, 28, 28], &device));
        assert_eq!(logits.dims(), [5, 10]);
    }
}
