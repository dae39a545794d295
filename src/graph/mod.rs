//! A generic directed acyclic graph over resource [`Address`]es.
//!
//! The graph knows nothing of AWS or Kubernetes: nodes are addresses, an edge
//! `a → b` means "`b` depends on `a`" (so `a` is created first and destroyed
//! last). It offers what the planner and the executor need: validation with
//! the cycle named, deterministic topological orders, `--target` subgraphs,
//! the critical path from duration estimates and DOT export.

mod critical;
mod dot;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::Direction;

use crate::address::Address;

pub use critical::CriticalPath;
pub use dot::NodeStyle;

/// Why a set of nodes does not form a valid graph, or a target is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    /// The same address was declared twice.
    #[error("resource {0} is declared twice")]
    DuplicateNode(Address),
    /// A node depends on an address that is not in the graph.
    #[error("resource {node} depends on {dependency}, which is not declared")]
    UnknownDependency {
        /// The node declaring the dependency.
        node: Address,
        /// The missing address.
        dependency: Address,
    },
    /// The dependencies form a cycle; `path` starts and ends at the same node.
    #[error("dependency cycle: {}", format_path(.path))]
    Cycle {
        /// The cycle, e.g. `[a, b, c, a]`: `b` depends on `a`, `c` on `b`, `a` on `c`.
        path: Vec<Address>,
    },
    /// A `--target` names an address that is not in the graph.
    #[error("target {0} is not a resource of this deployment")]
    UnknownTarget(Address),
}

fn format_path(path: &[Address]) -> String {
    path.iter()
        .map(Address::as_str)
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Which way a `--target` selection extends: `apply` needs a target's
/// dependencies, `destroy` needs its dependants (Terraform's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closure {
    /// The targets and everything they depend on, transitively.
    Dependencies,
    /// The targets and everything that depends on them, transitively.
    Dependants,
}

/// A validated DAG of addresses. Edges point from a dependency to its dependant.
#[derive(Debug, Clone, Default)]
pub struct Dag {
    graph: DiGraph<Address, ()>,
    index: BTreeMap<Address, NodeIndex>,
}

impl Dag {
    /// Builds the graph from `(node, dependencies)` pairs, in any order.
    ///
    /// # Errors
    /// [`GraphError::DuplicateNode`], [`GraphError::UnknownDependency`], or
    /// [`GraphError::Cycle`] with one cycle's path (the one through the
    /// lexicographically smallest node of the first strongly connected
    /// component found).
    pub fn new<I>(nodes: I) -> Result<Self, GraphError>
    where
        I: IntoIterator<Item = (Address, Vec<Address>)>,
    {
        let mut declared: BTreeMap<Address, Vec<Address>> = BTreeMap::new();
        for (node, deps) in nodes {
            if declared.contains_key(&node) {
                return Err(GraphError::DuplicateNode(node));
            }
            declared.insert(node, deps);
        }
        let mut dag = Dag::default();
        for node in declared.keys() {
            let ix = dag.graph.add_node(node.clone());
            dag.index.insert(node.clone(), ix);
        }
        for (node, deps) in &declared {
            let to = dag.index[node];
            for dep in deps.iter().collect::<BTreeSet<_>>() {
                let from = *dag
                    .index
                    .get(dep)
                    .ok_or_else(|| GraphError::UnknownDependency {
                        node: node.clone(),
                        dependency: dep.clone(),
                    })?;
                dag.graph.add_edge(from, to, ());
            }
        }
        dag.check_acyclic()?;
        Ok(dag)
    }

    fn check_acyclic(&self) -> Result<(), GraphError> {
        for scc in tarjan_scc(&self.graph) {
            let self_loop = scc.len() == 1 && self.graph.contains_edge(scc[0], scc[0]);
            if scc.len() > 1 || self_loop {
                return Err(GraphError::Cycle {
                    path: self.cycle_through(&scc),
                });
            }
        }
        Ok(())
    }

