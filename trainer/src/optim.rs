//! SGD with momentum on the flat parameter vector, with PyTorch's semantics
//! (`torch.optim.SGD`, dampening 0, no Nesterov, no weight decay):
//! `v ← μ·v + g` (`v ← g` on the first step), `p ← p − lr·v`.
//!
//! burn's `Sgd` computes the same update, but keeps its momentum keyed by per-process
//! parameter ids. Keeping it on the flat vector instead lets rank 0 checkpoint it and broadcast
//! it on resume with the parameters, so every rank continues from identical optimiser state.

/// Optimiser state and hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f32,
    /// Momentum factor μ (0 disables momentum).
    pub momentum: f32,
    /// Momentum buffer, one value per parameter; empty until the first step.
    pub velocity: Vec<f32>,
}

impl Sgd {
    /// A fresh optimiser.
    pub fn new(lr: f32, momentum: f32) -> Self {
        Self {
            lr,
            momentum,
            velocity: Vec::new(),
        }
    }

    /// Updates `params` in place with `grads` (same length).
    ///
    /// # Panics
    /// If the lengths differ: both come from the same model.
    pub fn step(&mut self, params: &mut [f32], grads: &[f32]) {
        assert_eq!(params.len(), grads.len(), "parameter and gradient lengths");
        if self.momentum == 0.0 {
            params
                .iter_mut()
                .zip(grads)
                .for_each(|(p, g)| *p -= self.lr * g);
            return;
        }
        if self.velocity.is_empty() {
            self.velocity = grads.to_vec();
        } else {
            let mu = self.momentum;
            self.velocity
                .iter_mut()
                .zip(grads)
                .for_each(|(v, g)| *v = mu * *v + g);
        }
        params
            .iter_mut()
            .zip(&self.velocity)
            .for_each(|(p, v)| *p -= self.lr * v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_pytorch_momentum_updates() {
        // Hand-computed torch.optim.SGD(lr=0.1, momentum=0.9) on p=1 with grads 1, 2, 3:
        // v: 1, 2.9, 5.61; p: 0.9, 0.61, 0.049.
        let mut sgd = Sgd::new(0.1, 0.9);
        let mut p = [1.0f32];
        let mut seen = Vec::new();
        for g in [1.0, 2.0, 3.0] {
            sgd.step(&mut p, &[g]);
            seen.push(p[0]);
        }
        for (got, want) in seen.iter().zip([0.9, 0.61, 0.049]) {
            assert!((got - want).abs() < 1e-6, "{seen:?}");
        }
        assert!((sgd.velocity[0] - 5.61).abs() < 1e-5);
    }

    #[test]
    fn zero_momentum_is_plain_gradient_descent() {
        let mut sgd = Sgd::new(0.5, 0.0);
        let mut p = [1.0f32, -1.0];
        sgd.step(&mut p, &[2.0, -2.0]);
        assert_eq!(p, [0.0, 0.0]);
        assert!(sgd.velocity.is_empty());
    }
}
