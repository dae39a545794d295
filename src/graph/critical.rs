//! The critical path: the chain of dependent nodes whose summed duration
//! estimates is largest. With unbounded parallelism no schedule finishes
//! sooner, so it is the yardstick for the executor (apply wall time ÷
//! critical path ≈ 1 means the walk adds no waiting of its own).

use std::collections::BTreeMap;
use std::time::Duration;

use super::Dag;
use crate::address::Address;

/// The longest chain through the graph under per-node duration estimates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriticalPath {
    /// Sum of the estimates along `path`.
    pub total: Duration,
    /// The chain, dependencies first; empty for an empty graph.
    pub path: Vec<Address>,
}

impl Dag {
    /// The critical path under `estimate` (the expected duration of one node).
    ///
    /// Longest path in a DAG by dynamic programming over the topological
    /// order, O(V + E). Ties go to the dependency that comes first in address
    /// order, so the answer is deterministic.
    pub fn critical_path(&self, estimate: impl Fn(&Address) -> Duration) -> CriticalPath {
        let mut finish: BTreeMap<Address, (Duration, Option<Address>)> = BTreeMap::new();
        for node in self.topological_order() {
            let mut best: Option<(&Address, Duration)> = None;
            for dep in self.dependencies(&node) {
                let f = finish[dep].0;
                if best.is_none_or(|(_, b)| f > b) {
                    best = Some((dep, f));
                }
            }
            let start = best.map_or(Duration::ZERO, |(_, f)| f);
            let via = best.map(|(d, _)| d.clone());
            let own = estimate(&node);
            finish.insert(node, (start + own, via));
        }
        let Some((last, (total, _))) = finish
            .iter()
            .max_by(|x, y| x.1 .0.cmp(&y.1 .0).then_with(|| y.0.cmp(x.0)))
        else {
            return CriticalPath {
                total: Duration::ZERO,
                path: Vec::new(),
            };
        };
        let total = *total;
        let mut path = vec![last.clone()];
        while let Some(prev) = &finish[path.last().expect("path is non-empty")].1 {
            path.push(prev.clone());
        }
        path.reverse();
        CriticalPath { total, path }
    }
}

impl Dag {
    /// Each node's "bottom level": its own estimate plus the longest chain
    /// of estimates among its transitive dependants. Starting ready nodes in
    /// decreasing bottom level is the classic critical-path list-scheduling
    /// rule (Hu 1961; Kwok & Ahmad 1999), which keeps bounded parallelism
    /// close to the critical path.
    pub fn bottom_levels(
        &self,
        estimate: impl Fn(&Address) -> Duration,
    ) -> BTreeMap<Address, Duration> {
        let mut level: BTreeMap<Address, Duration> = BTreeMap::new();
        for node in self.reverse_topological_order() {
            let below = self
                .dependants(&node)
                .into_iter()
                .map(|d| level[d])
                .max()
                .unwrap_or(Duration::ZERO);
            let own = estimate(&node);
            level.insert(node, own + below);
        }
        level
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{a, dag};
    use std::time::Duration;

    #[test]
    fn longest_weighted_chain_wins_over_longest_hop_count() {
        // a(1) → b(1) → c(1) is 3 s over three hops; x(10) → c(1) is 11 s.
        let g = dag(&[("a", &[]), ("b", &["a"]), ("x", &[]), ("c", &["b", "x"])]).unwrap();
        let est = |n: &crate::address::Address| {
            Duration::from_secs(if n.as_str() == "x" { 10 } else { 1 })
        };
        let cp = g.critical_path(est);
        assert_eq!(cp.total, Duration::from_secs(11));
        assert_eq!(cp.path, vec![a("x"), a("c")]);
    }

    #[test]
    fn independent_nodes_give_the_longest_single_node() {
        let g = dag(&[("a", &[]), ("b", &[]), ("c", &[])]).unwrap();
        let cp = g.critical_path(|n| match n.as_str() {
            "b" => Duration::from_secs(5),
            _ => Duration::from_secs(2),
        });
        assert_eq!(cp.total, Duration::from_secs(5));
        assert_eq!(cp.path, vec![a("b")]);
    }

    #[test]
    fn bottom_levels_sum_the_longest_chain_below() {
        let g = dag(&[("a", &[]), ("b", &["a"]), ("c", &["a"]), ("d", &["c"])]).unwrap();
        let lv = g.bottom_levels(|n| Duration::from_secs(if n.as_str() == "d" { 5 } else { 1 }));
        assert_eq!(lv[&a("d")], Duration::from_secs(5));
        assert_eq!(lv[&a("c")], Duration::from_secs(6));
        assert_eq!(lv[&a("b")], Duration::from_secs(1));
        assert_eq!(lv[&a("a")], Duration::from_secs(7));
    }

    #[test]
    fn empty_graph_has_an_empty_critical_path() {
        let g = dag(&[]).unwrap();
        let cp = g.critical_path(|_| Duration::from_secs(1));
        assert_eq!(cp.total, Duration::ZERO);
        assert!(cp.path.is_empty());
    }
}