    /// The shortest cycle from the smallest node of a strongly connected
    /// component back to itself, found by breadth-first search inside it.
    fn cycle_through(&self, scc: &[NodeIndex]) -> Vec<Address> {
        let members: BTreeSet<NodeIndex> = scc.iter().copied().collect();
        let start = *scc
            .iter()
            .min_by_key(|ix| &self.graph[**ix])
            .expect("a strongly connected component is never empty");
        let mut parent: BTreeMap<NodeIndex, NodeIndex> = BTreeMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(ix) = queue.pop_front() {
            let mut next: Vec<NodeIndex> = self
                .graph
                .neighbors_directed(ix, Direction::Outgoing)
                .filter(|n| members.contains(n))
                .collect();
            next.sort_by_key(|n| &self.graph[*n]);
            for n in next {
                if n == start {
                    let mut path = vec![start];
                    let mut cur = ix;
                    while cur != start {
                        path.push(cur);
                        cur = parent[&cur];
                    }
                    path.push(start);
                    path.reverse();
                    return path.into_iter().map(|i| self.graph[i].clone()).collect();
                }
                if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(n) {
                    e.insert(ix);
                    queue.push_back(n);
                }
            }
        }
        unreachable!("every node of a strongly connected component lies on a cycle")
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Whether `address` is a node.
    pub fn contains(&self, address: &Address) -> bool {
        self.index.contains_key(address)
    }

    /// All nodes in address order.
    pub fn nodes(&self) -> impl Iterator<Item = &Address> {
        self.index.keys()
    }

    /// The direct dependencies of `address`, sorted; empty for an unknown address.
    pub fn dependencies(&self, address: &Address) -> Vec<&Address> {
        self.neighbours(address, Direction::Incoming)
    }

    /// The direct dependants of `address`, sorted; empty for an unknown address.
    pub fn dependants(&self, address: &Address) -> Vec<&Address> {
        self.neighbours(address, Direction::Outgoing)
    }

    fn neighbours(&self, address: &Address, dir: Direction) -> Vec<&Address> {
        let Some(ix) = self.index.get(address) else {
            return Vec::new();
        };
        let mut out: Vec<&Address> = self
            .graph
            .neighbors_directed(*ix, dir)
            .map(|n| &self.graph[n])
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Dependencies before dependants; among nodes that are ready at the same
    /// time, address order (Kahn's algorithm with a min-heap), so the order is
    /// the same on every run.
    pub fn topological_order(&self) -> Vec<Address> {
        let mut indegree: BTreeMap<NodeIndex, usize> = self
            .index
            .values()
            .map(|ix| {
                let deps = self.dependencies(&self.graph[*ix]).len();
                (*ix, deps)
            })
            .collect();
        let mut ready: BinaryHeap<Reverse<&Address>> = indegree
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(ix, _)| Reverse(&self.graph[*ix]))
            .collect();
        let mut order = Vec::with_capacity(self.len());
        while let Some(Reverse(address)) = ready.pop() {
            order.push(address.clone());
            for dependant in self.dependants(address) {
                let d = indegree
                    .get_mut(&self.index[dependant])
                    .expect("every node has an indegree");
                *d -= 1;
                if *d == 0 {
                    ready.push(Reverse(dependant));
                }
            }
        }
        debug_assert_eq!(order.len(), self.len(), "a validated graph is acyclic");
        order
    }

    /// Dependants before dependencies: the destroy order.
    pub fn reverse_topological_order(&self) -> Vec<Address> {
        let mut order = self.topological_order();
        order.reverse();
        order
    }

    /// The subgraph of `targets` and their transitive dependencies
    /// ([`Closure::Dependencies`], for apply) or dependants
    /// ([`Closure::Dependants`], for destroy).
    ///
    /// # Errors
    /// [`GraphError::UnknownTarget`] for a target that is not a node.
    pub fn select(&self, targets: &[Address], closure: Closure) -> Result<Dag, GraphError> {
        let dir = match closure {
            Closure::Dependencies => Direction::Incoming,
            Closure::Dependants => Direction::Outgoing,
        };
        let mut keep: BTreeSet<NodeIndex> = BTreeSet::new();
        let mut stack = Vec::new();
        for t in targets {
            let ix = *self
                .index
                .get(t)
                .ok_or_else(|| GraphError::UnknownTarget(t.clone()))?;
            stack.push(ix);
        }
        while let Some(ix) = stack.pop() {
            if keep.insert(ix) {
                stack.extend(self.graph.neighbors_directed(ix, dir));
            }
        }
        let nodes = keep.iter().map(|ix| {
            let address = self.graph[*ix].clone();
            let deps = self
                .graph
                .neighbors_directed(*ix, Direction::Incoming)
                .filter(|d| keep.contains(d))
                .map(|d| self.graph[d].clone())
                .collect();
            (address, deps)
        });
        Dag::new(nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn a(s: &str) -> Address {
        Address::new(s).unwrap()
    }

    pub(crate) fn dag(edges: &[(&str, &[&str])]) -> Result<Dag, GraphError> {
        Dag::new(
            edges
                .iter()
                .map(|(n, deps)| (a(n), deps.iter().map(|d| a(d)).collect())),
        )
    }

    fn vanilla() -> Dag {
        dag(&[
            ("stack.network", &[]),
            ("stack.iam", &[]),
            ("eks.cluster", &["stack.network", "stack.iam"]),
            ("eks.nodegroup.cpu", &["eks.cluster"]),
            ("iam.oidc", &["eks.cluster"]),
            ("stack.irsa", &["iam.oidc"]),
            ("stack.efs", &["stack.network"]),
            ("k8s.efs-csi", &["eks.nodegroup.cpu", "stack.irsa"]),
            ("k8s.efs-storage", &["k8s.efs-csi", "stack.efs"]),
        ])
        .unwrap()
    }

    fn names(v: &[Address]) -> Vec<&str> {
        v.iter().map(Address::as_str).collect()
    }

    #[test]
    fn topological_order_puts_dependencies_first_and_is_deterministic() {
        let g = vanilla();
        let order = g.topological_order();
        assert_eq!(order.len(), g.len());
        let pos = |s: &str| order.iter().position(|x| x.as_str() == s).unwrap();
        for node in g.nodes() {
            for dep in g.dependencies(node) {
                assert!(
                    pos(dep.as_str()) < pos(node.as_str()),
                    "{dep} before {node}"
                );
            }
        }
        assert_eq!(
            names(&order)[..3],
            ["stack.iam", "stack.network", "eks.cluster"]
        );
        assert_eq!(order, vanilla().topological_order());
    }

    #[test]
    fn reverse_order_puts_dependants_first() {
        let g = vanilla();
        let rev = g.reverse_topological_order();
        assert_eq!(rev.first().unwrap().as_str(), "k8s.efs-storage");
        let pos = |s: &str| rev.iter().position(|x| x.as_str() == s).unwrap();
        assert!(pos("eks.cluster") > pos("eks.nodegroup.cpu"));
        assert!(pos("stack.network") > pos("stack.efs"));
    }

    #[test]
    fn cycle_is_reported_with_its_path() {
        let err = dag(&[("x", &[]), ("a", &["c", "x"]), ("b", &["a"]), ("c", &["b"])]).unwrap_err();
        assert_eq!(
            err,
            GraphError::Cycle {
                path: vec![a("a"), a("b"), a("c"), a("a")]
            }
        );
        assert_eq!(err.to_string(), "dependency cycle: a → b → c → a");
    }

    #[test]
    fn self_dependency_is_a_cycle() {
        let err = dag(&[("a", &["a"])]).unwrap_err();
        assert_eq!(
            err,
            GraphError::Cycle {
                path: vec![a("a"), a("a")]
            }
        );
    }

    #[test]
    fn unknown_dependency_and_duplicates_are_errors() {
        assert_eq!(
            dag(&[("a", &["ghost"])]).unwrap_err(),
            GraphError::UnknownDependency {
                node: a("a"),
                dependency: a("ghost")
            }
        );
        assert_eq!(
            dag(&[("a", &[]), ("a", &[])]).unwrap_err(),
            GraphError::DuplicateNode(a("a"))
        );
    }

    #[test]
    fn apply_target_takes_dependencies() {
        let g = vanilla();
        let sub = g
            .select(&[a("eks.nodegroup.cpu")], Closure::Dependencies)
            .unwrap();
        let nodes: Vec<_> = sub.nodes().map(Address::as_str).collect();
        assert_eq!(
            nodes,
            [
                "eks.cluster",
                "eks.nodegroup.cpu",
                "stack.iam",
                "stack.network"
            ]
        );
        assert_eq!(sub.dependencies(&a("eks.cluster")).len(), 2);
    }

    #[test]
    fn destroy_target_takes_dependants() {
        let g = vanilla();
        let sub = g.select(&[a("stack.efs")], Closure::Dependants).unwrap();
        let nodes: Vec<_> = sub.nodes().map(Address::as_str).collect();
        assert_eq!(nodes, ["k8s.efs-storage", "stack.efs"]);
        assert_eq!(
            g.select(&[a("nope")], Closure::Dependants).unwrap_err(),
            GraphError::UnknownTarget(a("nope"))
        );
    }
}
