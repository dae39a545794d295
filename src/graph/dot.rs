//! Graphviz DOT export, drawn by petgraph's `Dot` writer: nodes are
//! addresses, edges point from a dependency to its dependant.

use petgraph::dot::{Config, Dot};

use super::Dag;
use crate::address::Address;

/// How one node is drawn: a fill colour (an X11 colour name) and an extra
/// label line, e.g. the planned action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStyle {
    /// Fill colour; `None` draws the node unfilled.
    pub fill: Option<&'static str>,
    /// Text shown under the address.
    pub note: Option<String>,
}

impl Dag {
    /// The graph in DOT, each node styled by `style`.
    pub fn to_dot(&self, style: impl Fn(&Address) -> NodeStyle) -> String {
        let node_attrs = |_, (_, address): (_, &Address)| {
            let s = style(address);
            let label = match &s.note {
                Some(note) => format!("{address}\\n{note}"),
                None => address.to_string(),
            };
            match s.fill {
                Some(fill) => {
                    format!("label = \"{label}\" shape = box style = filled fillcolor = \"{fill}\"")
                }
                None => format!("label = \"{label}\" shape = box"),
            }
        };
        let dot = Dot::with_attr_getters(
            &self.graph,
            &[Config::EdgeNoLabel, Config::NodeNoLabel],
            &|_, _| String::new(),
            &node_attrs,
        );
        format!("{dot:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::dag;
    use super::NodeStyle;

    #[test]
    fn dot_names_every_node_and_edge_and_colours_by_style() {
        let g = dag(&[("stack.network", &[]), ("eks.cluster", &["stack.network"])]).unwrap();
        let out = g.to_dot(|a| NodeStyle {
            fill: (a.as_str() == "eks.cluster").then_some("palegreen"),
            note: (a.as_str() == "eks.cluster").then(|| "create".to_string()),
        });
        assert!(out.starts_with("digraph {"), "{out}");
        assert!(
            out.contains("label = \"stack.network\" shape = box]"),
            "{out}"
        );
        assert!(
            out.contains("label = \"eks.cluster\\ncreate\" shape = box style = filled fillcolor = \"palegreen\""),
            "{out}"
        );
        assert_eq!(out.matches("->").count(), 1, "{out}");
    }
}
