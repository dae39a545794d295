//! The datasets the trainer reads, by the names the `dataset` hyperparameter and `model.json`
//! use.

/// The datasets the trainer knows; each fixes the input shape, class names and normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetKind {
    /// MNIST handwritten digits, 1×28×28.
    Mnist,
    /// Zalando's Fashion-MNIST, 1×28×28, same IDX files as MNIST.
    FashionMnist,
    /// CIFAR-10, 3×32×32.
    Cifar10,
}

impl DatasetKind {
    /// Parses the names used by the `dataset` hyperparameter: `mnist`, `fashion-mnist`, `cifar10`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().replace('_', "-").as_str() {
            "mnist" => Some(Self::Mnist),
            "fashion-mnist" | "fashionmnist" => Some(Self::FashionMnist),
            "cifar10" | "cifar-10" => Some(Self::Cifar10),
            _ => None,
        }
    }

    /// The canonical name, as written in `model.json`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mnist => "mnist",
            Self::FashionMnist => "fashion-mnist",
            Self::Cifar10 => "cifar10",
        }
    }

    /// Input shape `[channels, height, width]`.
    pub fn shape(self) -> [usize; 3] {
        match self {
            Self::Mnist | Self::FashionMnist => [1, 28, 28],
            Self::Cifar10 => [3, 32, 32],
        }
    }

    /// Class names in label order, from each dataset's documentation.
    pub fn classes(self) -> [&'static str; 10] {
        match self {
            Self::Mnist => ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
            // github.com/zalandoresearch/fashion-mnist#labels
            Self::FashionMnist => [
                "T-shirt/top",
                "Trouser",
                "Pullover",
                "Dress",
                "Coat",
                "Sandal",
                "Shirt",
                "Sneaker",
                "Bag",
                "Ankle boot",
            ],
            // www.cs.toronto.edu/~kriz/cifar.html, batches.meta.txt
            Self::Cifar10 => [
                "airplane",
                "automobile",
                "bird",
                "cat",
                "deer",
                "dog",
                "frog",
                "horse",
                "ship",
                "truck",
            ],
        }
    }

    /// Per-channel mean and standard deviation of the training set's pixels scaled to `[0, 1]`.
    ///
    /// MNIST: 0.1307/0.3081 (torchvision examples/mnist); Fashion-MNIST: 0.2860/0.3530
    /// (computed over its 60,000 training images); CIFAR-10: the per-channel figures of the
    /// training set used by the common PyTorch CIFAR recipes.
    pub fn normalisation(self) -> (Vec<f32>, Vec<f32>) {
        match self {
            Self::Mnist => (vec![0.1307], vec![0.3081]),
            Self::FashionMnist => (vec![0.2860], vec![0.3530]),
            Self::Cifar10 => (vec![0.4914, 0.4822, 0.4465], vec![0.2470, 0.2435, 0.2616]),
        }
    }

    /// Whether the reference trains this dataset with augmentation (random crop, flip).
    pub fn augments(self) -> bool {
        self == Self::Cifar10
    }
}
