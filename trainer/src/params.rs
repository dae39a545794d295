//! A module's parameters (and their gradients) as one flat `f32` vector, in the fixed order
//! of the module's fields — the layout the all-reduce, the optimiser and checkpoints share.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor, TensorData};

/// All parameters of `module`, concatenated in field order (row-major within each tensor).
pub fn flatten_params<M: Module>(module: &M) -> Vec<f32> {
    struct Collect(Vec<f32>);
    impl ModuleVisitor for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            extend_from(&mut self.0, param.val());
        }
    }
    let mut collect = Collect(Vec::with_capacity(module.num_params()));
    module.visit(&mut collect);
    collect.0
}

/// Gradients of every parameter of `module` from `grads`, laid out as [`flatten_params`]
/// (zeros for a parameter the loss does not depend on).
pub fn flatten_grads<M: Module>(module: &M, grads: &Gradients) -> Vec<f32> {
    struct Collect<'a>(Vec<f32>, &'a Gradients);
    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let value = param.val();
            match value.grad(self.1) {
                Some(grad) => extend_from(&mut self.0, grad),
                None => self
                    .0
                    .extend(std::iter::repeat_n(0.0, value.shape().num_elements())),
            }
        }
    }
    let mut collect = Collect(Vec::with_capacity(module.num_params()), grads);
    module.visit(&mut collect);
    collect.0
}

/// `module` with its parameters replaced by `flat` (laid out as [`flatten_params`]), keeping
/// each parameter's id, device and gradient requirement.
///
/// # Panics
/// If `flat.len() != module.num_params()`: the caller's invariant, checked by the handshake.
pub fn load_flat_params<M: Module>(module: M, flat: &[f32]) -> M {
    struct Load<'a>(&'a [f32]);
    impl ModuleMapper for Load<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|old| {
                let shape = old.shape();
                let (head, rest) = self.0.split_at(shape.num_elements());
                self.0 = rest;
                let new = Tensor::from_data(TensorData::new(head.to_vec(), shape), &old.device());
                new.set_require_grad(old.is_require_grad())
            })
        }
    }
    assert_eq!(
        flat.len(),
        module.num_params(),
        "flat parameter vector length"
    );
    module.map(&mut Load(flat))
}

fn extend_from<const D: usize>(out: &mut Vec<f32>, tensor: Tensor<D>) {
    let data = tensor.into_data().convert::<f32>();
    out.extend_from_slice(data.as_slice::<f32>().expect("f32 data after convert"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Net;
    use burn::tensor::Device;

    #[test]
    fn flatten_then_load_round_trips_and_keeps_gradients_on() {
        let device = Device::flex().autodiff();
        let net = Net::new([1, 28, 28], &device);
        let flat = flatten_params(&net);
        assert_eq!(flat.len(), net.num_params());
        let shifted: Vec<f32> = flat.iter().map(|v| v + 1.0).collect();
        let net = load_flat_params(net, &shifted);
        assert_eq!(flatten_params(&net), shifted);
        let loss = net.forward(Tensor::ones([2, 1, 28, 28], &device)).sum();
        let grads = flatten_grads(&net, &loss.backward());
        assert_eq!(grads.len(), flat.len());
        assert!(
            grads.iter().any(|g| *g != 0.0),
            "gradients flow after loading"
        );
    }
}
